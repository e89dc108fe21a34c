"""What the gradient-quality study measures and at what size: the pools, sketches and replays' sizes (full and
quick), its designs (every method as the package's core samples it, the GRPO each is matched to and the references
its paired differences are taken against), the primary measure, and the equal-samples design's decision rule, all
fixed before the runs that use them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reinforce_ada.core.config import SamplerConfig

PRIMARY = "cos_heldout"  # fixed before the first full run: the update's cosine with the held-out gradient
TAKE = 2  # the equal-samples design's rule: at most this many candidates go to the next learning protocol


@dataclass(frozen=True)
class Size:
    """How big a measurement is; every method is measured on the same pools at this size.

    Attributes:
        train_prompts: Training prompts pooled (a seeded sample of the learning study's filtered training prompts).
        train_k: Responses pooled per training prompt: the first half is replayed, the second gives the prompt's
            reference gradient.
        heldout_prompts: Held-out questions pooled (a seeded sample of its filtered held-out set).
        heldout_k: Responses pooled per held-out question, for the held-out gradient.
        dims: Dimensions the per-response gradients are count-sketched to.
        batch: Training prompts per replayed batch.
        batches: Batches replayed, in rounds: each round a random partition of the training prompts' groups into
            batches, so ``batches`` is a multiple of ``train_prompts / batch``
            (:func:`studies.gradient_quality.intervals.partition_rounds`).
        replays_per_batch: Replays of each batch in other seeded orders of its pools (for the cosines and the gain),
            and as many in fresh draws with replacement from them (for the SNR).
        max_tokens: The longest response sampled into a pool, in tokens.
        group: Training prompts per group: the prompts are split once into random groups, every batch is made of
            whole groups, and the intervals take the groups as the sampled units.
    """

    train_prompts: int = 48
    train_k: int = 64
    heldout_prompts: int = 64
    heldout_k: int = 32
    dims: int = 16384
    batch: int = 8
    batches: int = 60
    replays_per_batch: int = 8
    max_tokens: int = 32
    group: int = 4


DEFAULT = Size()
QUICK = Size(train_prompts=4, train_k=64, heldout_prompts=4, heldout_k=8, dims=512, batch=2, batches=6,
             replays_per_batch=4, group=1)


def grpo(n: int) -> SamplerConfig:
    """GRPO-n as the core runs it: one round of n, every sample kept."""
    return SamplerConfig(n=n, round_size=n, max_rounds=1)


def matched_n(samples_per_prompt: float, most: int) -> int:
    """The n of the GRPO matched to a method: its mean responses per prompt on the pools, rounded, in [1, most]."""
    return int(min(most, max(1, round(samples_per_prompt))))


@dataclass(frozen=True)
class Design:
    """One set of methods and comparisons, fixed before its runs (studies/gradient_quality/README.md).

    Attributes:
        name: ``first`` (the base and format checkpoints' runs) or ``equal_samples``.
        candidates: The adaptive methods, by name (n 4; M 8 and R 4, N_max 32 unless set otherwise).
        grpo: The GRPO n's measured whatever the candidates draw.
        matched: The candidates each measured against a GRPO at its own mean responses per prompt on the pools.
        references: Every method's paired difference is also taken against each of these.
        checks: Candidates that draw and keep what their matched GRPO does, by construction: their paired
            difference must be 0 (a check of the replays), and no rule chooses them.
        decides: Whether :func:`decide` picks the candidates for the next learning protocol from its results.
    """

    name: str
    candidates: Mapping[str, SamplerConfig]
    grpo: tuple[int, ...]
    matched: tuple[str, ...]
    references: tuple[str, ...] = ()
    checks: tuple[str, ...] = field(default=())
    decides: bool = False


BUDGETS = (1.0, 1.25, 1.5, 2.0)  # sample_budget b: at most b x n responses per prompt on average


def _budget_name(variant: str, budget: float) -> str:
    return f"{variant}_budget{budget:g}"


FIRST = Design(
    "first",
    {"balance": SamplerConfig(),
     "balance_stratified": SamplerConfig(downsample_correction="stratified"),
     "pos": SamplerConfig(variant="pos"),
     "pos_stratified": SamplerConfig(variant="pos", downsample_correction="stratified"),
     "balance_inverse": SamplerConfig(prompt_weight="inverse"),
     "balance_inverse_stratified": SamplerConfig(prompt_weight="inverse", downsample_correction="stratified"),
     "est": SamplerConfig(variant="est"),
     "balance_budget2": SamplerConfig(sample_budget=2.0)},
    grpo=(4, 8, 16), matched=("balance",), references=("grpo_n4", "balance"))

_EQUAL_CANDIDATES = {
    **{_budget_name(variant, b): SamplerConfig(variant=variant, sample_budget=b)
       for variant in ("balance", "pos") for b in BUDGETS},
    "est": SamplerConfig(variant="est"),  # n 4: GRPO-n4's budget
    "balance_inverse_budget1": SamplerConfig(prompt_weight="inverse", sample_budget=1.0),
    "balance": SamplerConfig(),
}
EQUAL_SAMPLES = Design("equal_samples", _EQUAL_CANDIDATES, grpo=(4,), matched=tuple(_EQUAL_CANDIDATES),
                       checks=(_budget_name("balance", 1.0), _budget_name("pos", 1.0)), decides=True)
DESIGNS = {design.name: design for design in (FIRST, EQUAL_SAMPLES)}


def decide(matched_pairs: Mapping[str, Mapping], checks: tuple[str, ...] = EQUAL_SAMPLES.checks) -> dict:
    """The equal-samples design's rule, fixed before its runs: which candidates go to the next learning protocol.

    The candidates (checks left out) whose paired difference to their matched GRPO in the primary measure has a 95%
    interval wholly above 0 go, the largest differences first, at most :data:`TAKE`; if none has, the one candidate
    with the largest paired difference goes, as the best measured, not as one measured better than GRPO.

    Args:
        matched_pairs: Per candidate, its paired differences to its matched GRPO (``[value, low, high]`` per measure).
        checks: Candidates no rule chooses.

    Returns:
        ``{"above_zero": [...], "chosen": [...], "resolved": bool}``: the candidates above 0 (largest first), those
        chosen, and whether they were chosen for an interval above 0.
    """
    eligible = {name: pair[PRIMARY] for name, pair in matched_pairs.items() if name not in checks}
    ranked = sorted(eligible, key=lambda name: -eligible[name][0])
    above = [name for name in ranked if eligible[name][1] > 0]
    chosen = above[:TAKE] if above else ranked[:1]
    return {"above_zero": above, "chosen": chosen, "resolved": bool(above)}
