"""The third protocol's runs, in order: the learning-rate sweep (GRPO-n4 from start 0 at each rate, the whole budget,
then the rule of :func:`studies.learning.budget.choose_lr_by_area`), then for each seed its own start (a format
checkpoint made with seed ``FORMAT_SEED + seed``, evaluated once as mark 0) and each arm from it, stopped at the
budget and evaluated at the marks (:mod:`studies.learning.marks`). Everything resumes: a finished run's record, an
evaluation's JSON and a start's evaluation are never made again, and a start is made only for a seed with an arm
left to run (a fresh clone of the results, with no work folder, resumes without remaking the finished seeds'
starts)."""

from __future__ import annotations

import functools
import json
import shutil
from dataclasses import replace
from pathlib import Path

from reinforce_ada.core.messages import say
from studies.learning import start as learning_start
from studies.learning import training
from studies.learning.budget import choose_lr_by_area
from studies.learning.marks import evaluate_checkpoint, evaluate_marks, evaluation_path
from studies.learning.protocol import BASELINE, FILTERED, FORMAT_SEED, FORMAT_STEPS, Protocol, Size, method_overrides
from studies.learning.records import record_path, start_of_record
from studies.learning.third_section import planned_starts, primary_differences, run_curves, start_evaluation_path

_say = functools.partial(say, speaker="learning")


def candidates(protocol: Protocol, methods: list[str]) -> list[str]:
    """The arms whose pair with GRPO-n4 is sized and extended: all but GRPO-n4 and the pilot-only ones."""
    return [m for m in methods if m != BASELINE and m not in protocol.pilot_only]


def arms_of_seed(protocol: Protocol, methods: list[str], seed: int, targets: dict[str, int] | None = None) -> list[str]:
    """The arms a seed runs. At the pilot seeds, all of ``methods``. Past them, no pilot-only arm (the per-step
    control), and a candidate only while its pair with GRPO-n4 needs more starts (``targets``: candidate -> the
    starts its pair extends to, for the pairs already sized; an unsized one runs); GRPO-n4 while any candidate
    does (amendment 4)."""
    if seed < protocol.pilot_seeds:
        return list(methods)
    running = [m for m in candidates(protocol, methods) if seed < (targets or {}).get(m, protocol.most_seeds)]
    return [m for m in methods if m in running or (m == BASELINE and running)]


def pair_targets(protocol: Protocol, methods: list[str], results: Path, size: Size) -> dict[str, int]:
    """Candidate -> the starts its pair with GRPO-n4 extends to, for each pair whose pilot starts are done."""
    runs = run_curves(results, size)
    sized = {m: planned_starts(primary_differences(runs, m, size), protocol) for m in candidates(protocol, methods)}
    return {m: planned[2] for m, planned in sized.items() if planned}


def unfinished(results: Path, size: Size, methods: list[str], seed: int) -> list[str]:
    """The arms among ``methods`` with no record of ``seed`` under ``results`` yet."""
    return [m for m in methods
            if not record_path(results, method_overrides(m, size, size.run.group_size)[0], seed).exists()]


def seed_start(work: Path, results: Path, model: Path, data: dict, size: Size, seed: int, quick: bool,
               sampler_factory=None) -> tuple[Path, str]:
    """Seed ``seed``'s start (its format checkpoint, made once per work folder) and its fingerprint; the start is
    evaluated once (mark 0 of every run from it) under ``results``."""
    start = learning_start.format_checkpoint(work, model, data, size, steps=1 if quick else FORMAT_STEPS,
                                             seed=FORMAT_SEED + seed)
    start_id = learning_start.fingerprint(start)
    out = start_evaluation_path(results, start_id)
    if not out.exists():
        _say(f"start of seed {seed}: {start} (weights {start_id}), evaluated as mark 0")
        evaluate_checkpoint(start, data["files"], size, out, {"mark": 0, "start": start_id, "seed": seed},
                            sampler_factory)
    return start, start_id


def run_arm(method: str, seed: int, start: Path | None, start_id: str | None, data: dict, size: Size, work: Path,
            results: Path, prompt_tokens: int, sampler_factory=None) -> dict[int, dict]:
    """Trains one arm to the budget and evaluates it at the marks, then writes its record (or finds its record and
    reads its evaluations back); returns mark -> evaluation. ``start`` may be None for an arm that has its record."""
    name, _, _ = method_overrides(method, size, size.run.group_size)
    run_dir = work / "runs" / name / f"seed{seed}"

    def evaluate(steps: dict[int, dict]) -> dict[int, dict]:
        return evaluate_marks(run_dir, results, name, seed, data["files"], size, steps, start_id, sampler_factory)

    record = training.train_run(method, seed, start, data, size, size.run.group_size, work, results, prompt_tokens,
                                start_id, evaluate=evaluate)
    saved = json.loads(record.read_text())
    return evaluate_marks(run_dir, results, name, seed, data["files"], size,
                          {int(s): v for s, v in saved["steps"].items()}, start_of_record(saved), sampler_factory)


def sweep_runs(protocol: Protocol, results: Path, size: Size) -> dict[float, dict]:
    """The sweep's finished and evaluated runs, rate -> :func:`run_curves` entry (the starts' evaluations are the
    protocol's)."""
    found = {}
    for lr in protocol.sweep:
        swept = replace(size, run=replace(size.run, lr=lr))
        runs = run_curves(learning_start.sweep_folder(results, lr), swept, starts=results)
        if (BASELINE, 0) in runs:
            found[lr] = runs[(BASELINE, 0)]
    return found


def chosen_rate(protocol: Protocol, sweep: dict[float, dict], size: Size) -> float | None:
    """The rule's rate once every swept rate's run is evaluated, else None."""
    if len(sweep) < len(protocol.sweep):
        return None
    curves = {lr: {m: v / 100 for m, v in run[FILTERED]["curve"].items()} for lr, run in sweep.items()}
    return choose_lr_by_area(protocol.sweep, curves, size.marks, protocol.max_drop)


def run_third(protocol: Protocol, size: Size, seeds: list[int], methods: list[str], work: Path, results: Path,
              model: Path, data: dict, prompt_tokens: int, quick: bool, after_run=None,
              sampler_factory=None) -> Size:
    """Runs the sweep, then each seed's arms; returns the size at the chosen rate. ``after_run`` is called after
    each arm (the runner rewrites the results there); ``sampler_factory`` replaces vLLM's evaluation in tests."""
    swept_sizes = {lr: replace(size, run=replace(size.run, lr=lr)) for lr in protocol.sweep}
    start, start_id = None, None
    if any(unfinished(learning_start.sweep_folder(results, lr), swept, [BASELINE], 0)
           for lr, swept in swept_sizes.items()):
        start, start_id = seed_start(work, results, model, data, size, 0, quick, sampler_factory)
    for lr, swept in swept_sizes.items():
        run_arm(BASELINE, 0, start, start_id, data, swept, learning_start.sweep_folder(work, lr),
                learning_start.sweep_folder(results, lr), prompt_tokens, sampler_factory)
    lr = chosen_rate(protocol, sweep_runs(protocol, results, size), size)
    if lr is None:
        raise SystemExit("[learning] the learning-rate sweep's runs are not all evaluated: rerun to resume it")
    size = replace(size, run=replace(size.run, lr=lr))
    _say(f"2/4 learning rate {lr:g}, by the protocol's rule on the sweep's areas")
    chosen = record_path(results, BASELINE, 0)
    if not chosen.exists():  # the sweep's run at the chosen rate is start 0's GRPO-n4, evaluations and all
        swept = learning_start.sweep_folder(results, lr)
        chosen.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(evaluation_path(swept, BASELINE, 0, size.marks[0]).parent,
                        evaluation_path(results, BASELINE, 0, size.marks[0]).parent, dirs_exist_ok=True)
        shutil.copyfile(record_path(swept, BASELINE, 0), chosen)
    for seed in seeds:
        arms = arms_of_seed(protocol, methods, seed, pair_targets(protocol, methods, results, size))
        if not arms:
            _say(f"seed {seed}: every pair has the starts it needs; not run")
            continue
        start, start_id = None, None
        if unfinished(results, size, arms, seed):
            start, start_id = seed_start(work, results, model, data, size, seed, quick, sampler_factory)
        for method in arms:
            run_arm(method, seed, start, start_id, data, size, work, results, prompt_tokens, sampler_factory)
            if after_run:
                after_run(size)
    return size
