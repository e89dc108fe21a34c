"""The learning study's results: run records in, tables, paired differences, curves and the README's
results section out. Every sentence of the section is computed from the rows it reports."""

from __future__ import annotations

import json
import math
import os
import shlex
from pathlib import Path

from benchmarks.results import write_section
from reinforce_ada.demo.run import read_jsonl
from studies.learning.protocol import (
    BASELINE,
    FILTERED,
    FORMAT_LR,
    FORMAT_SEED,
    FORMAT_STEPS,
    KV_BLOCK,
    PROTOCOLS,
    UNFILTERED,
    VLLM_BLOCK_SIZE,
    VLLM_CPU_DEFAULT_BLOCK,
    Protocol,
    Size,
)
from studies.stats import excludes_zero, mean_ci, sd, seeds_needed


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
        differ = size.differs_from(record.get("size", {}))
        if differ:
            raise SystemExit(
                f"[learning] {path} was measured with other sizes ({', '.join(differ)} differ from this "
                "benchmark's Size): move the folder's records away or pass another --results"
            )
        record["steps"] = {int(step): values for step, values in record["steps"].items()}
        records.append(record)
    return records


def merged_steps(run_dir: Path) -> dict[int, dict]:
    """Step -> verl's logged values over every attempt; a resumed attempt's rows replace the earlier
    ones of the same step (it redoes the steps after its checkpoint)."""
    steps: dict[int, dict] = {}
    for path in sorted(run_dir.glob("metrics_*.jsonl")):
        for row in read_jsonl(path):
            steps[int(row["step"])] = row["data"]
    return steps


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
    sources = [(r["method"], r["seed"], r["steps"], r, start_of_record(r)) for r in read_records(results, size)]
    finished = {(method, seed) for method, seed, *_ in sources}
    for run_dir in sorted((work / "runs").glob("*/seed*")):
        method, seed = run_dir.parent.name, int(run_dir.name.removeprefix("seed"))
        if (method, seed) not in finished:
            start = (run_dir / "start.txt").read_text().strip() if (run_dir / "start.txt").exists() else None
            sources.append((method, seed, merged_steps(run_dir), None, start))
    for method, seed, steps, record, start in sources:
        done = record is not None
        evaluated, logged = run_rows(method, seed, steps, size.run.eval_k)
        if evaluated and evaluated[0]["step"] != 0:
            evaluated.insert(0, {"method": method, "seed": seed, "step": 0, "base_of": start})  # filled below
        for row in evaluated:
            row.update(finished=done, start=start)
        rows += evaluated
        per_step += logged
        about = {k: v for k, v in record.items() if k != "steps"} if done else {"method": method, "seed": seed}
        runs.append({**about, "finished": done, "steps_logged": len(logged)})
    # step 0 is the start, validated by the first run of a seed from those weights: the seed's other runs from
    # the same weights share it
    base = {(r["seed"], r["start"]): r for r in rows if r["step"] == 0 and "base_of" not in r}
    filled = []
    for row in rows:
        if "base_of" in row:
            if (row["seed"], row["base_of"]) not in base:
                continue  # this start has not been validated for the seed yet
            row = {**base[(row["seed"], row["base_of"])], "method": row["method"], "finished": row["finished"],
                   "base_of_seed": True}
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
    """The first protocol's section: finished runs only. ``records``: the run records' folder, as linked from it.

    Every sentence in it is computed from the rows it reports, so that it says what they show and no more."""
    finished = {(r["method"], r["seed"]) for r in runs if r["finished"]}
    rows = [r for r in rows if (r["method"], r["seed"]) in finished]
    per_step = [r for r in per_step if (r["method"], r["seed"]) in finished]
    methods = sorted({r["method"] for r in rows}, key=_method_order)
    counts = data["counts"]
    k = size.run.eval_k
    matched_grpo = f"grpo_n{matched['n']}"
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
        f"{size.run.steps} steps of {size.run.batch} prompts, n {size.run.group_size}, AdamW lr {size.run.lr:g} "
        "(constant), responses up to "
        f"{size.run.max_response_tokens} tokens, temperature 1.0; held-out Avg@{k} and best@{k} at steps "
        f"{', '.join(str(s) for s in sorted({r['step'] for r in rows}))} only. "
        f"{_matched_sentence(matched_grpo, matched, per_run, size.run.batch)} "
        "Mean ± 95% interval (Student t) over seeds. Command: `python -m studies.learning --seeds S "
        "--write studies/learning/README.md`, a seed or a few methods at a time; each run's trainer command is in its "
        "record (last table).",
        "",
        f"| method | seeds | held-out Avg@{k}, filtered (%) | best@{k} (bootstrap), filtered (%) | Avg@{k}, unfiltered "
        "(%) | responses / step | tokens / step | step time (s) | groups with signal (%) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for method in methods:
        final = [r for r in rows if r["method"] == method and r["step"] == size.run.steps]
        lines.append(
            f"| {method} | {len(final)} | {_cell([r['heldout_acc'] for r in final])} | "
            f"{_cell([r['heldout_pass_at_k'] for r in final])} | {_cell([r['heldout_all_acc'] for r in final])} | "
            f"{_cell(per_run(method, 'samples'), 1, 0)} | {_cell(per_run(method, 'tokens'), 1, 0)} | "
            f"{_cell(per_run(method, 'wall_s'), 1, 0)} | {_cell(per_run(method, 'signal_frac'), 100, 0)} |"
        )
    lines += ["", f"At step {size.run.steps}. best@{k} is verl's bootstrap estimate, not pass@{k}: the mean over 1000 "
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
        lines += _paired_table(rows, methods, reference, later, size.run.steps, k, comparisons)
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


def start_of_record(record: dict) -> str | None:
    """The fingerprint of the start weights a run's record names (None: the first protocol's, from the base model)."""
    return record.get("start", {}).get("fingerprint")


def kv_blocks(record: dict) -> list[int]:
    """Each attempt's vLLM KV block size: today's where its command line names it, vLLM-CPU's own default of 128
    where it does not (attempts made before the CPU platform set it). A record lists its attempts' commands; older
    records name only the last."""
    return [VLLM_BLOCK_SIZE if KV_BLOCK in shlex.split(command) else VLLM_CPU_DEFAULT_BLOCK
            for command in record.get("commands", [record.get("command", "")])]


def run_dates(record: dict) -> list[str]:
    """The days a run was measured on: each attempt's start and the day its record was written."""
    return sorted(set(record.get("attempt_dates", [])) | {record["date"]})


def at_kv_block(record: dict) -> bool:
    """Whether every attempt of a run had vLLM's KV blocks of today's size."""
    return all(size == VLLM_BLOCK_SIZE for size in kv_blocks(record))


def heldout_curve(record: dict, eval_k: int, source: str = FILTERED) -> dict[int, float]:
    """Step -> held-out Avg@k of a run's record (its evaluated steps only)."""
    key = f"val-core/{source}/reward/mean@{eval_k}"
    return {int(step): values[key] for step, values in record["steps"].items() if key in values}


def auc(curve: dict[int, float], last_step: int) -> float:
    """The area under a held-out curve over steps 0..``last_step`` by the trapezoid rule over its evaluated steps,
    divided by ``last_step``: the curve's mean height, in the curve's unit.

    Raises:
        ValueError: If the curve does not span step 0 to ``last_step``.
    """
    steps = sorted(curve)
    if not steps or steps[0] != 0 or steps[-1] != last_step:
        raise ValueError(f"a curve over steps 0..{last_step} is needed, got steps {steps}")
    return sum((b - a) * (curve[a] + curve[b]) / 2 for a, b in zip(steps, steps[1:])) / last_step


def report_paired(rows: list[dict], per_step: list[dict], runs: list[dict], data: dict, size: Size,
                  protocol: Protocol, sweep: dict[float, dict], records: str = "runs") -> str:
    """The second protocol's results section: the sweep (``sweep``: rate -> its run's record) and its choice,
    then each method against GRPO-n4 paired by seed on the primary measure (the filtered held-out curve's area
    over steps 0..last), the seeds that measure needs, and the secondary measures. Finished runs only; a seed's
    two runs pair whether or not they started from the same weights, and the table says which did; every sentence
    computed from its rows."""
    finished = {(r["method"], r["seed"]) for r in runs if r["finished"]}
    start_of = {(r["method"], r["seed"]): start_of_record(r) for r in runs if r["finished"]}
    rows = [r for r in rows if (r["method"], r["seed"]) in finished]
    per_step = [r for r in per_step if (r["method"], r["seed"]) in finished]
    methods = sorted({r["method"] for r in rows}, key=_method_order)
    last, k, counts = size.run.steps, size.run.eval_k, data["counts"]
    curves: dict[tuple[str, int], dict[str, dict[int, float]]] = {}
    for r in rows:
        for source, key in (("filtered", "heldout_acc"), ("unfiltered", "heldout_all_acc")):
            if r.get(key) is not None:
                curves.setdefault((r["method"], r["seed"]), {}).setdefault(source, {})[r["step"]] = 100 * r[key]

    def spans(method: str, seed: int, source: str = "filtered") -> bool:
        curve = curves.get((method, seed), {}).get(source, {})
        return 0 in curve and last in curve

    lines = [
        f"SmolLM2-135M-Instruct through verl's trainer on this CPU, every run from a checkpoint after the answer "
        f"format is learned ({FORMAT_STEPS} steps of GRPO-n4 at lr {FORMAT_LR:g}, seed {FORMAT_SEED}), made "
        "again by a session that starts without the last one's (the hash of its weights is in the last table); "
        "a seed's two runs are paired whether or not they started from the same checkpoint, and each run's curve "
        "begins at the evaluation of its start's weights (made once for each seed and start, by the seed's first "
        "run from it). "
        f"Data: {size.pool} questions of the demo task, {size.filter_k} base-model samples each, pass "
        f"rate in ({data['pass_range'][0]:g}, {data['pass_range'][1]:g}]: {counts.get('train', 0)} training prompts "
        f"and {counts.get('test', 0)} filtered held-out questions; {size.heldout_all} unfiltered held-out questions. "
        f"{last} steps of {size.run.batch} prompts, n {size.run.group_size}, AdamW lr {size.run.lr:g} after verl's "
        f"linear warm-up over {size.warmup_steps} step(s) (the rate is 0 in step 1; verl logs the next step's "
        f"rate), responses up to {size.run.max_response_tokens} tokens, temperature 1.0; held-out Avg@{k} every "
        f"{size.run.eval_every} steps. Methods: {' and '.join(protocol.methods)}; a third would have joined had the "
        "gradient-quality study measured a configuration better than both, and it measured none. The design and its "
        "primary measure were fixed before the runs (studies/learning/README.md). Command: "
        f"`python -m studies.learning --protocol {protocol.name} --seeds S --write studies/learning/README.md`.",
    ]
    if sweep:
        complete = len(sweep) == len(protocol.sweep)
        sweep_curves = {lr: heldout_curve(record, k) for lr, record in sweep.items()}
        evaluated = sorted({s for curve in sweep_curves.values() for s in curve})
        lines += ["", f"Learning-rate sweep (GRPO-n4, seed 0; filtered held-out Avg@{k}, %; the rule: the first rate "
                  f"whose curve never drops by more than {100 * protocol.max_drop:g} points between consecutive "
                  "evaluations)" + ("" if complete else "; not finished, no rate taken yet") + ":", "",
                  "| lr | " + " | ".join(f"step {s}" for s in evaluated)
                  + " | largest drop | taken | start | KV block, by attempt | dates | wall |",
                  "|---|" + "---:|" * len(evaluated) + "---:|---|---|---|---|---:|"]
        for lr, curve in sweep_curves.items():
            steps = sorted(curve)
            drop = max((curve[a] - curve[b] for a, b in zip(steps, steps[1:])), default=0.0)
            lines.append(f"| {lr:g} | " + " | ".join(f"{100 * curve[s]:.1f}" if s in curve else "" for s in evaluated)
                         + f" | {100 * max(drop, 0.0):.1f} | {'yes' if complete and lr == size.run.lr else ''} | "
                         f"{sweep[lr].get('start', {}).get('fingerprint', '')} | "
                         f"{', then '.join(str(b) for b in kv_blocks(sweep[lr]))} | "
                         f"{', '.join(run_dates(sweep[lr]))} | "
                         f"{sweep[lr].get('wall_s', 0.0) / 60:.1f} min |")
        chosen = sweep.get(size.run.lr)
        if complete and chosen and (BASELINE, 0) in start_of and not at_kv_block(chosen):
            lines += ["", f"{BASELINE}'s seed 0 is not the sweep's run: the sweep ran at vLLM-CPU's KV block of 128 "
                      f"tokens, and seed 0 was run again at {VLLM_BLOCK_SIZE}, as every run of the protocol "
                      "(studies/learning/README.md)."]
    reference = BASELINE
    for method in methods:
        if method == reference:
            continue
        both = sorted(s for m, s in curves if m == method and (reference, s) in curves)
        paired = [s for s in both if spans(method, s) and spans(reference, s)]
        left_out = [s for s in both if s not in paired]
        if not paired:
            continue
        primary = {s: auc(curves[(method, s)]["filtered"], last) - auc(curves[(reference, s)]["filtered"], last)
                   for s in paired}
        lines += ["", f"**Primary measure, {method} - {reference}**: the paired difference of the area under the "
                  f"filtered held-out curve over steps 0-{last} (trapezoid rule, divided by {last}: the curve's "
                  "mean height, points).", "",
                  f"| seed | same start | start's Avg@{k} (%), {reference}; {method} | {reference} AUC | {method} AUC "
                  f"| difference | at step {last} |",
                  "|---:|---|---:|---:|---:|---:|---:|"]
        for s in paired:
            mine, theirs = curves[(method, s)]["filtered"], curves[(reference, s)]["filtered"]
            same = start_of.get((method, s)) == start_of.get((reference, s))
            starts = f"{theirs[0]:.1f}" if same else f"{theirs[0]:.1f}; {mine[0]:.1f}"
            lines.append(f"| {s} | {'yes' if same else 'no'} | {starts} | {auc(theirs, last):.1f} | "
                         f"{auc(mine, last):.1f} | {primary[s]:+.1f} | {mine[last] - theirs[last]:+.1f} |")
        lines.append("")
        if left_out:
            lines.append(f"Left out: seed(s) {', '.join(map(str, left_out))}, whose runs lack an evaluation at step 0 "
                         f"or {last}.")
        diffs = list(primary.values())
        if len(diffs) < 2:
            lines.append(f"One seed so far ({diffs[0]:+.1f} points): no interval yet.")
            continue
        mean, half = mean_ci(diffs)
        spread = sd(diffs)
        verdict = (f"{method}'s area is {'higher' if mean > 0 else 'lower'} than {reference}'s on these seeds: the "
                   "interval excludes 0" if excludes_zero(diffs) else "the interval includes 0: no difference is "
                   "resolved on these seeds")
        if len(diffs) < protocol.pilot_seeds:
            sizing = (f"{len(diffs)} of the {protocol.pilot_seeds} pilot seeds are done; the seeds needed are "
                      "computed from all of them")
        else:  # sized once, from the pilot seeds' spread, as the design says
            pilot = sd([primary[s] for s in sorted(primary)[:protocol.pilot_seeds]])
            needed, target = planned_seeds(pilot, protocol)
            sizing = (f"from the {protocol.pilot_seeds} pilot seeds' SD ({pilot:.1f}), resolving a "
                      f"{protocol.primary_effect:g}-point difference at 80% power (two-sided 5%) needs {needed} seeds"
                      + (f" (the protocol stops at {protocol.most_seeds})" if needed > protocol.most_seeds else "")
                      + f"; {len(diffs)} are done, so the runs "
                      + (f"extend to {target}" if len(diffs) < target else "stop here"))
        at_last = [curves[(method, s)]["filtered"][last] - curves[(reference, s)]["filtered"][last] for s in paired]
        lines.append(
            f"Mean difference {mean:+.1f} ± {half:.1f} points (95% t interval, {len(diffs)} seeds); {verdict}. The "
            f"per-seed differences have SD {spread:.1f} points; {sizing}. Secondary, described and not tested: "
            f"at step {last} the paired difference is {_cell(at_last, 1.0, sign='+')} points")
        unfiltered = [auc(curves[(method, s)]["unfiltered"], last) - auc(curves[(reference, s)]["unfiltered"], last)
                      for s in paired if spans(method, s, "unfiltered") and spans(reference, s, "unfiltered")]
        if len(unfiltered) > 1:
            lines[-1] += (f"; on the unfiltered held-out set the AUC difference is "
                          f"{_cell(unfiltered, 1.0, sign='+')} ({len(unfiltered)} seeds)")
        lines[-1] += "."
    evaluated_steps = sorted({r["step"] for r in rows})
    run_means = _run_means(per_step)
    if methods:
        lines += ["", f"Held-out Avg@{k} (filtered, %) by step, mean ± 95% interval over each method's finished "
                  "seeds, and what a step cost:", "",
                  "| method | seeds | " + " | ".join(f"step {s}" for s in evaluated_steps)
                  + " | responses / step | tokens / step | step time (s) |",
                  "|---|---:|" + "---:|" * (len(evaluated_steps) + 3)]
    for method in methods:
        cells = [_cell([r["heldout_acc"] for r in rows if r["method"] == method and r["step"] == s])
                 for s in evaluated_steps]
        means = [v for (m, _), v in sorted(run_means.items()) if m == method]
        lines.append(f"| {method} | {len([1 for m, _ in curves if m == method])} | " + " | ".join(cells) + " | "
                     + " | ".join(_cell([v[key] for v in means], 1, 0) for key in ("samples", "tokens", "wall_s"))
                     + " |")
    done = [r for r in runs if r["finished"]]
    machines = sorted({r["machine"] for r in done})
    if len(machines) > 1:
        lines += ["", f"The finished runs were made on {len(machines)} kinds of machine (the last table names each "
                  "run's): step times, wall times and the curves against wall time compare only runs on one kind."]
    if done:
        lines += ["", "Runs (date, machine, wall time with start-up, the start's weights; the record holds the "
                  "command and every logged value):", "",
                  "| method | seed | date | wall | machine | start | record |", "|---|---:|---|---:|---|---|---|"]
        lines += [f"| {r['method']} | {r['seed']} | {r['date']} | {r['wall_s'] / 60:.1f} min | {r['machine']} | "
                  f"{r.get('start', {}).get('fingerprint', '')} | "
                  f"[{r['method']}_seed{r['seed']}.json]({records}/{r['method']}_seed{r['seed']}.json) |"
                  for r in sorted(done, key=lambda r: (_method_order(r["method"]), r["seed"]))]
    return "\n".join(lines)


def planned_seeds(pilot_sd: float, protocol: Protocol) -> tuple[int, int]:
    """The seeds that resolve the protocol's effect at 80% power given the pilot seeds' paired SD, and the seeds the
    runs extend to: that number, but never fewer than the pilots nor more than ``protocol.most_seeds``."""
    needed = seeds_needed(pilot_sd, protocol.primary_effect)
    return needed, min(max(needed, protocol.pilot_seeds), protocol.most_seeds)


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
    final = {m: [100 * r["heldout_acc"] for r in rows if r["method"] == m and r["step"] == size.run.steps]
             for m in methods}
    sds = [sd(v) for v in final.values() if len(v) > 1]
    base = sorted({(r["seed"], r["heldout_acc"]) for r in rows if r["step"] == 0})
    lines = ["", "How noisy one run is:"]
    if sds:
        lines.append(f"- between seeds, held-out Avg@{size.run.eval_k} at step {size.run.steps} has a standard "
                     "deviation of "
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
    lines.append(f"- the learning rate is constant ({size.run.lr:g}) with no warm-up, and Adam moves each weight by "
                 "up to "
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
        ax.set_ylabel(f"held-out Avg@{size.run.eval_k}, filtered (%)")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("Held-out accuracy, mean and 95% interval over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_results(work: Path, results: Path, size: Size, data: dict, matched: dict, write: str | None,
                  protocol: Protocol = PROTOCOLS["first"], sweep: dict[float, dict] | None = None) -> None:
    rows, per_step, runs = collect(work, results, size)
    balance = [s["samples"] for s in per_step if s["method"] == "balance"]
    if balance:
        matched = {**matched, "measured": sum(balance) / len(balance) / size.run.batch}
    results.mkdir(parents=True, exist_ok=True)
    (results / "runs.json").write_text(json.dumps({"runs": rows, "size": size.record(), "matched": matched,
                                                   "data": {k: v for k, v in data.items() if k != "files"},
                                                   "run_records": runs}, indent=1))
    (results / "steps.json").write_text(json.dumps({"steps": per_step}, indent=1))
    drawn = any(r["finished"] for r in rows)
    if drawn:
        plot(rows, size, results / "curves.png")
    if write:
        here = Path(write).resolve().parent
        records = os.path.relpath(results / "runs", here)
        body = (report(rows, per_step, runs, data, size, matched, records) if protocol.name == "first" else
                report_paired(rows, per_step, runs, data, size, protocol, sweep or {}, records))
        if drawn:
            body += (f"\n\n![held-out accuracy against step, samples and wall time]"
                     f"({os.path.relpath(results / 'curves.png', here)})")
        write_section(write, protocol.section, protocol.title, body,
                      measured=measured_span(runs, list((sweep or {}).values())))


def measured_span(runs: list[dict], sweep: list[dict] = ()) -> str | None:
    """The dates and machines of the finished runs' records and of the sweep's (every attempt's date), e.g.
    '2026-12-02 to 2026-12-03 on 2 CPU cores (...)'."""
    recorded = [r for r in runs if r["finished"]] + list(sweep)
    if not recorded:
        return None
    dates = sorted({day for r in recorded for day in run_dates(r)})
    machines = sorted({r["machine"] for r in recorded})
    span = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    return f"{span} on {' and '.join(machines)}"
