"""Skipping prompts without signal: the probability rule, a prompt that becomes informative again, decisions that
depend only on (seed, prompt, step), the saved state, and the step's metrics."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reinforce_ada.core.skip import SkipDecision, SkipRule, skip_metrics


def test_the_probability_grows_with_each_visit_without_signal_and_stops_at_the_cap():
    rule = SkipRule(growth=0.5, cap=0.9)
    seen = [rule.probability("p")]
    for _ in range(6):
        rule.observe("p", had_signal=False)
        seen.append(rule.probability("p"))
    assert seen == [0.0, 0.5, 0.75, 0.875, 0.9, 0.9, 0.9]


def test_a_prompt_that_becomes_informative_again_is_never_skipped_until_its_pool_is_uniform_again():
    rule = SkipRule(growth=0.5, cap=0.9)
    for _ in range(5):
        rule.observe("p", had_signal=False)
    assert rule.probability("p") == 0.9
    rule.observe("p", had_signal=True)  # a probe found both outcomes
    assert rule.streak("p") == 0 and rule.probability("p") == 0.0
    assert not any(d.skipped for step in range(200) for d in rule.decide(["p"], step))
    rule.observe("p", had_signal=False)
    assert rule.probability("p") == 0.5


def test_decisions_depend_on_seed_prompt_and_step_only_and_skip_at_the_stated_rate():
    rule = SkipRule(growth=0.5, cap=0.9, seed=3)
    keys = [f"p{i}" for i in range(2000)]
    for key in keys:
        rule.observe(key, had_signal=False)  # p_skip 0.5 each
    first = rule.decide(keys, step=7)
    assert [d.skipped for d in rule.decide(list(reversed(keys)), 7)] == [d.skipped for d in reversed(first)]
    assert [d.skipped for d in first] != [d.skipped for d in rule.decide(keys, 8)]
    other_seed = SkipRule(0.5, 0.9, seed=4)
    for key in keys:
        other_seed.observe(key, had_signal=False)
    assert [d.skipped for d in first] != [d.skipped for d in other_seed.decide(keys, 7)]
    share = sum(d.skipped for d in first) / len(keys)
    assert 0.46 < share < 0.54  # binomial(2000, 0.5): SD 0.011
    assert all(d.streak == 1 and d.probability == 0.5 for d in first)


@given(st.lists(st.booleans(), max_size=40), st.floats(0.01, 1.0), st.floats(0.0, 0.99))
def test_the_probability_never_reaches_one_and_a_signal_resets_it(history, growth, cap):
    rule = SkipRule(growth=growth, cap=cap)
    for had_signal in history:
        rule.observe("p", had_signal)
        assert 0.0 <= rule.probability("p") <= cap < 1.0
        if had_signal:
            assert rule.probability("p") == 0.0


def test_the_state_round_trips_through_json_and_a_restored_rule_decides_the_same():
    rule = SkipRule(growth=0.3, cap=0.8, seed=5)
    for key, outcomes in {"a": [False, False], "b": [False, True], "c": [False]}.items():
        for had_signal in outcomes:
            rule.observe(key, had_signal)
    restored = SkipRule(growth=0.3, cap=0.8, seed=5)
    restored.load_state_dict(json.loads(json.dumps(rule.state_dict())))
    assert (restored.streak("a"), restored.streak("b"), restored.streak("c"), len(restored)) == (2, 0, 1, 2)
    assert restored.decide(["a", "b", "c"], 11) == rule.decide(["a", "b", "c"], 11)
    with pytest.raises(ValueError, match="version"):
        restored.load_state_dict({"version": 99, "streaks": {}})
    with pytest.raises(ValueError, match="streaks"):
        restored.load_state_dict({"version": 1, "streaks": {"a": 0}})


@pytest.mark.parametrize(("growth", "cap"), [(0.0, 0.5), (1.5, 0.5), (0.5, 1.0), (0.5, -0.1)])
def test_settings_out_of_range_are_refused(growth, cap):
    with pytest.raises(ValueError):
        SkipRule(growth=growth, cap=cap)


def test_the_metrics_count_skips_and_how_often_a_probe_found_signal():
    decisions = [
        SkipDecision("new", 0, 0.0, False),  # never uninformative: not a candidate
        SkipDecision("a", 1, 0.5, True),
        SkipDecision("b", 2, 0.75, False),  # probed, found signal: skipping it would have lost a group
        SkipDecision("c", 1, 0.5, False),  # probed, uniform again
    ]
    metrics = skip_metrics(decisions, {"new": True, "b": True, "c": False})
    assert metrics == {"skipped": 1.0, "fetched": 4.0, "candidates_probed": 2.0, "probe_signal_frac": 0.5,
                       "skip_probability_mean": pytest.approx(1.75 / 4)}
    assert "probe_signal_frac" not in skip_metrics([SkipDecision("new", 0, 0.0, False)], {"new": True})


def test_fill_replaces_each_skipped_prompt_and_stops_skipping_after_the_last_refill():
    from reinforce_ada.core.skip import MAX_REFILLS, fill

    rule = SkipRule(growth=1.0, cap=0.99)
    stream = iter(f"p{i}" for i in range(10_000))
    for i in range(10_000):
        rule.observe(f"p{i}", had_signal=False)  # every prompt a candidate, skipped with p = 0.99
    refills = []

    def refill(skipped):
        refills.append(len(skipped))
        return [next(stream) for _ in skipped]

    decisions = fill(rule, [next(stream) for _ in range(8)], step=1, refill=refill)
    assert sum(not d.skipped for d in decisions) == 8  # the batch keeps its size
    assert len(refills) == MAX_REFILLS and len(decisions) == 8 + sum(refills)  # then the rest is sampled
