"""End to end: the learning benchmark's --quick run, every phase, with the tiny model."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import learning_protocol

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_quick_benchmark_filters_with_data_prep_trains_resumably_and_reports(tmp_path):
    """--quick with the tiny model: data prep with vLLM (scripts/prepare_data.sh), GRPO-n4 on the adaptive path
    through verl's trainer, the results; a rerun skips the finished run."""
    from reinforce_ada.tools import tiny

    tiny.build(tmp_path / "tiny", train=2, test=1)
    command = [sys.executable, "-m", "benchmarks.learning", "--quick", "--model",
               str(tmp_path / "tiny" / "model"), "--work", str(tmp_path / "work"), "--results",
               str(tmp_path / "results"), "--write", str(tmp_path / "RESULTS.md"), "--methods", "grpo_n4",
               "--pass-rate-range", "-1", "1"]  # the random model solves nothing: keep every question
    env = {**os.environ, "REINFORCE_ADA_CPU_THREADS": "1"}
    first = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    (tmp_path / "first.log").write_text(first.stdout + first.stderr)
    assert first.returncode == 0, (first.stdout + first.stderr)[-6000:]
    report = json.loads((tmp_path / "work" / "data" / "filtered" / "report.json").read_text())
    quick = learning_protocol.QUICK
    assert report["counts"]["read"] == quick.pool and report["counts"]["test"] == quick.heldout_filtered
    assert len((tmp_path / "work" / "data" / "filtered" / "pass_rates.jsonl").read_text().splitlines()) == quick.pool
    train = pd.read_parquet(tmp_path / "work" / "data" / "filtered" / "train.parquet")
    assert train["prompt"][0][1]["role"] == "user"  # the demo task's own prompt, with its worked example
    assert "step 1/1" in first.stdout and "base model, held-out Avg@2" in first.stdout
    runs = json.loads((tmp_path / "results" / "runs.json").read_text())["runs"]
    assert [(r["method"], r["step"]) for r in runs] == [("grpo_n4", 0), ("grpo_n4", 1)]
    assert [r["samples"] for r in runs] == [0, 8]  # 2 prompts x 4
    assert runs[-1]["tokens"] > 0 and runs[-1]["wall_s"] > 0 and runs[-1]["heldout_all_acc"] is not None
    run_dir = tmp_path / "work" / "runs" / "grpo_n4" / "seed0"
    record = json.loads((tmp_path / "results" / "runs" / "grpo_n4_seed0.json").read_text())
    assert not (run_dir / "checkpoints").exists() and sorted(record["steps"]) == ["0", "1"]
    assert "reinforce_ada.sampling_seed=0" in record["command"] and record["size"] == quick.record()
    assert "| grpo_n4 | 1 |" in (tmp_path / "RESULTS.md").read_text()
    assert len((tmp_path / "results" / "pass_rates.jsonl").read_text().splitlines()) == quick.pool

    # a new machine: an empty work folder, the results kept: nothing is sampled or trained again
    moved = [c if c != str(tmp_path / "work") else str(tmp_path / "work2") for c in command]
    again = subprocess.run(moved, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "grpo_n4 seed 0: finished before, skipped" in again.stdout
    assert "verl's trainer" not in again.stdout
    prep_log = (tmp_path / "work2" / "data" / "data_prep.log").read_text()
    assert f"{quick.pool} done before, 0 to sample" in prep_log and "vllm" not in prep_log.lower()
    assert json.loads((tmp_path / "results" / "runs.json").read_text())["runs"] == runs
