"""Math reward for verl: math-verify on the last ``\\boxed{...}`` of the response.

Use it as verl's custom reward function::

    reward.custom_reward_function.path=<path of this file> reward.custom_reward_function.name=compute_score

:func:`compute_score` returns 1.0 when the last boxed expression of the response is
mathematically equal to the gold answer (math-verify), else 0.0. It never raises: an empty
response, no ``\\boxed{}``, an answer math-verify cannot parse, a check that exceeds its time
limit, or a non-string input all score 0.0, and the returned dict says which (verl keeps the
extra keys as ``reward_extra_info``, one value per sample, so they can be counted).

Each check runs in a checker process (:mod:`reinforce_ada.tasks.checkers`) with a time limit that
counts only its own running time, so that outcomes are the same under any number of verl's
reward threads as when answers are checked one by one, and an answer whose check cannot finish
costs only itself ("timeout").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from reinforce_ada.core.messages import say_once
from reinforce_ada.tasks import checkers

TIMEOUT_SECONDS = float(os.environ.get("REINFORCE_ADA_VERIFY_TIMEOUT", "5"))
OUTCOMES = ("correct", "wrong", "no_answer", "unparsable", "timeout", "bad_input")


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces balanced."""
    for marker in ("\\boxed{", "\\fbox{"):
        start = text.rfind(marker)
        if start == -1:
            continue
        depth, i = 1, start + len(marker)
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start + len(marker) : i - 1].strip()
    return None


def judge(response: Any, gold: Any, timeout: float = TIMEOUT_SECONDS) -> str:
    """Classifies one response against the gold answer. Safe to call from many threads at once.

    Args:
        response: The model's response; its last ``\\boxed{}`` is the answer.
        gold: The gold answer, a string or a number.
        timeout: Seconds the check may run, counted from when a checker process starts on it
            (time spent waiting for a free checker does not count).

    Returns:
        One of :data:`OUTCOMES`; the same under any concurrency as when checked alone. Never raises.
    """
    try:
        if not isinstance(response, str) or not isinstance(gold, (str, int, float)) or str(gold).strip() == "":
            return "bad_input"
        answer = last_boxed(response)
        if not answer:
            return "no_answer"
        return _run_check(_verify, (str(gold), answer), timeout)
    except Exception as err:  # a bug here must not take verl's reward worker down: this sample scores 0, loudly
        say_once(f"judging failed ({type(err).__name__}: {err}); scored 0 as unparsable", checkers.SPEAKER)
        return "unparsable"


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict[str, float]:
    """verl custom reward: ``{"score": 1.0 or 0.0, "<outcome>": 1.0 for the outcome that applied, ...}``."""
    outcome = judge(solution_str, ground_truth)
    return {"score": 1.0 if outcome == "correct" else 0.0, **{name: float(name == outcome) for name in OUTCOMES}}


def timeouts() -> int:
    """How many checks in this process ran past their time limit (each scored "timeout")."""
    return checkers.timeouts()


def _verify(gold: str, answer: str) -> str:
    """Runs in a checker process. Returns an outcome name."""
    from math_verify import parse, verify

    gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=None)
    answer_parsed = parse(f"\\boxed{{{answer}}}", parsing_timeout=None)
    if not gold_parsed or not answer_parsed:
        return "unparsable"
    return "correct" if verify(gold_parsed, answer_parsed, timeout_seconds=None) else "wrong"


def _run_check(fn: Callable[..., str], args: tuple, timeout: float) -> str:
    """Runs ``fn(*args)`` (picklable, returning an outcome) in this process's checker pool."""
    outcome = checkers.run(fn, args, timeout)
    if outcome not in OUTCOMES:
        say_once(f"the answer check returned {outcome!r}; scored 0 as unparsable", checkers.SPEAKER)
        return "unparsable"
    return outcome


if __name__ != "reinforce_ada.tasks.reward":
    # verl loads a custom reward function from its file under a made-up module name; the checker
    # process cannot unpickle functions of such a module, so this copy hands over to the installed one.
    from reinforce_ada.tasks.reward import compute_score, judge, timeouts  # noqa: F401,F811
