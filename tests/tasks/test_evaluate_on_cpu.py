"""Evaluation: the pass@k estimator, the tables, and checkpoint resolution (fake sampler; no vLLM)."""

import itertools
import json
from math import comb

import pandas as pd
import pytest

from reinforce_ada.tasks import evaluate


@pytest.mark.parametrize("k, c, j", [(4, 0, 1), (4, 1, 1), (4, 2, 2), (8, 3, 4), (5, 5, 3), (6, 1, 6)])
def test_pass_at_matches_brute_force(k, c, j):
    outcomes = [1] * c + [0] * (k - c)
    subsets = list(itertools.combinations(range(k), j))
    brute = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
    assert evaluate.pass_at(k, c, j) == pytest.approx(brute)
    assert comb(k, j) == len(subsets)


def benchmark(path, answers):
    pd.DataFrame(
        [{"data_source": "math", "prompt": [{"role": "user", "content": f"q{i}"}],
          "reward_model": {"style": "rule", "ground_truth": a}} for i, a in enumerate(answers)]
    ).to_parquet(path)


def test_tables_weight_benchmarks_by_size(tmp_path):
    benchmark(tmp_path / "a.parquet", ["1", "2"])
    benchmark(tmp_path / "b.parquet", ["3", "4", "5", "6"])
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_text("")

    def factory(path):
        # answers 1 to every q0 and 4 to everything else: right for a.q0 and b.q1 only
        return lambda prompts, k: [["\\boxed{1}" if p[0]["content"] == "q0" else "\\boxed{4}"] * k for p in prompts]

    results = evaluate.main(
        ["--checkpoint", str(model), "--benchmark", f"a={tmp_path / 'a.parquet'}", "--benchmark",
         f"b={tmp_path / 'b.parquet'}", "--k", "4", "--output", str(tmp_path / "eval")],
        sampler_factory=factory,
    )[str(model)]
    assert results["benchmarks"]["a"]["avg"] == 0.5  # q0 -> 1 right, q1 -> 4 wrong
    assert results["benchmarks"]["b"]["avg"] == 0.25  # q1 -> 4 right
    assert results["weighted"]["avg"] == pytest.approx((0.5 * 2 + 0.25 * 4) / 6)
    saved = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert saved["settings"]["k"] == 4
    assert "| a Avg@4 | b Avg@4 |" in (tmp_path / "eval" / "results.md").read_text()


def test_unknown_checkpoint_layout_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="--checkpoint"):
        evaluate.hf_folder(tmp_path)
