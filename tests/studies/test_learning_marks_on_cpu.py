"""The third learning protocol's marks: checkpoints kept at the steps that reach them, the run stopped at the
budget, and the seeded evaluation with per-question results beside the record (vLLM replaced by a fake sampler)."""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from studies.learning import marks as learning_marks
from studies.learning import protocol as learning_protocol
from studies.learning import training as learning_training

QUICK = learning_protocol.PROTOCOLS["third"].quick  # budget 16, marks 8 and 16, 2 prompts a step


def save_step(run_dir: Path, step: int, clean_up: bool = True) -> None:
    """What verl's save leaves: the step's folder (with ``clean_up``, the trainer keeps one: the older is removed),
    the model's shard, the optimiser's state and the rest."""
    for old in (run_dir / "checkpoints").glob("global_step_*") if clean_up else ():
        for f in old.rglob("*"):
            f.unlink() if f.is_file() else None
    folder = run_dir / "checkpoints" / f"global_step_{step}" / "actor"
    (folder / "huggingface").mkdir(parents=True)
    (folder / "model_world_size_1_rank_0.pt").write_text(f"weights of step {step}")
    (folder / "optim_world_size_1_rank_0.pt").write_text("1.1 GB of Adam's moments")
    (folder / "extra_state_world_size_1_rank_0.pt").write_text("rng")
    (folder / "fsdp_config.json").write_text('{"FSDP_version": 2, "world_size": 1}')
    (folder / "huggingface" / "config.json").write_text("{}")
    (folder.parent / "data.pt").write_text("dataloader")
    (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(str(step))


def test_the_watch_keeps_each_crossing_steps_checkpoint_and_stops_at_the_budget(tmp_path):
    watch = learning_marks.BudgetWatch(tmp_path, QUICK)
    for step, drawn, done in [(1, 6, False), (2, 6, False), (3, 6, True)]:  # cumulative 6, 12, 18
        save_step(tmp_path, step)
        assert watch.on_step(step, {"reinforce_ada/samples_total": drawn}) is done
    # mark 8 was crossed in step 2, mark 16 in step 3: their checkpoints survive the trainer's clean-up
    for mark, step in ((8, 2), (16, 3)):
        kept = learning_marks.mark_folder(tmp_path, mark)
        assert (kept / "actor" / "model_world_size_1_rank_0.pt").read_text() == f"weights of step {step}"
        assert (kept / "step.txt").read_text() == f"{step}\n"
        # what the evaluation needs, not the optimiser's state (1.1 GB a mark for SmolLM2)
        assert sorted(str(f.relative_to(kept)) for f in kept.rglob("*") if f.is_file()) == [
            "actor/fsdp_config.json", "actor/huggingface/config.json", "actor/model_world_size_1_rank_0.pt",
            "step.txt"]
    # a resumed attempt counts the responses its earlier attempts logged
    save_step(tmp_path / "other", 1)
    again = learning_marks.BudgetWatch(tmp_path / "other", QUICK, {0: {}, 1: {"reinforce_ada/samples_total": 20}})
    assert again.done()
    with pytest.raises(FileNotFoundError, match="checkpoint of step 4, which reached 8 responses, is missing"):
        learning_marks.BudgetWatch(tmp_path / "none", QUICK).on_step(4, {"reinforce_ada/samples_total": 9})


def test_a_marks_checkpoint_is_kept_when_the_trainer_saved_the_next_step_before_the_watch_saw_this_one(tmp_path):
    """A fast step: the trainer has saved steps 1-3 when the watch reads step 2's log line. The mark's checkpoint
    (step 2) is linked, the steps before it go, and the newest saved one (3) stays for a resume."""
    watch = learning_marks.BudgetWatch(tmp_path, QUICK)
    for step in (1, 2, 3):  # saved with verl's clean-up off (max_actor_ckpt_to_keep=null), as the command asks
        folder = tmp_path / "checkpoints" / f"global_step_{step}" / "actor"
        folder.mkdir(parents=True)
        (folder / "model_world_size_1_rank_0.pt").write_text(f"weights of step {step}")
    watch.on_step(1, {"reinforce_ada/samples_total": 6})
    watch.on_step(2, {"reinforce_ada/samples_total": 6})  # 12 >= 8
    kept = learning_marks.mark_folder(tmp_path, 8)
    assert (kept / "actor" / "model_world_size_1_rank_0.pt").read_text() == "weights of step 2"
    assert sorted(f.name for f in (tmp_path / "checkpoints").glob("global_step_*")) == ["global_step_2",
                                                                                         "global_step_3"]
    files = {"files": {"train": "t", "heldout_filtered": "f", "heldout_all": "a"}}
    command = learning_training.run_command("balance", 0, Path("m"), files, QUICK, 4, Path("run"), 16)
    assert "trainer.max_actor_ckpt_to_keep=null" in command  # verl's own clean-up would race the watch


def test_a_run_ends_at_the_first_step_that_reaches_the_budget_and_its_command_saves_every_step():
    logged = {0: {}, **{s: {"reinforce_ada/samples_total": 6} for s in (1, 2, 3, 4)}}
    assert learning_training.last_step(logged, QUICK) == 3
    assert learning_training.last_step({0: {}}, QUICK) == QUICK.run.steps  # not reached yet
    assert learning_training.last_step(logged, replace(QUICK, budget=0)) == QUICK.run.steps
    files = {"files": {k: f"{k}.parquet" for k in ("train", "heldout_filtered", "heldout_all")}}
    command = learning_training.run_command("grpo_n4", 0, Path("m"), files, QUICK, 4, Path("run"), 16)
    # GRPO-n4 draws 8 a step: 2 steps to 16 responses, verl stops itself there
    assert {"trainer.total_training_steps=2", "trainer.save_freq=1", "trainer.test_freq=-1",
            "trainer.val_before_train=false"} <= set(command)
    adaptive = learning_training.run_command("balance", 0, Path("m"), files, QUICK, 4, Path("run"), 16)
    assert f"trainer.total_training_steps={QUICK.run.steps}" in adaptive


def test_a_run_at_equal_responses_is_stopped_at_its_budget_and_recorded(tmp_path, monkeypatch, capfd):
    """A fake trainer logs 6 responses a step and would run for a minute: the harness keeps the checkpoints of the
    marks' steps, stops it after step 3 (18 >= 16) and writes the record of steps 1-3."""
    run_dir = tmp_path / "work" / "runs" / "balance" / "seed0"
    script = (
        "import json, os, pathlib, time\n"
        f"run = pathlib.Path({str(run_dir)!r})\n"
        "for step in range(1, 50):\n"
        "    d = run / 'checkpoints' / f'global_step_{step}' / 'actor'\n"
        "    d.mkdir(parents=True, exist_ok=True)\n"
        "    (d / 'model_world_size_1_rank_0.pt').write_text(str(step))\n"
        "    with open(os.environ['VERL_FILE_LOGGER_PATH'], 'a') as f:\n"
        "        f.write(json.dumps({'step': step, 'data': {'reinforce_ada/samples_total': 6}}) + '\\n')\n"
        "    time.sleep(1.5)\n"
        "(run / 'ran_to_the_end').write_text('')\n"
    )
    monkeypatch.setattr(learning_training, "run_command", lambda *a, **k: [sys.executable, "-c", script])
    seen = {}

    def evaluate(logged):  # before the record: every mark kept, and no record yet
        seen.update({m: learning_marks.kept_step(run_dir, m) for m in QUICK.marks}, steps=sorted(logged))
        assert not (tmp_path / "results" / "runs").exists()

    record = learning_training.train_run("balance", 0, tmp_path / "model", {}, QUICK, 4, tmp_path / "work",
                                         tmp_path / "results", 16, evaluate=evaluate)
    saved = json.loads(record.read_text())
    assert sorted(int(s) for s in saved["steps"]) == [1, 2, 3] and saved["size"]["budget"] == 16
    assert not (run_dir / "ran_to_the_end").exists()  # stopped at the budget, not run to its 49th step
    assert seen == {8: 2, 16: 3, "steps": [1, 2, 3]}
    assert "balance seed 0 step 3 (18 of 16 responses)" in capfd.readouterr().err  # its last step reported too
    # once recorded, the checkpoints and the marks' links go
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "marks").exists()


def test_a_trainer_that_stops_logging_is_stopped_and_resumed(tmp_path, monkeypatch, capfd):
    """A fake trainer logs step 1, then Ray's memory-kill line, then hangs (as verl's does when a vLLM server is
    killed); the harness stops it after STALL_S without a step and starts it again, which resumes after step 1."""
    run_dir = tmp_path / "work" / "runs" / "balance" / "seed0"
    script = (
        "import json, os, pathlib, sys, time\n"
        f"run = pathlib.Path({str(run_dir)!r})\n"
        "first = not (run / 'hung_once').exists()\n"
        "tracker = run / 'checkpoints' / 'latest_checkpointed_iteration.txt'\n"
        "begin = int(tracker.read_text()) + 1 if tracker.exists() else 1\n"
        "for step in range(begin, 4):\n"
        "    d = run / 'checkpoints' / f'global_step_{step}' / 'actor'\n"
        "    d.mkdir(parents=True, exist_ok=True)\n"
        "    (d / 'model_world_size_1_rank_0.pt').write_text(str(step))\n"
        "    tracker.write_text(str(step))\n"
        "    with open(os.environ['VERL_FILE_LOGGER_PATH'], 'a') as f:\n"
        "        f.write(json.dumps({'step': step, 'data': {'reinforce_ada/samples_total': 6}}) + '\\n')\n"
        "    if first:\n"
        "        (run / 'hung_once').write_text('')\n"
        "        print('(raylet) 1 Workers (tasks / actors) killed due to memory pressure (OOM)', flush=True)\n"
        "        time.sleep(600)\n"
        "time.sleep(600)\n"
    )
    monkeypatch.setattr(learning_training, "run_command", lambda *a, **k: [sys.executable, "-c", script])
    monkeypatch.setattr(learning_training, "STALL_S", 4)
    record = learning_training.train_run("balance", 0, tmp_path / "model", {}, QUICK, 4, tmp_path / "work",
                                         tmp_path / "results", 16, evaluate=lambda logged: None)
    saved = json.loads(record.read_text())
    assert sorted(int(s) for s in saved["steps"]) == [1, 2, 3] and saved["attempts"] == 2
    attempts = [json.loads(line) for line in (run_dir / "attempts.jsonl").read_text().splitlines()]
    assert [a.get("stalled", False) for a in attempts] == [True, False]
    err = capfd.readouterr().err
    assert "no step logged for 4 s (Ray killed workers for lack of memory" in err
    assert "resuming after step 1" in err


def test_an_attempt_killed_before_it_wrote_its_time_is_counted_from_its_files(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for attempt, (began, ended) in enumerate(((1000.0, 1300.0), (2000.0, 2050.0))):
        for name, at in ((f"command_{attempt:02d}.txt", began), (f"trainer_{attempt:02d}.log", ended)):
            (run_dir / name).write_text("x")
            os.utime(run_dir / name, (at, at))
    (run_dir / "attempts.jsonl").write_text(json.dumps({"attempt": 1, "wall_s": 55.0, "returncode": 0}) + "\n")
    learning_training.count_killed_attempts(run_dir)
    learning_training.count_killed_attempts(run_dir)  # once only
    rows = [json.loads(line) for line in (run_dir / "attempts.jsonl").read_text().splitlines()]
    assert [(r["attempt"], r["wall_s"], r.get("killed", False)) for r in rows] == [(1, 55.0, False), (0, 300.0, True)]


def test_a_trainer_that_stalls_every_time_fails_with_the_way_on(tmp_path, monkeypatch):
    script = "import time; time.sleep(600)"
    monkeypatch.setattr(learning_training, "run_command", lambda *a, **k: [sys.executable, "-c", script])
    monkeypatch.setattr(learning_training, "STALL_S", 1)
    monkeypatch.setattr(learning_training, "RESUMES", 1)
    with pytest.raises(SystemExit):
        learning_training.train_run("grpo_n4", 0, tmp_path / "model", {}, QUICK, 4, tmp_path / "work",
                                    tmp_path / "results", 16)
    run_dir = tmp_path / "work" / "runs" / "grpo_n4" / "seed0"
    assert len((run_dir / "attempts.jsonl").read_text().splitlines()) == 2
    assert not list((tmp_path / "results").rglob("*.json"))


def test_a_run_whose_marks_fail_to_evaluate_has_no_record(tmp_path, monkeypatch):
    run_dir = tmp_path / "work" / "runs" / "grpo_n4" / "seed0"
    script = (
        "import json, os, pathlib\n"
        f"run = pathlib.Path({str(run_dir)!r})\n"
        "for step in (1, 2):\n"
        "    d = run / 'checkpoints' / f'global_step_{step}' / 'actor'\n"
        "    d.mkdir(parents=True, exist_ok=True)\n"
        "    (d / 'model_world_size_1_rank_0.pt').write_text(str(step))\n"
        "    with open(os.environ['VERL_FILE_LOGGER_PATH'], 'a') as f:\n"
        "        f.write(json.dumps({'step': step, 'data': {'reinforce_ada/samples_total': 8}}) + '\\n')\n"
    )
    monkeypatch.setattr(learning_training, "run_command", lambda *a, **k: [sys.executable, "-c", script])

    def evaluate(logged):
        raise SystemExit("the evaluation failed")

    with pytest.raises(SystemExit, match="the evaluation failed"):
        learning_training.train_run("grpo_n4", 0, tmp_path / "model", {}, QUICK, 4, tmp_path / "work",
                                    tmp_path / "results", 16, evaluate=evaluate)
    assert not list((tmp_path / "results").rglob("*.json"))  # no record: a rerun evaluates again
    assert learning_marks.kept_step(run_dir, 16) == 2


def write_heldout(path: Path, answers: list[str]) -> str:
    pd.DataFrame({"prompt": [[{"role": "user", "content": f"q{i}"}] for i in range(len(answers))],
                  "reward_model": [{"ground_truth": a} for a in answers],
                  "data_source": ["arithmetic"] * len(answers)}).to_parquet(path)
    return str(path)


def kept_marks(run_dir: Path, steps: dict[int, int]) -> None:
    """Mark -> step: each mark's kept folder, whole, as a Hugging Face folder (the fake sampler needs no weights)."""
    for mark, step in steps.items():
        folder = learning_marks.mark_folder(run_dir, mark)
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_text("")
        (folder / "step.txt").write_text(f"{step}\n")


def test_each_mark_is_evaluated_once_with_its_per_question_results_beside_the_record(tmp_path):
    files = {"heldout_filtered": write_heldout(tmp_path / "f.parquet", ["1", "2"]),
             "heldout_all": write_heldout(tmp_path / "a.parquet", ["3", "4", "5", "6"])}
    run_dir = tmp_path / "run"
    kept_marks(run_dir, {8: 2, 16: 3})
    seen = []

    def factory(model):
        seen.append(model.name)

        def sample(prompts, k):  # question 0 right on every draw, the others wrong
            return [[f"\\boxed{{{'1' if i == 0 else 'x'}}}"] * k for i in range(len(prompts))]
        return sample

    logged = {s: {"reinforce_ada/samples_total": 6} for s in (1, 2, 3)}
    done = learning_marks.evaluate_marks(run_dir, tmp_path / "results", "balance", 0, files, QUICK, logged, "s0",
                                         factory)
    assert seen == ["mark8", "mark16"]
    assert (done[8]["step"], done[8]["responses"], done[16]["step"], done[16]["responses"]) == (2, 12.0, 3, 18.0)
    assert done[8]["accuracy"] == {learning_protocol.FILTERED: 0.5, learning_protocol.UNFILTERED: 0.0}
    questions = done[16]["per_question"][learning_protocol.FILTERED]
    assert [q["correct"] for q in questions] == [QUICK.run.eval_k, 0]
    assert done[16]["settings"]["seed"] == learning_marks.EVAL_SEED
    # the run's identity: its start and where it crossed each mark
    assert done[16]["run"] == {"start": "s0", "crossings": {"8": {"step": 2, "responses": 12},
                                                            "16": {"step": 3, "responses": 18}}}
    path = learning_marks.evaluation_path(tmp_path / "results", "balance", 0, 16)
    assert json.loads(path.read_text()) == done[16]
    # evaluated once: a rerun reads them back
    assert learning_marks.evaluate_marks(run_dir, tmp_path / "results", "balance", 0, files, QUICK, logged, "s0",
                                         factory) == done and len(seen) == 2
    with pytest.raises(SystemExit, match=r"never reached mark\(s\) \[16\]"):
        learning_marks.evaluate_marks(run_dir, tmp_path / "r2", "balance", 0, files, QUICK,
                                      {1: {"reinforce_ada/samples_total": 8}}, "s0", factory)


def test_another_runs_evaluations_are_never_taken_for_this_runs(tmp_path):
    """An arm run again (its record and run folder removed) finds the old run's evaluations: they are made again
    from its own kept checkpoints; without those, it stops and names everything to remove."""
    files = {"heldout_filtered": write_heldout(tmp_path / "f.parquet", ["1"]),
             "heldout_all": write_heldout(tmp_path / "a.parquet", ["3"])}
    results, seen = tmp_path / "results", []

    def factory(model):
        seen.append(model.name)
        return lambda prompts, k: [["\\boxed{1}"] * k for _ in prompts]

    logged = {s: {"reinforce_ada/samples_total": 6} for s in (1, 2, 3)}
    kept_marks(tmp_path / "old", {8: 2, 16: 3})
    learning_marks.evaluate_marks(tmp_path / "old", results, "balance", 0, files, QUICK, logged, "s0", factory)
    # the new run drew 8 a step from another start: its marks at steps 1 and 2
    again = {s: {"reinforce_ada/samples_total": 8} for s in (1, 2)}
    kept_marks(tmp_path / "new", {8: 1, 16: 2})
    done = learning_marks.evaluate_marks(tmp_path / "new", results, "balance", 0, files, QUICK, again, "s1", factory)
    assert len(seen) == 4 and (done[8]["step"], done[8]["run"]["start"]) == (1, "s1")
    # the same start, another crossing: not this run's either; and with no kept checkpoint the study stops
    record, evaluations = results / "runs" / "balance_seed0.json", results / "runs" / "balance_seed0"
    with pytest.raises(SystemExit, match=(
            f"mark 8 \\(step 2\\) has an evaluation of another run .* remove its record \\({record}\\), its "
            f"evaluations \\({evaluations}/\\) and its work folder \\({tmp_path / 'gone'}/\\)")):
        learning_marks.evaluate_marks(tmp_path / "gone", results, "balance", 0, files, QUICK, logged, "s1", factory)
    # a half-made link (no step.txt) is no kept checkpoint
    (learning_marks.mark_folder(tmp_path / "half", 8) / "actor").mkdir(parents=True)
    with pytest.raises(SystemExit, match="mark 8 \\(step 2\\) has an evaluation of another run"):
        learning_marks.evaluate_marks(tmp_path / "half", results, "balance", 0, files, QUICK, logged, "s1", factory)


def test_a_failed_evaluation_in_its_child_process_stops_the_study(tmp_path, monkeypatch):
    """The evaluation runs in a child process (vLLM out of the harness's process and environment): a model folder
    without weights fails there, and the study stops saying which evaluation failed, with nothing written."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    out = tmp_path / "mark8.json"
    with pytest.raises(SystemExit, match="the evaluation of .*empty exited with status 1"):
        learning_marks.evaluate_checkpoint(tmp_path / "empty", {"heldout_filtered": "f", "heldout_all": "a"},
                                           QUICK, out, {"mark": 8})
    assert not out.exists()


def test_the_evaluation_child_is_started_to_die_with_the_harness_and_leaves_only_its_file(tmp_path, monkeypatch):
    """The evaluation child gets the trainers' death signal (:func:`studies.learning.processes.dies_with`, whose
    effect the trainer's test checks): a harness killed during an evaluation leaves no child to race the next one
    for its files; the file is written under another name and renamed whole."""
    started = {}

    def run(command, **kwargs):
        started.update(kwargs)
        learning_marks._evaluate(tmp_path / "model", {"heldout_filtered": "f", "heldout_all": "a"}, 4, 32,
                                 tmp_path / "mark8.json", {"mark": 8},
                                 lambda folder: None)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(learning_marks.subprocess, "run", run)
    monkeypatch.setattr("reinforce_ada.tasks.evaluate.hf_folder", lambda model, dtype: model)
    monkeypatch.setattr("reinforce_ada.tasks.evaluate.evaluate_model", lambda *a: {"benchmarks": {
        "arithmetic_filtered": {"avg": 0.5, "per_problem": [{"avg": 0.5, "correct": 2}]}}})
    written = learning_marks.evaluate_checkpoint(tmp_path / "model", {"heldout_filtered": "f", "heldout_all": "a"},
                                                 QUICK, tmp_path / "mark8.json", {"mark": 8})
    assert started["preexec_fn"] is not None and written["accuracy"] == {"arithmetic_filtered": 0.5}
    assert [f.name for f in tmp_path.iterdir()] == ["mark8.json"]


def test_every_question_has_its_own_seeds_whatever_the_model():
    """vLLM gives a request's j-th response the seed ``seed + j``: question i's requests start at ``i k``, so no two
    responses share a seed and every arm draws the same random numbers for a question."""
    class Engine:
        def chat(self, prompts, params, use_tqdm):
            self.seeds = [p.seed for p in params]
            return [type("Out", (), {"outputs": [type("C", (), {"text": "t"})] * p.n}) for p in params]

    engine = Engine()
    sample = learning_marks.seeded_sampler(engine, 1.0, 32)
    assert sample([[{"role": "user", "content": "q"}]] * 3, 4) == [["t"] * 4] * 3
    assert engine.seeds == [0, 4, 8]


def test_the_seeded_evaluation_builds_its_engine_with_whole_prefills(tmp_path, monkeypatch):
    """vLLM-CPU cannot rewind a seeded request's generator after a partial prefill ("CPU Generator does not use
    offset"): the evaluation's engine runs without chunked prefill, with a step's budget at least the model's
    length, through the one helper the rollout benchmark uses too."""
    import vllm

    from reinforce_ada.tasks import vllm_sampling

    built = {}

    class Engine:
        def __init__(self, **kwargs):
            built.update(kwargs)

        def chat(self, prompts, params, use_tqdm):
            return [type("Out", (), {"outputs": [type("C", (), {"text": "\\boxed{1}"})] * p.n}) for p in params]

    monkeypatch.setattr(vllm, "LLM", Engine)
    monkeypatch.setattr(vllm_sampling, "close_engine", lambda llm: None)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 8192}))
    (model / "model.safetensors").write_text("")
    files = {"heldout_filtered": write_heldout(tmp_path / "f.parquet", ["1"]),
             "heldout_all": write_heldout(tmp_path / "a.parquet", ["2"])}
    from reinforce_ada.tasks import evaluate

    merged = {}
    monkeypatch.setattr(evaluate, "hf_folder", lambda path, dtype="bfloat16": merged.update(dtype=dtype) or path)
    learning_marks._evaluate(model, files, 2, 32, tmp_path / "out.json", {"mark": 8})
    assert merged == {"dtype": "float32"}  # a mark's weights as trained, not rounded to bfloat16
    assert built["enable_chunked_prefill"] is False and built["max_model_len"] == 8192
    assert built["max_num_batched_tokens"] >= built["max_model_len"]
    assert vllm_sampling.whole_prefills(1024) == {"enable_chunked_prefill": False, "max_model_len": 1024,
                                                  "max_num_batched_tokens": 4096}


def test_a_resumed_watch_keeps_a_crossing_step_logged_before_the_harness_was_killed(tmp_path):
    """The harness died after the trainer logged step 2 (mark 8) and before the watch kept it; the trainer saved
    step 3 too. The resumed watch keeps step 2's checkpoint at once, and a half-made link is made again."""
    for step in (1, 2, 3):
        save_step(tmp_path, step, clean_up=False)
    logged = {0: {}, 1: {"reinforce_ada/samples_total": 6}, 2: {"reinforce_ada/samples_total": 6}}
    (learning_marks.mark_folder(tmp_path, 8) / "actor").mkdir(parents=True)  # a copy killed half-way: no step.txt
    watch = learning_marks.BudgetWatch(tmp_path, QUICK, logged)
    kept = learning_marks.mark_folder(tmp_path, 8)
    assert learning_marks.kept_step(tmp_path, 8) == 2
    assert (kept / "actor" / "model_world_size_1_rank_0.pt").read_text() == "weights of step 2"
    watch.on_step(3, {"reinforce_ada/samples_total": 6})  # 18: mark 16, the budget
    assert learning_marks.kept_step(tmp_path, 16) == 3 and watch.done()
    run = tmp_path / "run"
    for step in (1, 2):
        save_step(run, step, clean_up=False)
    shutil.rmtree(run / "checkpoints" / "global_step_2")  # lost: the mark cannot be evaluated, and the watch says so
    with pytest.raises(FileNotFoundError, match="checkpoint of step 2, which reached 8 responses, is missing"):
        learning_marks.BudgetWatch(run, QUICK, logged)


def test_a_resumed_run_redoes_a_step_saved_but_never_logged(tmp_path):
    """verl saves a step before it logs it: killed in between (step 3 saved, steps 1-2 logged), the run resumes
    after step 2, the last step both saved and logged, instead of never logging step 3."""
    for step in (1, 2, 3):
        save_step(tmp_path, step, clean_up=False)
    (tmp_path / "metrics_00.jsonl").write_text("".join(
        json.dumps({"step": s, "data": {"reinforce_ada/samples_total": 6}}) + "\n" for s in (1, 2)))
    assert learning_training.roll_back_to_logged(tmp_path) == 2
    assert sorted(f.name for f in (tmp_path / "checkpoints").glob("global_step_*")) == ["global_step_1",
                                                                                         "global_step_2"]
    assert (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "2"
    # nothing logged: the run starts again
    other = tmp_path / "other"
    save_step(other, 1)
    assert learning_training.roll_back_to_logged(other) is None
    assert not list((other / "checkpoints").iterdir())


def test_an_unfinished_run_from_another_start_is_refused(tmp_path, monkeypatch):
    run_dir = tmp_path / "work" / "runs" / "balance" / "seed0"
    run_dir.mkdir(parents=True)
    (run_dir / "start.txt").write_text("aaaa\n")
    monkeypatch.setattr(learning_training, "run_command", lambda *a, **k: [sys.executable, "-c", "exit(3)"])
    with pytest.raises(SystemExit, match=f"started from weights aaaa, this session's start is bbbb: remove {run_dir}"):
        learning_training.train_run("balance", 0, tmp_path / "model", {}, QUICK, 4, tmp_path / "work",
                                    tmp_path / "results", 16, "bbbb")
    assert (run_dir / "start.txt").read_text() == "aaaa\n"


def test_the_trainer_dies_with_the_harness(tmp_path):
    """A harness killed with SIGKILL runs no clean-up: its trainer (a session of its own) must not go on training
    and saving checkpoints."""
    import os
    import signal
    import subprocess
    import time

    harness = (
        "import os, sys, time\n"
        "from studies.learning.training import start_trainer\n"
        "trainer = start_trainer([sys.executable, '-c', 'import time; time.sleep(120)'], None, dict(os.environ))\n"
        "print(trainer.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    parent = subprocess.Popen([sys.executable, "-c", harness], stdout=subprocess.PIPE, text=True, env=env)
    trainer = int(parent.stdout.readline())

    def alive(pid):
        try:
            state = Path(f"/proc/{pid}/status").read_text()
        except FileNotFoundError:
            return False
        return "State:\tZ" not in state

    assert alive(trainer)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 10
    while alive(trainer) and time.time() < deadline:
        time.sleep(0.1)
    if alive(trainer):
        os.kill(trainer, signal.SIGKILL)
        raise AssertionError("the trainer outlived its harness")
