"""The third protocol's equal samples: where a run's cumulative training responses reach the budget and each mark,
what a GRPO arm draws a step, the area under a held-out curve against responses drawn, and the learning-rate rule
that reads those areas."""

from __future__ import annotations

import math

from studies.learning.protocol import Size


def grpo_draw(method: str, size: Size) -> int | None:
    """Responses a GRPO-n<k> arm draws each step (k for each of the step's prompts); None for an adaptive arm, whose
    draw is known only once it is logged."""
    if method.startswith("grpo_n") and method.removeprefix("grpo_n").isdigit():
        return int(method.removeprefix("grpo_n")) * size.run.batch
    return None


def steps_to_budget(method: str, size: Size) -> int:
    """The steps an arm may take: a GRPO arm's exact count to the budget, an adaptive arm's bound (``run.steps``).

    Raises:
        ValueError: If a GRPO arm would need more than ``run.steps`` steps to reach the budget.
    """
    draw = grpo_draw(method, size)
    if draw is None:
        return size.run.steps
    steps = math.ceil(size.budget / draw)
    if steps > size.run.steps:
        raise ValueError(f"{method} draws {draw} a step: {steps} steps to {size.budget} responses, more than the "
                         f"protocol's {size.run.steps}")
    return steps


def crossings(drawn: dict[int, float], marks: tuple[int, ...]) -> dict[int, tuple[int, float]]:
    """Mark -> (the first step whose cumulative responses reach it, the cumulative responses after that step).

    Args:
        drawn: Step (1, 2, ...) -> the responses drawn in that step (``reinforce_ada/samples_total``).
        marks: The marks, in responses.

    Returns:
        The marks reached so far; a mark reached mid-step counts at the end of that step, with its overshoot.
    """
    reached, total = {}, 0.0
    for step in sorted(drawn):
        total += drawn[step]
        for mark in marks:
            if mark not in reached and total >= mark:
                reached[mark] = (step, total)
    return reached


def auc_over_marks(curve: dict[int, float], marks: tuple[int, ...]) -> float:
    """The area under a held-out curve against responses drawn, by the trapezoid rule over mark 0 (the start) and
    ``marks``, divided by the last mark: the curve's mean height, in the curve's unit (the primary measure).

    Args:
        curve: Mark (0 and each of ``marks``) -> held-out accuracy there.

    Raises:
        ValueError: If the curve lacks mark 0 or one of ``marks``.
    """
    points = (0, *marks)
    missing = [m for m in points if m not in curve]
    if missing:
        raise ValueError(f"a curve at marks {list(points)} is needed, it lacks {missing}")
    return sum((b - a) * (curve[a] + curve[b]) / 2 for a, b in zip(points, points[1:])) / points[-1]


def auc_at_actual(points: list[tuple[float, float]], upto: float) -> float:
    """The area under a curve of (cumulative responses, accuracy) points over 0..``upto``, linear between points
    and cut at ``upto``, divided by ``upto`` (the secondary measure, each evaluation at its actual responses).

    Raises:
        ValueError: If the points do not start at 0 responses or end before ``upto``.
    """
    points = sorted(points)
    if not points or points[0][0] != 0 or points[-1][0] < upto or upto <= 0:
        raise ValueError(f"points from 0 to at least {upto} responses are needed, got {[p[0] for p in points]}")
    area = 0.0
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 >= upto:
            break
        end = min(x1, upto)
        y_end = y0 + (y1 - y0) * (end - x0) / (x1 - x0)
        area += (end - x0) * (y0 + y_end) / 2
    return area / upto


def choose_lr_by_area(rates: tuple[float, ...], curves: dict[float, dict[int, float]], marks: tuple[int, ...],
                      max_drop: float) -> float:
    """The third protocol's rule: among the swept rates whose held-out curve never drops by more than ``max_drop``
    between consecutive marks, the one with the largest area against responses; the lowest rate if every curve
    drops (ties go to the earlier rate in ``rates``)."""
    limit, points = round(100 * max_drop, 6), (0, *marks)
    steady = [lr for lr in rates
              if all(round(100 * (curves[lr][a] - curves[lr][b]), 6) <= limit for a, b in zip(points, points[1:]))]
    if not steady:
        return min(rates)
    return max(steady, key=lambda lr: (auc_over_marks(curves[lr], marks), -rates.index(lr)))


def save_every(method: str, size: Size) -> int:
    """How often (in steps) a run saves its checkpoint so that the step crossing each mark is saved: a GRPO arm's
    crossing steps are known in advance (GRPO-n4: every 16th step), so it saves at their greatest common divisor; an
    adaptive arm's are not, so it saves every step (each save costs a step a few seconds; step times are read
    without it)."""
    draw = grpo_draw(method, size)
    if draw is None:
        return 1
    steps = {s: draw for s in range(1, steps_to_budget(method, size) + 1)}
    return math.gcd(*(step for step, _ in crossings(steps, size.marks).values()))
