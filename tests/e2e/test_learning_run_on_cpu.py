"""End to end: the learning study's --quick run, every phase, with the tiny model."""

import json
import sys

import pandas as pd
import pytest

from studies.learning import protocol as learning_protocol

import trainer_runs
from e2e_jobs import job

pytestmark = pytest.mark.slow


@job()
def learning_run(out):
    """--quick with the tiny model, then again on a new machine (an empty work folder, the results kept)."""
    from reinforce_ada.tools import tiny

    tiny.build(out / "tiny", train=2, test=1)
    command = [sys.executable, "-m", "studies.learning", "--quick", "--model", str(out / "tiny" / "model"),
               "--work", str(out / "work"), "--results", str(out / "results"), "--write", str(out / "RESULTS.md"),
               "--methods", "grpo_n4",
               "--pass-rate-range", "-1", "1"]  # the random model solves nothing: keep every question
    env = {"REINFORCE_ADA_CPU_THREADS": "1"}
    trainers = ("work*/runs/*/*/trainer_*.log",)  # the Ray nodes are the trainers'
    first = trainer_runs.run(out, "first", command, env, ray_logs=trainers)
    runs = json.loads((out / "results" / "runs.json").read_text())["runs"] if first[0] == 0 else None
    moved = [c if c != str(out / "work") else str(out / "work2") for c in command]
    again = trainer_runs.run(out, "again", moved, env, timeout=600, ray_logs=trainers) if first[0] == 0 else None
    return out, first, runs, again


def test_the_quick_benchmark_filters_with_data_prep_trains_resumably_and_reports(e2e):
    """--quick with the tiny model: data prep with vLLM (scripts/prepare_data.sh), GRPO-n4 on the adaptive path
    through verl's trainer, the results."""
    out, (code, log), runs, _ = e2e.result("learning_run")
    assert code == 0, log[-6000:]
    report = json.loads((out / "work" / "data" / "filtered" / "report.json").read_text())
    quick = learning_protocol.QUICK
    assert report["counts"]["read"] == quick.pool and report["counts"]["test"] == quick.heldout_filtered
    assert len((out / "work" / "data" / "filtered" / "pass_rates.jsonl").read_text().splitlines()) == quick.pool
    train = pd.read_parquet(out / "work" / "data" / "filtered" / "train.parquet")
    assert train["prompt"][0][1]["role"] == "user"  # the demo task's own prompt, with its worked example
    assert "step 1/1" in log and "base model, held-out Avg@2" in log
    assert [(r["method"], r["step"]) for r in runs] == [("grpo_n4", 0), ("grpo_n4", 1)]
    assert [r["samples"] for r in runs] == [0, 8]  # 2 prompts x 4
    assert runs[-1]["tokens"] > 0 and runs[-1]["wall_s"] > 0 and runs[-1]["heldout_all_acc"] is not None
    run_dir = out / "work" / "runs" / "grpo_n4" / "seed0"
    record = json.loads((out / "results" / "runs" / "grpo_n4_seed0.json").read_text())
    assert not (run_dir / "checkpoints").exists() and sorted(record["steps"]) == ["0", "1"]
    assert "reinforce_ada.sampling_seed=0" in record["command"] and record["size"] == quick.record()
    assert "| grpo_n4 | 1 |" in (out / "RESULTS.md").read_text()
    assert len((out / "results" / "pass_rates.jsonl").read_text().splitlines()) == quick.pool


def test_a_new_machine_with_the_results_kept_samples_and_trains_nothing_again(e2e):
    out, (code, _), runs, again = e2e.result("learning_run")
    assert code == 0
    code, log = again
    assert code == 0, log[-3000:]
    assert "grpo_n4 seed 0: finished before, skipped" in log
    assert "verl's trainer" not in log
    prep_log = (out / "work2" / "data" / "data_prep.log").read_text()
    assert f"{learning_protocol.QUICK.pool} done before, 0 to sample" in prep_log and "vllm" not in prep_log.lower()
    assert json.loads((out / "results" / "runs.json").read_text())["runs"] == runs
