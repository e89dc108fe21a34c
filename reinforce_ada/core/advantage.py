"""Advantages with a baseline taken from every sample drawn for the prompt.

GRPO centres each reward on the mean of its own group. Reinforce-Ada keeps only n samples
per prompt for the update but may have drawn many more; the mean of all of them is a better
estimate of the prompt's pass rate, so it is the baseline:

    A_i = (r_i - mean(pool)) [/ (std(pool) + eps)] * w(mean(pool)) [* c(outcome of i)]

broadcast over the response tokens, where c is the downsampling correction's weight of the sample's
outcome (:class:`StratumWeights`, ``downsample_correction=stratified``; 1 otherwise). The pool travels
with each sample as a :class:`PoolStats`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from reinforce_ada.core.config import SamplerConfig


@dataclass(frozen=True)
class StratumWeights:
    """The downsampling correction of one prompt: a weight per outcome for its kept samples.

    Attributes:
        threshold: A sample is correct iff its reward is strictly greater than this.
        correct: The weight of a kept correct sample: its share in the pool over its share in the group.
        incorrect: The same for a kept incorrect sample.
    """

    threshold: float
    correct: float
    incorrect: float

    def of(self, reward: float) -> float:
        return self.correct if reward > self.threshold else self.incorrect


@dataclass(frozen=True)
class PoolStats:
    """Sufficient statistics of a prompt's pool of rewards, plus its prompt weight.

    Attributes:
        count: Samples drawn.
        mean: Mean reward over all of them (the baseline).
        m2: Sum of squared deviations from the mean (so the unbiased std is
            ``sqrt(m2 / (count - 1))``); kept instead of a sum of squares for accuracy.
        weight: Factor applied to the prompt's advantages (1.0 unless a prompt weight is on).
        strata: The downsampling correction's weights per outcome; None without one.
    """

    count: int
    mean: float
    m2: float
    weight: float = 1.0
    strata: StratumWeights | None = None

    @classmethod
    def from_rewards(cls, rewards: Sequence[float], weight: float = 1.0) -> PoolStats:
        if not rewards:
            raise ValueError("a pool needs at least one reward")
        mean = math.fsum(rewards) / len(rewards)
        m2 = math.fsum((r - mean) ** 2 for r in rewards)
        return cls(count=len(rewards), mean=mean, m2=m2, weight=weight)

    @property
    def std(self) -> float:
        """Unbiased standard deviation (as ``torch.std``); 0 for a single sample."""
        return math.sqrt(self.m2 / (self.count - 1)) if self.count > 1 else 0.0


def prompt_weight(pool_mean: float, config: SamplerConfig) -> float:
    """w(p) of ``config.prompt_weight`` (``"auto"`` resolved for the variant), with p the pool's
    mean reward clamped to eps.

    Est's weight is 1/sqrt(max(p, eps)): eps is a floor rather than an offset, 1/sqrt(p + eps),
    as the paper writes it (docs/algorithm.md). They differ only for p < eps, and a pool of N <= 1/eps samples with any
    correct one has p >= 1/N >= eps, while an all-incorrect pool has zero advantages anyway.
    """
    rule = config.weight_rule
    p = max(pool_mean, config.prompt_weight_eps)
    if rule == "inverse":
        return 1.0 / p
    if rule == "inverse_sqrt":
        return 1.0 / math.sqrt(p)
    return 1.0


def pool_stats(rewards: Sequence[float], config: SamplerConfig) -> PoolStats:
    """The pool statistics of one prompt, its prompt weight included."""
    stats = PoolStats.from_rewards(rewards)
    return PoolStats(stats.count, stats.mean, stats.m2, prompt_weight(stats.mean, config))


def outcome_advantages(
    scores: torch.Tensor,
    pools: Sequence[PoolStats],
    response_mask: torch.Tensor,
    norm_by_std: bool,
    epsilon: float = 1e-6,
) -> torch.Tensor:
    """Token-level advantages of outcome rewards against pool baselines.

    Args:
        scores: Sequence rewards, shape (bs,).
        pools: The pool of each sample's prompt, length bs (its prompt weight and, if any, the
            downsampling correction's weight of the sample's outcome multiply the advantage).
        response_mask: 1 on response tokens, shape (bs, response_length).
        norm_by_std: Divide by the pool's unbiased std plus ``epsilon`` (GRPO's scaling, but
            over the whole pool).
        epsilon: Added to the std, as in verl's GRPO.

    Returns:
        Advantages of shape (bs, response_length), zero outside the response mask.
    """
    if len(pools) != scores.shape[0]:
        raise ValueError(f"{len(pools)} pools for {scores.shape[0]} samples")
    mean = torch.tensor([p.mean for p in pools], dtype=scores.dtype, device=scores.device)
    weight = torch.tensor(
        [p.weight * (p.strata.of(score) if p.strata is not None else 1.0) for p, score in zip(pools, scores.tolist())],
        dtype=scores.dtype, device=scores.device,
    )
    advantages = scores - mean
    if norm_by_std:
        std = torch.tensor([p.std for p in pools], dtype=scores.dtype, device=scores.device)
        advantages = advantages / (std + epsilon)
    return (advantages * weight).unsqueeze(-1) * response_mask
