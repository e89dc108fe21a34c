"""One training run of the learning study through verl's trainer: its command line, started, followed and stopped
as a process group, resumed from its last checkpoint after a kill or a stall, and, once every step is logged, its
record (command, date, machine, wall time over every attempt, logged metrics) written under RESULTS."""

from __future__ import annotations

import datetime
import functools
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from benchmarks.results import machine
from reinforce_ada.core.messages import say
from reinforce_ada.demo import run as demo
from studies.learning.budget import save_every, steps_to_budget
from studies.learning.marks import BudgetWatch
from studies.learning.processes import dies_with
from studies.learning.protocol import FILTERED, KV_BLOCK, Size, method_overrides
from studies.learning.records import merged_steps, read_records, record_path, start_of_record

_say = functools.partial(say, speaker="learning")

# A trainer that logs no step for this long is stopped and resumed from its last checkpoint, at most RESUMES times in
# a row: when Ray's memory monitor kills a vLLM server or a worker, verl's trainer waits for it forever. Steps take
# 0.5-3 minutes on this CPU, and the start-up before the first about 3.
STALL_S = 20 * 60
RESUMES = 2
MEMORY_KILL = "killed due to memory pressure"  # Ray's line in the trainer's log


class Stalled(Exception):
    """The trainer logged no step for ``STALL_S`` seconds."""


def with_overrides(command: list[str], overrides: list[str]) -> list[str]:
    """``command`` with each ``key=value`` of ``overrides`` replacing the same key (Hydra's ``+`` ignored)."""
    def key(item: str) -> str:
        return item.split("=", 1)[0].lstrip("+")

    replaced = {key(o) for o in overrides}
    return [c for c in command if "=" not in c or key(c) not in replaced] + overrides


def micro_batch_size(mini_batch_samples: int, most: int = 32) -> int:
    """Samples per forward pass: the largest divisor of the mini-batch up to ``most`` (more only costs memory;
    verl's update asserts that it divides the mini-batch, after the first rollout)."""
    return max(d for d in range(1, most + 1) if mini_batch_samples % d == 0)


def run_command(
    method: str, seed: int, model: Path, data: dict, size: Size, matched_n: int, run_dir: Path, prompt_tokens: int,
    validate_base: bool = True,
) -> list[str]:
    """The trainer's command line. ``validate_base``: validate before the first step (the base model)."""
    name, group_size, overrides = method_overrides(method, size, matched_n)
    resuming = (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").exists()
    files = data["files"]
    base = demo.trainer_command(
        "GRPO-n4", model, {"train": Path(files["train"]), "test": Path(files["heldout_filtered"])},
        replace(size.run, group_size=group_size), run_dir, prompt_tokens,
    )
    micro = micro_batch_size(size.run.mini_batch * group_size)
    # at equal responses (size.budget) every step that may reach a mark is saved, so that the harness can keep the
    # checkpoint of each step that reaches one (studies.learning.marks); it evaluates those itself, seeded, so verl
    # validates nothing. A GRPO arm stops on its own at the step that reaches the budget, an adaptive one is stopped
    # by the harness there
    budget = [f"trainer.total_training_steps={steps_to_budget(method, size)}",
              f"trainer.save_freq={save_every(method, size)}", "trainer.test_freq=-1",
              # verl's own clean-up (keep 1) could delete a mark's checkpoint before the harness sees the step logged
              # (a fast step saves the next one first); the harness removes the checkpoints it no longer needs
              "trainer.max_actor_ckpt_to_keep=null"] if size.budget else []
    return with_overrides(base, [
        f"data.val_files=[{files['heldout_filtered']},{files['heldout_all']}]",
        "data.shuffle=true", f"data.seed={seed}", f"reinforce_ada.sampling_seed={seed}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        *([f"actor_rollout_ref.actor.optim.lr_warmup_steps={size.warmup_steps}"] if size.warmup_steps else []),
        "trainer.project_name=reinforce_ada_learning", f"trainer.experiment_name={name}_seed{seed}",
        f"trainer.save_freq={size.run.eval_every}", "trainer.max_actor_ckpt_to_keep=1", "trainer.resume_mode=auto",
        # validation before the first step gives step 0 (once per seed and start: the seed's runs from the same
        # weights share it); a resumed run has it already
        f"trainer.val_before_train={'true' if validate_base and not resuming and not size.budget else 'false'}",
        KV_BLOCK,
        *overrides,
        *budget,
    ])


# the logged values a run's record keeps: the sampler's, validation, timing and the update's
RECORDED = ("reinforce_ada/", "val-core/", "timing_s/", "actor/", "response_length/", "critic/score/")


def base_measured(results: Path, work: Path, size: Size, seed: int, start_id: str | None = None) -> bool:
    """Whether some run of ``seed`` has validated its start (step 0), finished or not; with ``start_id``, only
    a finished run from that start counts (this work folder's runs all have this session's start)."""
    if any(r["seed"] == seed and 0 in r["steps"] and (start_id is None or
                                                      start_of_record(r) == start_id)
           for r in read_records(results, size)):
        return True
    return any(0 in merged_steps(run_dir) for run_dir in (work / "runs").glob(f"*/seed{seed}"))


def train_run(
    method: str, seed: int, model: Path, data: dict, size: Size, matched_n: int, work: Path, results: Path,
    prompt_tokens: int, start_id: str | None = None, evaluate: Callable[[dict[int, dict]], object] | None = None,
) -> Path:
    """Runs (or resumes, or skips if finished) one method at one seed from ``model``; returns its record.

    The seed's first run validates the start (step 0) too; the seed's other runs share it. ``start_id``: the
    start's fingerprint, recorded (the second protocol pairs runs on it); an unfinished run from another start is
    refused. ``evaluate`` (the logged steps the record will hold -> anything) runs once every step is logged, before
    the record is written: a record is never committed without what it needs (the third protocol's marks).
    """
    name = method_overrides(method, size, matched_n)[0]
    run_dir = work / "runs" / name / f"seed{seed}"
    record = record_path(results, name, seed)
    if record.exists():
        _say(f"3/4 {name} seed {seed}: finished before, skipped ({record})")
        return record
    validate_base = not base_measured(results, work, size, seed, start_id)
    if start_id:  # which start an unfinished run has (its record will say it too)
        check_start(run_dir, start_id, name, seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    if start_id:
        (run_dir / "start.txt").write_text(start_id + "\n")
    for tries in range(1, RESUMES + 2):
        attempt, process, watch, log, stalled = _attempt(method, seed, model, data, size, matched_n, run_dir,
                                                         prompt_tokens, validate_base, name)
        if not stalled:
            break
        why = (" (Ray killed workers for lack of memory: run nothing large beside it)"
               if MEMORY_KILL in log.read_text(errors="replace") else "")
        if tries > RESUMES:
            demo.fail(f"{name} seed {seed}: verl's trainer logged no step for {demo.minutes(STALL_S)}, {tries} times "
                      f"in a row{why}; rerun the benchmark to resume from the last checkpoint", log, "learning")
        _say(f"3/4 {name} seed {seed}: no step logged for {demo.minutes(STALL_S)}{why}; the trainer was stopped and "
             "resumes from its last checkpoint")
    if process.returncode != 0 and not (watch and watch.done()):
        demo.fail(f"{name} seed {seed}: verl's trainer exited with status {process.returncode} "
                  "(rerun the benchmark to resume from the last checkpoint)", log, "learning")
    last = last_step(merged_steps(run_dir), size)
    # a step the trainer finished after the one that reached the budget, before it was stopped, is not the run's
    steps = sorted(s for s in merged_steps(run_dir) if 0 < s <= last)
    if steps != list(range(1, last + 1)):
        demo.fail(f"{name} seed {seed}: the trainer logged steps {steps}, expected 1..{last}", log, "learning")
    attempts = [json.loads(line) for line in (run_dir / "attempts.jsonl").read_text().splitlines()]
    logged = {step: {k: v for k, v in values.items() if k.startswith(RECORDED)}
              for step, values in sorted(merged_steps(run_dir).items()) if step <= last}
    if watch:  # every mark reached, kept (a resumed run whose last attempt ended at the budget)
        BudgetWatch(run_dir, size, logged).keep_reached()
    if evaluate:
        evaluate(logged)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({
        "method": name, "seed": seed, "date": datetime.date.today().isoformat(), "machine": machine(),
        "wall_s": sum(a["wall_s"] for a in attempts), "attempts": len(attempts),
        "attempt_dates": sorted({a["date"][:10] for a in attempts}),
        "command": (run_dir / f"command_{attempt:02d}.txt").read_text().strip(),
        "commands": [path.read_text().strip() for path in sorted(run_dir.glob("command_*.txt"))],
        "size": size.record(),
        **({"start": {"model": str(model), "fingerprint": start_id}} if start_id else {}),
        "steps": logged,
    }, indent=1) + "\n")
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # 1.6 GB; the run is over
    shutil.rmtree(run_dir / "marks", ignore_errors=True)  # evaluated before the record
    return record


def _attempt(method: str, seed: int, model: Path, data: dict, size: Size, matched_n: int, run_dir: Path,
             prompt_tokens: int, validate_base: bool, name: str
             ) -> tuple[int, subprocess.Popen, BudgetWatch | None, Path, bool]:
    """One start of the trainer, resuming the run in ``run_dir`` from its last checkpoint, followed until it exits,
    reaches the budget or stalls; the attempt's number, process (stopped), budget watch, log and whether it stalled.
    Every attempt's wall time goes to ``attempts.jsonl``."""
    if size.budget:  # the harness manages this protocol's checkpoints (verl keeps them all)
        roll_back_to_logged(run_dir)
    count_killed_attempts(run_dir)
    attempt = len(list(run_dir.glob("metrics_*.jsonl")))
    command = run_command(method, seed, model, data, size, matched_n, run_dir, prompt_tokens, validate_base)
    (run_dir / f"command_{attempt:02d}.txt").write_text(shlex.join(command) + "\n")
    metrics_file = run_dir / f"metrics_{attempt:02d}.jsonl"
    log = run_dir / f"trainer_{attempt:02d}.log"
    done_before = sorted(s for s in merged_steps(run_dir) if s > 0)
    tracker = run_dir / "checkpoints" / "latest_checkpointed_iteration.txt"  # where verl resumes
    resume = int(tracker.read_text()) if done_before and tracker.exists() else 0
    _say(f"3/4 {name} seed {seed}: " + (f"resuming after step {resume}" if resume else
                                        f"starting again ({len(done_before)} steps logged, none saved)" if done_before
                                        else "starting") + f" (verl's trainer; log {log})")
    watch = BudgetWatch(run_dir, size, merged_steps(run_dir)) if size.budget else None
    start, stalled = time.perf_counter(), False
    with open(log, "w") as stream:
        process = start_trainer(command, stream, demo.trainer_env({"VERL_FILE_LOGGER_PATH": str(metrics_file)}))
        try:
            if not (watch and watch.done()):  # a run killed after its last step but before its record: no step
                _follow(process, metrics_file, name, seed, size, start, watch)
        except Stalled:
            stalled = True
        finally:  # stopped at the budget (the trainer would go on: run.steps bounds an adaptive arm), on a stall or
            # on any error; a stopped attempt's time counts too (SIGTERM reaches here as SystemExit)
            stop_trainer(process)
            with open(run_dir / "attempts.jsonl", "a") as f:
                f.write(json.dumps({"attempt": attempt, "wall_s": time.perf_counter() - start,
                                    "returncode": process.returncode, **({"stalled": True} if stalled else {}),
                                    "date": datetime.datetime.now().isoformat(timespec="seconds")}) + "\n")
    return attempt, process, watch, log, stalled


def count_killed_attempts(run_dir: Path) -> None:
    """Writes down the attempts that were killed before they could (SIGKILL, the end of a session): each one's wall
    time is counted from its command's writing to its log's last write, marked ``killed``."""
    attempts = run_dir / "attempts.jsonl"
    recorded = ({json.loads(line)["attempt"] for line in attempts.read_text().splitlines()} if attempts.exists()
                else set())
    for command in sorted(run_dir.glob("command_*.txt")):
        number = command.stem.removeprefix("command_")
        attempt, log = int(number), run_dir / f"trainer_{number}.log"
        if attempt in recorded or not log.exists():
            continue
        ended = log.stat().st_mtime
        with open(attempts, "a") as f:
            f.write(json.dumps({"attempt": attempt, "wall_s": max(0.0, ended - command.stat().st_mtime),
                                "returncode": None, "killed": True,
                                "date": datetime.datetime.fromtimestamp(ended).isoformat(timespec="seconds")}) + "\n")


def check_start(run_dir: Path, start_id: str, name: str, seed: int) -> None:
    """Refuses to resume an unfinished run that started from other weights than ``start_id``.

    Raises:
        SystemExit: Naming the run folder to remove.
    """
    saved = run_dir / "start.txt"
    if saved.exists() and saved.read_text().strip() != start_id:
        raise SystemExit(f"[learning] {name} seed {seed}: the unfinished run in {run_dir} started from weights "
                         f"{saved.read_text().strip()}, this session's start is {start_id}: remove {run_dir} to run "
                         "it again from this start")


def roll_back_to_logged(run_dir: Path) -> int | None:
    """Makes a resumed run redo any step whose checkpoint was saved but whose metrics were never logged.

    verl saves a step's checkpoint before it logs the step, and resumes after its newest checkpoint: a trainer
    killed between the two would never log that step. The checkpoints of steps past the last logged one are removed
    and verl's tracker (``latest_checkpointed_iteration.txt``) names the newest one left, or is removed if none is
    (the run starts again). Returns the step the trainer resumes after (None: from the start).
    """
    checkpoints = run_dir / "checkpoints"
    logged = max((s for s in merged_steps(run_dir) if s > 0), default=0)
    saved = {int(f.name.rsplit("_", 1)[1]): f for f in checkpoints.glob("global_step_*")
             if f.name.rsplit("_", 1)[1].isdigit()}
    for at, folder in saved.items():
        if at > logged:
            shutil.rmtree(folder)
    resume = max((at for at in saved if at <= logged), default=None)
    tracker = checkpoints / "latest_checkpointed_iteration.txt"
    if resume is None:
        tracker.unlink(missing_ok=True)
    elif not tracker.exists() or tracker.read_text().strip() != str(resume):
        _say(f"{run_dir}: resuming after step {resume}, the last one saved and logged")
        tracker.write_text(str(resume))
    return resume


def start_trainer(command: list[str], log, env: dict) -> subprocess.Popen:
    """Starts a trainer in its own process group (stopped as one by :func:`stop_trainer`), writing to ``log``; it
    dies with this process (:func:`dies_with`)."""
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
                            preexec_fn=dies_with(os.getpid()))


def last_step(logged: dict[int, dict], size: Size) -> int:
    """The step a run ends after: ``run.steps``, or at equal responses the first step whose cumulative responses
    reach the budget (``run.steps`` while none has)."""
    if not size.budget:
        return size.run.steps
    total = 0.0
    for step in sorted(s for s in logged if s > 0):
        total += logged[step]["reinforce_ada/samples_total"]
        if total >= size.budget:
            return step
    return size.run.steps


def _follow(process: subprocess.Popen, metrics_file: Path, name: str, seed: int, size: Size, start: float,
            watch: BudgetWatch | None = None) -> None:
    """Reports each step the trainer logs to ``metrics_file`` as it comes, and a note every 2 minutes without one,
    until the trainer exits or, with ``watch``, the run has drawn its budget (each step is passed to it first).

    Raises:
        Stalled: No step was logged for ``STALL_S`` seconds.
    """
    shown, last_note, last_row, exited = 0, time.perf_counter(), time.perf_counter(), False
    while not exited:
        time.sleep(3)
        exited = process.poll() is not None  # the rows it logged before it exited are read once more
        rows = demo.read_jsonl(metrics_file)
        for row in rows[shown:]:
            values, step = row["data"], row["step"]
            budget_drawn = bool(watch and step > 0 and watch.on_step(step, values))
            held_out = values.get(f"val-core/{FILTERED}/reward/mean@{size.run.eval_k}")
            extra = f", held-out Avg@{size.run.eval_k} {held_out:.3f}" if held_out is not None else ""
            if step == 0:
                _say(f"3/4 {name} seed {seed}: base model{extra}")
                continue
            progress = (f"step {step} ({sum(watch.drawn.values()):.0f} of {size.budget} responses)" if watch
                        else f"step {step}/{size.run.steps}")
            _say(f"3/4 {name} seed {seed} {progress}: "
                 f"{values.get('reinforce_ada/samples_total', 0):.0f} samples, "
                 f"train pass rate {values.get('reinforce_ada/pass_rate_mean', float('nan')):.3f}, "
                 f"step {values.get('timing_s/step', 0):.0f} s{extra}")
            if budget_drawn:  # reported first: the step that reaches the budget is the run's last
                return
        if len(rows) != shown:
            shown, last_note, last_row = len(rows), time.perf_counter(), time.perf_counter()
        elif not exited and time.perf_counter() - last_row > STALL_S:
            raise Stalled
        elif time.perf_counter() - last_note > 120:
            _say(f"3/4 {name} seed {seed}: running, {demo.minutes(time.perf_counter() - start)} since start")
            last_note = time.perf_counter()


def stop_trainer(process: subprocess.Popen) -> None:
    """Stops the trainer and everything it started (Ray, vLLM); a rerun resumes it."""
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=wait)
            return
        except (subprocess.TimeoutExpired, ProcessLookupError):
            continue
