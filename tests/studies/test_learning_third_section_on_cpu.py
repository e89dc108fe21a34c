"""The third learning protocol's results section from fake records and evaluations: each arm against GRPO-n4
paired by start on the area against responses, the intervals over starts and over starts and questions, the starts
needed and the secondary measures."""

import json
from dataclasses import replace
from pathlib import Path

from reinforce_ada.demo.config import DemoSize
from studies.learning import marks as learning_marks
from studies.learning import protocol as learning_protocol
from studies.learning import records as learning_records
from studies.learning import third_section

FILTERED, ALL = learning_protocol.FILTERED, learning_protocol.UNFILTERED
SIZE = learning_protocol.Size(pool=8, filter_k=2, heldout_filtered=4, heldout_all=4,
                              run=DemoSize(batch=2, steps=8, eval_every=1, eval_k=2, mini_batch=2),
                              warmup_steps=1, start="format", budget=16, marks=(8, 16))
THIRD = replace(learning_protocol.PROTOCOLS["third"], size=SIZE, pilot_seeds=2)
DATA = {"counts": {"train": 4, "test": 4}, "pass_range": [0, 0.3125]}


def evaluation(correct: list[int], about: dict, k: int = 2) -> dict:
    """An evaluation whose filtered questions have ``correct`` of k right (the unfiltered set: half of that)."""
    per = {FILTERED: [{"avg": c / k, "correct": c} for c in correct],
           ALL: [{"avg": c / (2 * k), "correct": c / 2} for c in correct]}
    return {**about, "accuracy": {s: sum(q["avg"] for q in qs) / len(qs) for s, qs in per.items()},
            "per_question": per}


def write_run(results: Path, method: str, seed: int, drawn: list[int], at_marks: list[list[int]], start: str,
              step_s: float = 2.0, paths: list[int] | None = None, machine: str = "test") -> None:
    """A finished run's record (``drawn`` responses a step, critical path ``paths`` a step, by default 10 x the
    step) and its evaluations at the marks (per-question correct)."""
    paths = paths or [10 * s for s in range(1, len(drawn) + 1)]
    steps = {s: {"reinforce_ada/samples_total": d, "timing_s/step": step_s, "timing_s/save_checkpoint": step_s / 2,
                 "reinforce_ada/critical_path_tokens": p} for s, (d, p) in enumerate(zip(drawn, paths), 1)}
    path = learning_records.record_path(results, method, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"method": method, "seed": seed, "date": "2026-12-07", "machine": machine,
                                "wall_s": 120.0, "command": "x", "size": SIZE.record(),
                                "start": {"fingerprint": start}, "steps": steps}))
    total, reached = 0, {}
    for s, d in enumerate(drawn, 1):
        total += d
        for mark in SIZE.marks:
            reached.setdefault(mark, (s, total)) if total >= mark else None
    for mark, correct in zip(SIZE.marks, at_marks):
        out = learning_marks.evaluation_path(results, method, seed, mark)
        out.parent.mkdir(parents=True, exist_ok=True)
        step, responses = reached[mark]
        out.write_text(json.dumps(evaluation(correct, {"mark": mark, "step": step, "responses": responses})))


def write_start(results: Path, start: str, correct: list[int]) -> None:
    out = third_section.start_evaluation_path(results, start)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(evaluation(correct, {"mark": 0})))


def test_each_arm_is_paired_with_grpo_by_start_on_the_area_against_responses(tmp_path):
    results = tmp_path / "results"
    for seed in (0, 1):
        write_start(results, f"s{seed}", [0, 0, 1, 1])  # 25%
        # GRPO-n4: 8 a step, no overshoot; 50% at 8 and 16 responses: area (25 + 2x50 + 50) / 4 = 43.75
        write_run(results, "grpo_n4", seed, [8, 8], [[1, 1, 1, 1], [1, 1, 1, 1]], f"s{seed}")
        # balance: 12 then 12: 24 responses after step 2 (overshoot 4 at mark 8, 8 at 16); seed 0: 75% at both
        # marks (area (25 + 150 + 75) / 4 = 62.5, +18.75); seed 1: 50% then 100% (area (25 + 100 + 100) / 4 = 56.25)
        later = [[2, 2, 1, 1], [2, 2, 1, 1]] if seed == 0 else [[1, 1, 1, 1], [2, 2, 2, 2]]
        write_run(results, "balance", seed, [12, 12], later, f"s{seed}", step_s=6.0)
    write_run(results, "pos", 0, [16], [[2, 2, 2, 2], [2, 2, 2, 2]], "s0")
    (learning_marks.evaluation_path(results, "pos", 0, 16)).unlink()  # not evaluated at 16 yet: left out
    runs = third_section.run_curves(results, SIZE)
    assert set(runs) == {("grpo_n4", 0), ("grpo_n4", 1), ("balance", 0), ("balance", 1)}
    assert runs[("balance", 1)][FILTERED]["curve"] == {0: 25.0, 8: 50.0, 16: 100.0}
    assert runs[("balance", 0)][FILTERED]["points"] == [(0.0, 25.0), (12, 75.0), (24, 75.0)]
    text = third_section.report_third(results, DATA, SIZE, THIRD)
    assert "| 0 | yes | 43.8 | 62.5 | +18.8 | +25.0 |" in text
    # t(1) = 12.706 x SD 4.42 / sqrt(2) = 39.7
    assert "Mean difference +15.6 ± 39.7 points (95% t interval over 2 starts); the interval includes 0" in text
    # resampling starts and questions: narrower than t(1)'s interval, above 0
    assert "Resampling starts and, within each, held-out questions: +6.2 to +28.1." in text
    assert ("From the 2 pilot starts' SD (4.4), resolving a 5-point difference at 80% power (two-sided 5%) needs 9 "
            "starts; 2 are done, so the runs extend to 9") in text
    # the unfiltered set (half the filtered accuracy here): +9.4 and +6.2
    assert "on the unfiltered held-out set the area difference is +7.8 ± 19.9." in text
    # the evaluations at their actual responses, cut at 16: balance (0, 25), (12, 50), (24, 100) against GRPO-n4's
    assert "| 1 | yes | 43.8 | 56.2 | +12.5 | +50.0 | -1.0 | 8 |" in text
    # 2 steps, 12 a step, 2 x (6 - 3) s without the checkpoint saves (3x GRPO-n4's 2 x (2 - 1) s), critical path
    # (10 + 20) / 2, over the run 30
    assert "| balance | 2 | 2.0 ± 0.0 | 12 ± 0 | 0.1 ± 0.0 | 3.00 ± 0.00 | 15 ± 0 | 30 ± 0 |" in text
    assert "kinds of machine" not in text
    assert "| grpo_n4 | 0 | 2026-12-07 |" in text and "| pos |" not in text


def test_step_time_is_compared_with_grpos_from_the_same_start_on_the_same_machine(tmp_path):
    results = tmp_path / "results"
    for seed, machine in ((0, "fast"), (1, "slow"), (2, "slow")):
        write_start(results, f"s{seed}", [0, 0, 1, 1])
        scale = 2.0 if machine == "slow" else 1.0  # the slow machine takes twice as long for the same step
        write_run(results, "grpo_n4", seed, [8, 8], [[1, 1, 1, 1], [1, 1, 1, 1]], f"s{seed}", step_s=2.0 * scale,
                  machine=machine)
        # balance: 3x GRPO-n4's step time at starts 0 and 1; at start 2 it ran on the fast machine: not compared
        write_run(results, "balance", seed, [12, 12], [[2, 2, 1, 1], [2, 2, 1, 1]], f"s{seed}",
                  step_s=6.0 * (scale if seed < 2 else 1.0), machine=machine if seed < 2 else "fast")
    text = third_section.report_third(results, DATA, SIZE, THIRD)
    assert "the runs ran on 2 kinds of machine (the runs table says which)" in text
    # summed step time: a mean over machines (6, 12 and 6 s); the ratio: starts 0 and 1 only, 3.00 at both
    assert "| balance | 3 | 2.0 ± 0.0 | 12 ± 0 | 0.1 ± 0.1 | 3.00 ± 0.00 |" in text
    assert third_section.step_time_ratios(third_section.run_curves(results, SIZE), "balance") == [3.0, 3.0]


def test_the_per_step_control_pairs_balance_with_the_grpo_that_draws_as_much(tmp_path):
    results = tmp_path / "results"
    for seed in (0, 1):
        write_start(results, f"s{seed}", [0, 0, 1, 1])  # 25%
        write_run(results, "grpo_n4", seed, [8, 8], [[1, 1, 1, 1], [1, 1, 1, 1]], f"s{seed}")  # area 43.75
        # balance: 75% at both marks (area 62.5); GRPO-n24: 16 a step, 50% then 100% (area 56.25) or 75% twice
        write_run(results, "balance", seed, [12, 12], [[2, 2, 1, 1], [2, 2, 1, 1]], f"s{seed}")
        control = [[1, 1, 1, 1], [2, 2, 2, 2]] if seed == 0 else [[2, 2, 1, 1], [2, 2, 1, 1]]
        write_run(results, "grpo_n24", seed, [16], control, f"s{seed}")
    text = third_section.report_third(results, DATA, SIZE, THIRD)
    control = text.split("**Per-step control, balance - grpo_n24**")[1]
    assert "| start | same weights | grpo_n24 area | balance area |" in control
    assert "| 0 | yes | 56.2 | 62.5 | +6.2 | -25.0 |" in control
    assert "| 1 | yes | 62.5 | 62.5 | +0.0 | +0.0 |" in control
    assert "Mean difference +3.1 ± 39.7 points (95% t interval over 2 starts)" in control
    assert "no start count is sized on this pair" in control and "needs" not in control
    # GRPO-n24 is still read against GRPO-n4, as the other arms, with no sizing either
    assert "**Primary measure, grpo_n24 - grpo_n4**" in text
    assert "grpo_n24 is the per-step control, run at the 2 pilot starts only" in text
    assert "the per-step control is balance minus grpo_n24 on the same measure" in text


def test_each_arm_is_read_against_grpo_at_about_equal_critical_path(tmp_path):
    results = tmp_path / "results"
    for seed in (0, 1):
        write_start(results, f"s{seed}", [0, 0, 0, 0])  # 0%
        # GRPO-n4: critical path 10 then 20 (30 over the run); 50% at mark 8 (step 1), 100% at mark 16 (step 2)
        write_run(results, "grpo_n4", seed, [8, 8], [[1, 1, 1, 1], [2, 2, 2, 2]], f"s{seed}")
        # balance: one step of 16 with a critical path of 25: compared at 25 tokens, where GRPO-n4 has only reached
        # mark 8 (10 tokens); 75% at both marks: +25 points on both starts
        write_run(results, "balance", seed, [16], [[2, 2, 1, 1], [2, 2, 1, 1]], f"s{seed}", paths=[25])
        # GRPO-n24: 5 tokens in all, before GRPO-n4's first mark: left out
        write_run(results, "grpo_n24", seed, [16], [[2, 2, 2, 2], [2, 2, 2, 2]], f"s{seed}", paths=[5])
    text = third_section.report_third(results, DATA, SIZE, THIRD)
    assert "left out, where a run has no mark within it: grpo_n24 at start 0, grpo_n24 at start 1:" in text
    assert "| balance | 2 | 25 ± 0 | 25 ± 0 | 10 ± 0 | 75.0 ± 0.0 | 50.0 ± 0.0 | +25.0 ± 0.0 | +25.0, +25.0 |" in text
    assert "| grpo_n24 | 2 | 5 |" not in text


def test_the_question_bootstrap_resamples_questions_within_starts():
    marks = (8, 16)
    same = {0: [0.5, 0.5], 8: [0.5, 0.5], 16: [0.5, 0.5]}
    better = {0: [0.5, 0.5], 8: [1.0, 1.0], 16: [1.0, 1.0]}
    # every question gains 50 points at both marks: every resample gives (0 + 2 x 50 + 50) / 4 = 37.5
    low, high = third_section.paired_bootstrap([(better, same)] * 3, marks, resamples=200)
    assert low == high == 37.5
    # one question gains, one does not: resampling questions spreads the difference over 0 to 75
    mixed = {0: [0.5, 0.5], 8: [1.0, 0.5], 16: [1.0, 0.5]}
    low, high = third_section.paired_bootstrap([(mixed, same)], marks, resamples=400)
    assert low == 0.0 and high == 37.5


def test_the_sweep_table_takes_the_rule_s_rate(tmp_path):
    def run(curve):
        return {FILTERED: {"curve": curve}}

    sweep = {2e-5: run({0: 30.0, 8: 60.0, 16: 50.0}), 1e-5: run({0: 30.0, 8: 50.0, 16: 55.0}),
             3e-6: run({0: 30.0, 8: 40.0, 16: 45.0})}
    text = "\n".join(third_section.sweep_table(sweep, THIRD, SIZE))
    assert "| 2e-05 | 30.0 | 60.0 | 50.0 | 10.0 | 50.0 |  |" in text  # drops 10 points: not taken
    assert "| 1e-05 | 30.0 | 50.0 | 55.0 | 0.0 | 46.2 | yes |" in text


def test_the_figure_counts_each_methods_finished_starts_which_may_differ_between_methods():
    from studies.learning.curves import run_counts

    rows = [{"method": m, "seed": s, "mark": k, "finished": f}
            for m, seeds, f in (("grpo_n4", (0, 1, 2), True), ("balance", (0, 1), True), ("grpo_n24", (3,), False))
            for s in seeds for k in (0, 8)]
    assert run_counts(rows) == {"grpo_n4": 3, "balance": 2}
