"""Math reward for verl: math-verify on the last ``\\boxed{...}`` of the response.

Use it as verl's custom reward function::

    reward.custom_reward_function.path=<path of this file> reward.custom_reward_function.name=compute_score

:func:`compute_score` returns 1.0 when the last boxed expression of the response is
mathematically equal to the gold answer (math-verify), else 0.0. It never raises: an empty
response, no ``\\boxed{}``, an answer math-verify cannot parse, a check that exceeds its time
limit, or a non-string input all score 0.0, and the returned dict says which (verl keeps the
extra keys as ``reward_extra_info``, one value per sample, so they can be counted).

The time limit is enforced in a separate worker process, because math-verify's own limit uses
``signal.alarm``, which only works in a process's main thread (verl's reward workers call from
other threads), and a runaway sympy computation cannot be interrupted inside a thread.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import multiprocessing
import os
import sys
from typing import Any

TIMEOUT_SECONDS = float(os.environ.get("REINFORCE_ADA_VERIFY_TIMEOUT", "5"))
STARTUP_SECONDS = 300.0
OUTCOMES = ("correct", "wrong", "no_answer", "unparsable", "timeout", "bad_input")

_pool: concurrent.futures.ProcessPoolExecutor | None = None


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


def _verify(gold: str, answer: str) -> str:
    """Runs in the worker process. Returns an outcome name."""
    from math_verify import parse, verify

    gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=None)
    answer_parsed = parse(f"\\boxed{{{answer}}}", parsing_timeout=None)
    if not gold_parsed or not answer_parsed:
        return "unparsable"
    return "correct" if verify(gold_parsed, answer_parsed, timeout_seconds=None) else "wrong"


def _executor() -> concurrent.futures.ProcessPoolExecutor:
    global _pool
    if _pool is None:
        _pool = concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        # Starting the process and importing math-verify takes seconds on a busy machine: keep
        # that out of the first answer's time limit.
        _pool.submit(_import_checker).result(timeout=STARTUP_SECONDS)
    return _pool


def _import_checker() -> None:
    import math_verify  # noqa: F401


def _restart_executor() -> None:
    global _pool
    if _pool is not None:
        for process in list(getattr(_pool, "_processes", {}).values()):
            process.kill()  # a runaway check would otherwise keep the worker busy
        _pool.shutdown(wait=False, cancel_futures=True)
    _pool = None


atexit.register(_restart_executor)


def judge(response: Any, gold: Any, timeout: float = TIMEOUT_SECONDS) -> str:
    """Classifies one response against the gold answer; one of :data:`OUTCOMES`."""
    if not isinstance(response, str) or not isinstance(gold, (str, int, float)) or str(gold).strip() == "":
        return "bad_input"
    answer = last_boxed(response)
    if not answer:
        return "no_answer"
    future = _executor().submit(_verify, str(gold), answer)
    try:
        return future.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        _restart_executor()
        return "timeout"
    except Exception as err:  # a crash inside math-verify or the worker: this sample scores 0, loudly
        _restart_executor()
        _warn_once(
            f"reinforce_ada.reward: the answer check failed ({type(err).__name__}: {err}); scored 0 as unparsable"
        )
        return "unparsable"


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        print(message, file=sys.stderr, flush=True)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict[str, float]:
    """verl custom reward: ``{"score": 1.0 or 0.0, "<outcome>": 1.0 for the outcome that applied, ...}``."""
    outcome = judge(solution_str, ground_truth)
    return {"score": 1.0 if outcome == "correct" else 0.0, **{name: float(name == outcome) for name in OUTCOMES}}


if __name__ != "reinforce_ada.reward":
    # verl loads a custom reward function from its file under a made-up module name; the checker
    # process cannot unpickle functions of such a module, so this copy hands over to the installed one.
    from reinforce_ada.reward import compute_score, judge  # noqa: F401,F811
