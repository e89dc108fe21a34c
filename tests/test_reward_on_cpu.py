"""The math-verify reward: correct answers, and every kind of bad input scoring 0 without raising."""

import time

import pytest

from reinforce_ada import reward


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so \\boxed{12}.", "12"),
        ("first \\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("nested \\boxed{\\sqrt{\\frac{a}{b}}} end", "\\sqrt{\\frac{a}{b}}"),
        ("\\fbox{7}", "7"),
        ("no box here", None),
        ("unbalanced \\boxed{3", None),
    ],
)
def test_last_boxed(text, expected):
    assert reward.last_boxed(text) == expected


@pytest.mark.parametrize(
    "response, gold, score, outcome",
    [
        ("The answer is \\boxed{5}.", "5", 1.0, "correct"),
        ("\\boxed{0.5}", "\\frac{1}{2}", 1.0, "correct"),
        ("\\boxed{6}", "5", 0.0, "wrong"),
        ("", "5", 0.0, "no_answer"),
        ("I think it is 5", "5", 0.0, "no_answer"),
        ("\\boxed{}", "5", 0.0, "no_answer"),
        ("\\boxed{@@@}", "5", 0.0, "wrong"),
        (None, "5", 0.0, "bad_input"),
        ("\\boxed{5}", None, 0.0, "bad_input"),
    ],
)
def test_compute_score(response, gold, score, outcome):
    result = reward.compute_score("math", response, gold)
    assert result["score"] == score
    assert result[outcome] == 1.0 and sum(result[o] for o in reward.OUTCOMES) == 1.0


def test_a_check_over_the_time_limit_scores_zero_and_the_next_one_works(monkeypatch):
    monkeypatch.setattr(reward, "_verify", _slow_verify)
    start = time.perf_counter()
    assert reward.judge("\\boxed{1}", "1", timeout=0.5) == "timeout"
    assert time.perf_counter() - start < 5
    monkeypatch.undo()
    assert reward.judge("\\boxed{1}", "1") == "correct"


def _slow_verify(gold, answer):
    time.sleep(30)
    return "correct"


def test_a_crash_inside_the_checker_scores_zero(monkeypatch):
    monkeypatch.setattr(reward, "_verify", _crashing_verify)
    assert reward.compute_score("math", "\\boxed{1}", "1")["unparsable"] == 1.0


def _crashing_verify(gold, answer):
    raise RecursionError("sympy blew up")


def test_the_file_loaded_as_verl_loads_a_custom_reward_function_still_checks_answers():
    from verl.utils.import_utils import load_extern_object

    compute_score = load_extern_object(reward.__file__, "compute_score")
    assert compute_score("math", "2 + 4 = 6, so the answer is \\boxed{6}.", "6")["correct"] == 1.0
