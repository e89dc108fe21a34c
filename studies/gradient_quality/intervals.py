"""The gradient-quality study's intervals: how its batches are drawn and how each estimate's 95% interval comes from
its per-batch values, with the training prompts as the sampled units.

The training prompts are split once into random groups (of ``Size.group`` prompts), and the batches are drawn in
rounds: each round is a random partition of the groups into batches, so every prompt is in exactly one batch of each
round. An estimate is the mean over batches of a per-batch value, or a ratio of such means (the SNR). Its variance
has two parts, estimated separately:

- **What the replays and the batches' make-up add** (given the prompts): the rounds are independent given the
  prompts, and each round's mean covers every prompt once, so the variance of the round means over the number of
  rounds estimates it.
- **What the prompts sampled add**: each group's deviation, its batches' values minus their rounds' means averaged
  over the rounds, is in expectation its own effect times ``kappa = (G - k) / (k (G - 1))`` (G groups, k of them a
  batch); the spread of these deviations over groups, less the part their rounds' noise adds (each group's variance
  over rounds, over the number of rounds), over ``kappa^2``, estimates the groups' variance.

A ratio of means is linearized first (its first-order expansion in the batch values), and a paired difference uses
the difference of the two methods' per-batch values (or of their linearizations). The interval is Student's t with
Satterthwaite's degrees of freedom. :mod:`studies.gradient_quality.coverage` simulates the study's design with a
known truth and measures this interval's coverage against the jackknife the study used before, and against other
group sizes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from studies.stats import t_quantile

MEANS = ("cos_train", "cos_heldout", "gain")  # measures that are means of per-batch values
# measures that are ratios of per-batch means: numerator, then the denominators
RATIOS = {"snr": ("signal", ("noise",)), "snr_per_sample": ("signal", ("noise", "samples_per_prompt"))}
MEASURES = (*MEANS, *RATIOS)
METHOD = "prompts_and_rounds"  # the name results record for this interval


def partition_rounds(prompts: int, batch: int, batches: int, rng: np.random.Generator,
                     group: int = 1) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The study's batches: its prompts split once into random groups of ``group``, then ``batches`` batches of
    ``batch`` prompts in rounds, each round a random partition of the groups into batches.

    Returns:
        ``(batches, groups)``: each batch's prompts, round by round, and each group's prompts.

    Raises:
        ValueError: If the prompts do not split into groups and at least two batches a round, or the batches into
            at least two rounds.
    """
    per_round = prompts // batch
    if prompts % batch or batch % group or per_round < 2 or batches % per_round or batches // per_round < 2:
        raise ValueError(f"{prompts} prompts in batches of {batch} made of groups of {group}: need prompts a multiple "
                         f"of the batch and the batch of the group, at least two batches a round and {batches} "
                         "batches a multiple of them, at least two rounds")
    groups = list(rng.permutation(prompts).reshape(prompts // group, group))
    out = []
    for _ in range(batches // per_round):
        for chosen in rng.permutation(len(groups)).reshape(per_round, batch // group):
            out.append(np.concatenate([groups[g] for g in chosen]))
    return out, groups


def units(per_batch: Mapping[str, Sequence[float]], key: str) -> tuple[float, np.ndarray]:
    """A measure's estimate and its per-batch units: the values themselves for a mean, the first-order expansion of
    the ratio for a ratio (their mean is 0; the estimate's error is, to first order, their mean).

    Args:
        per_batch: One method's per-batch values by name (``cos_heldout``, ``signal``, ``noise``, ...).
        key: One of :data:`MEASURES`.
    """
    if key in MEANS:
        values = np.asarray(per_batch[key], dtype=float)
        return float(values.mean()), values
    numerator_key, denominator_keys = RATIOS[key]
    numerator = np.asarray(per_batch[numerator_key], dtype=float)
    denominators = [np.asarray(per_batch[name], dtype=float) for name in denominator_keys]
    below = float(np.prod([d.mean() for d in denominators]))
    if below == 0:  # no noise in any batch (every update the same): no ratio
        return float("nan"), np.zeros(len(numerator))
    value = float(numerator.mean()) / below
    linear = (numerator - numerator.mean()) / below
    for d in denominators:
        linear = linear - value * (d - d.mean()) / d.mean()
    return value, linear


def variance(values: np.ndarray, batches: Sequence[Sequence[int]], groups: Sequence[Sequence[int]]) -> dict:
    """The variance of the mean of ``values`` (one per batch, in :func:`partition_rounds`' order) over the groups of
    prompts sampled and the replays, its parts and degrees of freedom.

    The groups' part is ``Q / (kappa^2 G (G - 1))``, ``Q`` the sum over the G groups of their mean deviation
    squared less its variance over rounds over the rounds (each term unbiased for ``kappa^2`` times the group's
    effect squared), floored at 0; its degrees of freedom are Satterthwaite's, ``2 Q^2 / (G var(terms))`` (at most
    G - 1), and the rounds' part has R - 1.

    Returns:
        ``{"variance", "prompts", "rounds", "df"}``: the total, the prompts' part, the rounds' part (given the
        prompts) and the total's degrees of freedom (Satterthwaite).
    """
    values = np.asarray(values, dtype=float)
    unit_of = {int(p): g for g, members in enumerate(groups) for p in members}
    count, per_batch = len(groups), len(batches[0]) // len(groups[0])  # groups, and groups a batch
    per_round = count // per_batch
    rounds = len(values) // per_round
    table = values.reshape(rounds, per_round)
    round_means = table.mean(axis=1)
    deviations = np.empty((rounds, count))  # each group's batch value minus its round's mean, per round
    for index, members in enumerate(batches):
        held = sorted({unit_of[int(p)] for p in members})
        deviations[index // per_round, held] = table.flat[index] - round_means[index // per_round]
    kappa = (count - per_batch) / (per_batch * (count - 1))
    terms = deviations.mean(axis=0) ** 2 - deviations.var(axis=0, ddof=1) / rounds
    spread = float(terms.sum())
    prompt_part = max(0.0, spread) / (kappa ** 2 * count * (count - 1))
    spread_var = count * float(terms.var(ddof=1))
    df_prompts = min(count - 1.0, max(1.0, 2 * spread ** 2 / spread_var)) if spread > 0 and spread_var > 0 else 1.0
    round_part = float(round_means.var(ddof=1)) / rounds
    total = prompt_part + round_part
    df = total ** 2 / (prompt_part ** 2 / df_prompts + round_part ** 2 / (rounds - 1)) if total > 0 else 1.0
    return {"variance": total, "prompts": prompt_part, "rounds": round_part, "df": df}


def interval(value: float, values: np.ndarray, batches: Sequence[Sequence[int]], groups: Sequence[Sequence[int]],
             level: float = 0.95) -> list[float]:
    """``[value, low, high]``: the estimate and its Student-t interval from :func:`variance`."""
    parts = variance(values, batches, groups)
    half = t_quantile(0.5 + level / 2, max(1, int(parts["df"]))) * float(np.sqrt(parts["variance"]))
    return [value, value - half, value + half]


def estimate(per_batch: Mapping[str, Mapping[str, Sequence[float]]], key: str, method: str,
             batches: Sequence[Sequence[int]], groups: Sequence[Sequence[int]],
             reference: str | None = None) -> list[float]:
    """A method's measure, or its paired difference to ``reference`` on the same batches, with its interval.

    Args:
        per_batch: Per method, its per-batch values by name.
        key: One of :data:`MEASURES`.
        method: The method measured.
        batches: The batches' training prompts, round by round.
        groups: The groups of training prompts the batches are made of.
        reference: The method subtracted, if a paired difference.
    """
    value, values = units(per_batch[method], key)
    if reference is not None:
        other, other_values = units(per_batch[reference], key)
        value, values = value - other, values - other_values
    return interval(value, values, batches, groups)


def from_json(checkpoint: Mapping, key: str, method: str, reference: str | None = None) -> list[float]:
    """An interval recomputed from a checkpoint's results alone (its ``batches`` and every method's ``per_batch``):
    what the report printed for ``method`` (or its paired difference to ``reference``)."""
    per_batch = {name: m["per_batch"] for name, m in checkpoint["methods"].items()}
    return estimate(per_batch, key, method, checkpoint["batches"], checkpoint["groups"], reference)
