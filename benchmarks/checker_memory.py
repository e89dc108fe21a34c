"""Memory of the math reward's checker pool, in a plain process and inside a Ray actor (as verl's reward workers).

    python -m benchmarks.checker_memory [--workers 4] [--write benchmarks/RESULTS.md]

Each verl reward worker that scores with ``reinforce_ada.tasks.reward`` starts its own pool of
``REINFORCE_ADA_VERIFY_WORKERS`` checker processes ("spawn"). A spawned process re-runs its parent's main
module: inside a Ray actor that is Ray's worker script, so every checker imports Ray too. This starts one
pool in this process and one in a Ray actor (a local Ray on 127.0.0.1, nothing else), and measures each
checker's memory with psutil: USS (what killing it frees; the number to budget with), PSS and RSS.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

DEFAULT_REWARD_WORKERS = 8  # verl's reward.num_workers


def measure(workers: int) -> dict:
    """Starts this process's checker pool, waits until every checker is idle, measures it, shuts it down."""
    import psutil

    os.environ["REINFORCE_ADA_VERIFY_WORKERS"] = str(workers)
    from reinforce_ada.tasks import checkers, reward

    start = time.monotonic()
    reward.judge("so the answer is \\boxed{2}", "2")  # the first check starts the pool
    pool = checkers._default_pool()
    pool.wait_ready(300)
    startup = time.monotonic() - start
    ray_in_checker = checkers.run(eval, ("'ray' in __import__('sys').modules",), 30)
    pids = set(pool.pids())
    per = []
    for proc in psutil.Process().children(recursive=True):
        if proc.pid in pids:
            info = proc.memory_full_info()
            per.append((info.uss, getattr(info, "pss", 0), info.rss))
    checkers.shutdown()
    n = max(1, len(per))
    return {"checkers": len(per), "startup_s": startup, "ray_in_checker": ray_in_checker,
            **{f"{key}_mb": sum(p[i] for p in per) / n / 2**20 for i, key in enumerate(("uss", "pss", "rss"))}}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.checker_memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4, help="checker processes per pool")
    parser.add_argument("--write", help="RESULTS.md to write the checker_memory section into")
    args = parser.parse_args(argv)
    results = {"plain": measure(args.workers)}
    import ray

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep 127.0.0.1: no cluster is formed
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    try:
        probe = ray.remote(num_cpus=1)(measure)
        results["ray_actor"] = ray.get(probe.remote(args.workers), timeout=900)
    finally:
        ray.shutdown()
    actor = results["ray_actor"]
    per_worker = args.workers * actor["uss_mb"]
    lines = [f"One pool of {args.workers} checker processes; memory per checker (psutil, MB).", "",
             "| pool started by | checkers | USS | PSS | RSS | Ray imported in the checker | start-up (s) |",
             "|---|---:|---:|---:|---:|---|---:|"]
    for name, r in results.items():
        lines.append(f"| {'a Ray actor (as a reward worker)' if name == 'ray_actor' else 'a plain process'} | "
                     f"{r['checkers']} | {r['uss_mb']:.0f} | {r['pss_mb']:.0f} | {r['rss_mb']:.0f} | "
                     f"{r['ray_in_checker']} | {r['startup_s']:.1f} |")
    lines += ["", f"A reward worker's pool adds about {per_worker:.0f} MB (USS); verl's default "
              f"{DEFAULT_REWARD_WORKERS} reward workers on a node, {DEFAULT_REWARD_WORKERS * args.workers} checkers, "
              f"about {DEFAULT_REWARD_WORKERS * per_worker / 1024:.1f} GB.", "",
              f"Command: `python -m benchmarks.checker_memory "
              f"{shlex.join(argv if argv is not None else sys.argv[1:])}`"]
    body = "\n".join(lines)
    print(body)
    if args.write:
        from benchmarks.results import write_section

        write_section(args.write, "checker_memory", "The math reward's checker pools: memory", body)
    return results


if __name__ == "__main__":  # spawned checkers re-run this module as __mp_main__: its top level stays light
    main()
