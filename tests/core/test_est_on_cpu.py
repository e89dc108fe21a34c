"""Reinforce-Ada-Est and warm-started Seq in the pure core: settings, requests, groups, weights."""

import math
import random

import pytest

from reinforce_ada.core.advantage import prompt_weight
from reinforce_ada.core.config import ConfigError, SamplerConfig
from reinforce_ada.core.sampler import PromptSampler
from reinforce_ada.core.step import run_step
from reinforce_ada.core.tracker import PassRateTracker, make_tracker, plan_first_requests


def bernoulli_rollout(pass_rates, seed=0):
    rngs = [random.Random(f"{seed}:{i}") for i in range(len(pass_rates))]
    calls = []

    def generate(requests):
        calls.append(dict(requests))
        return {i: [float(rngs[i].random() < pass_rates[i]) for _ in range(k)] for i, k in requests.items()}

    return generate, calls


def test_est_defaults_and_weight():
    config = SamplerConfig(variant="est")
    assert config.weight_rule == "inverse_sqrt" and config.uses_tracker
    assert SamplerConfig().weight_rule == "none" and not SamplerConfig().uses_tracker
    assert SamplerConfig(variant="est", prompt_weight="none").weight_rule == "none"  # the ablation stays possible
    assert prompt_weight(0.25, config) == pytest.approx(2.0)
    assert (config.tracker_decay, config.tracker_prior_pos, config.tracker_prior_neg) == (0.5, 1.0, 1.0)
    assert config.min_samples_per_prompt == 2


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"variant": "est", "warm_start": True}, "warm_start:"),
        ({"variant": "est", "unresolved": "drop"}, "unresolved:"),
        ({"variant": "est", "k_pos": 1}, "k_pos:"),
        ({"variant": "est", "min_samples_per_prompt": 5}, "min_samples_per_prompt:"),
        ({"min_samples_per_prompt": 0}, "min_samples_per_prompt:"),
        ({"warm_start": "yes"}, "warm_start:"),
        ({"tracker_decay": 0.0}, "tracker_decay:"),
        ({"tracker_decay": 1.5}, "tracker_decay:"),
        ({"tracker_prior_pos": 0}, "tracker_prior_pos:"),
        ({"tracker_prior_neg": float("nan")}, "tracker_prior_neg:"),
        ({"variant": "est", "n": 40}, "n:"),
    ],
)
def test_bad_est_and_tracker_settings_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=f"^{field}"):
        SamplerConfig(**kwargs)


def test_est_makes_one_request_of_its_allocation_and_keeps_every_sample():
    config = SamplerConfig(variant="est")
    generate, calls = bernoulli_rollout([0.1, 0.5, 0.9])
    result = run_step(["a", "b", "c"], config, generate, first_requests=[7, 3, 2])
    assert calls == [{0: 7, 1: 3, 2: 2}]  # one request per prompt, no second round
    assert [s.drawn for s in result.samplers] == [7, 3, 2]
    assert [g.kept for g in result.groups] == [list(range(7)), list(range(3)), list(range(2))]
    for sampler, group in zip(result.samplers, result.groups):
        assert group.stats.count == sampler.drawn and not group.dropped
        assert group.stats.weight == pytest.approx(1 / math.sqrt(max(group.stats.mean, 0.01)))
    metrics = result.metrics()
    assert metrics["kept_samples"] == 12 and metrics["rounds"] == 1 and metrics["prompts_resolved"] == 3


def test_est_without_a_tracker_gives_every_prompt_n():
    generate, calls = bernoulli_rollout([0.5, 0.5])
    run_step(["a", "b"], SamplerConfig(variant="est", n=6, round_size=8), generate)
    assert calls == [{0: 6, 1: 6}]


def test_est_allocation_from_the_tracker_spends_exactly_n_per_prompt():
    config = SamplerConfig(variant="est")
    tracker = make_tracker(config)
    tracker.update("hard", 32, 0)
    tracker.update("easy", 32, 31)
    keys = ["hard", "easy", "new", "new2"]
    plan = plan_first_requests(tracker, keys, config)
    # hard: 1/sqrt(1/34 + 0.01) = 5.06 -> 9.04; new: 1.39 -> 2.48 each; easy: clipped up to N_min = 2;
    # the one sample left over goes to the larger remainder, the tie to the earlier prompt
    assert plan == [9, 2, 3, 2] and sum(plan) == 4 * len(keys)


def test_warm_start_sizes_the_first_round_only():
    config = SamplerConfig(variant="balance", warm_start=True)
    tracker = PassRateTracker()
    tracker.update("hard", 8, 0)  # p_hat = 1/10: first round 2 / 0.1 = 20
    tracker.update("easy", 8, 7)  # p_hat = 8/10: first round max(2/0.8, 2/0.2) = 10
    plan = plan_first_requests(tracker, ["hard", "easy", "new"], config)
    assert plan == [20, 10, 8]  # an unseen prompt keeps round_size
    sampler = PromptSampler(config, first_request=20)
    assert sampler.next_request() == 20
    sampler.record([0.0] * 20)
    assert sampler.next_request() == 8 and not sampler.finished  # later rounds unchanged
    sampler.record([0.0] * 8)
    assert sampler.next_request() == 4  # the budget (32) still caps the last round
    assert plan_first_requests(tracker, ["hard"], SamplerConfig()) is None  # off: nothing planned


def test_warm_start_keeps_the_exit_rule():
    config = SamplerConfig(variant="pos", warm_start=True)
    sampler = PromptSampler(config, first_request=4)
    sampler.record([1.0, 0.0, 0.0, 0.0])
    assert sampler.resolved and sampler.finished  # k_pos = 1 and n = 4 drawn
    short = PromptSampler(SamplerConfig(variant="pos", n=4, round_size=2, max_rounds=4), first_request=2)
    short.record([1.0, 0.0])
    assert not short.resolved  # fewer than n drawn: cannot exit yet, as without warm start


def test_run_step_checks_the_first_request_count():
    generate, _ = bernoulli_rollout([0.5])
    with pytest.raises(ValueError, match="2 first requests for 1 prompts"):
        run_step(["a"], SamplerConfig(variant="est"), generate, first_requests=[4, 4])


def test_async_mode_makes_the_same_est_requests():
    generate, calls = bernoulli_rollout([0.2, 0.7])
    result = run_step(["a", "b"], SamplerConfig(variant="est", mode="async"), generate, first_requests=[5, 3])
    assert [s.drawn for s in result.samplers] == [5, 3] and sum(len(c) for c in calls) == 2
