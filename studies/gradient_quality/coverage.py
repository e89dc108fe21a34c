"""How often each interval procedure of the gradient-quality study covers a known truth: a simulation of its design.

    python -m studies.gradient_quality.coverage [--studies 4000] [--seed 0]

Each simulated study draws its 48 training prompts afresh from a population (each prompt a random effect), draws
the design's 60 batches of 8, and gives every batch a value: a function of its prompts' effects plus the noise of its
replays. Three measures are computed as :func:`studies.gradient_quality.replay.analyse` computes them: ``mean``, the
mean over batches of the mean of the batch's effects (a paired difference is one); ``saturating``, the mean over
batches of a saturating function of it (as a cosine saturates: the batch's value is not a sum over its prompts); and
``ratio``, a ratio of two means over batches (the SNR: signal over noise, each with its prompts' effects and replay
noise). The truth is the population's value of each. The prompts' share of the estimate's variance is varied from
0.99 (the prompts drawn dominate, as they likely do for the cosines) to 0.1 (the replays dominate).

The schemes compared, each as a 95% interval:

- ``old``: the study's intervals until 2026-12-06: batches drawn independently, each a random set of prompts; each
  jackknife replicate drops every batch holding one prompt and is scaled as a delete-1 jackknife over prompts,
  ``(P - 1) / P`` times the replicates' sum of squares, with Student's t on P - 1 degrees of freedom.
- ``delete_d``: the same replicates scaled as a delete-d jackknife over batches, ``(B - d) / d`` times each
  replicate's squared deviation (d the batches it drops), averaged over replicates.
- ``rounds_g1``, ``rounds_g4``: batches in rounds of partitions of groups of 1 or 4 prompts, and the variance split
  into the groups' and the rounds' parts (:func:`studies.gradient_quality.intervals.variance`); groups of 4 are the
  study's intervals since 2026-12-06.
- ``disjoint``: 6 fixed batches of disjoint prompts (groups of 8), each replayed in every round, and Student's t
  over the 6 batches' means (5 degrees of freedom): independent units, no model of the overlap.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

from studies.gradient_quality import intervals
from studies.gradient_quality.design import DEFAULT, Size
from studies.stats import t_quantile

SCHEMES = ("old", "delete_d", "rounds_g1", "rounds_g4", "disjoint")
CHOSEN = "rounds_g4"
SHARES = (0.99, 0.9, 0.5, 0.1)  # the prompts' share of the variance of a mean over the design's batches
MEASURES = ("mean", "saturating", "ratio")
SIGNAL_SD, NOISE_SD = 0.8, 0.4  # log-scale SDs of a prompt's signal and noise (log-normal, mean 1)


def saturate(x: np.ndarray) -> np.ndarray:
    """The ``saturating`` measure of a batch whose prompts' effects average ``x``."""
    x = 0.5 + 0.8 * x
    return x / np.sqrt(x * x + 0.5)


@dataclass(frozen=True)
class Truth:
    """The population's values of the measures (the saturating one by Monte Carlo) and a batch's replay noise.

    Attributes:
        share: The prompts' share of the variance of a mean over the design's batches.
        noise: The SD of one batch's replay noise for that share.
        saturating: The population's mean of the saturating measure of a batch of ``size.batch`` prompts.
    """

    share: float
    noise: float
    saturating: float

    @classmethod
    def of(cls, share: float, size: Size, rng: np.random.Generator) -> Truth:
        # a mean's variance is sd_a^2 / P + sd_e^2 / B with sd_a = 1: sd_e for the share
        noise = float(np.sqrt(size.batches / size.train_prompts * (1 - share) / share))
        batches = rng.normal(size=(200_000, size.batch)).mean(axis=1)
        return cls(share, noise, float(saturate(batches).mean()))


def random_batches(size: Size, rng: np.random.Generator) -> list[np.ndarray]:
    """The old design: each batch an independent random set of ``size.batch`` prompts."""
    return [rng.choice(size.train_prompts, size.batch, replace=False) for _ in range(size.batches)]


def old_style(values: dict, key: str, batches: list[np.ndarray], prompts: int, delete_d: bool) -> list[float]:
    """The jackknife over prompts that drops every batch holding one, scaled as delete-1 (``delete_d`` False) or as a
    delete-d jackknife over batches."""
    holds = np.zeros((prompts, len(batches)), dtype=bool)
    for index, members in enumerate(batches):
        holds[members, index] = True
    kept = ~holds[holds.sum(axis=1) < len(batches)]
    if key == "ratio":
        value = values["signal"].mean() / values["noise"].mean()
        partial = (kept @ values["signal"]) / (kept @ values["noise"])
    else:
        value = values[key].mean()
        partial = (kept @ values[key]) / kept.sum(axis=1)
    n = len(partial)
    squares = (partial - partial.mean()) ** 2
    if delete_d:
        dropped = len(batches) - kept.sum(axis=1)
        some = dropped > 0  # a prompt in no batch gives no delete-d replicate
        var = float(np.mean((len(batches) - dropped[some]) / dropped[some] * squares[some]))
    else:
        var = (n - 1) / n * float(squares.sum())
    half = t_quantile(0.975, n - 1) * np.sqrt(var)
    return [value, value - half, value + half]


def batch_values(truth: Truth, effects: dict, batches: list[np.ndarray], rng: np.random.Generator) -> dict:
    """Each batch's values: the measures of its prompts' effects plus its replays' noise."""
    members = np.stack(batches)

    def noisy(x: np.ndarray, scale: float) -> np.ndarray:
        return x + rng.normal(scale=scale * truth.noise, size=len(batches))

    mean = effects["effect"][members].mean(axis=1)
    return {"mean": noisy(mean, 1.0), "saturating": noisy(saturate(mean), 0.3),
            "signal": noisy(effects["signal"][members].mean(axis=1), np.sqrt(np.expm1(SIGNAL_SD ** 2))),
            "noise": noisy(effects["noise"][members].mean(axis=1), 0.1 * np.sqrt(np.expm1(NOISE_SD ** 2)))}


def one_study(truth: Truth, size: Size, rng: np.random.Generator, schemes=SCHEMES) -> dict:
    """One simulated study's intervals, per (measure, scheme)."""
    prompts = size.train_prompts
    effects = {"effect": rng.normal(size=prompts),
               "signal": rng.lognormal(-SIGNAL_SD ** 2 / 2, SIGNAL_SD, size=prompts),
               "noise": rng.lognormal(-NOISE_SD ** 2 / 2, NOISE_SD, size=prompts)}
    out = {}
    for scheme in schemes:
        if scheme in ("old", "delete_d"):
            batches = random_batches(size, rng)
        else:
            group = {"rounds_g1": 1, "rounds_g4": 4, "disjoint": size.batch}[scheme]
            batches, groups = intervals.partition_rounds(prompts, size.batch, size.batches, rng, group)
        values = batch_values(truth, effects, batches, rng)
        for measure in MEASURES:
            if scheme in ("old", "delete_d"):
                out[measure, scheme] = old_style(values, measure, batches, prompts, scheme == "delete_d")
                continue
            value, units = (intervals.units(values, "snr") if measure == "ratio"
                            else (float(values[measure].mean()), values[measure]))
            if scheme == "disjoint":  # each batch is one group: t over the groups' means
                own = [int(np.flatnonzero([set(b) == set(g) for g in groups])[0]) for b in batches]
                means = np.array([units[np.equal(own, g)].mean() for g in range(len(groups))])
                half = t_quantile(0.975, len(groups) - 1) * means.std(ddof=1) / np.sqrt(len(groups))
                out[measure, scheme] = [value, value - half, value + half]
            else:
                out[measure, scheme] = intervals.interval(value, units, batches, groups)
    return out


def coverage(studies: int = 2000, seed: int = 0, size: Size = DEFAULT, shares=SHARES, schemes=SCHEMES) -> dict:
    """Per (share, measure, scheme): the share of 95% intervals that hold the truth (``coverage``) and the mean
    half-width over 1.96 times the estimates' SD across studies (``width``; a calibrated interval's is about 1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for share in shares:
        truth = Truth.of(share, size, rng)
        results = [one_study(truth, size, rng, schemes) for _ in range(studies)]
        targets = {"mean": 0.0, "saturating": truth.saturating, "ratio": 1.0}  # both log-normals have mean 1
        for measure in MEASURES:
            for scheme in schemes:
                triples = np.array([r[measure, scheme] for r in results])
                covered = (triples[:, 1] <= targets[measure]) & (targets[measure] <= triples[:, 2])
                half = (triples[:, 2] - triples[:, 1]) / 2
                out[share, measure, scheme] = {"coverage": float(covered.mean()),
                                               "width": float(half.mean() / triples[:, 0].std() / 1.96)}
    return out


def table(results: dict, shares=SHARES, schemes=SCHEMES) -> str:
    """The results as a Markdown table: coverage (and width relative to a calibrated interval's) per scheme."""
    lines = ["| prompts' share | measure | " + " | ".join(schemes) + " |", "|---|---|" + "---:|" * len(schemes)]
    for share in shares:
        for measure in MEASURES:
            cells = [f"{results[share, measure, s]['coverage']:.3f} ({results[share, measure, s]['width']:.2f}x)"
                     for s in schemes]
            lines.append(f"| {share} | {measure} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m studies.gradient_quality.coverage",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", type=int, default=4000, help="simulated studies per prompts' share")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(table(coverage(args.studies, args.seed)))


if __name__ == "__main__":
    main()
