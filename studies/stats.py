"""The statistics the studies' reports use: intervals, paired differences, seeds needed, bootstrap.

Standard library only (the CPU stack has no scipy): Student's t comes from its density, integrated
numerically, which is exact to far more digits than any report prints.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Sequence


def t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    # P(|T| <= |x|) = I_{x^2/(df+x^2)}(1/2, df/2): integrate the density on [0, |x|] instead (Simpson)
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def density(t: float) -> float:
        return math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))

    a = abs(x)
    if a == 0:
        return 0.5
    # substitute t = tan(u): the tail is bounded, so a fixed grid over [0, atan(a)] is accurate
    top, steps = math.atan(a), 200  # exact to about 1e-12 (checked against 2000)
    h = top / steps
    total = 0.0
    for i in range(steps + 1):
        u = i * h
        value = density(math.tan(u)) / math.cos(u) ** 2
        total += value * (1 if i in (0, steps) else 4 if i % 2 else 2)
    half = total * h / 3
    return 0.5 + half if x > 0 else 0.5 - half


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: int) -> float:
    """The x with P(T <= x) = p (bisection on :func:`t_cdf`)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Mean and the half-width of its Student-t interval (nan for a single value)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = math.fsum(values) / n
    if n < 2:
        return mean, math.nan
    return mean, t_quantile(0.5 + level / 2, n - 1) * sd(values) / math.sqrt(n)


def sd(values: Sequence[float]) -> float:
    """Sample standard deviation (n - 1)."""
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def excludes_zero(values: Sequence[float], level: float = 0.95) -> bool:
    """True if the Student-t interval of the mean of ``values`` lies wholly on one side of 0."""
    mean, half = mean_ci(values, level)
    return not math.isnan(half) and abs(mean) > half


def seeds_needed(paired_sd: float, effect: float, alpha: float = 0.05, power: float = 0.8, most: int = 10_000) -> int:
    """Seeds a two-sided paired t-test at ``alpha`` needs to detect ``effect`` with ``power``.

    The smallest m with t_{1-alpha/2, m-1} + t_{power, m-1} <= sqrt(m) * effect / paired_sd (the usual
    approximation of the noncentral t; it errs by under one seed from about 5 seeds on).

    Args:
        paired_sd: Standard deviation of the per-seed differences (from a pilot).
        effect: The difference to resolve, in the same unit.
    """
    if effect <= 0 or paired_sd < 0:
        raise ValueError(f"need effect > 0 and paired_sd >= 0, got {effect}, {paired_sd}")
    if paired_sd == 0:
        return 2
    def enough(m: int) -> bool:  # monotone in m
        return t_quantile(1 - alpha / 2, m - 1) + t_quantile(power, m - 1) <= math.sqrt(m) * effect / paired_sd

    low, high = 1, 2  # enough(high), not enough(low); 1 seed has no interval
    while not enough(high):
        if high >= most:
            return most
        low, high = high, min(2 * high, most)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return high


def bootstrap_ci(
    units: Sequence, statistic: Callable[[Sequence], float], resamples: int = 1000, level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """The statistic on ``units`` and its percentile bootstrap interval, resampling the units with replacement.

    Returns:
        ``(estimate, low, high)``.
    """
    rng = random.Random(seed)
    estimate = statistic(units)
    draws = sorted(statistic([units[rng.randrange(len(units))] for _ in units]) for _ in range(resamples))
    tail = (1 - level) / 2
    low = draws[max(0, int(math.floor(tail * resamples)))]
    high = draws[min(resamples - 1, int(math.ceil((1 - tail) * resamples)) - 1)]
    return estimate, low, high
