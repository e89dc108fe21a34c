"""The third protocol's results section: each arm against GRPO-n4 at equal responses drawn, paired by start, on
the primary measure (the area under the filtered held-out curve against responses, over the marks), its interval
over starts and a bootstrap over starts and held-out questions, the starts that measure needs, and the secondary
measures (the area at the evaluations' actual responses, steps, summed step time, the rollout's critical path), and
a reading added after the pilots: each arm against GRPO-n4 at about equal critical path."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from studies.learning.budget import auc_at_actual, auc_over_marks, choose_lr_by_area
from studies.learning.marks import evaluation_path
from studies.learning.protocol import BASELINE, FILTERED, FORMAT_SEED, UNFILTERED, Protocol, Size
from studies.learning.records import read_records, start_of_record
from studies.learning.second_section import planned_seeds
from studies.learning.summary import mean_cell, method_order
from studies.stats import excludes_zero, mean_ci, sd


def start_evaluation_path(results: Path, start_id: str) -> Path:
    """The evaluation of a start's weights (mark 0 of every run from it), per question, under ``results``."""
    return results / "starts" / f"{start_id}.json"


def run_curves(results: Path, size: Size, records: list[dict] | None = None,
               starts: Path | None = None) -> dict[tuple[str, int], dict]:
    """(method, seed) -> a finished, evaluated run: its record, its curve at the marks (points; mark 0 is its start's
    evaluation, under ``starts``, by default ``results``), its evaluations at their actual responses, and each mark's
    per-question Avg, on both held-out sets. A run whose start or a mark is not evaluated yet is left out."""
    runs = {}
    for record in read_records(results, size) if records is None else records:
        name, seed, start = record["method"], record["seed"], start_of_record(record)
        paths = {0: start_evaluation_path(starts or results, start or "none"),
                 **{m: evaluation_path(results, name, seed, m) for m in size.marks}}
        if not all(p.exists() for p in paths.values()):
            continue
        evaluations = {m: json.loads(p.read_text()) for m, p in paths.items()}
        run = {"record": record, "start": start}
        for source in (FILTERED, UNFILTERED):
            run[source] = {
                "curve": {m: 100 * e["accuracy"][source] for m, e in evaluations.items()},
                "points": [(e.get("responses", 0.0) if m else 0.0, 100 * e["accuracy"][source])
                           for m, e in sorted(evaluations.items())],
                "steps": {m: e.get("step", 0) if m else 0 for m, e in evaluations.items()},
                "questions": {m: [q["avg"] for q in e["per_question"][source]] for m, e in evaluations.items()},
            }
        runs[(name, seed)] = run
    return runs


def paired_bootstrap(pairs: list[tuple[dict, dict]], marks: tuple[int, ...], resamples: int = 2000, seed: int = 0,
                     level: float = 0.95) -> tuple[float, float]:
    """A percentile interval of the mean paired area difference that resamples starts and, within each, held-out
    questions (the same questions for both arms of a pair).

    Args:
        pairs: (candidate, reference) per start: mark -> per-question Avg (fractions), the questions in one order.
        marks: The marks (mark 0 is the start).
    """
    rng = random.Random(seed)

    def area(questions: dict[int, list[float]], chosen: list[int]) -> float:
        return auc_over_marks({m: 100 * sum(questions[m][i] for i in chosen) / len(chosen) for m in questions}, marks)

    draws = []
    for _ in range(resamples):
        total = 0.0
        for _ in pairs:
            mine, theirs = pairs[rng.randrange(len(pairs))]
            count = len(mine[0])
            chosen = [rng.randrange(count) for _ in range(count)]
            total += area(mine, chosen) - area(theirs, chosen)
        draws.append(total / len(pairs))
    draws.sort()
    tail = (1 - level) / 2
    return draws[int(tail * resamples)], draws[min(resamples - 1, int((1 - tail) * resamples))]


def step_costs(record: dict) -> dict[str, float]:
    """A run's steps, responses a step, summed step time, and its critical path (tokens): the mean a step and the sum
    over the run (the generation a run waits for in sequence, if each round's longest response sets its time)."""
    steps = [v for s, v in record["steps"].items() if int(s) > 0]
    paths = [v["reinforce_ada/critical_path_tokens"] for v in steps if "reinforce_ada/critical_path_tokens" in v]
    whole = len(paths) == len(steps)
    return {"steps": len(steps), "per_step": sum(v["reinforce_ada/samples_total"] for v in steps) / len(steps),
            # without the checkpoint saves that mark the marks (every step for an adaptive arm, every 16th for GRPO-n4)
            "step_time": sum(v.get("timing_s/step", 0.0) - v.get("timing_s/save_checkpoint", 0.0) for v in steps),
            "critical_path": sum(paths) / len(paths) if paths else float("nan"),
            "critical_path_run": sum(paths) if paths and whole else float("nan")}


def step_time_ratios(runs: dict, method: str) -> list[float]:
    """Per start, ``method``'s summed step time over GRPO-n4's from the same start, where both ran on one kind of
    machine (a step's time is comparable only there)."""
    ratios = []
    for (m, seed), run in sorted(runs.items()):
        reference = runs.get((BASELINE, seed))
        if m == method and reference and run["record"]["machine"] == reference["record"]["machine"]:
            ratios.append(step_costs(run["record"])["step_time"] / step_costs(reference["record"])["step_time"])
    return ratios


def report_third(results: Path, data: dict, size: Size, protocol: Protocol, sweep: dict[float, dict] | None = None,
                 records: str = "runs") -> str:
    """The third protocol's results section, from the finished and evaluated runs under ``results`` (and the
    sweep's, rate -> its run's ``run_curves`` entry); every sentence computed from them."""
    runs, marks, counts = run_curves(results, size), size.marks, data["counts"]
    mark_list = ", ".join(f"{m:,}" for m in marks)
    lines = [
        f"SmolLM2-135M-Instruct through verl's trainer on this CPU. Each start s is a checkpoint after the answer "
        f"format is learned (5 steps of GRPO-n4, seed {FORMAT_SEED} + s), and start s's arms run training seed s "
        f"from it. Every run draws training responses until {size.budget:,} and is evaluated from the checkpoint of "
        f"the first step whose cumulative responses reach each mark ({mark_list}; mark 0 is the start), on "
        f"{counts.get('test', 0)} filtered and {size.heldout_all} unfiltered held-out questions, "
        f"Avg@{size.run.eval_k}, "
        "every question with its own sampling seed, the same for every arm. Primary measure: per start, the area "
        f"under the filtered held-out curve against responses over the marks (trapezoid rule, divided by "
        f"{size.budget:,}: the curve's mean height, points), arm minus {BASELINE}"
        + (f"; the per-step control is {protocol.per_step_control[0]} minus {protocol.per_step_control[1]} on the "
           "same measure" if protocol.per_step_control else "")
        + ". The design was fixed before the "
        f"runs (studies/learning/README.md). Command: `python -m studies.learning --protocol {protocol.name} "
        "--seeds S --write studies/learning/README.md`.",
    ]
    if sweep:
        lines += sweep_table(sweep, protocol, size)
    for method in sorted({m for m, _ in runs if m != BASELINE}, key=method_order):
        lines += pair_section(runs, method, size, protocol)
    if protocol.per_step_control:
        method, control = protocol.per_step_control
        lines += pair_section(runs, method, size, protocol, reference=control)
    if runs:
        machines = {r["record"]["machine"] for r in runs.values()}
        lines += ["", f"What each arm's run cost, mean ± 95% interval over its starts (none for one start; the budget "
                  f"is {size.budget:,} responses; step time is summed over the steps, evaluations, checkpoint saves "
                  "and start-up left out, and compares only between runs with nothing else beside them: the notes "
                  "on the runs, in the design above, say where that did not hold"
                  + (f"; the runs ran on {len(machines)} kinds of machine (the runs table says which), so a mean of "
                     f"summed step times mixes them, and the ratio to {BASELINE}'s from the same start on the same "
                     "machine is the comparison that holds" if len(machines) > 1 else "")
                  + "; the critical path is the sum over a step's rounds of each round's longest response, and its "
                  "run total the generation the run waited for in sequence):", "",
                  f"| arm | starts | steps | responses / step | summed step time (min) | step time / {BASELINE}'s, "
                  "same start and machine | critical path / step (tokens) | critical path, whole run (tokens) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for method in sorted({m for m, _ in runs}, key=method_order):
            costs = [step_costs(r["record"]) for (m, _), r in runs.items() if m == method]
            paths = [c["critical_path"] for c in costs if not math.isnan(c["critical_path"])]
            totals = [c["critical_path_run"] for c in costs if not math.isnan(c["critical_path_run"])]
            lines.append(f"| {method} | {len(costs)} | {mean_cell([c['steps'] for c in costs], 1, 1)} | "
                         f"{mean_cell([c['per_step'] for c in costs], 1, 0)} | "
                         f"{mean_cell([c['step_time'] / 60 for c in costs], 1, 1)} | "
                         f"{mean_cell(step_time_ratios(runs, method), 1, 2) if method != BASELINE else ''} | "
                         f"{mean_cell(paths, 1, 0)} | {mean_cell(totals, 1, 0)} |")
        lines += equal_critical_path_section(runs, size)
        lines += ["", "Runs (date, machine, wall time with start-up, the start's weights; the record holds the command "
                  "and every logged value, and the folder beside it each evaluation's per-question results):", "",
                  "| arm | start | date | wall | machine | start's weights | record |",
                  "|---|---:|---|---:|---|---|---|"]
        lines += [f"| {m} | {s} | {r['record']['date']} | {r['record']['wall_s'] / 60:.1f} min | "
                  f"{r['record']['machine']} | {r['start'] or ''} | [{m}_seed{s}.json]({records}/{m}_seed{s}.json) |"
                  for (m, s), r in sorted(runs.items(), key=lambda kv: (method_order(kv[0][0]), kv[0][1]))]
    return "\n".join(lines)


def read_within_critical_path(run: dict, tokens: float) -> tuple[float, float]:
    """A run's filtered held-out accuracy (points) at its last mark whose step's cumulative critical path is at most
    ``tokens``, and that cumulative critical path (mark 0, the start, has none)."""
    paths = {int(s): v["reinforce_ada/critical_path_tokens"] for s, v in run["record"]["steps"].items() if int(s) > 0}
    reached, reached_tokens = 0, 0.0
    for mark, step in sorted(run[FILTERED]["steps"].items()):  # marks in order: the last one within wins
        used = sum(paths[s] for s in range(1, step + 1))
        if used <= tokens:
            reached, reached_tokens = mark, used
    return run[FILTERED]["curve"][reached], reached_tokens


def equal_critical_path_section(runs: dict, size: Size) -> list[str]:
    """Each arm against GRPO-n4 at about equal critical path: per start, each run read at its last mark within the
    smaller of the two runs' whole-run critical paths. Added after the pilot starts were read, as a description for
    a GPU, where a step waits for its rounds' longest responses; not part of the design."""
    rows, unread = [], []
    for method in sorted({m for m, _ in runs if m != BASELINE}, key=method_order):
        cells = []
        for (m, s), run in sorted(runs.items()):
            reference = runs.get((BASELINE, s))
            if m != method or reference is None:
                continue
            totals = [step_costs(r["record"])["critical_path_run"] for r in (run, reference)]
            if any(math.isnan(t) for t in totals):
                continue
            tokens = min(totals)
            cell = (tokens, *read_within_critical_path(run, tokens), *read_within_critical_path(reference, tokens))
            if cell[2] == 0 or cell[4] == 0:  # a run read at its start: no mark within the critical path compared
                unread.append(f"{method} at start {s}")
            else:
                cells.append(cell)
        if cells:
            tokens, mine, mine_at, theirs, theirs_at = (list(column) for column in zip(*cells))
            diffs = [a - b for a, b in zip(mine, theirs)]
            rows.append(f"| {method} | {len(cells)} | {mean_cell(tokens, 1, 0)} | {mean_cell(mine_at, 1, 0)} | "
                        f"{mean_cell(theirs_at, 1, 0)} | {mean_cell(mine, 1, 1)} | {mean_cell(theirs, 1, 1)} | "
                        f"{mean_cell(diffs, 1, sign='+')} | " + ", ".join(f"{d:+.1f}" for d in diffs) + " |")
    if not rows and not unread:
        return []
    return ["", "At about equal critical path (added after the pilot starts were read; described, not tested, and not "
            "part of the design): per start, the smaller of the two runs' whole-run critical paths, and each run's "
            "filtered held-out accuracy (%) at its last mark reached within it (marks "
            f"{', '.join(f'{m:,}' for m in size.marks)} responses; mark 0 is the start). Where generation sets a "
            "step's time, as on a GPU, and each round takes as long as its longest response, this compares the arms "
            "at about equal generation time; the marks are coarse, so a run is read at the critical path its mark "
            "had reached (the columns 'read at'), and the run read at more tokens is the one favoured"
            + (f"; left out, where a run has no mark within it: {', '.join(unread)}" if unread else "") + ":", "",
            f"| arm | starts | critical path compared (tokens) | arm read at | {BASELINE} read at | arm's accuracy | "
            f"{BASELINE}'s accuracy | difference | per start |", "|---|---:|---:|---:|---:|---:|---:|---:|---|", *rows]


def sweep_table(sweep: dict[float, dict], protocol: Protocol, size: Size) -> list[str]:
    """The learning-rate sweep's curves at the marks, each rate's area and largest drop, and the rate taken."""
    curves = {lr: run[FILTERED]["curve"] for lr, run in sweep.items()}
    complete = len(sweep) == len(protocol.sweep)
    fractions = {lr: {m: v / 100 for m, v in curve.items()} for lr, curve in curves.items()}  # the rule's unit
    taken = choose_lr_by_area(protocol.sweep, fractions, size.marks, protocol.max_drop) if complete else None
    points = (0, *size.marks)
    lines = ["", f"Learning-rate sweep ({BASELINE}, start 0; filtered held-out Avg@{size.run.eval_k}, %, at each mark "
             "of responses; the rule: among the rates whose curve never drops by more than "
             f"{100 * protocol.max_drop:g} points between consecutive marks, the largest area)"
             + ("" if complete else "; not finished") + ":", "",
             "| lr | " + " | ".join(f"{m:,}" for m in points) + " | largest drop | area | taken |",
             "|---|" + "---:|" * (len(points) + 2) + "---|"]
    for lr, curve in curves.items():
        drop = max(curve[a] - curve[b] for a, b in zip(points, points[1:]))
        lines.append(f"| {lr:g} | " + " | ".join(f"{curve[m]:.1f}" for m in points) + f" | {max(drop, 0.0):.1f} | "
                     f"{auc_over_marks(curve, size.marks):.1f} | {'yes' if lr == taken else ''} |")
    return lines


def primary_differences(runs: dict, method: str, size: Size, reference: str = BASELINE) -> dict[int, float]:
    """Start -> the primary measure of ``method`` minus ``reference`` (area over the marks, points), at the starts
    where both are finished and evaluated."""
    return {s: auc_over_marks(runs[(method, s)][FILTERED]["curve"], size.marks)
            - auc_over_marks(runs[(reference, s)][FILTERED]["curve"], size.marks)
            for m, s in sorted(runs) if m == method and (reference, s) in runs}


def planned_starts(primary: dict[int, float], protocol: Protocol) -> tuple[float, int, int] | None:
    """A candidate's pair with GRPO-n4 (``primary``: start -> its primary measure), sized once its first
    ``protocol.pilot_seeds`` starts are done: the pilots' SD, the starts that resolve the protocol's effect, and the
    starts its runs extend to (never fewer than the pilots nor more than ``protocol.most_seeds``); None before."""
    if len(primary) < protocol.pilot_seeds:
        return None
    pilot = sd([primary[s] for s in sorted(primary)[:protocol.pilot_seeds]])
    return (pilot, *planned_seeds(pilot, protocol))


def pair_section(runs: dict, method: str, size: Size, protocol: Protocol, reference: str = BASELINE) -> list[str]:
    """One arm against ``reference`` (GRPO-n4, or the per-step control), paired by start: the table, the mean and
    its intervals, the starts needed (sized on the candidates' pairs with GRPO-n4 only) and the secondary
    measures."""
    marks, last = size.marks, size.marks[-1]
    primary = primary_differences(runs, method, size, reference)
    starts = sorted(primary)
    if not starts:
        return []
    mine = {s: runs[(method, s)][FILTERED] for s in starts}
    theirs = {s: runs[(reference, s)][FILTERED] for s in starts}
    actual = {}
    for s in starts:
        upto = min(mine[s]["points"][-1][0], theirs[s]["points"][-1][0])
        actual[s] = auc_at_actual(mine[s]["points"], upto) - auc_at_actual(theirs[s]["points"], upto)
    overshoot = {s: max(r - m for m, (r, _) in zip(marks, mine[s]["points"][1:])) for s in starts}
    title = (f"Primary measure, {method} - {reference}" if reference == BASELINE else
             f"Per-step control, {method} - {reference}")
    lines = ["", f"**{title}**, paired by start:", "",
             f"| start | same weights | {reference} area | {method} area | difference | at mark {last:,} | "
             f"at actual responses | {method}'s largest overshoot |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for s in starts:
        same = runs[(method, s)]["start"] == runs[(reference, s)]["start"]
        lines.append(f"| {s} | {'yes' if same else 'no'} | {auc_over_marks(theirs[s]['curve'], marks):.1f} | "
                     f"{auc_over_marks(mine[s]['curve'], marks):.1f} | {primary[s]:+.1f} | "
                     f"{mine[s]['curve'][last] - theirs[s]['curve'][last]:+.1f} | {actual[s]:+.1f} | "
                     f"{overshoot[s]:.0f} |")
    diffs = [primary[s] for s in starts]
    lines.append("")
    if len(diffs) < 2:
        lines.append(f"One start so far ({diffs[0]:+.1f} points): no interval yet.")
        return lines
    mean, half = mean_ci(diffs)
    low, high = paired_bootstrap([({m: mine[s]["questions"][m] for m in (0, *marks)},
                                   {m: theirs[s]["questions"][m] for m in (0, *marks)}) for s in starts], marks)
    verdict = (f"{method}'s area is {'higher' if mean > 0 else 'lower'} than {reference}'s at equal responses on "
               "these starts: the interval excludes 0" if excludes_zero(diffs) else
               "the interval includes 0: no difference is resolved on these starts")
    if reference != BASELINE:
        sizing = (f"{reference} draws about {method}'s responses a step, so at equal responses the two are at "
                  f"nearly equal steps too; no start count is sized on this pair")
    elif method in protocol.pilot_only:  # the per-step control: not a candidate, and no sizing comes from it
        sizing = (f"{method} is the per-step control, run at the {protocol.pilot_seeds} pilot starts only: the "
                  "starts are sized on the candidates' pairs")
    elif len(diffs) < protocol.pilot_seeds:
        sizing = f"{len(diffs)} of the {protocol.pilot_seeds} pilot starts are done"
    else:
        pilot, needed, target = planned_starts(primary, protocol)
        sizing = (f"From the {protocol.pilot_seeds} pilot starts' SD ({pilot:.1f}), resolving a "
                  f"{protocol.primary_effect:g}-point difference at 80% power (two-sided 5%) needs {needed} starts"
                  + (f" (the protocol stops at {protocol.most_seeds})" if needed > protocol.most_seeds else "")
                  + f"; {len(diffs)} are done, so the runs " + (f"extend to {target}" if len(diffs) < target
                                                               else "stop here"))
    lines.append(f"Mean difference {mean:+.1f} ± {half:.1f} points (95% t interval over {len(diffs)} starts); "
                 f"{verdict}. Resampling starts and, within each, held-out questions: {low:+.1f} to {high:+.1f}. "
                 f"{sizing}. Secondary, described and not tested: at each evaluation's actual responses the area "
                 f"difference is {mean_cell(list(actual.values()), 1.0, sign='+')}; at mark {last:,} "
                 f"{mean_cell([mine[s]['curve'][last] - theirs[s]['curve'][last] for s in starts], 1.0, sign='+')}; "
                 "on the unfiltered held-out set the area difference is "
                 + mean_cell([auc_over_marks(runs[(method, s)][UNFILTERED]["curve"], marks)
                              - auc_over_marks(runs[(reference, s)][UNFILTERED]["curve"], marks) for s in starts],
                             1.0, sign="+") + ".")
    return lines
