"""The third learning protocol's equal samples: its definition, where runs reach the budget and the marks, the area
against responses drawn and the learning-rate rule (studies/learning/README.md, third protocol)."""

import json
from pathlib import Path

import pytest

from studies.learning import budget
from studies.learning import protocol as learning_protocol

ROOT = Path(__file__).resolve().parents[2]
THIRD = learning_protocol.PROTOCOLS["third"]


def test_the_third_protocol_is_the_written_design():
    size = THIRD.size
    assert (size.budget, size.marks) == (2048, (512, 1024, 1536, 2048))
    assert THIRD.sweep == (2e-5, 1e-5, 3e-6) and max(THIRD.sweep) > 1e-5
    # amendment 2: the candidate the equal-samples gradient-quality study's rule sent
    assert THIRD.methods == ("grpo_n4", "balance", "balance_inverse_budget1", "grpo_n24")
    assert THIRD.pilot_only == ("grpo_n24",)
    assert THIRD.start_per_seed and THIRD.pilot_seeds == 4 and THIRD.most_seeds == 10
    # amendment 1: no warm-up, so that an arm drawing more a step spends no more of the budget below its rate
    assert (size.run.batch, size.run.eval_k, size.warmup_steps, size.start) == (8, 4, 0, "format")
    # the quick size's marks are GRPO-n4's steps 1 and 2 there
    assert budget.crossings({1: 8, 2: 8}, THIRD.quick.marks) == {8: (1, 8.0), 16: (2, 16.0)}
    # a record carries the budget; one without it (the second protocol's) is refused
    assert size.record()["budget"] == 2048 and size.record()["marks"] == [512, 1024, 1536, 2048]
    second = learning_protocol.PROTOCOLS["second"].size.record()
    assert "budget" not in second and "budget" in size.differs_from({**size.record(), "budget": 1024})


def test_the_per_step_control_draws_balances_mean_from_the_second_protocols_records():
    drawn = [values["reinforce_ada/samples_total"]
             for path in sorted((ROOT / "studies/learning/results/second/runs").glob("balance_seed*.json"))
             for step, values in json.loads(path.read_text())["steps"].items() if int(step) > 0]
    per_prompt = sum(drawn) / len(drawn) / learning_protocol.PROTOCOLS["second"].size.run.batch
    assert len(drawn) == 80 and round(per_prompt) == learning_protocol.PER_STEP_CONTROL_N == 24


def test_grpo_arms_reach_the_marks_at_known_steps_and_within_the_protocols_steps():
    size = THIRD.size
    assert budget.grpo_draw("grpo_n4", size) == 32 and budget.grpo_draw("balance", size) is None
    assert budget.steps_to_budget("grpo_n4", size) == 64 == size.run.steps
    assert budget.steps_to_budget("grpo_n24", size) == 11  # 192 a step: 2112 responses after step 11
    assert budget.steps_to_budget("balance", size) == size.run.steps  # a bound: known once logged
    grpo = budget.crossings({s: 32 for s in range(1, 65)}, size.marks)
    assert {m: s for m, (s, _) in grpo.items()} == {512: 16, 1024: 32, 1536: 48, 2048: 64}
    assert all(total == mark for mark, (_, total) in grpo.items())  # no overshoot
    # GRPO-n4 saves at its marks' steps only; GRPO-n24 (steps 3, 6, 8, 11) and adaptive arms every step
    assert [budget.save_every(m, size) for m in ("grpo_n4", "grpo_n24", "balance")] == [16, 1, 1]
    with pytest.raises(ValueError, match="more than the protocol's 64"):
        budget.steps_to_budget("grpo_n2", size)


def test_a_mark_reached_mid_step_counts_after_that_step_with_its_overshoot():
    # balance-like draws: 200, 250, 100 -> cumulative 200, 450, 550: mark 512 is crossed in step 3
    reached = budget.crossings({1: 200, 2: 250, 3: 100, 4: 600}, (512, 1024))
    assert reached == {512: (3, 550.0), 1024: (4, 1150.0)}
    assert budget.crossings({1: 200}, (512,)) == {}  # not reached yet
    assert budget.crossings({1: 1100}, (512, 1024)) == {512: (1, 1100.0), 1024: (1, 1100.0)}  # one step, two marks


def test_the_area_against_responses_is_the_curves_mean_height_over_the_marks():
    marks = (512, 1024, 1536, 2048)
    curve = {0: 30.0, 512: 50.0, 1024: 60.0, 1536: 70.0, 2048: 70.0}
    assert budget.auc_over_marks(curve, marks) == pytest.approx((30 + 2 * 50 + 2 * 60 + 2 * 70 + 70) / 8)
    with pytest.raises(ValueError, match=r"lacks \[1536\]"):
        budget.auc_over_marks({k: v for k, v in curve.items() if k != 1536}, marks)
    # the secondary area places evaluations at their actual responses and cuts at the end
    assert budget.auc_at_actual([(0, 0.0), (100, 100.0)], 50) == pytest.approx(25.0)
    assert budget.auc_at_actual([(0, 10.0), (600, 10.0), (1200, 10.0)], 1000) == pytest.approx(10.0)
    with pytest.raises(ValueError, match="at least 1000"):
        budget.auc_at_actual([(0, 10.0), (600, 10.0)], 1000)


def test_the_rate_rule_takes_the_largest_area_among_curves_that_never_drop_too_far():
    marks, rates = (1, 2), (2e-5, 1e-5, 3e-6)
    high, mid, low = {0: 0.3, 1: 0.6, 2: 0.7}, {0: 0.3, 1: 0.5, 2: 0.6}, {0: 0.3, 1: 0.4, 2: 0.5}
    dropping = {0: 0.3, 1: 0.8, 2: 0.7}  # the largest area, but a 10-point drop
    assert budget.choose_lr_by_area(rates, {2e-5: high, 1e-5: mid, 3e-6: low}, marks, 0.05) == 2e-5
    assert budget.choose_lr_by_area(rates, {2e-5: dropping, 1e-5: low, 3e-6: mid}, marks, 0.05) == 3e-6
    assert budget.choose_lr_by_area(rates, {r: dropping for r in rates}, marks, 0.05) == 3e-6
    assert budget.choose_lr_by_area(rates, {r: mid for r in rates}, marks, 0.05) == 2e-5  # a tie: the first
