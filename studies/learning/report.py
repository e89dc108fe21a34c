"""The learning study's results, rewritten from its runs: ``runs.json``, ``steps.json``, ``curves.png`` and, with
``--write``, the protocol's section of the study's README, stamped with the dates and machines of the runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

from benchmarks.results import write_section
from studies.learning.curves import plot
from studies.learning.first_section import report
from studies.learning.protocol import FILTERED, PROTOCOLS, UNFILTERED, Protocol, Size
from studies.learning.records import collect, run_dates
from studies.learning.second_section import report_paired
from studies.learning.third_section import report_third, run_curves


def write_results(work: Path, results: Path, size: Size, data: dict, matched: dict, write: str | None,
                  protocol: Protocol = PROTOCOLS["first"], sweep: dict[float, dict] | None = None) -> None:
    """Rewrites the results under ``results`` from the run records there and the run folders under ``work``.

    Args:
        work: The work folder, whose unfinished runs' rows are kept in ``runs.json`` and ``steps.json``.
        results: The folder of the run records, and of the results written.
        size: The protocol's sizes; a record measured with others stops it.
        data: The data phase's summary (counts, pass-rate range; its ``files`` are not written).
        matched: The matched GRPO's ``n`` and balance's predicted responses per prompt; balance's measured ones
            are added when it has run.
        write: The Markdown file the protocol's section is written into; None writes none.
        protocol: The protocol whose section is written: the first's or the paired second's.
        sweep: The second protocol's learning-rate sweep, rate -> its run's record.
    """
    if protocol.name == "third":
        write_third(results, size, data, write, protocol, sweep or {})
        return
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


def write_third(results: Path, size: Size, data: dict, write: str | None, protocol: Protocol,
                sweep: dict[float, dict]) -> None:
    """The third protocol's results: ``runs.json`` (each finished, evaluated run's curve at the marks, filtered and
    unfiltered, with each evaluation's step and responses) and, with ``write``, its section."""
    runs = run_curves(results, size)
    rows = []
    for (m, s), run in sorted(runs.items()):
        logged = {int(step): v for step, v in run["record"]["steps"].items()}
        for mark, (responses, _) in zip((0, *size.marks), run[FILTERED]["points"]):
            step = run[FILTERED]["steps"][mark]
            rows.append({
                "method": m, "seed": s, "start": run["start"], "mark": mark, "step": step, "samples": responses,
                # summed step time to this evaluation, without the checkpoint saves that mark the marks
                "wall_s": sum(v.get("timing_s/step", 0.0) - v.get("timing_s/save_checkpoint", 0.0)
                              for k, v in logged.items() if 0 < k <= step),
                "heldout_acc": run[FILTERED]["curve"][mark] / 100,
                "heldout_all_acc": run[UNFILTERED]["curve"][mark] / 100, "finished": True})
    results.mkdir(parents=True, exist_ok=True)
    (results / "runs.json").write_text(json.dumps({
        "runs": rows, "size": size.record(), "data": {k: v for k, v in data.items() if k != "files"},
        "run_records": [{k: v for k, v in run["record"].items() if k != "steps"} for run in runs.values()]},
        indent=1))
    if rows:
        plot(rows, size, results / "curves.png", key="mark", over="starts",
             time_label="summed step time (min), saves left out")
    if write:
        here = Path(write).resolve().parent
        recorded = [run["record"] for run in runs.values()]
        body = report_third(results, data, size, protocol, sweep, os.path.relpath(results / "runs", here))
        if rows:
            body += (f"\n\n![held-out accuracy at each mark, against step, responses drawn and summed step time]"
                     f"({os.path.relpath(results / 'curves.png', here)})")
        write_section(write, protocol.section, protocol.title, body,
                      measured=measured_span([{**r, "finished": True} for r in recorded],
                                             [run["record"] for run in sweep.values()]))
