"""The benchmark harnesses run (small sizes) and their tables say what they should."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def test_sampling_efficiency_tables(tmp_path, capsys):
    from benchmarks.sampling_efficiency import main

    results = tmp_path / "RESULTS.md"
    main(["--prompts", "200", "--write", str(results)])
    text = results.read_text()
    assert text.count("<!-- sampling_efficiency:start -->") == 1
    rows = [line for line in text.splitlines() if line.startswith("| uniform |")]
    assert len(rows) == 9
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


def test_rollout_time_engine_driver_gives_async_the_same_pools_as_rounds():
    """EngineRollout on a fake engine finishing requests in a random order: seeds follow the pool index."""
    import random
    from types import SimpleNamespace

    from benchmarks.rollout_time import POOL_STRIDE, EngineRollout
    from reinforce_ada.config import SamplerConfig
    from reinforce_ada.step import run_step

    class FakeEngine:
        def __init__(self):
            self.running, self.rng, self.seeds = {}, random.Random(0), []

        def add_request(self, request_id, prompt, params):
            self.running[request_id] = params
            self.seeds += [params.seed + i for i in range(params.n)]

        def step(self):
            if not self.running or self.rng.random() < 0.3:
                return []  # a step that finishes nothing
            request_id = self.rng.choice(sorted(self.running))
            params = self.running.pop(request_id)
            outputs = [SimpleNamespace(index=i, text=str(params.seed + i), token_ids=[0] * 3) for i in range(params.n)]
            return [SimpleNamespace(request_id=request_id, finished=True, outputs=outputs[::-1])]

    def run(mode):
        engine = FakeEngine()
        rollout = EngineRollout(
            engine, ["p"] * 6, lambda p, text: float(int(text) % 5 == 0), lambda n, seed: SimpleNamespace(n=n, seed=seed), 7
        )
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
