"""The downsampling correction: exact enumeration over every pool the sampler can draw shows that a corrected
group's expected update is its pool's, and that an uncorrected balanced group's is not."""

import itertools

import pytest
import torch

from reinforce_ada.core.advantage import PoolStats, StratumWeights, outcome_advantages
from reinforce_ada.core.config import ConfigError, SamplerConfig
from reinforce_ada.core.groups import form_group, stratum_weights
from reinforce_ada.core.metrics import summarize
from reinforce_ada.core.sampler import PromptSampler


def finished_pools(config: SamplerConfig, p: float):
    """Every way the sampler can finish on a prompt with pass rate p, with its probability."""

    def extend(rewards: list[float], prob: float):
        sampler = PromptSampler(config)
        for start in request_starts(config, rewards):
            sampler.record(rewards[start[0]:start[1]])
        size = sampler.next_request()
        if size == 0:
            yield sampler, prob
            return
        for outcome in itertools.product((0.0, 1.0), repeat=size):
            correct = sum(outcome)
            yield from extend(rewards + list(outcome), prob * p**correct * (1 - p) ** (size - correct))

    yield from extend([], 1.0)


def request_starts(config: SamplerConfig, rewards: list[float]):
    """The (start, end) of each request a sampler made to draw ``rewards`` (replayed on a fresh sampler)."""
    replay, start = PromptSampler(config), 0
    while start < len(rewards):
        size = replay.next_request()
        replay.record(rewards[start:start + size])
        yield start, start + size
        start += size


def expected_updates(config: SamplerConfig, p: float) -> tuple[float, float]:
    """E[the kept group's update] and E[the whole pool's], the score function of a response taken in
    expectation given its outcome: 1 for a correct one, -p / (1 - p) for an incorrect one (zero mean)."""
    score = {1.0: 1.0, 0.0: -p / (1 - p)}
    kept_total = pool_total = 0.0
    for sampler, prob in finished_pools(config, p):
        group = form_group(sampler)
        rewards = sampler.rewards
        pool = sum((r - group.stats.mean) * score[r] for r in rewards) / len(rewards)
        advantages = outcome_advantages(torch.tensor([rewards[i] for i in group.kept], dtype=torch.float64),
                                        [group.stats] * len(group.kept), torch.ones(len(group.kept), 1),
                                        norm_by_std=False)[:, 0].tolist()
        kept = sum(a * score[rewards[i]] for a, i in zip(advantages, group.kept)) / len(group.kept)
        kept_total += prob * kept
        pool_total += prob * pool
    return kept_total, pool_total


@pytest.mark.parametrize("variant", ["balance", "pos"])
@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.85])
def test_a_corrected_group_estimates_its_pools_update_exactly(variant, p):
    config = SamplerConfig(n=4, round_size=4, max_rounds=3, variant=variant, downsample_correction="stratified")
    kept, pool = expected_updates(config, p)
    assert kept == pytest.approx(pool, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("p", [0.1, 0.3, 0.85])
def test_an_uncorrected_balanced_group_does_not(p):
    kept, pool = expected_updates(SamplerConfig(n=4, round_size=4, max_rounds=3), p)
    assert abs(kept - pool) > 0.05 * abs(pool)
    # it over-weights the outcome the pool lacks: hard prompts (p small) and easy ones (p large) alike
    assert abs(kept) > abs(pool)


def test_stratum_weights_are_pool_share_over_group_share():
    # a pool of 1 correct in 8; the group keeps it with 3 incorrect
    weights = stratum_weights([0, 0, 1, 0, 0, 0, 0, 0], kept=[0, 1, 2, 3], threshold=0.7)
    assert (weights.correct, weights.incorrect) == (pytest.approx((1 / 8) / (1 / 4)), pytest.approx((7 / 8) / (3 / 4)))
    assert stratum_weights([0, 0, 0, 0, 0], kept=[0, 1, 2, 3], threshold=0.7) == StratumWeights(0.7, 1.0, 1.0)


def test_the_weights_reach_the_advantages_and_the_metrics():
    config = SamplerConfig(n=4, round_size=8, max_rounds=1, downsample_correction="stratified")
    sampler = PromptSampler(config)
    sampler.record([0, 0, 1, 0, 0, 0, 0, 0])
    group = form_group(sampler)
    assert group.kept == [0, 1, 2, 3] and group.stats.strata is not None
    advantages = outcome_advantages(torch.tensor([0.0, 0.0, 1.0, 0.0]), [group.stats] * 4, torch.ones(4, 2), False)
    assert advantages[:, 0].tolist() == pytest.approx([-1 / 8 * 7 / 6, -1 / 8 * 7 / 6, 7 / 8 * 0.5, -1 / 8 * 7 / 6])
    metrics = summarize([sampler], [group])
    assert metrics["stratified_weight_min"] == pytest.approx(0.5)
    assert metrics["stratified_weight_max"] == pytest.approx(7 / 6)
    assert "stratified_weight_min" not in summarize([sampler], [form_group(replace_config(sampler, "none"))])


def replace_config(sampler: PromptSampler, correction: str) -> PromptSampler:
    from dataclasses import replace

    return replace(sampler, config=replace(sampler.config, downsample_correction=correction))


def test_est_keeps_every_sample_so_has_nothing_to_correct():
    config = SamplerConfig(n=4, variant="est", downsample_correction="stratified")
    sampler = PromptSampler(config)
    sampler.record([0, 1, 0, 0])
    assert form_group(sampler).stats.strata is None


def test_a_group_of_one_cannot_be_corrected():
    with pytest.raises(ConfigError, match="downsample_correction: 'stratified' needs a group of n >= 2"):
        SamplerConfig(n=1, downsample_correction="stratified")
    with pytest.raises(ConfigError, match="downsample_correction: must be one of 'none', 'stratified'"):
        SamplerConfig(downsample_correction="yes")
    assert PoolStats(count=1, mean=0.0, m2=0.0).strata is None
