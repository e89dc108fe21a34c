"""Answer checks per second under concurrency, and how long a check waits for a free checker.

    python -m benchmarks.reward_throughput [--threads 1,8,32,64] [--answers 256] [--seed 0]
        [--repeats 3] [--runaways 4] [--write benchmarks/RESULTS.md]

verl's reward workers call ``compute_score`` from many threads at once. This scores a fixed,
seeded set of answers (the demo task's ``\\boxed{42}`` style, plus LaTeX fractions, roots,
polynomials and multiples of pi) through ``reinforce_ada.tasks.reward.judge`` with 1, 8, 32 and 64
threads, and reports:

* checks per second (wall time of the whole set; the median of ``--repeats`` runs);
* queue wait: from a thread asking for a check to the checker starting it (mean and p95), from
  a second pass whose check stamps the time it starts;
* answers whose outcome differs from the one-by-one outcome (1 thread).

With ``--runaways K`` a last run, at the largest thread count and a 2 s limit, adds K answers whose
check never finishes (``9^{9^{9^{9}}}``) and counts the other answers it misclassified and the
exceptions raised out of ``judge``.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import os
import random
import statistics
import threading
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
RUNAWAY = ("\\boxed{9^{9^{9^{9}}}}", "1")  # sympy evaluates the tower exactly: minutes, holding the GIL
RUNAWAY_TIMEOUT = 2.0


def answers(count: int, seed: int) -> list[tuple[str, str]]:
    """(response, gold) pairs: 70% demo-style integers, 30% LaTeX expressions; about half correct."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        right = rng.random() < 0.5
        kind = rng.random()
        if kind < 0.7:
            gold = rng.randint(0, 200)
            answer = str(gold if right else gold + rng.choice([-2, -1, 1, 10]))
        elif kind < 0.8:
            a, b = rng.randint(1, 9), rng.randint(2, 9)
            gold = f"\\frac{{{a}}}{{{b}}}"
            answer = f"\\frac{{{2 * a}}}{{{2 * b}}}" if right else f"\\frac{{{a + 1}}}{{{b}}}"
        elif kind < 0.9:
            k = rng.randint(2, 7)
            gold, answer = f"{k}\\sqrt{{3}}", f"\\sqrt{{{3 * k * k}}}" if right else f"\\sqrt{{{3 * k}}}"
        elif kind < 0.95:
            a, b = rng.randint(1, 5), rng.randint(1, 9)
            gold, answer = f"{a}x^2 + {b}", f"{b} + {a}x^{{2}}" if right else f"{a}x^2 - {b}"
        else:
            k = rng.randint(2, 6)
            gold = f"\\frac{{\\pi}}{{{k}}}"
            answer = f"\\frac{{2\\pi}}{{{2 * k}}}" if right else f"\\frac{{\\pi}}{{{k + 1}}}"
        out.append((f"Let me work it out step by step. So the answer is \\boxed{{{answer}}}.", str(gold)))
    return out


def _stamped(verify, gold: str, answer: str) -> tuple[float, str]:
    """Runs in a checker process: the time it started (CLOCK_MONOTONIC is system-wide), then the check."""
    return time.monotonic(), verify(gold, answer)


def in_threads(call, items: list, threads: int, timeout: float = 600.0) -> tuple[list, float, int]:
    """call(item) for every item from ``threads`` threads; (results, wall seconds, exceptions raised)."""
    results, raised, counter = [None] * len(items), [0], itertools.count()

    def work():
        while (i := next(counter)) < len(items):
            try:
                results[i] = call(items[i])
            except Exception:
                results[i] = "raised"
                raised[0] += 1

    start = time.perf_counter()
    pool = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(max(0.0, start + timeout - time.perf_counter()))
    if any(thread.is_alive() for thread in pool):
        raise RuntimeError(f"{threads} threads did not finish {len(items)} checks in {timeout:g} s")
    return results, time.perf_counter() - start, raised[0]


class Impl:
    """The reward module under test: its judge, and a way to run the stamped check on its checkers."""

    def __init__(self, name: str, module: ModuleType) -> None:
        self.name, self.module = name, module
        pool = module.checkers._default_pool()  # the pool of checker processes (reinforce_ada.tasks.checkers)
        pool.wait_ready(300)
        self.stamped = lambda gold, answer: pool.run(_stamped, (module._verify, gold, answer), 60.0)
        self.judge(("\\boxed{1}", "1"))
        self.stamped("1", "1")  # the first stamped check imports this module in the checker

    def shutdown(self) -> None:
        """Stops the module's checker processes."""
        self.module.checkers.shutdown()

    def judge(self, item: tuple[str, str], timeout: float | None = None) -> str:
        return self.module.judge(*item) if timeout is None else self.module.judge(*item, timeout=timeout)

    def queue_waits(self, items: list[tuple[str, str]], threads: int) -> list[float]:
        def timed(item):
            submit = time.monotonic()
            started, _ = self.stamped(item[1], self.module.last_boxed(item[0]))
            return started - submit

        return in_threads(timed, items, threads)[0]


def measure(impls: list[Impl], items: list, thread_counts: list[int], repeats: int) -> dict[str, dict[int, dict]]:
    """Per implementation and thread count: median checks/s over ``repeats`` runs, queue waits, differences.

    The implementations take turns, run by run, so that a change in the machine's load hits them alike.
    """
    expected = {impl.name: in_threads(impl.judge, items, 1)[0] for impl in impls}
    rows: dict[str, dict[int, dict]] = {impl.name: {} for impl in impls}
    for threads in thread_counts:
        rates, waits, differ = {i.name: [] for i in impls}, {i.name: [] for i in impls}, dict.fromkeys(expected, 0)
        for repeat in range(repeats):
            for impl in impls if repeat % 2 == 0 else impls[::-1]:
                outcomes, seconds, raised = in_threads(impl.judge, items, threads)
                rates[impl.name].append(len(items) / seconds)
                differ[impl.name] += sum(o != e for o, e in zip(outcomes, expected[impl.name], strict=True)) + raised
                waits[impl.name] += impl.queue_waits(items, threads)
        for impl in impls:
            w = sorted(waits[impl.name])
            row = rows[impl.name][threads] = {
                "rate": statistics.median(rates[impl.name]),
                "wait_mean": statistics.fmean(w),
                "wait_p95": w[min(len(w) - 1, int(0.95 * len(w)))],
                "differ": differ[impl.name],
            }
            print(
                f"{impl.name:>6} {threads:>3} threads: {row['rate']:7.1f} checks/s (runs: "
                f"{', '.join(f'{r:.0f}' for r in rates[impl.name])}), queue wait mean {row['wait_mean'] * 1e3:.0f} ms "
                f"p95 {row['wait_p95'] * 1e3:.0f} ms, {row['differ']} outcomes differ from one by one",
                flush=True,
            )
    return rows


def runaway_run(impl: Impl, items: list, threads: int, runaways: int, seed: int) -> dict:
    """The answers plus ``runaways`` never-finishing checks, at a 2 s limit: what else goes wrong."""
    expected = [impl.judge(item, RUNAWAY_TIMEOUT) for item in items]  # one by one
    jobs = list(zip(items, expected, strict=True)) + [(RUNAWAY, "timeout")] * runaways
    random.Random(seed).shuffle(jobs)
    outcomes, seconds, raised = in_threads(lambda i: impl.judge(i, RUNAWAY_TIMEOUT), [j[0] for j in jobs], threads)
    wrong = sum(o != e and o != "raised" for o, (_, e) in zip(outcomes, jobs, strict=True))
    row = {"seconds": seconds, "misclassified": wrong, "raised": raised, "total": len(jobs)}
    print(f"{impl.name:>6} {threads} threads with {runaways} runaway checks: {row}", flush=True)
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,8,32,64")
    parser.add_argument("--answers", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="runs per thread count; the median is shown")
    parser.add_argument("--runaways", type=int, default=0, help="never-finishing checks in a last run")
    parser.add_argument("--write", metavar="RESULTS_MD")
    args = parser.parse_args(argv)
    thread_counts = [int(t) for t in args.threads.split(",")]
    items = answers(args.answers, args.seed)
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]

    from reinforce_ada.tasks import reward

    impl = Impl("now", reward)
    rows = measure([impl], items, thread_counts, args.repeats)
    runaway = {}
    if args.runaways:
        runaway[impl.name] = runaway_run(impl, items, thread_counts[-1], args.runaways, args.seed)
    impl.shutdown()

    lines = ["| threads | checks/s | queue wait mean / p95 | outcomes differing from one by one |",
             "|---:|---:|---:|---:|"]
    for threads in thread_counts:
        row = rows["now"][threads]
        lines.append(f"| {threads} | {row['rate']:.1f} | {row['wait_mean'] * 1e3:.0f} / {row['wait_p95'] * 1e3:.0f} ms "
                     f"| {row['differ']} |")
    command = (f"python -m benchmarks.reward_throughput --threads {args.threads} --answers {args.answers} "
               f"--seed {args.seed} --repeats {args.repeats}")
    command += f" --runaways {args.runaways}" if args.runaways else ""
    workers = reward.checkers._worker_count()
    body = (
        f"Run {started}, load average {load:.1f} at the start. "
        f"Regenerate with `{command} --write benchmarks/RESULTS.md`. {args.answers} answers (seed {args.seed}): "
        "70% demo-style `\\boxed{42}` integers, 30% LaTeX fractions, roots, polynomials and multiples of pi, about "
        "half correct, each scored by `reinforce_ada.tasks.reward.judge` (default 5 s limit) from the given number of "
        f"threads; checks/s: the median of {args.repeats} runs. Queue wait: from a thread asking for a check to a "
        "checker process starting it (a second pass whose check stamps its start). "
        f"{workers} checker processes (the default here), time limit counted from the start.\n\n"
        + "\n".join(lines)
        + "\n"
    )
    if runaway:
        body += (
            f"\nWith {args.runaways} never-finishing checks (`{RUNAWAY[0]}`) shuffled in, {thread_counts[-1]} threads, "
            f"{RUNAWAY_TIMEOUT:g} s limit: outcomes against one by one (the runaways: \"timeout\").\n\n"
            "| code | checks | wall time | answers misclassified | exceptions out of judge |\n"
            "|---|---:|---:|---:|---:|\n"
            + "".join(f"| {name} | {r['total']} | {r['seconds']:.1f} s | {r['misclassified']} | {r['raised']} |\n"
                      for name, r in sorted(runaway.items(), reverse=True))
        )
    print(body)
    if args.write:
        from benchmarks.results import write_section

        write_section(args.write, "reward_throughput", "Reward checks under concurrency", body)


if __name__ == "__main__":
    main()
