"""The per-step sample budget: never exceeded, every prompt a full group or unresolved, spent where it pays."""

import json
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reinforce_ada.core.budget import StepBudget, fit_first_requests, priority, request_size, step_budget
from reinforce_ada.core.config import ConfigError, SamplerConfig
from reinforce_ada.core.sampler import FAILED, PromptSampler
from reinforce_ada.core.step import run_step

import strategies
from fake_rollouts import ShuffledRollout

# rewards per (prompt, pool index), some of them failed samples
reward_tables = strategies.reward_tables([0.0, 1.0, 0.0, 1.0, FAILED], length=80, max_prompts=10)


BUDGETED = strategies.sampler_configs(
    ("balance", "pos", "est"), n=(2, 6), rounds=(1, 5),
    caps=False, selections=False, budgets=True, min_samples=2
)


def first_requests(config, prompts, seed):
    """Est needs its allocation; a warm start may ask for more than the budget holds."""
    rng = random.Random(seed)
    if config.variant == "est":
        return None
    return [rng.randint(config.n, config.n_max) for _ in range(prompts)] if seed % 2 else None


@settings(max_examples=150, deadline=None)
@given(BUDGETED, reward_tables, st.integers(0, 5))
def test_the_budget_is_never_exceeded_and_every_kept_group_is_full(config, table, seed):
    rollout = ShuffledRollout(table, seed)
    result = run_step([f"p{i}" for i in range(len(table))], config, rollout,
                      first_requests=first_requests(config, len(table), seed))
    total = step_budget(config, len(table))
    requested = sum(count for _, count, _ in rollout.submitted)  # failed samples cost too
    assert requested == result.budget.spent <= total
    assert sum(s.drawn + s.samples_failed for s in result.samplers) == requested
    for sampler, group in zip(result.samplers, result.groups):
        assert sampler.finished
        if sampler.budget_stopped:
            assert not sampler.resolved
        if config.variant != "est" and not group.dropped and not result.empty:
            assert len(group.kept) == config.n
    metrics = result.metrics()
    assert metrics["budget_used_frac"] == pytest.approx(requested / total)
    assert metrics["prompts_budget_stopped"] == sum(s.budget_stopped for s in result.samplers)


@settings(max_examples=60, deadline=None)
@given(BUDGETED, reward_tables)
def test_rounds_and_async_agree_on_a_rollout_with_nothing_in_parallel(config, table):
    """With every request answered before the next is sent, async makes the rounds' decisions."""
    from dataclasses import replace

    def generate(requests):
        out = {}
        for p, c in requests.items():
            out[p] = table[p][offsets[p]: offsets[p] + c]
            offsets[p] += c
        return out

    pools = {}
    for mode in ("rounds", "async"):
        offsets = [0] * len(table)
        result = run_step([f"p{i}" for i in range(len(table))], replace(config, mode=mode), generate)
        pools[mode] = [(s.rewards, s.budget_stopped) for s in result.samplers], result.budget.spent
    assert pools["rounds"] == pools["async"]


def test_first_requests_are_cut_largest_first_never_below_the_floor():
    assert fit_first_requests([4, 4, 4], 12, 4) == [4, 4, 4]
    assert fit_first_requests([32, 8, 4], 24, 4) == [12, 8, 4]
    assert fit_first_requests([10, 10, 10], 25, 4) == [9, 8, 8]
    assert sum(fit_first_requests([30, 5, 17, 4], 26, 4)) == 26
    with pytest.raises(ValueError, match="do not fit"):
        fit_first_requests([4, 4, 4], 11, 4)


def test_a_budgeted_step_starts_with_n_samples_per_prompt_not_a_round():
    config = SamplerConfig(n=4, round_size=8, max_rounds=4, sample_budget=2)
    rounds = []

    def generate(requests):
        rounds.append(dict(requests))
        return {p: [0.0] * c for p, c in requests.items()}

    result = run_step(["a", "b"], config, generate)
    # 4 first, then the 8 left spread over 2 uniform prompts and their 3 rounds left: 2, then 1 and 1
    assert rounds == [{0: 4, 1: 4}, {0: 2, 1: 2}, {0: 1, 1: 1}, {0: 1, 1: 1}]
    assert result.budget.spent == 16 and not any(s.resolved for s in result.samplers)


def sampler_with(pos, neg, config=None, redraw=0):
    s = PromptSampler(config or SamplerConfig(n=4, round_size=8, max_rounds=4, sample_budget=2))
    s.rewards, s.num_pos, s.num_neg, s.rounds, s.redraw = [1.0] * pos + [0.0] * neg, pos, neg, 1, redraw
    return s


def test_priority_redraws_first_then_uniform_pools_by_their_chance_then_mixed_pools():
    redraw, fresh, stale, all_right, mixed = (
        sampler_with(0, 3, redraw=1), sampler_with(0, 4), sampler_with(0, 12), sampler_with(4, 0), sampler_with(1, 3)
    )
    ranks = [priority(s, 4) for s in (redraw, fresh, stale, all_right, mixed)]
    assert ranks[0][0] == 2 and ranks[1][0] == ranks[2][0] == ranks[3][0] == 1 and ranks[4][0] == 0
    assert ranks[1][1] > ranks[2][1]  # 0 of 4 correct is likelier to turn than 0 of 12
    assert ranks[1][1] == pytest.approx(ranks[3][1])  # a flat prior: all wrong and all right alike
    assert 0 < ranks[4][1] < 1


def test_when_the_budget_runs_short_the_likeliest_prompts_get_it_and_the_rest_stop():
    samplers = [sampler_with(0, 12), sampler_with(0, 4), sampler_with(1, 3), sampler_with(0, 4)]
    for s in samplers:
        s.rounds = 3  # one round left: each uniform prompt's share is ceil(4 / 3) = 2
    budget = StepBudget(total=4)
    granted = budget.grant(samplers, [0, 1, 2, 3])
    assert granted == {1: 2, 3: 2} and budget.left == 0  # the two 0-of-4 prompts, ties in prompt order
    assert samplers[0].budget_stopped and samplers[2].budget_stopped  # 0 of 12, and the mixed one
    assert samplers[1].next_request() == 2


def test_a_mixed_pool_waits_while_uniform_pools_may_need_the_rest():
    samplers = [sampler_with(1, 3), sampler_with(0, 4)]
    budget = StepBudget(total=30)
    assert budget.grant(samplers, [0, 1]) == {1: 10}  # 30 / (1 uniform prompt x 3 rounds left)
    assert not samplers[0].finished  # waits, not stopped
    samplers[1].record([1.0] + [0.0] * 9)  # now mixed: nothing uniform is left to reserve for
    assert budget.grant(samplers, [0]) == {0: 8}


def test_request_sizes_spread_what_is_left_over_the_uniform_prompts_and_their_rounds():
    s = sampler_with(0, 4)
    assert request_size(s, left=60, uniform_prompts=5) == 4  # ceil(60 / (5 x 3))
    assert request_size(s, left=1000, uniform_prompts=1) == 28  # N_max - drawn
    assert request_size(sampler_with(1, 3), left=60, uniform_prompts=5) == 8  # mixed: its own round


@pytest.mark.parametrize("value", [0.5, 0, -1, float("inf"), True, "2"])
def test_invalid_budgets_are_refused_naming_the_field(value):
    with pytest.raises(ConfigError, match="sample_budget"):
        SamplerConfig(sample_budget=value)


def test_the_budget_spends_where_it_pays_on_the_papers_early_training_pass_rates():
    """Beta(0.5, 2), n 4: at a budget of 2, kept groups with a gradient at least 5 points above GRPO-8
    drawing the same samples (the simulate tool, as a user runs it)."""

    def summary(*flags):
        out = subprocess.run(
            [sys.executable, "-m", "reinforce_ada.tools.simulate", "--beta", "0.5", "2", "--num-prompts", "2048",
             "--seed", "0", "--summary-only", *flags], capture_output=True, text=True, check=True,
        ).stdout
        return json.loads(out)

    grpo8 = summary("--n", "8", "--round-size", "8", "--max-rounds", "1")
    budget2 = summary("--sample-budget", "2")
    assert budget2["samples_per_prompt_mean"] <= 8 == grpo8["samples_per_prompt_mean"]
    assert budget2["kept_groups_with_signal_frac"] >= grpo8["kept_groups_with_signal_frac"] + 0.05
    assert budget2["budget_used_frac"] <= 1.0 and budget2["prompts_budget_stopped"] > 0


def test_a_warm_start_under_a_budget_asks_n_of_new_prompts_and_cuts_known_ones_to_fit():
    from reinforce_ada.core.tracker import make_tracker, plan_first_requests

    config = SamplerConfig(n=4, round_size=8, max_rounds=4, warm_start=True, sample_budget=1.5)
    tracker = make_tracker(config)
    tracker.update("hard", drawn=8, correct=0)
    tracker.update("even", drawn=8, correct=4)
    plan = plan_first_requests(tracker, ["hard", "even", "new"], config)
    assert plan == [20, 4, 4]  # the tracker's wish (K / p_hat, within [n, N_max]) for known prompts; n for a new one
    made = []
    run_step(["hard", "even", "new"], config, lambda requests: {p: [0.0] * c for p, c in requests.items()},
             first_requests=plan, on_start=made.extend)
    # run_step, the one place the step budget is cut: floor(1.5 x 3 x 4) = 18, the hard prompt gets what is left
    assert made == [18 - 8, 4, 4]


def test_a_step_reports_every_round_it_ran_even_when_no_prompt_took_part_in_all():
    """A mixed pool that waits for the uniform ones sits out a round; the step's round count still has it."""
    config = SamplerConfig(n=4, round_size=8, max_rounds=3, sample_budget=3)  # 24 samples
    # "mixed" has 1 of 4 right after its first request; "uniform" 0 of 4, then 2 of its next 8 (resolved)
    pools = {0: [1.0, 0.0, 0.0, 0.0] + [1.0, 0.0] * 14, 1: [0.0] * 4 + [1.0, 1.0] + [0.0] * 26}
    offsets = {0: 0, 1: 0}

    def generate(requests):
        out = {}
        for p, c in requests.items():
            out[p], offsets[p] = pools[p][offsets[p]: offsets[p] + c], offsets[p] + c
        return out

    result = run_step(["mixed", "uniform"], config, generate)
    metrics = result.metrics()
    # n each; the uniform one (8 = its share: 16 left over its 2 rounds left), while the mixed one waits; then it
    assert [s.drawn for s in result.samplers] == [12, 12] and len(result.round_seconds) == 3
    assert metrics["rounds"] == 3 and max(s.requests for s in result.samplers) == 2
    assert sum(metrics[f"round_{i}_seconds"] for i in (1, 2, 3)) == pytest.approx(metrics["rollout_seconds"])
