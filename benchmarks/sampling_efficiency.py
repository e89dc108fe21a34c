"""Sampling efficiency without a model: what each method draws, and how many useful groups it gets.

    python benchmarks/sampling_efficiency.py [--prompts 4096] [--seed 0] [--write benchmarks/RESULTS.md]

Prompts get pass rates from a distribution; each sample is a Bernoulli(p) 0/1 reward. A *useful*
group is one whose kept samples have a non-zero advantage (mixed rewards). Methods, all keeping
n = 4 samples per prompt for the update unless named otherwise:

* GRPO-n: n samples per prompt (n = 4, 8, 16; the group is all n).
* DAPO: GRPO-4 groups, resampling fresh prompts until the batch holds as many mixed groups as it
  has prompts (dynamic sampling with filtering), capped at 10 batches' worth.
* Reinforce-Ada-pos / -balance: the reference settings (M = 8, R = 4, N_max = 32).
* Oracles: the same exit rules drawing one sample at a time (M = 1, same N_max = 32), i.e. the
  fewest samples any round size could spend; "mixed oracle": stop at the first correct *and*
  incorrect sample (at least n drawn), the cheapest way to a useful group of n.

"samples / useful group" is the total drawn divided by the useful groups obtained; each
method's ratio to its oracle is shown (GRPO and DAPO against the mixed oracle). A ratio below 1
means the method gives up on prompts the oracle keeps sampling: GRPO never samples a hard prompt
more than n times, and DAPO discards it and trains only on prompts that happened to mix, a
biased subset. Deterministic given the seed; about twenty seconds.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.results import write_section  # noqa: E402
from reinforce_ada.config import SamplerConfig  # noqa: E402
from reinforce_ada.metrics import group_has_signal  # noqa: E402
from reinforce_ada.step import run_step  # noqa: E402

DISTRIBUTIONS: dict[str, Callable[[random.Random], float]] = {
    "uniform": lambda rng: rng.random(),
    "early (Beta(0.5, 2), mean 0.2)": lambda rng: rng.betavariate(0.5, 2.0),
    "late (Beta(2, 0.5), mean 0.8)": lambda rng: rng.betavariate(2.0, 0.5),
    "hard (Beta(0.3, 4), 80% below 0.125)": lambda rng: rng.betavariate(0.3, 4.0),
}
N = 4


@dataclass
class Outcome:
    samples: int
    prompts: int
    useful: int

    @property
    def per_prompt(self) -> float:
        return self.samples / self.prompts

    @property
    def useful_frac(self) -> float:
        return self.useful / self.prompts

    @property
    def per_useful(self) -> float:
        return self.samples / self.useful if self.useful else float("inf")


def bernoulli(rng: random.Random, p: float, k: int) -> list[float]:
    return [float(rng.random() < p) for _ in range(k)]


def grpo(pass_rates: list[float], rng: random.Random, n: int) -> Outcome:
    useful = sum(len(set(bernoulli(rng, p, n))) > 1 for p in pass_rates)
    return Outcome(samples=n * len(pass_rates), prompts=len(pass_rates), useful=useful)


def dapo(pass_rates: list[float], rng: random.Random, draw_p: Callable[[random.Random], float]) -> Outcome:
    target, samples, useful, prompts = len(pass_rates), 0, 0, 0
    while useful < target and prompts < 10 * target:
        p = pass_rates[prompts] if prompts < len(pass_rates) else draw_p(rng)
        samples += N
        prompts += 1
        useful += len(set(bernoulli(rng, p, N))) > 1
    # the batch trains on `target` groups; every prompt drawn counts towards the cost
    return Outcome(samples=samples, prompts=target, useful=min(useful, target))


def adaptive(pass_rates: list[float], rng: random.Random, config: SamplerConfig) -> Outcome:
    rngs = [random.Random(rng.random()) for _ in pass_rates]
    step = run_step(
        [str(i) for i in range(len(pass_rates))],
        config,
        lambda requests: {i: bernoulli(rngs[i], pass_rates[i], k) for i, k in requests.items()},
    )
    useful = sum(group_has_signal(s, g) for s, g in zip(step.samplers, step.groups) if not g.dropped)
    return Outcome(samples=sum(s.drawn for s in step.samplers), prompts=len(pass_rates), useful=useful)


def mixed_oracle(pass_rates: list[float], rng: random.Random) -> Outcome:
    config = SamplerConfig(n=N, round_size=1, max_rounds=32, variant="balance", k_pos=1, k_neg=1)
    return adaptive(pass_rates, rng, config)


REFERENCE = dict(n=N, round_size=8, max_rounds=4)
ORACLE = dict(n=N, round_size=1, max_rounds=32)


def efficiency_table(prompts: int, seed: int) -> str:
    lines = [
        "| pass rates | method | samples / prompt | useful groups | samples / useful group | x oracle |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, draw_p in DISTRIBUTIONS.items():
        rng = random.Random(f"{seed}:{name}")
        rates = [draw_p(rng) for _ in range(prompts)]
        oracles = {
            "mixed": mixed_oracle(rates, random.Random(f"{seed}:{name}:mixed")),
            "pos": adaptive(rates, random.Random(f"{seed}:{name}:opos"), SamplerConfig(variant="pos", **ORACLE)),
            "balance": adaptive(
                rates, random.Random(f"{seed}:{name}:obal"), SamplerConfig(variant="balance", **ORACLE)
            ),
        }
        rows = [
            ("GRPO-4", grpo(rates, random.Random(f"{seed}:{name}:g4"), 4), "mixed"),
            ("GRPO-8", grpo(rates, random.Random(f"{seed}:{name}:g8"), 8), "mixed"),
            ("GRPO-16", grpo(rates, random.Random(f"{seed}:{name}:g16"), 16), "mixed"),
            ("DAPO (GRPO-4 + refill)", dapo(rates, random.Random(f"{seed}:{name}:dapo"), draw_p), "mixed"),
            ("Reinforce-Ada-pos", adaptive(rates, random.Random(f"{seed}:{name}:pos"), SamplerConfig(variant="pos", **REFERENCE)), "pos"),  # noqa: E501
            ("Reinforce-Ada-balance", adaptive(rates, random.Random(f"{seed}:{name}:bal"), SamplerConfig(variant="balance", **REFERENCE)), "balance"),  # noqa: E501
            ("oracle: mixed (M=1)", oracles["mixed"], "mixed"),
            ("oracle: pos (M=1)", oracles["pos"], "pos"),
            ("oracle: balance (M=1)", oracles["balance"], "balance"),
        ]
        for method, outcome, oracle in rows:
            ratio = outcome.per_useful / oracles[oracle].per_useful
            lines.append(
                f"| {name} | {method} | {outcome.per_prompt:.2f} | {outcome.useful_frac:.1%} | "
                f"{outcome.per_useful:.2f} | {ratio:.2f} ({oracle}) |"
            )
    return "\n".join(lines)


def round_size_table(prompts: int, seed: int) -> str:
    lines = [
        "| round size M | rounds R (N_max = 32) | samples / prompt | mean rounds run | useful groups |",
        "|---:|---:|---:|---:|---:|",
    ]
    name = "early (Beta(0.5, 2), mean 0.2)"
    rng = random.Random(f"{seed}:{name}")
    rates = [DISTRIBUTIONS[name](rng) for _ in range(prompts)]
    for m in (1, 2, 4, 8, 16, 32):
        config = SamplerConfig(n=N, round_size=m, max_rounds=32 // m, variant="balance")
        rngs = random.Random(f"{seed}:M{m}")
        prompt_rngs = [random.Random(rngs.random()) for _ in rates]
        step = run_step(
            [str(i) for i in range(len(rates))],
            config,
            lambda requests: {i: bernoulli(prompt_rngs[i], rates[i], k) for i, k in requests.items()},
        )
        useful = sum(group_has_signal(s, g) for s, g in zip(step.samplers, step.groups))
        mean_rounds = sum(s.rounds for s in step.samplers) / len(rates)
        lines.append(
            f"| {m} | {32 // m} | {sum(s.drawn for s in step.samplers) / len(rates):.2f} | "
            f"{len(step.round_seconds)} (prompt mean {mean_rounds:.2f}) | {useful / len(rates):.1%} |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=4096, help="prompts per distribution (default 4096)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write", metavar="RESULTS_MD", help="also write the tables into this Markdown file")
    args = parser.parse_args(argv)
    command = f"python benchmarks/sampling_efficiency.py --prompts {args.prompts} --seed {args.seed}"
    efficiency = efficiency_table(args.prompts, args.seed)
    rounds = round_size_table(args.prompts, args.seed)
    body = (
        f"{args.prompts} prompts per distribution, n = 4 kept, 0/1 rewards, seed {args.seed}. Regenerate with\n"
        f"`{command} --write benchmarks/RESULTS.md` (model-free, deterministic, seconds).\n"
        "Useful group: the kept samples have a non-zero advantage. x oracle: samples per useful group over "
        "the oracle's (same exit rule, one sample per round); below 1 means the method gives up on prompts "
        "the oracle keeps sampling (GRPO stops at n, DAPO discards them and trains on a biased subset).\n\n"
        f"{efficiency}\n\n"
        "Round size M against rounds, Reinforce-Ada-balance, N_max = 32, early-training pass rates "
        "(\"rounds\": rounds the whole batch needed, i.e. synchronous round barriers):\n\n"
        f"{rounds}\n"
    )
    print(body)
    if args.write:
        write_section(args.write, "sampling_efficiency", "Sampling efficiency against the oracle (model-free)", body)


if __name__ == "__main__":
    main()
