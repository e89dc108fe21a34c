"""Sampling efficiency without a model: what each method draws, and how many useful groups it gets.

    python -m benchmarks.sampling_efficiency [--prompts 4096] [--seed 0] [--write benchmarks/RESULTS.md]
        [--dataset 1024] [--batch 256] [--epochs 4]

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
biased subset.

A second table follows training over several epochs, so that the per-prompt pass-rate tracker
has something to go on: a dataset whose pass rates drift upwards epoch by epoch (the logit of
each prompt's pass rate rises by 0.5 per epoch, plus noise), sampled in batches, every method
with its own tracker fed by its own draws. It compares Reinforce-Ada-Est (one request of N_x
samples per prompt, N_x ~ 1/sqrt(p_hat), N_x in [2, 32], the batch's budget that of GRPO-4)
against GRPO-4 and against Est allocating with the true pass rates, and Seq with and without
warm start (first round sized K/p_hat from the tracker). Deterministic given the seed; about a
minute.
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.results import write_section
from reinforce_ada.core.config import SamplerConfig
from reinforce_ada.core.metrics import group_has_signal
from reinforce_ada.core.step import run_step
from reinforce_ada.core.tracker import PassRateTracker, allocate_samples, plan_first_requests

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


def adaptive(
    pass_rates: list[float], rng: random.Random, config: SamplerConfig, first_requests: list[int] | None = None
) -> Outcome:
    rngs = [random.Random(rng.random()) for _ in pass_rates]
    step = run_step(
        [str(i) for i in range(len(pass_rates))],
        config,
        lambda requests: {i: bernoulli(rngs[i], pass_rates[i], k) for i, k in requests.items()},
        first_requests=first_requests,
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


BUDGETS = (1.5, 2.0, 3.0, 4.0)


def budget_table(prompts: int, seed: int) -> str:
    """``sample_budget`` b against GRPO drawing the same samples (n = 4b), unbudgeted balance and the oracle."""
    lines = [
        "| pass rates | budget b | samples / prompt | GRPO-4b (same samples) | balance, budget b | "
        "balance, budget b, first round M | pos, budget b | budgeted / unbudgeted balance |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    tail = []
    for name, draw_p in DISTRIBUTIONS.items():
        rng = random.Random(f"{seed}:{name}")
        rates = [draw_p(rng) for _ in range(prompts)]
        free = adaptive(rates, random.Random(f"{seed}:{name}:bal"), SamplerConfig(variant="balance", **REFERENCE))
        oracle = mixed_oracle(rates, random.Random(f"{seed}:{name}:mixed"))
        tail.append(f"{name}: unbudgeted balance {free.per_prompt:.2f} samples / prompt, {free.useful_frac:.1%} "
                    f"useful; mixed oracle {oracle.per_prompt:.2f}, {oracle.useful_frac:.1%}")
        for b in BUDGETS:
            k = round(N * b)
            same = grpo(rates, random.Random(f"{seed}:{name}:g{k}"), k)
            budgeted = {
                variant: adaptive(rates, random.Random(f"{seed}:{name}:bal"),
                                  SamplerConfig(variant=variant, sample_budget=b, **REFERENCE))
                for variant in ("balance", "pos")
            }
            # the alternative the rule replaces: every prompt's first request a full round of M
            first_round = adaptive(rates, random.Random(f"{seed}:{name}:bal"),
                                   SamplerConfig(variant="balance", sample_budget=b, **REFERENCE),
                                   first_requests=[REFERENCE["round_size"]] * len(rates))
            lines.append(
                f"| {name} | {b:g} | {budgeted['balance'].per_prompt:.2f} | {same.useful_frac:.1%} | "
                f"{budgeted['balance'].useful_frac:.1%} | {first_round.useful_frac:.1%} | "
                f"{budgeted['pos'].useful_frac:.1%} | {budgeted['balance'].useful_frac / free.useful_frac:.1%} |"
            )
    return "\n".join(lines) + "\n\n" + "; ".join(tail) + "."


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
            lambda requests, prompt_rngs=prompt_rngs: {
                i: bernoulli(prompt_rngs[i], rates[i], k) for i, k in requests.items()
            },
        )
        useful = sum(group_has_signal(s, g) for s, g in zip(step.samplers, step.groups))
        mean_rounds = sum(s.rounds for s in step.samplers) / len(rates)
        lines.append(
            f"| {m} | {32 // m} | {sum(s.drawn for s in step.samplers) / len(rates):.2f} | "
            f"{len(step.round_seconds)} (prompt mean {mean_rounds:.2f}) | {useful / len(rates):.1%} |"
        )
    return "\n".join(lines)


def drifting_pass_rates(dataset: int, epochs: int, seed: int) -> list[list[float]]:
    """Per epoch, per prompt: the true pass rate. Early-training start (Beta(0.5, 2)), then the
    logit rises by 0.5 per epoch plus N(0, 0.3) noise, so easy prompts saturate and hard ones thaw."""
    rng = random.Random(f"{seed}:drift")
    logits = [
        math.log(p / (1 - p)) for p in (min(max(rng.betavariate(0.5, 2.0), 1e-4), 1 - 1e-4) for _ in range(dataset))
    ]
    rates = []
    for _ in range(epochs):
        rates.append([1 / (1 + math.exp(-z)) for z in logits])
        logits = [z + 0.5 + rng.gauss(0.0, 0.3) for z in logits]
    return rates


@dataclass
class RunTotals:
    samples: int = 0
    prompts: int = 0
    useful: int = 0
    hard: int = 0  # prompts with a true pass rate below HARD
    hard_reached: int = 0  # of those, the ones with at least one correct sample drawn
    step_rounds: int = 0  # synchronous round barriers, summed over steps
    prompt_rounds: int = 0  # requests per prompt, summed over prompts
    steps: int = 0
    first_request: int = 0  # samples asked for in each prompt's first request, summed

    def row(self) -> str:
        return (
            f"{self.samples / self.prompts:.2f} | {self.useful / self.prompts:.1%} | "
            f"{self.samples / self.useful if self.useful else float('inf'):.2f} | "
            f"{self.hard_reached / self.hard if self.hard else 0.0:.1%} | "
            f"{self.first_request / self.prompts:.2f} | {self.prompt_rounds / self.prompts:.2f} | "
            f"{self.step_rounds / self.steps:.2f}"
        )


HARD = 0.125


def train_simulation(
    rates: list[list[float]], batch: int, seed: int, method: str, config: SamplerConfig
) -> tuple[RunTotals, RunTotals]:
    """Runs one method over every epoch; returns the totals of epoch 1 and of the later epochs.

    ``method``: ``"grpo"`` (n per prompt), ``"tracker"`` (the config's own use of the tracker:
    Est's allocation, warm start, or nothing for plain Seq) or ``"truth"`` (Est allocating with
    the true pass rates, the best any tracker could do).
    """
    dataset = len(rates[0])
    tracker = PassRateTracker(config.tracker_decay, config.tracker_prior_pos, config.tracker_prior_neg)
    first, later = RunTotals(), RunTotals()
    for epoch, epoch_rates in enumerate(rates):
        order = list(range(dataset))
        random.Random(f"{seed}:order:{epoch}").shuffle(order)
        totals = first if epoch == 0 else later
        for start in range(0, dataset - batch + 1, batch):
            ids = order[start : start + batch]
            keys = [str(i) for i in ids]
            p = [epoch_rates[i] for i in ids]
            # common random numbers: a prompt's visit draws the same reward stream under every method
            rngs = [random.Random(f"{seed}:{epoch}:{i}") for i in ids]
            if method == "grpo":
                outcomes = [bernoulli(rng, q, config.n) for rng, q in zip(rngs, p)]
                for key, rewards in zip(keys, outcomes):
                    tracker.update(key, len(rewards), int(sum(rewards)))
                totals.samples += config.n * len(ids)
                totals.useful += sum(len(set(r)) > 1 for r in outcomes)
                totals.hard += sum(q < HARD for q in p)
                totals.hard_reached += sum(q < HARD and max(r) > 0 for q, r in zip(p, outcomes))
                totals.first_request += config.n * len(ids)
                totals.prompt_rounds += len(ids)
                totals.step_rounds += 1
            else:
                if method == "truth":
                    first_requests = allocate_samples(
                        p, config.n * len(ids), config.min_samples_per_prompt, config.n_max, config.prompt_weight_eps
                    )
                else:
                    first_requests = plan_first_requests(tracker, keys, config)
                step = run_step(
                    keys,
                    config,
                    lambda requests, rngs=rngs, p=p: {i: bernoulli(rngs[i], p[i], k) for i, k in requests.items()},
                    first_requests=first_requests,
                )
                tracker.update_many((k, s.drawn, s.num_pos) for k, s in zip(keys, step.samplers))
                totals.samples += sum(s.drawn for s in step.samplers)
                totals.useful += sum(
                    group_has_signal(s, g) for s, g in zip(step.samplers, step.groups) if not g.dropped
                )
                totals.hard += sum(q < HARD for q in p)
                totals.hard_reached += sum(q < HARD and s.num_pos > 0 for q, s in zip(p, step.samplers))
                totals.first_request += sum(first_requests) if first_requests else config.round_size * len(ids)
                totals.prompt_rounds += sum(s.rounds for s in step.samplers)
                totals.step_rounds += len(step.round_seconds)
            totals.prompts += len(ids)
            totals.steps += 1
    return first, later


def tracker_table(dataset: int, batch: int, epochs: int, seed: int) -> str:
    rates = drifting_pass_rates(dataset, epochs, seed)
    est = SamplerConfig(n=N, variant="est")
    rows = [
        ("GRPO-4", "grpo", est),
        ("Reinforce-Ada-Est (tracker)", "tracker", est),
        ("Reinforce-Ada-Est (true pass rates)", "truth", est),
        ("Reinforce-Ada-balance", "tracker", SamplerConfig(variant="balance", **REFERENCE)),
        (
            "Reinforce-Ada-balance + warm start",
            "tracker",
            SamplerConfig(variant="balance", warm_start=True, **REFERENCE),
        ),
        ("Reinforce-Ada-pos", "tracker", SamplerConfig(variant="pos", **REFERENCE)),
        ("Reinforce-Ada-pos + warm start", "tracker", SamplerConfig(variant="pos", warm_start=True, **REFERENCE)),
    ]
    lines = [
        "| method | epoch | samples / prompt | useful groups | samples / useful group | hard prompts reached "
        "| first request / prompt | requests / prompt | rounds / step |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, method, config in rows:
        first, later = train_simulation(rates, batch, seed, method, config)
        lines.append(f"| {name} | 1 | {first.row()} |")
        lines.append(f"| {name} | 2-{epochs} | {later.row()} |")
    mean_rates = [sum(r) / len(r) for r in rates]
    caption = ", ".join(f"{m:.2f}" for m in mean_rates)
    return f"Mean true pass rate per epoch: {caption}.\n\n" + "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=4096, help="prompts per distribution (default 4096)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dataset", type=int, default=1024, help="prompts in the multi-epoch dataset (default 1024)")
    parser.add_argument("--batch", type=int, default=256, help="prompts per step in the multi-epoch run (default 256)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs of the multi-epoch run (default 4)")
    parser.add_argument("--write", metavar="RESULTS_MD", help="also write the tables into this Markdown file")
    args = parser.parse_args(argv)
    command = (
        f"python -m benchmarks.sampling_efficiency --prompts {args.prompts} --seed {args.seed} "
        f"--dataset {args.dataset} --batch {args.batch} --epochs {args.epochs}"
    )
    efficiency = efficiency_table(args.prompts, args.seed)
    rounds = round_size_table(args.prompts, args.seed)
    tracked = tracker_table(args.dataset, args.batch, args.epochs, args.seed)
    body = (
        f"{args.prompts} prompts per distribution, n = 4 kept, 0/1 rewards, seed {args.seed}. Regenerate with\n"
        f"`{command} --write benchmarks/RESULTS.md` (model-free, deterministic, seconds).\n"
        "Useful group: the kept samples have a non-zero advantage. x oracle: samples per useful group over "
        "the oracle's (same exit rule, one sample per round); below 1 means the method gives up on prompts "
        "the oracle keeps sampling (GRPO stops at n, DAPO discards them and trains on a biased subset).\n\n"
        f"{efficiency}\n\n"
        "Round size M against rounds, Reinforce-Ada-balance, N_max = 32, early-training pass rates "
        "(\"rounds\": rounds the whole batch needed, i.e. synchronous round barriers):\n\n"
        f"{rounds}\n\n"
        f"Across steps: the pass-rate tracker (Est, warm start). {args.dataset} prompts, {args.batch} per step, "
        f"{args.epochs} epochs, pass rates drifting upwards each epoch; epoch 1 has an empty tracker (Est allocates "
        "evenly, warm start falls back to round_size), so the later epochs show what the tracker buys. Est: "
        "N_x ~ 1/sqrt(p_hat + 0.01) in [2, 32], batch budget = GRPO-4's, every sample trained on; useful group: the "
        "trained samples have a non-zero advantage. Warm start: first request max(K_pos/p_hat, K_neg/(1-p_hat)) in "
        "[n, 32] for prompts seen before. \"first request / prompt\": samples asked for before any reward is "
        "seen; \"requests / prompt\": a prompt's generate-then-score cycles (its latency chain in `mode: async`); "
        "\"rounds / step\": synchronous round barriers per step (`mode: rounds`: the batch waits for its slowest "
        f"prompt); \"hard prompts reached\": of the prompts with a true pass rate below {HARD}, those with at least "
        "one correct sample drawn (without one, a hard prompt gives no gradient). "
        "Tracker defaults: lambda 0.5 per visit, Beta(1, 1) prior.\n\n"
        f"{tracked}\n\n"
        "Reading: Est's 1/sqrt(p_hat) allocation targets the variance of the log-objective gradient "
        "(docs/algorithm.md, Est), which these columns do not measure. At GRPO-4's budget it reaches more "
        "hard prompts but forms fewer mixed groups than GRPO-4, since it spends on prompts near p = 0 and "
        "leaves easy ones N_min = 2; with the true pass rates it does so more sharply than with the tracker, "
        "whose prior and decay keep estimates off the extremes. Warm start cuts each prompt's requests, not "
        "the batch's rounds: with this many prompts a step, some prompt still needs all R rounds.\n"
    )
    budget = (
        f"{args.prompts} prompts per distribution, n = 4, M = 8, R = 4, seed {args.seed} (`{command}`). Useful "
        "groups (kept samples with a non-zero advantage) at `sample_budget` b, i.e. at most 4b samples per "
        "prompt on average: GRPO with n = 4b drawing the same samples; balance and pos with the budget's rule "
        "(first requests of n, the rest spread over prompts whose pools are still uniform; docs/algorithm.md); "
        "balance with a first round of M for every prompt instead (the alternative the rule replaces); and the "
        "share of unbudgeted balance's useful groups the budget keeps.\n\n" + budget_table(args.prompts, args.seed)
    )
    print(body + "\n\n" + budget)
    if args.write:
        write_section(args.write, "sampling_efficiency", "Sampling efficiency against the oracle (model-free)", body)
        write_section(args.write, "sample_budget", "A sample budget per step against GRPO at the same samples "
                      "(model-free)", budget)


if __name__ == "__main__":
    main()
