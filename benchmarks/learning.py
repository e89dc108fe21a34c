"""Does Reinforce-Ada learn more than GRPO? Seeds, the paper's data regime, a GRPO at balance's predicted samples.

    python benchmarks/learning.py [--quick] [--seeds 0 1 2] [--methods grpo_n4 balance ...]
        [--work outputs/learning] [--results benchmarks/results/learning] [--write benchmarks/RESULTS.md]
        [--model PATH] [--pass-rate-range 0 0.3125]

Everything runs through verl's trainer on this machine (``reinforce_ada.main_ppo``, V1 trainer,
vLLM-CPU rollout, FSDP2 update) with SmolLM2-135M-Instruct, in phases:

1. data, the paper's regime: a seeded pool of the demo task's questions
   (:mod:`reinforce_ada.demo_task`), each sampled ``filter_k`` times by the base model with the
   project's data prep (:mod:`reinforce_ada.data_prep`, vLLM, resumable); the questions whose
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
   RESULTS.md (mean and 95% interval per method and evaluated step, paired differences to GRPO-n4
   and to the matched GRPO per seed at every evaluated step, same-day step-time ratios, how noisy
   one run is, the runs' total wall time). Every run records its date, machine and command.

WORK is scratch (checkpoints, logs, parquet). What a run on another machine needs to carry on is
kept under RESULTS, meant to be committed: the base model's pass rates (``pass_rates.jsonl``,
so no question is sampled twice) and one record per finished run
(``runs/<method>_seed<seed>.json``: command, date, machine, wall time and the logged metrics). A
run with a record is not run again; a record measured with other sizes stops the benchmark
rather than being mixed in or overwritten. A run killed mid-way resumes from its checkpoint on
the same machine, and starts again on a new one.

``--quick`` runs every phase in minutes (a pool of 12 questions, 2 steps of 2 prompts, 1 seed).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import machine, write_section  # noqa: E402
from benchmarks.stats import excludes_zero, mean_ci, sd  # noqa: E402
from reinforce_ada import demo, demo_task  # noqa: E402

FILTERED, UNFILTERED = "arithmetic_filtered", "arithmetic_all"  # the held-out sets' data_source
EASY = (0.0, 0.3125)  # the paper's "easy" filter: 0 < pass rate <= 5/16
BASELINE = "grpo_n4"


@dataclass(frozen=True)
class Size:
    """How big the benchmark is; every method gets the same numbers.

    Attributes:
        pool: Questions sampled by the base model for the filter.
        filter_k: Samples per pool question for its pass rate.
        heldout_filtered: Filtered questions held out (the rest train).
        heldout_all: Unfiltered held-out questions, from the same generator.
        batch: Prompts per training step.
        steps: Training steps per run.
        eval_every: Validation (and checkpoint) every this many steps, and before the first.
        eval_k: Samples per held-out question (Avg@k, best@k).
        max_response_tokens: Response limit in filtering, training and validation.
        lr: Actor learning rate (AdamW).
        mini_batch: Prompts per optimiser step.
        n: Samples per prompt in the update (GRPO-n4's n, Reinforce-Ada's group size).
    """

    pool: int = 768
    filter_k: int = 16
    heldout_filtered: int = 64
    heldout_all: int = 64
    batch: int = 8
    steps: int = 20
    eval_every: int = 10
    eval_k: int = 8
    max_response_tokens: int = 32
    lr: float = 3e-5
    mini_batch: int = 4
    n: int = 4

    def trainer_size(self, group_size: int) -> demo.DemoSize:
        return demo.DemoSize(
            batch=self.batch, steps=self.steps, eval_every=self.eval_every, eval_k=self.eval_k,
            max_response_tokens=self.max_response_tokens, lr=self.lr, mini_batch=self.mini_batch,
            group_size=group_size,
        )


DEFAULT = Size()
QUICK = Size(
    pool=12, filter_k=4, heldout_filtered=2, heldout_all=4, batch=2, steps=2, eval_every=1, eval_k=2, mini_batch=2
)
METHODS = ("grpo_n4", "balance", "grpo_matched", "est", "pos")  # the order each seed runs them in


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
        if summary["size"] == asdict(size) and summary["pass_range"] == list(pass_range):
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
        "MAX_TOKENS": str(size.max_response_tokens), "TEST_SIZE": str(size.heldout_filtered),
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
    if counts.get("train", 0) < size.batch:
        raise SystemExit(
            f"[learning] only {counts.get('train', 0)} training prompts passed the pass-rate filter "
            f"({pass_range[0]:g}, {pass_range[1]:g}] (counts: {counts}); need at least one batch ({size.batch}): "
            "raise --pool or widen --pass-rate-range"
        )
    import pandas as pd

    rates = [float(info["pass_rate"]) for info in pd.read_parquet(data / "filtered" / "train.parquet")["extra_info"]]
    summary = {
        "size": asdict(size), "pass_range": list(pass_range), "data_seed": data_seed, "counts": counts,
        "train_pass_rates": rates, "date": datetime.date.today().isoformat(), "machine": machine(),
        "files": {"train": str(data / "filtered" / "train.parquet"), "heldout_filtered": str(data / "filtered" /
                  "test.parquet"), "heldout_all": str(data / "heldout_all.parquet")},
    }
    summary_file.write_text(json.dumps(summary, indent=1))
    return summary


# ------------------------------------------------------------------------------------------
# phase 2: the matched GRPO's n (fixed before the runs, from the base pass rates)
# ------------------------------------------------------------------------------------------
def balance_samples_per_prompt(pass_rates: list[float], n: int, repeats: int = 20, seed: int = 0) -> float:
    """Balance's mean samples per prompt (M 8, R 4) on prompts with these pass rates, by the core sampler."""
    import numpy as np

    from reinforce_ada.config import SamplerConfig
    from reinforce_ada.simulate import simulate

    config = SamplerConfig(n=n, round_size=8, max_rounds=4, variant="balance")
    rng = np.random.default_rng(seed)
    ids = [str(i) for i in range(len(pass_rates))]
    means = []
    for _ in range(repeats):
        def draw(prompt, count):
            return (rng.random(count) < pass_rates[int(prompt)]).astype(float).tolist()

        means.append(simulate(ids, draw, config)["summary"]["samples_per_prompt_mean"])
    return float(np.mean(means))


def method_overrides(method: str, size: Size, matched_n: int) -> tuple[str, int, list[str]]:
    """The method's name in the results, its update group size and its Hydra overrides."""
    if method.startswith("grpo_n") or method == "grpo_matched":
        k = matched_n if method == "grpo_matched" else int(method.removeprefix("grpo_n"))
        # one round of k and nothing else: every prompt's group is its k samples, with verl's GRPO advantage
        return f"grpo_n{k}", k, [
            "reinforce_ada.enable=true", "algorithm.adv_estimator=grpo", f"actor_rollout_ref.rollout.n={k}",
            f"reinforce_ada.round_size={k}", "reinforce_ada.max_rounds=1",
        ]
    if method in ("balance", "pos", "est"):
        # the paper's rounds: M = 8, R = 4 (Est: N_max = 32)
        return method, size.n, [
            "reinforce_ada.enable=true", "algorithm.adv_estimator=reinforce_ada", f"reinforce_ada.variant={method}",
            "reinforce_ada.round_size=8", "reinforce_ada.max_rounds=4", f"actor_rollout_ref.rollout.n={size.n}",
        ]
    raise SystemExit(f"[learning] --methods: unknown method {method!r}; known: {', '.join(METHODS)} or grpo_n<k>")


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
        size.trainer_size(group_size), run_dir, prompt_tokens,
    )
    micro = micro_batch_size(size.mini_batch * group_size)
    return _with(base, [
        f"data.val_files=[{files['heldout_filtered']},{files['heldout_all']}]",
        "data.shuffle=true", f"data.seed={seed}", f"reinforce_ada.sampling_seed={seed}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        "trainer.project_name=reinforce_ada_learning", f"trainer.experiment_name={name}_seed{seed}",
        f"trainer.save_freq={size.eval_every}", "trainer.max_actor_ckpt_to_keep=1", "trainer.resume_mode=auto",
        # validation before the first step gives step 0 (once per seed: every method starts from the same model);
        # a resumed run has it already
        f"trainer.val_before_train={'true' if validate_base and not resuming else 'false'}",
        *overrides,
    ])


# the logged values a run's record keeps: the sampler's, validation, timing and the update's
RECORDED = ("reinforce_ada/", "val-core/", "timing_s/", "actor/", "response_length/", "critic/score/")


def record_path(results: Path, name: str, seed: int) -> Path:
    return results / "runs" / f"{name}_seed{seed}.json"


def read_records(results: Path, size: Size) -> list[dict]:
    """Every finished run's record under ``results``.

    Raises:
        SystemExit: If a record was measured with other sizes than ``size`` (mixing them would be wrong).
    """
    records = []
    for path in sorted((results / "runs").glob("*_seed*.json")):
        record = json.loads(path.read_text())
        if record.get("size") != asdict(size):
            differ = sorted(k for k, v in asdict(size).items() if record.get("size", {}).get(k) != v)
            raise SystemExit(
                f"[learning] {path} was measured with other sizes ({', '.join(differ)} differ from this "
                "benchmark's Size): move the folder's records away or pass another --results"
            )
        record["steps"] = {int(step): values for step, values in record["steps"].items()}
        records.append(record)
    return records


def base_measured(results: Path, work: Path, size: Size, seed: int) -> bool:
    """Whether some run of ``seed`` has validated the base model (step 0), finished or not."""
    if any(r["seed"] == seed and 0 in r["steps"] for r in read_records(results, size)):
        return True
    return any(0 in merged_steps(run_dir) for run_dir in (work / "runs").glob(f"*/seed{seed}"))


def train_run(
    method: str, seed: int, model: Path, data: dict, size: Size, matched_n: int, work: Path, results: Path,
    prompt_tokens: int,
) -> Path:
    """Runs (or resumes, or skips if finished) one method at one seed; returns its record.

    The seed's first run validates the base model (step 0) too; the seed's other runs share it.
    """
    name = method_overrides(method, size, matched_n)[0]
    run_dir = work / "runs" / name / f"seed{seed}"
    record = record_path(results, name, seed)
    if record.exists():
        _say(f"3/4 {name} seed {seed}: finished before, skipped ({record})")
        return record
    validate_base = not base_measured(results, work, size, seed)
    run_dir.mkdir(parents=True, exist_ok=True)
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
    wall = time.perf_counter() - start
    with open(run_dir / "attempts.jsonl", "a") as f:
        f.write(json.dumps({"attempt": attempt, "wall_s": wall, "returncode": process.returncode,
                            "date": datetime.datetime.now().isoformat(timespec="seconds")}) + "\n")
    if process.returncode != 0:
        demo.fail(f"{name} seed {seed}: verl's trainer exited with status {process.returncode} "
                  "(rerun the benchmark to resume from the last checkpoint)", log, "learning")
    steps = sorted(s for s in merged_steps(run_dir) if s > 0)
    if steps != list(range(1, size.steps + 1)):
        demo.fail(f"{name} seed {seed}: the trainer logged steps {steps}, expected 1..{size.steps}", log, "learning")
    attempts = [json.loads(line) for line in (run_dir / "attempts.jsonl").read_text().splitlines()]
    logged = {step: {k: v for k, v in values.items() if k.startswith(RECORDED)}
              for step, values in sorted(merged_steps(run_dir).items())}
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({
        "method": name, "seed": seed, "date": datetime.date.today().isoformat(), "machine": machine(),
        "wall_s": sum(a["wall_s"] for a in attempts), "attempts": len(attempts),
        "command": (run_dir / f"command_{attempt:02d}.txt").read_text().strip(), "size": asdict(size),
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
            held_out = values.get(f"val-core/{FILTERED}/reward/mean@{size.eval_k}")
            extra = f", held-out Avg@{size.eval_k} {held_out:.3f}" if held_out is not None else ""
            if step == 0:
                _say(f"3/4 {name} seed {seed}: base model{extra}")
                continue
            _say(f"3/4 {name} seed {seed} step {step}/{size.steps}: "
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


def merged_steps(run_dir: Path) -> dict[int, dict]:
    """Step -> verl's logged values over every attempt; a resumed attempt's rows replace the earlier
    ones of the same step (it redoes the steps after its checkpoint)."""
    steps: dict[int, dict] = {}
    for path in sorted(run_dir.glob("metrics_*.jsonl")):
        for row in demo.read_jsonl(path):
            steps[int(row["step"])] = row["data"]
    return steps


# ------------------------------------------------------------------------------------------
# phase 4: results
# ------------------------------------------------------------------------------------------
def run_rows(method: str, seed: int, steps: dict[int, dict], eval_k: int) -> tuple[list[dict], list[dict]]:
    """One row per evaluated step (cumulative samples, tokens and wall time) and one per training step."""
    evaluated, per_step = [], []
    samples = tokens = wall = 0.0
    for step in sorted(steps):
        values = steps[step]
        if step > 0:
            row = {
                "method": method, "seed": seed, "step": step,
                "samples": values["reinforce_ada/samples_total"],
                "tokens": values["reinforce_ada/response_tokens_total"],
                "wall_s": values["timing_s/step"],
                "rollout_s": values["reinforce_ada/rollout_seconds"],
                "signal_frac": values["reinforce_ada/kept_groups_with_signal_frac"],
                "train_pass_rate": values["reinforce_ada/pass_rate_mean"],
                "kept_samples": values["reinforce_ada/kept_samples"],
                "no_answer_frac": values.get("reinforce_ada/reward/no_answer"),
            }
            per_step.append(row)
            samples, tokens, wall = samples + row["samples"], tokens + row["tokens"], wall + row["wall_s"]
        accuracy = values.get(f"val-core/{FILTERED}/reward/mean@{eval_k}")
        if accuracy is None:
            continue
        evaluated.append({
            "method": method, "seed": seed, "step": step, "heldout_acc": accuracy,
            "heldout_pass_at_k": values.get(f"val-core/{FILTERED}/reward/best@{eval_k}/mean"),
            "heldout_all_acc": values.get(f"val-core/{UNFILTERED}/reward/mean@{eval_k}"),
            "heldout_all_pass_at_k": values.get(f"val-core/{UNFILTERED}/reward/best@{eval_k}/mean"),
            "samples": samples, "tokens": tokens, "wall_s": wall, "k": eval_k,
        })
    return evaluated, per_step


def collect(work: Path, results: Path, size: Size) -> tuple[list[dict], list[dict], list[dict]]:
    """Rows of every run (finished: its record in ``results``; unfinished: its folder in ``work``),
    per-step rows, and the runs' records without their steps."""
    rows, per_step, runs = [], [], []
    sources = [(r["method"], r["seed"], r["steps"], r) for r in read_records(results, size)]
    finished = {(method, seed) for method, seed, _, _ in sources}
    for run_dir in sorted((work / "runs").glob("*/seed*")):
        method, seed = run_dir.parent.name, int(run_dir.name.removeprefix("seed"))
        if (method, seed) not in finished:
            sources.append((method, seed, merged_steps(run_dir), None))
    for method, seed, steps, record in sources:
        evaluated, logged = run_rows(method, seed, steps, size.eval_k)
        if evaluated and evaluated[0]["step"] != 0:
            evaluated.insert(0, {"method": method, "seed": seed, "step": 0, "base_of_seed": True})  # filled below
        for row in evaluated:
            row["finished"] = record is not None
        rows += evaluated
        per_step += logged
        about = {k: v for k, v in record.items() if k != "steps"} if record else {"method": method, "seed": seed}
        runs.append({**about, "finished": record is not None, "steps_logged": len(logged)})
    # step 0 is the base model, validated once per seed (by its first run): the seed's other runs share it
    base = {r["seed"]: r for r in rows if r["step"] == 0 and "base_of_seed" not in r}
    filled = []
    for row in rows:
        if row.get("base_of_seed"):
            if row["seed"] not in base:
                continue  # its seed's base model has not been measured yet
            row = {**base[row["seed"]], "method": row["method"], "finished": row["finished"], "base_of_seed": True}
        filled.append(row)
    return filled, per_step, runs


def _cell(values: list[float], scale: float = 100.0, digits: int = 1, sign: str = "") -> str:
    if not values:
        return ""
    mean, ci = mean_ci(values)
    return f"{scale * mean:{sign}.{digits}f}" + ("" if math.isnan(ci) else f" ± {scale * ci:.{digits}f}")


def report(
    rows: list[dict], per_step: list[dict], runs: list[dict], data: dict, size: Size, matched: dict,
    records: str = "runs",
) -> str:
    """The RESULTS.md section: finished runs only. ``records``: the run records' folder, as linked from it.

    Every sentence in it is computed from the rows it reports, so that it says what they show and no more."""
    finished = {(r["method"], r["seed"]) for r in runs if r["finished"]}
    rows = [r for r in rows if (r["method"], r["seed"]) in finished]
    per_step = [r for r in per_step if (r["method"], r["seed"]) in finished]
    methods = sorted({r["method"] for r in rows}, key=_method_order)
    counts = data["counts"]
    k = size.eval_k
    matched_grpo = method_overrides("grpo_matched", size, matched["n"])[0]
    run_means = _run_means(per_step)

    def per_run(method: str, key: str) -> list[float]:
        """Each run's mean per step (the interval is over runs, as the accuracy's)."""
        return [v[key] for (m, _), v in sorted(run_means.items()) if m == method]

    lines = [
        f"SmolLM2-135M-Instruct through verl's trainer on this CPU. Data: {size.pool} questions of the demo task, "
        f"{size.filter_k} base-model samples each; pass rate in ({data['pass_range'][0]:g}, "
        f"{data['pass_range'][1]:g}]: {counts.get('kept', 0)} kept ({counts.get('pass_rate_too_low', 0)} at 0, "
        f"{counts.get('pass_rate_too_high', 0)} above), split into {counts.get('train', 0)} training prompts and "
        f"{counts.get('test', 0)} filtered held-out questions; {size.heldout_all} unfiltered held-out questions. "
        f"{size.steps} steps of {size.batch} prompts, n {size.n}, AdamW lr {size.lr:g} (constant), responses up to "
        f"{size.max_response_tokens} tokens, temperature 1.0; held-out Avg@{k} and best@{k} at steps "
        f"{', '.join(str(s) for s in sorted({r['step'] for r in rows}))} only. "
        f"{_matched_sentence(matched_grpo, matched, per_run, size.batch)} "
        "Mean ± 95% interval (Student t) over seeds. Command: `python benchmarks/learning.py --seeds S "
        "--write benchmarks/RESULTS.md`, a seed or a few methods at a time; each run's trainer command is in its "
        "record (last table).",
        "",
        f"| method | seeds | held-out Avg@{k}, filtered (%) | best@{k} (bootstrap), filtered (%) | Avg@{k}, unfiltered "
        "(%) | responses / step | tokens / step | step time (s) | groups with signal (%) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for method in methods:
        final = [r for r in rows if r["method"] == method and r["step"] == size.steps]
        lines.append(
            f"| {method} | {len(final)} | {_cell([r['heldout_acc'] for r in final])} | "
            f"{_cell([r['heldout_pass_at_k'] for r in final])} | {_cell([r['heldout_all_acc'] for r in final])} | "
            f"{_cell(per_run(method, 'samples'), 1, 0)} | {_cell(per_run(method, 'tokens'), 1, 0)} | "
            f"{_cell(per_run(method, 'wall_s'), 1, 0)} | {_cell(per_run(method, 'signal_frac'), 100, 0)} |"
        )
    lines += ["", f"At step {size.steps}. best@{k} is verl's bootstrap estimate, not pass@{k}: the mean over 1000 "
              f"draws of {k} of a question's {k} responses, with replacement, of the best reward, so a question with "
              f"1 of {k} responses correct counts {1 - (1 - 1 / k) ** k:.2f}, not 1."]
    lines += _step_time_lines(runs, run_means, methods, [BASELINE, matched_grpo])
    evaluated_steps = sorted({r["step"] for r in rows})
    lines += ["", f"Held-out Avg@{k} (filtered, %) by step:", "",
              "| method | " + " | ".join(f"step {s}" for s in evaluated_steps) + " |",
              "|---|" + "---:|" * len(evaluated_steps)]
    for method in methods:
        cells = [_cell([r["heldout_acc"] for r in rows if r["method"] == method and r["step"] == s])
                 for s in evaluated_steps]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    later = [s for s in evaluated_steps if s > 0]
    comparisons: dict[tuple[str, str, str], list[float]] = {}
    for reference in dict.fromkeys([BASELINE, matched_grpo]):  # one table when the matched n is GRPO-n4's
        lines += _paired_table(rows, methods, reference, later, size.steps, k, comparisons)
    if comparisons:
        excluding = sum(excludes_zero(d) for d in comparisons.values() if len(d) > 1)
        lines += ["", f"These tables hold {len(comparisons)} distinct paired comparisons (a method against a "
                  f"reference at a step or averaged); {excluding} of their intervals exclude 0. The intervals are not "
                  f"corrected for multiple comparisons: at 95%, about {len(comparisons) / 20:.1f} of "
                  f"{len(comparisons)} would exclude 0 by chance alone."]
    lines += _noise_lines(rows, per_step, methods, size)
    done = [r for r in runs if r["finished"]]
    if done:
        lines += ["", "Runs (date, machine, wall time with start-up; the record holds the command and every logged "
                  "value):", "", "| method | seed | date | wall | machine | record |", "|---|---:|---|---:|---|---|"]
        lines += [f"| {r['method']} | {r['seed']} | {r['date']} | {r['wall_s'] / 60:.1f} min | {r['machine']} | "
                  f"[{r['method']}_seed{r['seed']}.json]({records}/{r['method']}_seed{r['seed']}.json) |"
                  for r in sorted(done, key=lambda r: (_method_order(r["method"]), r["seed"]))]
        lines += ["", f"{len(done)} runs, {sum(r['wall_s'] for r in done) / 3600:.1f} h of this machine in all "
                  "(the data phase not counted)."]
    return "\n".join(lines)


def _run_means(per_step: list[dict]) -> dict[tuple[str, int], dict[str, float]]:
    """(method, seed) -> each per-step value averaged over the run's steps."""
    runs: dict[tuple[str, int], list[dict]] = {}
    for row in per_step:
        runs.setdefault((row["method"], row["seed"]), []).append(row)
    return {key: {name: sum(r[name] for r in steps) / len(steps)
                  for name in ("samples", "tokens", "wall_s", "signal_frac")}
            for key, steps in runs.items()}


def _matched_sentence(matched_grpo: str, matched: dict, per_run, batch: int) -> str:
    """What the 'sample-matched' GRPO was matched to, and how far it is from what balance drew."""
    sentence = (f"{matched_grpo}'s n was fixed before the runs at balance's expected responses per prompt on the base "
                f"pass rates ({matched['balance_samples_per_prompt']:.2f}, by the core sampler)")
    balance, grpo = per_run("balance", "samples"), per_run(matched_grpo, "samples")
    if not (balance and grpo):
        return sentence + "."
    mean = lambda values: sum(values) / len(values)  # noqa: E731
    samples = mean(balance) / mean(grpo)
    tokens = mean(per_run("balance", "tokens")) / mean(per_run(matched_grpo, "tokens"))
    return (sentence + f"; in training balance drew {mean(balance) / batch:.2f} per prompt, so balance drew "
            f"{samples:.2f}x {matched_grpo}'s responses and {tokens:.2f}x its tokens per step.")


def _step_time_lines(runs: list[dict], run_means: dict, methods: list[str], references: list[str]) -> list[str]:
    """Step times are only comparable within a day: the ratio of each method's mean step time to a reference's,
    for the seeds whose two runs were measured on the same date."""
    dates = {(r["method"], r["seed"]): r.get("date") for r in runs if r["finished"]}
    by_method: dict[str, list[float]] = {}
    for (method, _), values in run_means.items():
        by_method.setdefault(method, []).append(values["wall_s"])
    drift = max((max(v) / min(v) - 1 for v in by_method.values() if len(v) > 1), default=0.0)
    lines = ["", "Step time relative to the reference, for the seeds whose two runs were measured on the same day"
             + (f" (the mean step time of one method varied by up to {100 * drift:.0f}% between runs, and more "
                "between days than within one, so step times compare only within a day):"
                if len(set(dates.values())) > 1 else ":")]
    for reference in dict.fromkeys(references):
        parts = []
        for method in methods:
            if method == reference:
                continue
            ratios = [f"{run_means[(method, seed)]['wall_s'] / run_means[(reference, seed)]['wall_s']:.2f} "
                      f"(seed {seed})"
                      for (m, seed) in sorted(run_means) if m == method and (reference, seed) in run_means
                      and dates.get((method, seed)) == dates.get((reference, seed))]
            if ratios:
                parts.append(f"{method} {', '.join(ratios)}")
        if parts:
            lines.append(f"- to {reference}: " + "; ".join(parts) + ".")
    return lines if len(lines) > 2 else []


def _noise_lines(rows: list[dict], per_step: list[dict], methods: list[str], size: Size) -> list[str]:
    """How noisy a single run is, from the runs themselves."""
    final = {m: [100 * r["heldout_acc"] for r in rows if r["method"] == m and r["step"] == size.steps]
             for m in methods}
    sds = [sd(v) for v in final.values() if len(v) > 1]
    base = sorted({(r["seed"], r["heldout_acc"]) for r in rows if r["step"] == 0})
    lines = ["", "How noisy one run is:"]
    if sds:
        lines.append(f"- between seeds, held-out Avg@{size.eval_k} at step {size.steps} has a standard deviation of "
                     f"{min(sds):.1f}-{max(sds):.1f} points, depending on the method;")
    if len(base) > 1:
        lines.append(f"- the base model, the same weights validated once by each seed's first run with other "
                     f"sampling, scored {', '.join(f'{100 * acc:.1f}%' for _, acc in base)};")
    evaluated = sorted({r["step"] for r in rows if r["step"] > 0})
    if len(evaluated) > 1:
        last, before = evaluated[-1], evaluated[-2]
        acc = {(r["method"], r["seed"], r["step"]): r["heldout_acc"] for r in rows}
        pairs = [(m, s) for m, s, step in acc if step == last and (m, s, before) in acc]
        fell = sum(acc[(m, s, last)] < acc[(m, s, before)] for m, s in pairs)
        lines.append(f"- held-out accuracy fell between steps {before} and {last} in {fell} of {len(pairs)} runs;")
    no_answer = {}
    for row in per_step:
        if row.get("no_answer_frac") is not None:
            no_answer.setdefault(row["step"], []).append(100 * row["no_answer_frac"])
    if 1 in no_answer and 3 in no_answer:
        lines.append(f"- training responses without an answer (they score 0): {min(no_answer[1]):.0f}-"
                     f"{max(no_answer[1]):.0f}% at step 1, {min(no_answer[3]):.0f}-{max(no_answer[3]):.0f}% at step "
                     "3, over all runs: every method learns the answer format first, which alone can account for "
                     "much of the early gain;")
    lines.append(f"- the learning rate is constant ({size.lr:g}) with no warm-up, and Adam moves each weight by up to "
                 "about lr per step whatever the gradient's size: one evaluation of one run mixes the estimator's "
                 "quality with where that run's walk happens to be.")
    if len(lines) > 2:
        lines[-2] = lines[-2].rstrip(";") + ";"
    return lines


def _paired_table(rows: list[dict], methods: list[str], reference: str, later: list[int], last_step: int,
                  k: int, comparisons: dict | None = None) -> list[str]:
    """Report lines: each method's held-out accuracy minus ``reference``'s on the same seed, per seed at the
    evaluated steps ``later``, then mean ± 95% interval at each and of each seed's average over them; none
    without a finished ``reference`` run."""
    base = {(r["seed"], r["step"]): r["heldout_acc"] for r in rows if r["method"] == reference}
    seeds = sorted({seed for seed, step in base if step == last_step})
    if not seeds:
        return []
    # one evaluation of one run swings by tens of points: the average over the run's evaluations is steadier
    averaged = [f"steps {later[0]}-{later[-1]} averaged"] if len(later) > 1 else []
    lines = ["", f"Paired difference to {reference} (filtered Avg@{k}, points): per seed at steps "
             + " / ".join(map(str, later)) + ", then mean ± 95% interval at each"
             + (" and of each seed's average over them" if averaged else "") + ":", "",
             "| method | " + " | ".join(f"seed {s}" for s in seeds) + " | "
             + " | ".join([f"step {s}" for s in later] + averaged) + " |",
             "|---|" + "---:|" * (len(seeds) + len(later) + len(averaged))]
    for method in methods:
        if method == reference:
            continue
        diffs = {(r["seed"], r["step"]): r["heldout_acc"] - base[(r["seed"], r["step"])] for r in rows
                 if r["method"] == method and (r["seed"], r["step"]) in base and r["step"] > 0}
        per_seed = [" / ".join(f"{100 * diffs[(seed, s)]:+.1f}" for s in later if (seed, s) in diffs)
                    for seed in seeds]
        columns = {f"step {step}": [d for (_, s), d in diffs.items() if s == step] for step in later}
        if averaged:
            complete = [seed for seed in seeds if all((seed, s) in diffs for s in later)]
            columns[averaged[0]] = [sum(diffs[(seed, s)] for s in later) / len(later) for seed in complete]
        at_step = [_cell(values, sign="+") for values in columns.values()]
        if comparisons is not None:  # a pair compared both ways is one comparison
            for column, values in columns.items():
                if values:
                    comparisons[(*sorted((method, reference)), column)] = values
        lines.append(f"| {method} | " + " | ".join(per_seed) + " | " + " | ".join(at_step) + " |")
    return lines


def _method_order(method: str) -> tuple[int, str]:
    order = {"grpo_n4": 0, "balance": 2, "pos": 3, "est": 4}
    return order.get(method, 1 if method.startswith("grpo_n") else 5), method


def plot(rows: list[dict], size: Size, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for method in sorted({r["method"] for r in rows}, key=_method_order):
        mine = [r for r in rows if r["method"] == method and r["finished"]]
        steps = sorted({r["step"] for r in mine})
        if not steps:
            continue
        at = [[r for r in mine if r["step"] == s] for s in steps]
        acc = [100 * mean_ci([r["heldout_acc"] for r in group])[0] for group in at]
        ci = [100 * mean_ci([r["heldout_acc"] for r in group])[1] for group in at]
        ci = [0.0 if math.isnan(c) else c for c in ci]
        for ax, x in zip(axes, (steps, [mean_ci([r["samples"] for r in g])[0] for g in at],
                                [mean_ci([r["wall_s"] for r in g])[0] / 60 for g in at])):
            ax.errorbar(x, acc, yerr=ci, marker="o", capsize=3, label=method)
    for ax, label in zip(axes, ("training step", "samples generated", "training wall time (min)")):
        ax.set_xlabel(label)
        ax.set_ylabel(f"held-out Avg@{size.eval_k}, filtered (%)")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("Held-out accuracy, mean and 95% interval over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_results(work: Path, results: Path, size: Size, data: dict, matched: dict, write: str | None) -> None:
    rows, per_step, runs = collect(work, results, size)
    balance = [s["samples"] for s in per_step if s["method"] == "balance"]
    if balance:
        matched = {**matched, "measured": sum(balance) / len(balance) / size.batch}
    results.mkdir(parents=True, exist_ok=True)
    (results / "runs.json").write_text(json.dumps({"runs": rows, "size": asdict(size), "matched": matched,
                                                   "data": {k: v for k, v in data.items() if k != "files"},
                                                   "run_records": runs}, indent=1))
    (results / "steps.json").write_text(json.dumps({"steps": per_step}, indent=1))
    if any(r["finished"] for r in rows):
        plot(rows, size, results / "curves.png")
    if write:
        here = Path(write).resolve().parent
        body = report(rows, per_step, runs, data, size, matched, os.path.relpath(results / "runs", here))
        rel = os.path.relpath(results / "curves.png", here)
        title = "Learning, first protocol: Reinforce-Ada against GRPO on SmolLM2-135M, 3 seeds"
        write_section(write, "learning", title,
                      body + f"\n\n![held-out accuracy against step, samples and wall time]({rel})",
                      measured=measured_span(runs))


def measured_span(runs: list[dict]) -> str | None:
    """The dates and machines of the finished runs' records, e.g. '2026-12-02 to 2026-12-03 on 2 CPU cores (...)'."""
    recorded = [r for r in runs if r["finished"]]
    if not recorded:
        return None
    dates, machines = sorted({r["date"] for r in recorded}), sorted({r["machine"] for r in recorded})
    span = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    return f"{span} on {' and '.join(machines)}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python benchmarks/learning.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="every phase in minutes: 12 questions, 2 steps, 1 seed")
    parser.add_argument("--seeds", type=int, nargs="+", help="run seeds (default 0 1 2; --quick 0)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS),
                        help="grpo_n4, balance, est, pos, grpo_matched (GRPO at balance's samples) or grpo_n<k>")
    parser.add_argument("--work", help="scratch: data, run folders, checkpoints (default outputs/learning; "
                        "--quick: outputs/learning_quick)")
    parser.add_argument("--results", help="runs.json, steps.json, curves.png, pass rates and run records (default "
                        "benchmarks/results/learning; --quick: outputs/learning_quick/results)")
    parser.add_argument("--write", default=None, help="RESULTS.md to write the learning section into")
    parser.add_argument("--model", help="a Hugging Face model folder (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--pass-rate-range", type=float, nargs=2, default=EASY, metavar=("LOW", "HIGH"),
                        help="keep training prompts with LOW < base pass rate <= HIGH (default: the paper's easy)")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the question pool")
    parser.add_argument("--report-only", action="store_true", help="rewrite the results from the run folders")
    args = parser.parse_args(argv)
    size = QUICK if args.quick else DEFAULT
    seeds = args.seeds if args.seeds is not None else ([0] if args.quick else [0, 1, 2])
    for method in args.methods:
        method_overrides(method, size, 0)  # unknown names fail here, before anything starts
    work = Path(args.work or ("outputs/learning_quick" if args.quick else "outputs/learning")).resolve()
    results = Path(args.results or ("outputs/learning_quick/results" if args.quick else
                                    "benchmarks/results/learning")).resolve()
    started = time.perf_counter()

    model = demo.model_folder(args.model, parser)
    data = prepare_data(work, results, model, size, tuple(args.pass_rate_range), args.data_seed)
    counts = data["counts"]
    _say(f"1/4 data: {counts.get('kept', 0)} of {size.pool} questions passed the filter: {counts.get('train', 0)} "
         f"train, {counts.get('test', 0)} filtered held-out; {size.heldout_all} unfiltered held-out")

    per_prompt = balance_samples_per_prompt(data["train_pass_rates"], size.n)
    matched = {"n": max(size.n, round(per_prompt)), "balance_samples_per_prompt": per_prompt}
    _say(f"2/4 balance draws {per_prompt:.2f} samples per prompt on these pass rates: the matched GRPO is "
         f"grpo_n{matched['n']}")
    if not args.report_only:
        files = data["files"]
        prompt_tokens = demo.longest_prompt(model, [Path(files[k]) for k in ("train", "heldout_filtered",
                                                                               "heldout_all")])
        todo = [(seed, method) for seed in seeds for method in args.methods]
        for i, (seed, method) in enumerate(todo):
            _say(f"3/4 run {i + 1}/{len(todo)} ({demo.minutes(time.perf_counter() - started)} so far)")
            train_run(method, seed, model, data, size, matched["n"], work, results, prompt_tokens)
            write_results(work, results, size, data, matched, args.write)
    write_results(work, results, size, data, matched, args.write)
    _say(f"4/4 results: {results / 'runs.json'}" + (f" and the learning section of {args.write}" if args.write else "")
         + f" ({demo.minutes(time.perf_counter() - started)})")


if __name__ == "__main__":
    main()
