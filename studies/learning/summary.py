"""How the learning study's report condenses its rows, shared by both protocols' sections and the curves: a table
cell of a mean and its 95% interval, each run's mean per training step, and the order methods are listed in."""

from __future__ import annotations

import math

from studies.stats import mean_ci


def mean_cell(values: list[float], scale: float = 100.0, digits: int = 1, sign: str = "") -> str:
    """A table cell: the mean of ``values`` and its 95% interval (Student t), each times ``scale``.

    Args:
        values: One value per seed or run; none gives an empty cell, one a mean without an interval.
        scale: Factor applied to the mean and the interval (100 for a fraction shown in %).
        digits: Digits after the decimal point.
        sign: A format sign option (``"+"`` shows the sign of a difference).
    """
    if not values:
        return ""
    mean, ci = mean_ci(values)
    return f"{scale * mean:{sign}.{digits}f}" + ("" if math.isnan(ci) else f" ± {scale * ci:.{digits}f}")


def per_run_means(per_step: list[dict]) -> dict[tuple[str, int], dict[str, float]]:
    """(method, seed) -> each per-step value averaged over the run's steps."""
    runs: dict[tuple[str, int], list[dict]] = {}
    for row in per_step:
        runs.setdefault((row["method"], row["seed"]), []).append(row)
    return {key: {name: sum(r[name] for r in steps) / len(steps)
                  for name in ("samples", "tokens", "wall_s", "signal_frac")}
            for key, steps in runs.items()}


def method_order(method: str) -> tuple[int, str]:
    """The sort key of a method in tables and legends: GRPO-n4, the other GRPOs, balance, pos, est, the rest."""
    order = {"grpo_n4": 0, "balance": 2, "pos": 3, "est": 4}
    return order.get(method, 1 if method.startswith("grpo_n") else 5), method
