"""The demo's task, its bookkeeping and its report (the whole demo runs in tests/e2e/test_demo_run_on_cpu.py)."""

import json
from pathlib import Path

import pandas as pd
import pytest

from reinforce_ada.demo import report as demo_report
from reinforce_ada.demo import run as demo
from reinforce_ada.demo import task as demo_task
from reinforce_ada.tasks.reward import compute_score


def test_questions_are_seeded_distinct_and_split_without_overlap():
    train, test = demo_task.questions(200, 50, seed=3)
    assert (train, test) == demo_task.questions(200, 50, seed=3)
    assert (train, test) != demo_task.questions(200, 50, seed=4)
    expressions = [q for _, q, _ in train + test]
    assert len(train) == 200 and len(test) == 50 and len(set(expressions)) == 250
    assert {level for level, _, _ in train} == set(demo_task.LEVELS)
    for _, expression, answer in train + test:
        assert str(eval(expression)) == answer  # the expressions are plain Python arithmetic


def test_asking_for_more_questions_than_exist_names_the_options():
    with pytest.raises(ValueError, match="--train \\+ --test"):
        demo_task.questions(9000, 100, seed=0)


def test_parquet_is_verl_format_and_the_reference_answer_scores_one(tmp_path):
    train_file, test_file = demo_task.build(tmp_path, train=12, test=4, seed=0)
    frame = pd.read_parquet(train_file)
    assert {"prompt", "data_source", "reward_model", "extra_info"} <= set(frame.columns)
    assert len(frame) == 12 and len(pd.read_parquet(test_file)) == 4
    row = frame.iloc[0]
    messages = list(row["prompt"])
    assert messages[0]["role"] == "system" and "\\boxed{}" in messages[0]["content"]
    assert messages[-1]["content"] == f"What is {row['extra_info']['question']}?"
    answer = row["reward_model"]["ground_truth"]
    assert compute_score(row["data_source"], f"so the answer is \\boxed{{{answer}}}.", answer)["score"] == 1.0


def _verl_row(step, **values):
    return {"step": step, "data": {"timing_s/step": 10.0 + step, **values}}


def test_step_table_counts_samples_and_reads_both_methods_rewards():
    size = demo.DemoSize(batch=2, steps=2, eval_k=4)
    runs = {
        "GRPO-n4": [_verl_row(1, **{"critic/score/mean": 0.25}),
                    _verl_row(2, **{"critic/score/mean": 0.5, "val-core/arithmetic/reward/mean@4": 0.3})],
        "Reinforce-Ada-balance": [
            _verl_row(1, **{"critic/score/mean": 0.5, "reinforce_ada/pass_rate_mean": 0.2,
                            "reinforce_ada/samples_total": 40.0}),
            _verl_row(2, **{"critic/score/mean": 0.5, "reinforce_ada/pass_rate_mean": 0.4,
                            "reinforce_ada/samples_total": 24.0, "val-core/arithmetic/reward/mean@4": 0.35}),
        ],
    }
    table = demo_report.step_table(runs, base_accuracy=0.1, size=size)
    grpo = [r for r in table if r["method"] == "GRPO-n4"]
    ada = [r for r in table if r["method"] == "Reinforce-Ada-balance"]
    assert [r["samples_cumulative"] for r in grpo] == [0, 8, 16]  # batch 2 x n 4 per step
    assert [r["samples_cumulative"] for r in ada] == [0, 40, 64]
    assert [r["train_reward"] for r in ada] == ["", 0.2, 0.4]  # the pools' pass rate, not the kept groups'
    assert [r["held_out_accuracy"] for r in ada] == [0.1, "", 0.35]


def test_report_files_are_written_from_a_table(tmp_path):
    size = demo.DemoSize(batch=2, steps=1, eval_k=4)
    runs = {"GRPO-n4": [_verl_row(1, **{"critic/score/mean": 0.25, "val-core/arithmetic/reward/mean@4": 0.3})]}
    table = demo_report.step_table(runs, base_accuracy=0.1, size=size)
    demo_report.write_csv(table, tmp_path / "metrics.csv")
    demo_report.plot_curves(table, size, tmp_path / "curves.png")
    base = [{"question": "1 + 1", "level": 1, "pass_rate": 0.75}, {"question": "10 + 90", "level": 4, "pass_rate": 0.0}]
    demo_report.plot_base_histogram(base, size, tmp_path / "hist.png")
    assert demo_report.histogram_counts(base, size) == {"0/4": 1, "1/4": 0, "2/4": 0, "3/4": 1, "4/4": 0}
    summary = {
        "date": "2026-11-30", "machine": "test", "seed": 0, "base_accuracy": 0.1, "total_seconds": 100.0,
        "phases": {"training GRPO-n4": 50.0},
        "methods": {"GRPO-n4": {"final_accuracy": 0.3, "samples": 8, "wall_seconds": 50.0, "mean_step_seconds": 11.0}},
    }
    text = demo_report.report(summary, base, size)
    assert "| GRPO-n4 | 10.0% | 30.0% | +20.0 pts | 8 |" in text
    assert len(pd.read_csv(tmp_path / "metrics.csv")) == 2
    assert (tmp_path / "curves.png").stat().st_size > 10_000 and (tmp_path / "hist.png").stat().st_size > 5_000


def test_base_pass_rates_come_from_verls_validation_dump(tmp_path):
    """Each held-out question's samples are found by its own question, not the worked example's."""
    _, test_file = demo_task.build(tmp_path / "data", train=4, test=2, seed=0)
    questions = [info["question"] for info in pd.read_parquet(test_file)["extra_info"]]
    size = demo.DemoSize(eval_k=2)

    def sample(question, score):
        # verl decodes the prompt without special tokens: system, worked example, then the question
        text = f"system Give only the final answer. user What is 2 + 2? assistant 4 user What is {question}? assistant"
        return json.dumps({"input": text, "output": "...", "score": score, "step": 0})

    dump = tmp_path / "0.jsonl"
    dump.write_text("\n".join([sample(questions[0], 1.0), sample(questions[1], 0.0), sample(questions[0], 0.0),
                               sample(questions[1], 0.0)]))
    rows = demo.base_pass_rates(dump, test_file, size)
    assert [(r["question"], r["pass_rate"]) for r in rows] == [(questions[0], 0.5), (questions[1], 0.0)]
    assert all(r["level"] in demo_task.LEVELS for r in rows)
    dump.write_text(sample(questions[0], 1.0))
    with pytest.raises(SystemExit, match="val_kwargs.n"):
        demo.base_pass_rates(dump, test_file, size)


def test_time_left_after_one_step_leaves_out_verls_start_up():
    """After step 1 the wall time so far is mostly start-up and validation: use verl's step time."""
    assert demo._eta([240.0], steps_left=9, first_step_seconds=30.0) == "4.5 min"
    assert demo._eta([240.0, 270.0, 310.0], steps_left=2, first_step_seconds=30.0) == "70 s"


def test_a_budgeted_demo_gives_reinforce_ada_the_budget_and_grpo_nothing_new():
    runs = demo.demo_methods(2.0)
    assert list(runs) == ["GRPO-n4", "Reinforce-Ada-balance-budget2"]
    assert runs["GRPO-n4"] == demo.METHODS["GRPO-n4"]
    assert runs["Reinforce-Ada-balance-budget2"][-1] == "reinforce_ada.sample_budget=2.0"
    command = demo.trainer_command("x", Path("m"), {"train": Path("t"), "test": Path("v")}, demo.DemoSize(), Path("r"),
                                   64, overrides=runs["Reinforce-Ada-balance-budget2"])
    assert command[-1] == "reinforce_ada.sample_budget=2.0" and "trainer.experiment_name=x" in command
    (reward_file,) = [c.split("=", 1)[1] for c in command if c.startswith("reward.custom_reward_function.path=")]
    assert Path(reward_file).is_file()
