"""Skipping prompts without signal, replayed without a model: what it saves and what it loses against GRPO-n.

    python -m benchmarks.skip_replay --pass-rates studies/learning/results/second/pass_rates.jsonl \\
        --epochs 3 --seeds 5 --write benchmarks/RESULTS.md

A data stream of prompts with known pass rates (a JSONL file of ``{"pass_rate": p}`` rows, optionally filtered to
an interval, optionally rising over training by ``--drift`` logits per epoch) is trained on for the same number
of steps twice: by GRPO-n alone, and by GRPO-n with ``reinforce_ada.skip`` (the package's own rule and refill,
:func:`reinforce_ada.core.skip.fill`: a skipped prompt is replaced by the next one of the stream). Each prompt
sampled draws n Bernoulli(p) rewards; its group has signal when they are not all equal.
Both draw n responses for each of ``batch`` prompts a step, so at the same steps they draw the same responses, and
the measures compare them at equal responses:

* informative groups per 1000 responses, with and without the skip, and their ratio;
* informative groups lost: for every skipped visit the group it would have drawn is drawn too (and thrown away),
  and the share of those with signal is how often a skip cost a group with signal;
* prompts skipped, as a share of the prompts fetched, and how many fetches the data stream paid.

No model and no learning: a prompt's pass rate follows only ``--drift``, on a clock of training steps shared by
both runs, not the updates. The rule acts on a prompt's second visit at the earliest, so fewer than two epochs
of the data give it little to do.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from reinforce_ada.core.skip import SkipDecision, SkipRule, fill


def load_pass_rates(path: str | Path, low: float | None = None, high: float | None = None) -> list[float]:
    """The ``pass_rate`` of each row of a JSONL file, those in (low, high] if given."""
    rates = [float(json.loads(line)["pass_rate"]) for line in Path(path).read_text().splitlines() if line.strip()]
    if low is not None:
        rates = [p for p in rates if low < p <= high]
    if not rates:
        raise SystemExit(f"error: --pass-rates {path}: no pass rate in ({low}, {high}]")
    return rates


def rate_at(p0: float, epoch: float, drift: float, floor: float) -> float:
    """A prompt's pass rate after ``epoch`` epochs, its logit raised by ``drift`` per epoch (p0 of 0 starts at
    ``floor``: a rate too small for the base model's samples to see)."""
    if drift == 0:
        return p0
    p = min(max(p0, floor), 1 - floor)
    return 1 / (1 + math.exp(-(math.log(p / (1 - p)) + drift * epoch)))


def replay(rates: Sequence[float], n: int, batch: int, steps: int, rule: SkipRule | None, drift: float,
           seed: int, floor: float) -> dict[str, float]:
    """Trains ``steps`` steps of ``batch`` prompts on the stream; returns the counts of :func:`summary`."""
    rng = random.Random(seed)
    order: list[int] = []
    fetched = 0

    def fetch() -> int:
        nonlocal order, fetched
        if not order:
            order = list(range(len(rates)))
            rng.shuffle(order)
        fetched += 1
        return order.pop()

    step = 0

    def group_has_signal(prompt: int) -> bool:
        # training progress, in epochs of GRPO-n's data: the same clock with and without the skip
        p = rate_at(rates[prompt], (step - 1) * batch / len(rates), drift, floor)
        correct = sum(rng.random() < p for _ in range(n))
        return 0 < correct < n

    informative = skipped = lost = 0
    for step in range(1, steps + 1):
        if rule is None:
            sampled = [fetch() for _ in range(batch)]
        else:
            def refill(decisions: list[SkipDecision]) -> list[str]:
                nonlocal skipped, lost
                skipped += len(decisions)
                lost += sum(group_has_signal(int(d.key)) for d in decisions)  # the groups thrown away
                return [str(fetch()) for _ in decisions]

            first = [str(fetch()) for _ in range(batch)]
            sampled = [int(d.key) for d in fill(rule, first, step, refill) if not d.skipped]
        for prompt in sampled:
            signal = group_has_signal(prompt)
            informative += signal
            if rule is not None:
                rule.observe(str(prompt), signal)
    return {"groups": float(batch * steps), "responses": float(n * batch * steps), "informative": float(informative),
            "skipped": float(skipped), "lost": float(lost), "fetched": float(fetched)}


def summary(runs: Sequence[dict[str, float]], base: Sequence[dict[str, float]]) -> dict[str, float]:
    """Means (and the per-seed ratio's range) over seeds of the skip's runs against GRPO-n's, seed by seed."""
    per_1000 = [1000 * r["informative"] / r["responses"] for r in runs]
    base_1000 = [1000 * b["informative"] / b["responses"] for b in base]
    ratios = [a / b for a, b in zip(per_1000, base_1000)]
    return {
        "informative_per_1000_grpo": statistics.mean(base_1000),
        "informative_per_1000_skip": statistics.mean(per_1000),
        "ratio_mean": statistics.mean(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
        "lost_frac": sum(r["lost"] for r in runs) / max(sum(r["skipped"] for r in runs), 1),
        "skipped_frac": sum(r["skipped"] for r in runs) / sum(r["fetched"] for r in runs),
        "signal_frac_grpo": sum(b["informative"] for b in base) / sum(b["groups"] for b in base),
        "signal_frac_skip": sum(r["informative"] for r in runs) / sum(r["groups"] for r in runs),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.skip_replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pass-rates", required=True, help="JSONL with a pass_rate per prompt")
    parser.add_argument("--filter", nargs=2, type=float, metavar=("LOW", "HIGH"),
                        help="keep the prompts with a pass rate in (LOW, HIGH]")
    parser.add_argument("--n", type=int, default=4, help="responses per prompt (GRPO-n; default 4)")
    parser.add_argument("--batch", type=int, default=8, help="prompts a step (default 8)")
    parser.add_argument("--epochs", type=float, nargs="+", default=[1.0, 3.0, 10.0],
                        help="run lengths, in passes of GRPO-n over the data (default 1 3 10)")
    parser.add_argument("--drift", type=float, nargs="+", default=[0.0, 1.0],
                        help="logits a pass rate rises per epoch (default 0 1)")
    parser.add_argument("--growth", type=float, default=0.5, help="reinforce_ada.skip_growth (default 0.5)")
    parser.add_argument("--cap", type=float, default=0.9, help="reinforce_ada.skip_cap (default 0.9)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per setting (default 5)")
    parser.add_argument("--floor", type=float, default=1 / 32,
                        help="where a pass rate of 0 starts when it drifts (default 1/32)")
    parser.add_argument("--out", default="benchmarks/results/skip_replay.json")
    parser.add_argument("--write", metavar="RESULTS_MD")
    args = parser.parse_args(argv)
    low, high = args.filter or (None, None)
    rates = load_pass_rates(args.pass_rates, low, high)
    rows = []
    for epochs in args.epochs:
        steps = max(1, round(epochs * len(rates) / args.batch))
        for drift in args.drift:
            base = [replay(rates, args.n, args.batch, steps, None, drift, s, args.floor) for s in range(args.seeds)]
            runs = [replay(rates, args.n, args.batch, steps, SkipRule(args.growth, args.cap, seed=s), drift, s,
                           args.floor) for s in range(args.seeds)]
            rows.append({"epochs": epochs, "steps": steps, "drift": drift, **summary(runs, base)})
            print(f"[skip_replay] {epochs:g} epochs ({steps} steps), drift {drift:g}: "
                  f"ratio {rows[-1]['ratio_mean']:.3f}, lost {rows[-1]['lost_frac']:.3f}", file=sys.stderr)
    command = "python -m benchmarks.skip_replay " + " ".join(argv if argv is not None else sys.argv[1:])
    record = {"command": command, "prompts": len(rates), "n": args.n, "batch": args.batch, "growth": args.growth,
              "cap": args.cap, "seeds": args.seeds, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    if args.write:
        from benchmarks.results import write_section

        write_section(args.write, "skip_replay", "Skipping prompts without signal, replayed without a model",
                      section(record))
    return record


def section(record: dict) -> str:
    lines = [
        f"GRPO-n{record['n']} with and without `reinforce_ada.skip` (growth {record['growth']}, cap "
        f"{record['cap']}) on {record['prompts']} prompts of known pass rate, {record['batch']} prompts a step, "
        f"{record['seeds']} seeds a row; both draw the same responses a step. Informative: a group whose rewards "
        "are not all equal. Lost: of the groups the skipped visits would have drawn, the share with signal. "
        "No model: a pass rate moves only by the drift (logits per epoch). "
        f"Command: `{record['command']}`.",
        "",
        "| epochs | steps | drift | groups with signal, GRPO | with the skip | informative per response, ratio "
        "(seed range) | skipped / fetched | lost |",
        "|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for row in record["rows"]:
        lines.append(
            f"| {row['epochs']:g} | {row['steps']} | {row['drift']:g} | {row['signal_frac_grpo']:.1%} | "
            f"{row['signal_frac_skip']:.1%} | {row['ratio_mean']:.2f} ({row['ratio_min']:.2f}-"
            f"{row['ratio_max']:.2f}) | {row['skipped_frac']:.2f} | {row['lost_frac']:.3f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
