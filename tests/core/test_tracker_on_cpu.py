"""The pass-rate tracker, Est's allocation and warm-start sizes."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reinforce_ada.core.tracker import (
    AllocationError,
    PassRateTracker,
    allocate_samples,
    prompt_identity,
    warm_start_size,
)


def test_ada_ema_update_follows_the_spec_formula():
    tracker = PassRateTracker(decay=0.5, prior_pos=1.0, prior_neg=2.0)
    assert tracker.pass_rate("x") == pytest.approx(1 / 3)  # the prior mean for an unseen prompt
    tracker.update("x", drawn=8, correct=2)
    assert tracker.counts("x") == (8.0, 2.0)
    tracker.update("x", drawn=4, correct=4)
    assert tracker.counts("x") == (0.5 * 8 + 4, 0.5 * 2 + 4)
    assert tracker.pass_rate("x") == pytest.approx((5 + 1) / (8 + 1 + 2))
    assert tracker.counts("y") == (0.0, 0.0) and len(tracker) == 1


def test_pass_rate_is_never_zero_or_one():
    tracker = PassRateTracker()
    tracker.update("hard", 32, 0)
    tracker.update("easy", 32, 32)
    assert 0 < tracker.pass_rate("hard") < 0.05 and 0.95 < tracker.pass_rate("easy") < 1


@pytest.mark.parametrize("kwargs", [{"decay": 0.0}, {"decay": 1.5}, {"prior_pos": 0.0}, {"prior_neg": -1.0}])
def test_bad_tracker_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        PassRateTracker(**kwargs)


def test_update_refuses_impossible_counts():
    with pytest.raises(ValueError, match="correct <= drawn"):
        PassRateTracker().update("x", 4, 5)


def test_state_dict_is_json_and_round_trips_exactly():
    tracker = PassRateTracker(decay=0.3)
    for i in range(50):
        tracker.update(f"p{i % 7}", 3 + i % 5, i % 3)
    state = json.loads(json.dumps(tracker.state_dict()))
    restored = PassRateTracker(decay=0.3)
    restored.load_state_dict(state)
    keys = [f"p{i}" for i in range(8)]
    assert restored.pass_rates(keys) == tracker.pass_rates(keys)  # exact, not approx
    assert allocate_samples(restored.pass_rates(keys), 32, 2, 32) == allocate_samples(
        tracker.pass_rates(keys), 32, 2, 32
    )


def test_load_state_dict_refuses_other_versions_and_bad_counts():
    tracker = PassRateTracker()
    with pytest.raises(ValueError, match="version"):
        tracker.load_state_dict({"version": 99, "prompts": {}})
    with pytest.raises(ValueError, match="bad counts"):
        tracker.load_state_dict({"version": 1, "prompts": {"x": [1.0, 2.0]}})


def test_summary_reports_the_steps_prompts():
    tracker = PassRateTracker()
    tracker.update("a", 8, 0)
    summary = tracker.summary(["a", "b"])
    assert summary["tracker/prompts_seen_before"] == 1 and summary["tracker/size"] == 1
    assert summary["tracker/p_hat_min"] == pytest.approx(0.1) and summary["tracker/p_hat_max"] == 0.5


def test_prompt_identity_is_stable_and_ignores_container_types():
    messages = [{"role": "user", "content": "What is 2 plus 3?"}]
    key = prompt_identity(messages, "tiny")
    assert key == prompt_identity(np.array(messages, dtype=object), np.str_("tiny"))
    assert key == prompt_identity([{"content": "What is 2 plus 3?", "role": "user"}], "tiny")  # key order
    assert key != prompt_identity(messages, "other") and key != prompt_identity("What is 2 plus 3?", "tiny")
    assert len(key) == 32
    assert key == "d1ca78941356083bbd864980d6908130"  # no per-process salt (unlike Python's hash())


def test_allocation_favours_hard_prompts_and_sums_to_the_budget():
    counts = allocate_samples([0.05, 0.2, 0.5, 0.95], total=16, min_samples=2, max_samples=32)
    assert sum(counts) == 16 and counts == sorted(counts, reverse=True)
    assert counts[0] > counts[-1] >= 2


def test_allocation_is_proportional_to_inverse_sqrt_when_unclipped():
    rates = [0.01, 0.04, 0.16, 0.64]
    counts = allocate_samples(rates, total=150, min_samples=1, max_samples=1000, eps=0.0)
    assert counts == [80, 40, 20, 10]  # 1/sqrt(p) = 10, 5, 2.5, 1.25


def test_allocation_clips_and_redistributes():
    counts = allocate_samples([0.001, 0.5, 0.5, 0.5], total=20, min_samples=2, max_samples=8)
    assert counts[0] == 8 and sum(counts) == 20 and all(2 <= c <= 8 for c in counts)


def test_equal_pass_rates_give_equal_shares_and_ties_go_to_earlier_prompts():
    assert allocate_samples([0.5] * 4, 16, 2, 32) == [4, 4, 4, 4]
    assert allocate_samples([0.5] * 3, 10, 2, 32) == [4, 3, 3]


def test_infeasible_budget_names_the_bounds():
    with pytest.raises(AllocationError, match=r"feasible budgets: 8\.\.32"):
        allocate_samples([0.5] * 4, 40, 2, 8)
    with pytest.raises(AllocationError, match="feasible"):
        allocate_samples([0.5] * 4, 7, 2, 8)
    with pytest.raises(AllocationError, match="N_min"):
        allocate_samples([0.5], 4, 5, 3)


@settings(max_examples=300, deadline=None)
@given(
    rates=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=40),
    lo=st.integers(1, 6),
    span=st.integers(0, 40),
    frac=st.floats(0.0, 1.0),
)
def test_allocation_invariants(rates, lo, span, frac):
    hi = lo + span
    total = len(rates) * lo + round(frac * len(rates) * span)
    counts = allocate_samples(rates, total, lo, hi)
    assert sum(counts) == total and all(lo <= c <= hi for c in counts)
    assert counts == allocate_samples(list(rates), total, lo, hi)  # deterministic
    # a harder prompt never gets fewer samples than an easier one, beyond the one of rounding
    for i in range(len(rates)):
        for j in range(len(rates)):
            if rates[i] < rates[j]:
                assert counts[i] >= counts[j] - 1


@pytest.mark.parametrize(
    "p, k_pos, k_neg, expected",
    [
        (0.5, 2, 2, 4),  # max(2/0.5, 2/0.5)
        (0.1, 2, 2, 20),  # hard: 2/0.1
        (0.9, 2, 2, 20),  # easy, balance needs negatives: 2/0.1
        (0.9, 1, 0, 4),  # easy, pos: 1/0.9 -> 2, clipped up to n = 4
        (0.01, 1, 0, 32),  # clipped to the budget
        (0.3, 1, 0, 4),  # ceil(3.33) = 4
        (0.2, 1, 0, 5),  # exactly 5, not 6
    ],
)
def test_warm_start_size_is_the_expected_samples_to_exit(p, k_pos, k_neg, expected):
    assert warm_start_size(p, k_pos, k_neg, min_size=4, max_size=32) == expected
