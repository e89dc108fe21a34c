"""What the gradient-quality study measures and at what size: the pools, sketches and replays' sizes (full and
quick), every method as the package's core samples it, and the primary measure and the references each method's
paired difference is taken against, all fixed before the first full run."""

from __future__ import annotations

from dataclasses import dataclass

from reinforce_ada.core.config import SamplerConfig

PAIRED_REFERENCES = ("grpo_n4", "balance")  # every method's paired difference is taken against these
PRIMARY = "cos_heldout"  # fixed before the first full run: the update's cosine with the held-out gradient


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
        batches: Batches drawn, each a random set of ``batch`` training prompts.
        replays_per_batch: Replays of each batch, each in another seeded order of its pools.
        max_tokens: The longest response sampled into a pool, in tokens.
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


DEFAULT = Size()
QUICK = Size(train_prompts=4, train_k=64, heldout_prompts=4, heldout_k=8, dims=512, batch=2, batches=6,
             replays_per_batch=4)


def method_configs(matched_n: int) -> dict[str, SamplerConfig]:
    """Every method, as the package's core runs it (n 4; M 8 and R 4 for the adaptive ones, N_max 32)."""
    grpo = {f"grpo_n{k}": SamplerConfig(n=k, round_size=k, max_rounds=1) for k in (4, 8, 16, matched_n)}
    seq = {
        "balance": SamplerConfig(),
        "balance_stratified": SamplerConfig(downsample_correction="stratified"),
        "pos": SamplerConfig(variant="pos"),
        "pos_stratified": SamplerConfig(variant="pos", downsample_correction="stratified"),
        "balance_inverse": SamplerConfig(prompt_weight="inverse"),
        "balance_inverse_stratified": SamplerConfig(prompt_weight="inverse", downsample_correction="stratified"),
        "est": SamplerConfig(variant="est"),
        "balance_budget2": SamplerConfig(sample_budget=2.0),
    }
    return {**grpo, **seq}
