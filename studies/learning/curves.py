"""The learning study's figure, ``curves.png``: each method's held-out accuracy (mean and 95% interval over its
finished seeds, their number in the legend) against training step, responses sampled and training wall time."""

from __future__ import annotations

import math
from pathlib import Path

from studies.learning.protocol import Size
from studies.learning.summary import method_order
from studies.stats import mean_ci


def run_counts(rows: list[dict]) -> dict[str, int]:
    """Method -> how many of its runs (seeds, or starts) are finished, which its curve averages over."""
    counts: dict[str, set] = {}
    for r in rows:
        if r["finished"]:
            counts.setdefault(r["method"], set()).add(r["seed"])
    return {method: len(seeds) for method, seeds in counts.items()}


def plot(rows: list[dict], size: Size, path: Path, key: str = "step", over: str = "seeds",
         time_label: str = "training wall time (min)") -> None:
    """Draws the finished runs' held-out curves into ``path``.

    Args:
        rows: One row per method, seed and evaluated step (:func:`studies.learning.records.collect`); unfinished
            runs' rows are left out.
        size: The sizes the rows were measured with (its ``eval_k`` labels the accuracy axis).
        path: The PNG file to write.
        key: What a point averages over seeds: the rows of one ``step``, or (the third protocol) of one ``mark`` of
            responses, whose step differs between seeds; each axis shows the points' mean step, responses and time.
        over: What the interval is over (the third protocol's unit is a start).
        time_label: The time axis's label (the rows' ``wall_s`` is summed step time).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    counts = run_counts(rows)
    for method in sorted({r["method"] for r in rows}, key=method_order):
        mine = [r for r in rows if r["method"] == method and r["finished"]]
        points = sorted({r[key] for r in mine})
        if not points:
            continue
        at = [[r for r in mine if r[key] == p] for p in points]
        steps = [mean_ci([r["step"] for r in group])[0] for group in at]
        acc = [100 * mean_ci([r["heldout_acc"] for r in group])[0] for group in at]
        ci = [100 * mean_ci([r["heldout_acc"] for r in group])[1] for group in at]
        ci = [0.0 if math.isnan(c) else c for c in ci]
        for ax, x in zip(axes, (steps, [mean_ci([r["samples"] for r in g])[0] for g in at],
                                [mean_ci([r["wall_s"] for r in g])[0] / 60 for g in at])):
            ax.errorbar(x, acc, yerr=ci, marker="o", capsize=3, label=f"{method} ({counts[method]} {over})")
    for ax, label in zip(axes, ("training step", "samples generated", time_label)):
        ax.set_xlabel(label)
        ax.set_ylabel(f"held-out Avg@{size.run.eval_k}, filtered (%)")
        ax.grid(alpha=0.3)
    axes[0].legend()
    title = f"Held-out accuracy, mean and 95% interval over {over}"
    if len(set(counts.values())) > 1:  # a mean over other starts differs at the start too: the tables pair them
        title += f" (each method over its own {over}; the paired tables compare methods on the same ones)"
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
