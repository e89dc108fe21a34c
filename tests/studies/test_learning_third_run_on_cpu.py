"""The third learning protocol end to end with verl and vLLM replaced: the sweep at the budget and its rule, a start
per seed evaluated once, each arm to the budget and evaluated at the marks with per-question results, the section,
and --report-only rewriting it from the committed files alone."""

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd

from studies.learning import budget, third_run, training
from studies.learning import marks as learning_marks
from studies.learning import protocol as learning_protocol
from studies.learning import records as learning_records
from studies.learning import runner as learning
from studies.learning import start as learning_start

# the harness's mechanics with the protocol's first arms (the candidate of amendment 2 runs as balance does)
THIRD = replace(learning_protocol.PROTOCOLS["third"], pilot_seeds=2, results="unused",
                methods=("grpo_n4", "balance", "grpo_n24"))
SIZE = THIRD.quick  # budget 16, marks 8 and 16, 2 prompts a step: GRPO-n4 8 a step, GRPO-n24 48


def correct_of_4(method: str, seed: int, lr: float, mark: int) -> int:
    """The fake model's held-out questions right of 4 at a mark (all draws alike)."""
    if method == "grpo_n4":  # at 2e-5 it drops from 4 to 2 of 4: the rule passes over it
        return {8: 4, 16: 2}[mark] if lr == 2e-5 else {8: 2, 16: 3}[mark] if lr == 1e-5 else {8: 2, 16: 2}[mark]
    return {8: 3, 16: 4}[mark] if method == "balance" else {8: 2, 16: 2}[mark]


def fake_session(monkeypatch, tmp_path) -> list[tuple]:
    calls = []
    (tmp_path / "config.json").write_text("{}")  # the base model's folder
    answers = [str(i) for i in range(4)]
    files = {"train": str(tmp_path / "train.parquet")}
    for name in ("heldout_filtered", "heldout_all"):
        files[name] = str(tmp_path / f"{name}.parquet")
        pd.DataFrame({"prompt": [[{"role": "user", "content": a}] for a in answers],
                      "reward_model": [{"ground_truth": a} for a in answers]}).to_parquet(files[name])

    def weights(folder: Path, text: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_text(text)

    def format_checkpoint(work, model, data, size, steps, seed):
        weights(work / f"format{seed}", "1")  # every start: 1 of 4 right
        return work / f"format{seed}"

    def train_run(method, seed, model, data, size, matched_n, work, results, prompt_tokens, start_id=None,
                  evaluate=None):
        name = learning_protocol.method_overrides(method, size, matched_n)[0]
        record = learning_records.record_path(results, name, seed)
        if record.exists():
            return record
        calls.append((name, seed, size.run.lr))
        draw = budget.grpo_draw(name, size) or 6
        steps, total, step = {}, 0, 0
        while total < size.budget:
            step, total = step + 1, total + draw
            steps[step] = {"reinforce_ada/samples_total": draw, "timing_s/step": 1.0}
        for mark, (at, _) in budget.crossings({s: draw for s in steps}, size.marks).items():
            folder = learning_marks.mark_folder(work / "runs" / name / f"seed{seed}", mark)
            weights(folder, str(correct_of_4(name, seed, size.run.lr, mark)))
            (folder / "step.txt").write_text(f"{at}\n")
        evaluate(steps)  # as the harness does: the marks before the record
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"method": name, "seed": seed, "date": "2026-12-07", "machine": "test",
                                      "wall_s": 60.0, "command": "x", "size": size.record(),
                                      "start": {"fingerprint": start_id}, "steps": steps}))
        return record

    def seeded_sampler(llm, temperature, max_tokens):  # llm: the fake engine is the model folder
        right = int((Path(llm) / "model.safetensors").read_text())
        return lambda prompts, k: [[f"\\boxed{{{i if i < right else 'x'}}}"] * k for i in range(len(prompts))]

    import reinforce_ada.tasks.vllm_sampling as vllm_sampling

    monkeypatch.setattr(vllm_sampling, "chat_sampler", lambda folder, *a, **k: (folder, None))
    monkeypatch.setattr(vllm_sampling, "close_engine", lambda llm: None)
    monkeypatch.setattr(learning_marks, "seeded_sampler", seeded_sampler)
    monkeypatch.setattr(learning_marks, "IN_PROCESS", True)
    monkeypatch.setitem(learning.PROTOCOLS, "third", THIRD)
    monkeypatch.setattr(learning, "prepare_data", lambda work, results, model, size, *a: {
        "counts": {"train": 4, "test": 4}, "files": files, "size": size.record(), "pass_range": [0, 0.3125],
        "train_pass_rates": [0.2]})
    monkeypatch.setattr(learning.demo, "longest_prompt", lambda *a: 16)
    monkeypatch.setattr(learning_start, "format_checkpoint", format_checkpoint)
    monkeypatch.setattr(training, "train_run", train_run)
    return calls


def test_the_third_protocol_sweeps_then_runs_each_seeds_arms_from_its_own_start(monkeypatch, tmp_path):
    calls = fake_session(monkeypatch, tmp_path)
    results, write = tmp_path / "results", tmp_path / "RESULTS.md"
    args = ["--protocol", "third", "--quick", "--model", str(tmp_path), "--work", str(tmp_path / "work"),
            "--results", str(results), "--write", str(write)]
    learning.main([*args, "--seeds", "0", "1", "2"])
    # the sweep at every rate; 1e-5 has the largest area of the curves that never drop 5 points: start 0's
    # GRPO-n4 is its run; GRPO-n24 (the per-step control) runs at the pilot seeds only; balance's pair, sized on
    # its 2 pilot starts (the same difference at both: SD 0), needs no third start, so seed 2 runs nothing
    assert calls == [("grpo_n4", 0, 2e-5), ("grpo_n4", 0, 1e-5), ("grpo_n4", 0, 3e-6), ("balance", 0, 1e-5),
                     ("grpo_n24", 0, 1e-5), ("grpo_n4", 1, 1e-5), ("balance", 1, 1e-5), ("grpo_n24", 1, 1e-5)]
    text = write.read_text()
    assert "| 2e-05 | 25.0 | 100.0 | 50.0 | 50.0 | 68.8 |  |" in text
    assert "| 1e-05 | 25.0 | 50.0 | 75.0 | 0.0 | 50.0 | yes |" in text
    # balance: (25 + 2 x 75 + 100) / 4 = 68.75 against GRPO-n4's 50.0 on both starts; its steps draw 6:
    # 12 responses at mark 8 (overshoot 4), 18 at 16
    assert "| 0 | yes | 50.0 | 68.8 | +18.8 | +25.0 |" in text and "| 1 | yes | 50.0 | 68.8 | +18.8 | +25.0 |" in text
    assert "Mean difference +18.8 ± 0.0 points (95% t interval over 2 starts)" in text
    assert "needs 2 starts; 2 are done, so the runs stop here" in text
    assert "| grpo_n24 | 1 | 2026-12-07 |" in text and "| grpo_n24 | 2 | 2026" not in text
    # the starts are sized on the candidate pairs only: the per-step control's pair says so and sizes nothing
    assert text.count("needs ") == 1 and "grpo_n24 is the per-step control, run at the 2 pilot starts only" in text
    assert "| grpo_n24 | 2 | 1.0 ± 0.0 | 48 ± 0 |" in text  # 2 starts, 1 step of 48 responses
    # the evaluations' per-question results are kept beside the records, and each start is evaluated once
    saved = json.loads(learning_marks.evaluation_path(results, "balance", 1, 16).read_text())
    assert [q["correct"] for q in saved["per_question"][learning_protocol.FILTERED]] == [2, 2, 2, 2]
    assert saved["settings"]["seed"] == learning_marks.EVAL_SEED and saved["responses"] == 18
    assert len(list((results / "starts").glob("*.json"))) == 1  # the fake starts share their weights

    # another session resumes: nothing runs again, and --report-only rewrites the same section from the files
    learning.main([*args, "--seeds", "0", "1", "2"])
    assert len(calls) == 8
    # a fresh clone has the results but no work folder: the finished seeds' starts are not made again (training on
    # a CPU would not give the same weights, and each start costs a format run)
    def no_start(*a, **k):
        raise AssertionError("a start was made for seeds whose arms are all finished")

    monkeypatch.setattr(learning_start, "format_checkpoint", no_start)
    learning.main([*args, "--work", str(tmp_path / "fresh_work"), "--seeds", "0", "1", "2"])
    assert len(calls) == 8
    again = tmp_path / "AGAIN.md"
    learning.main([*args[:-1], str(again), "--report-only", "--work", str(tmp_path / "elsewhere")])
    assert again.read_text() == text
    runs = json.loads((results / "runs.json").read_text())["runs"]
    assert {(r["method"], r["seed"], r["mark"]) for r in runs} >= {("balance", 1, 16), ("grpo_n24", 0, 0)}
    # balance's mark 16 is its step 3 (18 responses, 3 s of steps)
    (row,) = [r for r in runs if (r["method"], r["seed"], r["mark"]) == ("balance", 1, 16)]
    assert (row["step"], row["samples"], row["wall_s"], row["heldout_acc"]) == (3, 18, 3.0, 1.0)
    assert (results / "curves.png").stat().st_size > 0 and "(results/curves.png)" in text


def test_the_per_step_control_runs_at_the_pilot_seeds_only():
    protocol = learning_protocol.PROTOCOLS["third"]
    methods = list(protocol.methods)
    assert third_run.arms_of_seed(protocol, methods, 3) == methods
    assert third_run.arms_of_seed(protocol, methods, 4) == ["grpo_n4", "balance", "balance_inverse_budget1"]


def test_past_the_pilots_a_candidate_runs_only_while_its_pair_needs_starts():
    protocol = learning_protocol.PROTOCOLS["third"]
    methods = list(protocol.methods)
    targets = {"balance": 10, "balance_inverse_budget1": 4}
    assert third_run.arms_of_seed(protocol, methods, 3, targets) == methods  # a pilot seed runs every arm
    assert third_run.arms_of_seed(protocol, methods, 4, targets) == ["grpo_n4", "balance"]
    assert third_run.arms_of_seed(protocol, methods, 9, targets) == ["grpo_n4", "balance"]
    assert third_run.arms_of_seed(protocol, methods, 4, {"balance": 4, "balance_inverse_budget1": 4}) == []
    # a pair not sized yet (its pilots unfinished) runs
    assert third_run.arms_of_seed(protocol, methods, 4, {"balance": 4}) == ["grpo_n4", "balance_inverse_budget1"]


def test_a_starts_fsdp_states_go_once_its_merged_weights_are_whole(tmp_path):
    """A start's runs train from, and its hash and evaluation read, its merged folder alone: the 1.6 GB of model,
    optimiser and data-loader states go, but not while the merged weights do not open."""
    import torch
    from safetensors.torch import save_file

    checkpoint = tmp_path / "global_step_5"
    actor = checkpoint / "actor"
    (actor / "merged_hf").mkdir(parents=True)
    (actor / "huggingface").mkdir()
    for name in ("model", "optim", "extra_state"):
        (actor / f"{name}_world_size_1_rank_0.pt").write_text("state")
    (checkpoint / "data.pt").write_text("dataloader")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("5")
    (actor / "merged_hf" / "config.json").write_text("{}")
    save_file({"w": torch.zeros(4)}, actor / "merged_hf" / "model.safetensors")
    whole = (actor / "merged_hf" / "model.safetensors").read_bytes()
    (actor / "merged_hf" / "model.safetensors").write_bytes(whole[:-4])  # cut short
    learning_start.prune_start(checkpoint)
    assert (actor / "model_world_size_1_rank_0.pt").exists()
    (actor / "merged_hf" / "model.safetensors").write_bytes(whole)
    fingerprint = learning_start.fingerprint(actor / "merged_hf")
    learning_start.prune_start(checkpoint)
    assert sorted(str(f.relative_to(checkpoint)) for f in checkpoint.rglob("*")) == [
        "actor", "actor/huggingface", "actor/merged_hf", "actor/merged_hf/config.json",
        "actor/merged_hf/model.safetensors"]
    assert learning_start.fingerprint(actor / "merged_hf") == fingerprint
    assert not (tmp_path / "latest_checkpointed_iteration.txt").exists()  # lost weights: made again, not resumed
