"""Reproducible rollouts: one vLLM seed per training sample.

With ``reinforce_ada.sampling_seed`` set, the i-th sample a prompt asks for in a training step is
generated with the seed :func:`sample_seed` derives from the run seed, the prompt's identity
(the pass-rate tracker's key: its messages and data source), the step and i (its slot: its index in the
prompt's pool while nothing has failed); the redraw of a failed sample gets a seed of its own for the
failed slot, so a failure shifts no other sample's seed. Nothing else enters: not the worker that
runs it, the order requests are sent or finish in, the round it belongs to, or the mode. So two runs
with the same settings draw the same samples at step 1, and two methods draw the same first samples of
a prompt at the same weights (common random numbers). Each model turn of a multi-turn episode gets a seed of its
own, :func:`turn_seed` of the episode's seed and the turn's index (the first turn the episode's seed), so that
a later turn does not restart the first turn's random stream. What it does not promise: identical logits in batches of a
different shape (floating point), nor identical weights after an update on a platform whose
kernels are not deterministic.
"""

from __future__ import annotations

import hashlib

SEED_BITS = 63  # vLLM takes any non-negative int64; -1 means "unseeded"
# Odd, so k -> k * stride is one-to-one modulo 2**63 and modulo 2**32 (torch's CPU generator keeps a seed's low 32
# bits only): the golden ratio's 64-bit constant, as in splitmix64, cut to 63 bits.
TURN_STRIDE = 0x9E3779B97F4A7C15 % 2**SEED_BITS


def sample_seed(run_seed: int, prompt_key: str, step: int, index: int, redraw: bool = False) -> int:
    """The vLLM seed of one sample.

    Args:
        run_seed: ``reinforce_ada.sampling_seed``.
        prompt_key: The prompt's :func:`~reinforce_ada.core.tracker.prompt_identity`.
        step: The training step (verl's ``global_steps``).
        index: The sample's slot: the i-th sample the prompt asks for in this step (0, 1, ...; failed samples
            counted, redraws not), which is its index in the pool while nothing has failed.
        redraw: The sample redraws the failed sample of slot ``index``: a seed of its own, so that a failure
            shifts no other sample's seed and a redraw does not repeat the response that failed.

    Returns:
        An integer in [0, 2**63).
    """
    payload = f"{int(run_seed)}:{prompt_key}:{int(step)}:{int(index)}{':redraw' if redraw else ''}".encode()
    digest = hashlib.blake2b(payload, digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - SEED_BITS)


def turn_seed(episode_seed: int, turn: int) -> int:
    """The vLLM seed of one model turn of an episode.

    A multi-turn agent loop calls the model once per turn with the episode's sampling parameters; were each call
    seeded with the episode's seed, every turn would restart the same random stream. Turn k instead gets the
    episode's seed plus k strides of an odd constant, modulo 2**63: a one-to-one function of k, so the turns of
    an episode never share a seed, and turn 0 keeps the episode's seed, so a single-turn sample draws what it
    drew before turns were seeded.

    Args:
        episode_seed: The episode's seed (:func:`sample_seed`).
        turn: The turn's index: the episode's k-th call of the model (0, 1, ...).

    Returns:
        An integer in [0, 2**63); ``episode_seed`` itself for turn 0.

    Raises:
        ValueError: ``turn`` is negative.
    """
    if turn < 0:
        raise ValueError(f"turn must be >= 0, got {turn}")
    return (int(episode_seed) + int(turn) * TURN_STRIDE) % 2**SEED_BITS
