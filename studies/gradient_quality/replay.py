"""The gradient-quality study's replays and measures: every method's sampler replays each training prompt's pool
through the package's core on the same batches and orders, its update is built with the package's advantages as
verl's token-mean aggregates it, and is measured against the reference and held-out gradients, with intervals
from a jackknife over training prompts."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from reinforce_ada.core.advantage import outcome_advantages
from reinforce_ada.core.config import SamplerConfig
from reinforce_ada.core.messages import say
from reinforce_ada.core.step import run_step
from reinforce_ada.core.tracker import PassRateTracker, plan_first_requests
from studies.gradient_quality.design import PAIRED_REFERENCES, Size, method_configs
from studies.gradient_quality.pools import pool_key, read_pool
from studies.gradient_quality.sketches import read_sketched
from studies.stats import t_quantile

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
    """One step of the method on these prompts: each draws its first-half responses in ``order``.

    Returns:
        (the update: sum of advantage x gradient over the kept samples over their token count, as verl's
        token-mean; the samples drawn).
    """
    import torch

    drawn = [0] * len(prompts)

    def generate(requests):
        out = {}
        for p, count in requests.items():
            out[p] = prompts[p]["rewards"][order[p][drawn[p]:drawn[p] + count]].tolist()
            drawn[p] += count
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
    return (update / tokens if tokens else np.zeros(prompts[0]["grads"].shape[1])), sum(drawn)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The cosine of two vectors; 0 if either is zero."""
    norm = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / norm) if norm else 0.0


def analyse(train: list[dict], heldout: list[dict], size: Size, base_rates: list[float], seed: int = 0) -> dict:
    """Every method on the same batches and replay orders; per batch, its measures; intervals by a jackknife over
    training prompts."""
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
    batches = [rng.choice(len(train), size.batch, replace=False) for _ in range(size.batches)]
    orders = [[[rng.permutation(half) for _ in range(size.batch)] for _ in range(size.replays_per_batch)]
              for _ in range(size.batches)]
    # the matched GRPO draws what balance draws on these pools
    balance_drawn = [replay(SamplerConfig(), [train[x] for x in b], o)[1] for b, os_ in zip(batches, orders)
                     for o in os_]
    matched = int(min(half, max(4, round(np.mean(balance_drawn) / size.batch))))
    configs = method_configs(matched)
    per_batch: dict[str, list[dict]] = {name: [] for name in configs}
    for b, (batch, batch_orders) in enumerate(zip(batches, orders)):
        prompts = [train[x] for x in batch]
        reference = sum(p["reference"] for p in prompts)
        tracker = PassRateTracker()  # Est: one earlier visit, the base model's 16 samples of each prompt (data prep)
        for x in batch:
            tracker.update(str(x), 16, round(16 * base_rates[x]))
        for name, config in configs.items():
            firsts = plan_first_requests(tracker, [str(x) for x in batch], config) if config.variant == "est" else None
            updates, drawn = zip(*(replay(config, prompts, o, firsts) for o in batch_orders))
            updates = np.stack(updates)
            mean = updates.mean(axis=0)
            noise = float(((updates - mean) ** 2).sum(axis=1).sum()) / (len(updates) - 1)  # E|u - E u|^2, unbiased
            unit = [u / np.linalg.norm(u) if np.linalg.norm(u) else u for u in updates]
            per_batch[name].append({
                "cos_train": float(np.mean([cosine(u, reference) for u in updates])),
                "cos_heldout": float(np.mean([cosine(u, heldout_grad) for u in updates])),
                "gain": float(np.mean([u @ heldout_grad for u in unit])),
                # |E u|^2: the replays' mean has |mean|^2 = |E u|^2 + noise / replays in expectation
                "signal": float(mean @ mean) - noise / len(updates),
                "noise": noise,
                "samples_per_prompt": float(np.mean(drawn)) / size.batch,
            })
        if (b + 1) % 10 == 0 or b + 1 == len(batches):
            _say(f"analysis: {b + 1}/{len(batches)} batches replayed")

    # batches share prompts (each prompt is in about batch x batches / prompts of them), so batches are not
    # independent units: intervals come from a jackknife over training prompts, each estimate recomputed without
    # the batches that hold one prompt
    holds = [set(int(x) for x in b) for b in batches]
    leave_out = [[i for i, members in enumerate(holds) if prompt not in members] for prompt in range(len(train))]

    def jackknife(estimate) -> list[float]:
        """``estimate(batch indices)`` over every batch, and its 95% interval."""
        value = float(estimate(list(range(len(batches)))))
        partial = np.array([estimate(kept) for kept in leave_out if kept])
        n = len(partial)
        half = float(t_quantile(0.975, n - 1) * np.sqrt((n - 1) / n * ((partial - partial.mean()) ** 2).sum()))
        return [value, value - half, value + half]

    def measure(rows: list[dict], key: str, idx: list[int]) -> float:
        """A method's measure over the batches ``idx``: the mean of the per-batch values, or for ``snr`` the update's
        signal-to-noise ratio, mean |E u|^2 over mean E|u - E u|^2."""
        if key == "snr":
            return float(np.mean([rows[i]["signal"] for i in idx]) / np.mean([rows[i]["noise"] for i in idx]))
        return float(np.mean([rows[i][key] for i in idx]))

    def summary(rows: list[dict]) -> dict:
        samples = float(np.mean([r["samples_per_prompt"] for r in rows]))
        result = {key: jackknife(lambda idx, key=key: measure(rows, key, idx))
                  for key in ("cos_train", "cos_heldout", "gain", "snr")}
        return {"samples_per_prompt": samples, **result, "snr_per_sample": [v / samples for v in result["snr"]]}

    def paired(name: str, reference: str, key: str) -> list[float]:
        """The difference of two methods' measures, each over the same batches in every jackknife replicate."""
        return jackknife(lambda idx: measure(per_batch[name], key, idx) - measure(per_batch[reference], key, idx))

    differences = {reference: {name: {key: paired(name, reference, key) for key in ("cos_heldout", "cos_train", "snr")}
                               for name in configs if name != reference} for reference in PAIRED_REFERENCES}

    reliability = {
        "train_split_half": cosine(sum(r["ref_a"] for r in train), sum(r["ref_b"] for r in train)),
        "heldout_split_half": cosine(held_a, held_b),
        "train_vs_heldout": cosine(sum(r["reference"] for r in train), heldout_grad),
    }
    for key in ("train_split_half", "heldout_split_half"):  # Spearman-Brown: the reliability of the whole reference
        rho = reliability[key]
        reliability[key.replace("split_half", "full")] = 2 * rho / (1 + rho) if rho > -1 else float("nan")
    return {"matched_n": matched, "balance_samples_per_prompt": float(np.mean(balance_drawn)) / size.batch,
            "reliability": reliability, "methods": {name: summary(rows) for name, rows in per_batch.items()},
            "paired": differences,
            "pass_rate_train": float(np.mean([r["rewards"].mean() for r in train])),
            "pass_rate_heldout": float(np.mean([q["rewards"].mean() for q in heldout]))}
