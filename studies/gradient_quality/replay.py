"""The gradient-quality study's replays and measures: every method's sampler replays each training prompt's pool
through the package's core on the same batches and orders, its update is built with the package's advantages as
verl's token-mean aggregates it, and is measured against the reference and held-out gradients; the SNR's noise comes
from fresh draws (with replacement) from the pools. Every measure keeps its per-batch values, from which
:mod:`studies.gradient_quality.intervals` makes its interval."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from reinforce_ada.core.advantage import outcome_advantages
from reinforce_ada.core.config import SamplerConfig
from reinforce_ada.core.messages import say
from reinforce_ada.core.metrics import CriticalPath
from reinforce_ada.core.step import run_step
from reinforce_ada.core.tracker import PassRateTracker, plan_first_requests
from studies.gradient_quality import intervals
from studies.gradient_quality.design import FIRST, PRIMARY, Design, Size, decide, grpo, matched_n
from studies.gradient_quality.pools import pool_key, read_pool
from studies.gradient_quality.sketches import read_sketched

_say = functools.partial(say, speaker="gradient_quality")


def load_split(pool_folder: Path, sketch_folder: Path, prompts: list[dict], k: int) -> list[dict]:
    """Each prompt's first k responses: rewards, sketched gradients and token counts."""
    rows = []
    for prompt in prompts:
        pool = read_pool(pool_folder, prompt)[:k]
        rows.append({"rewards": np.array([r["reward"] for r in pool], dtype=float),
                     "grads": read_sketched(sketch_folder, prompt)[:k].astype(np.float64),
                     "tokens": read_sketched(sketch_folder, prompt, "tokens")[:k].astype(float)})
        if not len(rows[-1]["rewards"]) == len(rows[-1]["grads"]) == k:
            raise ValueError(f"{pool_folder}: pool {pool_key(prompt)} has {len(pool)} responses and "
                             f"{len(rows[-1]['grads'])} sketched, not {k}: rerun to complete it")
    return rows


def pass_rate_gradient(rewards: np.ndarray, grads: np.ndarray) -> np.ndarray:
    """Unbiased estimate of grad p from K responses: the mean of (r_i - mean of the others) g_i."""
    k = len(rewards)
    others = (rewards.sum() - rewards) / (k - 1)
    return ((rewards - others)[:, None] * grads).mean(axis=0)


def replay(config: SamplerConfig, prompts: list[dict], order: list[np.ndarray], first_requests=None):
    """One step of the method on these prompts: each draws its first-half responses in ``order`` (a permutation of
    them, or indices drawn with replacement: fresh draws from the pool).

    Returns:
        (the update: sum of advantage x gradient over the kept samples over their token count, as verl's
        token-mean; the samples drawn; the critical path: the sum over rounds of each round's longest response,
        in tokens, as the rollout logs ``critical_path_tokens``).
    """
    import torch

    drawn = [0] * len(prompts)
    path = CriticalPath()

    def generate(requests):
        out, lengths = {}, []
        for p, count in requests.items():
            rows = order[p][drawn[p]:drawn[p] + count]
            out[p] = prompts[p]["rewards"][rows].tolist()
            lengths += prompts[p]["tokens"][rows].tolist()
            drawn[p] += count
        path.add_round(lengths)
        return out

    result = run_step([str(i) for i in range(len(prompts))], config, generate, first_requests=first_requests)
    update, tokens = 0.0, 0.0
    for p, group in enumerate(result.groups):
        if group.dropped or not group.kept:
            continue
        rows = order[p][group.kept]
        rewards = torch.tensor(prompts[p]["rewards"][rows])
        advantages = outcome_advantages(rewards, [group.stats] * len(rows), torch.ones(len(rows), 1),
                                        norm_by_std=False)[:, 0].numpy()
        update = update + (advantages[:, None] * prompts[p]["grads"][rows]).sum(axis=0)
        tokens += prompts[p]["tokens"][rows].sum()
    update = update / tokens if tokens else np.zeros(prompts[0]["grads"].shape[1])
    return update, sum(drawn), path.metrics()["critical_path_tokens"]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The cosine of two vectors; 0 if either is zero."""
    norm = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / norm) if norm else 0.0


def batch_measures(config: SamplerConfig, prompts: list[dict], orders: list, draws: list, reference: np.ndarray,
                   heldout_grad: np.ndarray, first_requests=None) -> dict:
    """One method's measures on one batch.

    Args:
        config: The method.
        prompts: The batch's training prompts (rewards, sketched gradients, token counts of their replay halves).
        orders: Per replay, per prompt, a permutation of its replay half: the replays the cosines, the gain and the
            responses drawn are measured on (a draw from a permutation of an i.i.d. pool is a fresh draw).
        draws: Per replay, per prompt, indices into its replay half drawn with replacement: the replays the SNR is
            measured on (each response independent given the pool, so that the spread of the updates is that of
            fresh draws, whatever share of the pool a method draws). ``orders`` here gives the SNR of replays of one
            fixed pool, as the study measured it until 2026-12-06.
        reference: The batch's reference gradient (the sum of its prompts').
        heldout_grad: The held-out gradient.
        first_requests: Est's first requests, from the tracker.

    Returns:
        The batch's ``cos_train``, ``cos_heldout``, ``gain`` (means over ``orders``' replays), ``signal`` (|E u|^2)
        and ``noise`` (E|u - E u|^2, unbiased, over ``draws``' replays), ``samples_per_prompt`` and
        ``critical_path_tokens`` (means over ``orders``' replays).
    """
    updates, drawn, paths = zip(*(replay(config, prompts, order, first_requests) for order in orders))
    fresh = np.stack([replay(config, prompts, draw, first_requests)[0] for draw in draws])
    mean = fresh.mean(axis=0)
    noise = float(((fresh - mean) ** 2).sum()) / (len(fresh) - 1)
    unit = [u / np.linalg.norm(u) if np.linalg.norm(u) else u for u in updates]
    return {
        "cos_train": float(np.mean([cosine(u, reference) for u in updates])),
        "cos_heldout": float(np.mean([cosine(u, heldout_grad) for u in updates])),
        "gain": float(np.mean([u @ heldout_grad for u in unit])),
        # |E u|^2: the replays' mean has |mean|^2 = |E u|^2 + noise / replays in expectation
        "signal": float(mean @ mean) - noise / len(fresh),
        "noise": noise,
        "samples_per_prompt": float(np.mean(drawn)) / len(prompts),
        "critical_path_tokens": float(np.mean(paths)),
    }


def summary(per_batch: list[dict], batches: list, groups: list) -> dict:
    """A method's measures with their intervals, and the per-batch values they come from."""
    values = {key: [row[key] for row in per_batch] for key in per_batch[0]}
    out = {key: float(np.mean(values[key])) for key in ("samples_per_prompt", "critical_path_tokens") if key in values}
    for key in intervals.MEASURES:
        value, units = intervals.units(values, key)
        out[key] = intervals.interval(value, units, batches, groups)
    parts = intervals.variance(intervals.units(values, PRIMARY)[1], batches, groups)
    out["prompt_share"] = parts["prompts"] / parts["variance"] if parts["variance"] else 0.0
    return {**out, "per_batch": values}


PAIRED = ("cos_heldout", "cos_train", "snr", "snr_per_sample")  # the measures paired differences are taken of


def analyse(train: list[dict], heldout: list[dict], size: Size, base_rates: list[float], design: Design = FIRST,
            seed: int = 0) -> dict:
    """Every method of ``design`` on the same batches and replays; per batch, its measures; their intervals over the
    groups of training prompts and the rounds (:mod:`studies.gradient_quality.intervals`)."""
    half = size.train_k // 2
    quarter = half // 2  # the reference half's own halves, for its split-half reliability
    for row in train:  # reference half: the second half of each pool, in pool order
        row["reference"] = pass_rate_gradient(row["rewards"][half:], row["grads"][half:])
        row["ref_a"] = pass_rate_gradient(row["rewards"][half:half + quarter], row["grads"][half:half + quarter])
        row["ref_b"] = pass_rate_gradient(row["rewards"][half + quarter:], row["grads"][half + quarter:])
    heldout_grad = sum(pass_rate_gradient(q["rewards"], q["grads"]) for q in heldout)
    held_half = size.heldout_k // 2
    held_a = sum(pass_rate_gradient(q["rewards"][:held_half], q["grads"][:held_half]) for q in heldout)
    held_b = sum(pass_rate_gradient(q["rewards"][held_half:], q["grads"][held_half:]) for q in heldout)
    rng = np.random.default_rng(seed)
    batches, groups = intervals.partition_rounds(len(train), size.batch, size.batches, rng, size.group)
    longest = max([half, *(config.n_max for config in design.candidates.values())])
    orders = [[[rng.permutation(half) for _ in range(size.batch)] for _ in range(size.replays_per_batch)]
              for _ in batches]
    draws = [[[rng.integers(0, half, size=longest) for _ in range(size.batch)] for _ in range(size.replays_per_batch)]
             for _ in batches]
    firsts = []
    for batch in batches:  # Est: one earlier visit, the base model's 16 samples of each prompt (data prep)
        tracker = PassRateTracker()
        for x in batch:
            tracker.update(str(x), 16, round(16 * base_rates[x]))
        firsts.append(lambda config, batch=batch, tracker=tracker: plan_first_requests(
            tracker, [str(x) for x in batch], config) if config.variant == "est" else None)

    def measured(name: str, config: SamplerConfig) -> list[dict]:
        rows = []
        for b, batch in enumerate(batches):
            prompts = [train[x] for x in batch]
            rows.append(batch_measures(config, prompts, orders[b], draws[b], sum(p["reference"] for p in prompts),
                                       heldout_grad, firsts[b](config)))
        _say(f"analysis: {name} replayed on {len(batches)} batches")
        return rows

    per_batch = {name: measured(name, config) for name, config in design.candidates.items()}
    drew = {name: float(np.mean([row["samples_per_prompt"] for row in per_batch[name]])) for name in design.matched}
    matched = {name: f"grpo_n{matched_n(drew[name], half)}" for name in design.matched}
    grpo_ns = sorted(set(design.grpo) | {int(m.removeprefix("grpo_n")) for m in matched.values()})
    per_batch = {**{f"grpo_n{k}": measured(f"grpo_n{k}", grpo(k)) for k in grpo_ns}, **per_batch}
    methods = {name: summary(rows, batches, groups) for name, rows in per_batch.items()}
    values = {name: m["per_batch"] for name, m in methods.items()}

    def paired(name: str, reference: str) -> dict:
        """The difference of two methods' measures on the same batches and replays, with its interval."""
        return {key: intervals.estimate(values, key, name, batches, groups, reference) for key in PAIRED}

    reliability = {
        "train_split_half": cosine(sum(r["ref_a"] for r in train), sum(r["ref_b"] for r in train)),
        "heldout_split_half": cosine(held_a, held_b),
        "train_vs_heldout": cosine(sum(r["reference"] for r in train), heldout_grad),
    }
    for key in ("train_split_half", "heldout_split_half"):  # Spearman-Brown: the reliability of the whole reference
        rho = reliability[key]
        reliability[key.replace("split_half", "full")] = 2 * rho / (1 + rho) if rho > -1 else float("nan")
    out = {"design": design.name, "interval": intervals.METHOD, "batches": [[int(x) for x in b] for b in batches],
           "groups": [[int(x) for x in g] for g in groups], "matched": matched, "checks": list(design.checks),
           "reliability": reliability, "methods": methods,
           "paired": {reference: {name: paired(name, reference) for name in methods if name != reference}
                      for reference in design.references},
           "paired_matched": {name: {"reference": matched[name], **paired(name, matched[name])} for name in matched},
           "pass_rate_train": float(np.mean([r["rewards"].mean() for r in train])),
           "pass_rate_heldout": float(np.mean([q["rewards"].mean() for q in heldout]))}
    if design.decides:
        out["decision"] = decide(out["paired_matched"], design.checks)
    return out
