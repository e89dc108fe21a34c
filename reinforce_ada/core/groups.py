"""Group formation: from a prompt's pool, the n samples that enter the update.

The group aims for ``n // 2`` correct and ``n - n // 2`` incorrect samples, and fills from the
other side when one side is short, so a group is uniform only when the whole pool is. The
advantage baseline is still taken from the whole pool (see :mod:`reinforce_ada.core.advantage`).

Balancing changes what the update estimates: a group of half correct samples over-represents
whichever outcome is rare in the pool. ``downsample_correction=stratified`` weighs each kept
sample by its outcome's share in the pool over its share in the group (:func:`stratum_weights`),
so that the group is a stratified sample of the pool: its expected update is the pool's.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from reinforce_ada.core.advantage import PoolStats, StratumWeights, pool_stats
from reinforce_ada.core.config import SamplerConfig
from reinforce_ada.core.sampler import PromptSampler


def select_group(rewards: Sequence[float], config: SamplerConfig, prompt_key: str = "") -> list[int]:
    """Picks the n samples of one prompt's pool that form its group.

    Args:
        rewards: The pool's rewards, in generation order.
        config: Gives n, the correctness threshold and the selection rule.
        prompt_key: Identifies the prompt for the ``random`` selection, whose generator is
            seeded with ``(config.selection_seed, prompt_key)`` so the choice does not depend on the
            prompt's position in the batch.

    Returns:
        Indices into ``rewards``, ascending (generation order), exactly ``config.n`` of them.

    Raises:
        ValueError: If the pool holds fewer than n samples.
    """
    n = config.n
    if len(rewards) < n:
        raise ValueError(f"a pool of {len(rewards)} samples cannot form a group of n={n}")
    positives = [i for i, r in enumerate(rewards) if r > config.threshold]
    negatives = [i for i, r in enumerate(rewards) if not r > config.threshold]

    take_pos = min(n // 2, len(positives))
    take_neg = min(n - take_pos, len(negatives))
    take_pos = n - take_neg  # fills from the positives when the negatives are short

    if config.selection == "first":
        kept = positives[:take_pos] + negatives[:take_neg]
    else:
        rng = random.Random(f"{config.selection_seed}:{prompt_key}")
        kept = rng.sample(positives, take_pos) + rng.sample(negatives, take_neg)
    return sorted(kept)


def candidates(rewards: Sequence[float], config: SamplerConfig) -> list[int]:
    """The samples of a pool so far that may still end up in its group, ascending.

    With the ``first`` selection a group takes at most n samples of each side, the earliest
    ones, so any later sample on a side that already has n can be let go, whatever comes next.
    The ``random`` selection may pick any of them.
    """
    if config.selection != "first":
        return list(range(len(rewards)))
    positives = [i for i, r in enumerate(rewards) if r > config.threshold][: config.n]
    negatives = [i for i, r in enumerate(rewards) if not r > config.threshold][: config.n]
    return sorted(positives + negatives)


def stratum_weights(rewards: Sequence[float], kept: Sequence[int], threshold: float) -> StratumWeights:
    """The stratified correction of a group: for each outcome, its share in the pool over its share in the group.

    With these weights the group's mean of weight x (advantage x score function) has, for either outcome,
    the pool's share of that outcome times the mean over the kept samples of that outcome, whose
    expectation is the mean over the pool's samples of that outcome (the kept ones are a uniform choice
    among them, or the first drawn of exchangeable draws). So the group's expected update is the pool's.
    An outcome with no kept sample has no sample to weigh (its weight is 1).
    """
    positives = sum(r > threshold for r in rewards)
    kept_pos = sum(rewards[i] > threshold for i in kept)

    def ratio(in_pool: int, in_group: int) -> float:
        return (in_pool / len(rewards)) / (in_group / len(kept)) if in_group else 1.0

    return StratumWeights(threshold, ratio(positives, kept_pos), ratio(len(rewards) - positives, len(kept) - kept_pos))


@dataclass(frozen=True)
class PromptGroup:
    """The outcome of one prompt's sampling: its group and its pool statistics.

    Attributes:
        kept: Indices into the pool of the samples in the update, ascending; empty if dropped.
        stats: Statistics of the whole pool (the advantage baseline) and the prompt weight;
            None only for a pool left empty by failed samples.
        dropped: True if the prompt is left out of the update: unresolved under
            ``unresolved="drop"``, or failed with fewer than n samples in its pool.
    """

    kept: list[int]
    stats: PoolStats | None
    dropped: bool = False


def form_group(sampler: PromptSampler, prompt_key: str = "") -> PromptGroup:
    """Turns a finished prompt's pool into its group (or drops it, per the config); for
    ``est``, the group is the whole pool.

    A failed prompt (see :mod:`reinforce_ada.core.sampler`) is treated as unresolved, from the
    samples it has: with at least n of them it follows ``config.unresolved``, with fewer it
    is dropped (Est keeps whatever it has).
    """
    config = sampler.config
    if not sampler.finished:
        raise ValueError("form_group() needs a finished prompt; it still asks for samples")
    if not sampler.drawn:  # every sample failed
        return PromptGroup(kept=[], stats=None, dropped=True)
    stats = pool_stats(sampler.rewards, config)
    if config.variant == "est":  # no downsampling: Est trains on every sample drawn
        return PromptGroup(kept=list(range(sampler.drawn)), stats=stats)
    if sampler.drawn < config.n or (not sampler.resolved and config.unresolved == "drop"):
        return PromptGroup(kept=[], stats=stats, dropped=True)
    kept = select_group(sampler.rewards, config, prompt_key)
    if config.downsample_correction == "stratified":
        stats = replace(stats, strata=stratum_weights(sampler.rewards, kept, config.threshold))
    return PromptGroup(kept=kept, stats=stats)


def without_signal(
    samplers: Sequence[PromptSampler], groups: Sequence[PromptGroup], prompt_keys: Sequence[str]
) -> list[PromptGroup] | None:
    """Groups for a step in which every prompt was dropped: each prompt's usual group (all of its
    samples if it has fewer than n) with prompt weight 0, so every advantage is zero.

    The trainer then runs the step as it runs a GRPO step whose groups are all uniform: the
    policy-gradient loss is zero, and nothing is left for verl to fail on. Dropping is kept in
    spirit: no unresolved prompt contributes a gradient.

    Returns:
        None if some prompt kept a group (the step is not empty) or no prompt has a sample left.
    """
    if any(not g.dropped for g in groups) or not any(s.drawn for s in samplers):
        return None
    zero = []
    for sampler, group, key in zip(samplers, groups, prompt_keys):
        if group.stats is None:
            zero.append(group)
            continue
        enough = sampler.drawn >= sampler.config.n
        kept = select_group(sampler.rewards, sampler.config, key) if enough else list(range(sampler.drawn))
        zero.append(PromptGroup(kept=kept, stats=replace(group.stats, weight=0.0)))
    return zero
