"""The first protocol's results section: per method its held-out accuracy, cost and step time, paired differences
to GRPO-n4 and to the sample-matched GRPO, how noisy one run is, and the runs' table, every sentence computed from
the finished runs' rows."""

from __future__ import annotations

from studies.learning.protocol import BASELINE, Size
from studies.learning.summary import mean_cell, method_order, per_run_means
from studies.stats import excludes_zero, sd


def report(
    rows: list[dict], per_step: list[dict], runs: list[dict], data: dict, size: Size, matched: dict,
    records: str = "runs",
) -> str:
    """The first protocol's section: finished runs only. ``records``: the run records' folder, as linked from it.

    Every sentence in it is computed from the rows it reports, so that it says what they show and no more."""
    finished = {(r["method"], r["seed"]) for r in runs if r["finished"]}
    rows = [r for r in rows if (r["method"], r["seed"]) in finished]
    per_step = [r for r in per_step if (r["method"], r["seed"]) in finished]
    methods = sorted({r["method"] for r in rows}, key=method_order)
    counts = data["counts"]
    k = size.run.eval_k
    matched_grpo = f"grpo_n{matched['n']}"
    run_means = per_run_means(per_step)

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
            f"| {method} | {len(final)} | {mean_cell([r['heldout_acc'] for r in final])} | "
            f"{mean_cell([r['heldout_pass_at_k'] for r in final])} | "
            f"{mean_cell([r['heldout_all_acc'] for r in final])} | "
            f"{mean_cell(per_run(method, 'samples'), 1, 0)} | {mean_cell(per_run(method, 'tokens'), 1, 0)} | "
            f"{mean_cell(per_run(method, 'wall_s'), 1, 0)} | {mean_cell(per_run(method, 'signal_frac'), 100, 0)} |"
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
        cells = [mean_cell([r["heldout_acc"] for r in rows if r["method"] == method and r["step"] == s])
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
                  for r in sorted(done, key=lambda r: (method_order(r["method"]), r["seed"]))]
        lines += ["", f"{len(done)} runs, {sum(r['wall_s'] for r in done) / 3600:.1f} h of this machine in all "
                  "(the data phase not counted)."]
    return "\n".join(lines)


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
        at_step = [mean_cell(values, sign="+") for values in columns.values()]
        if comparisons is not None:  # a pair compared both ways is one comparison
            for column, values in columns.items():
                if values:
                    comparisons[(*sorted((method, reference)), column)] = values
        lines.append(f"| {method} | " + " | ".join(per_seed) + " | " + " | ".join(at_step) + " |")
    return lines
