"""The math-verify reward: correct answers, and every kind of bad input scoring 0 without raising."""

import multiprocessing
import os
import random
import threading
import time

import pytest

from reinforce_ada.tasks import checkers, reward

# time limits of checks, and checks that wait for checker processes: run before the end-to-end jobs load the CPU
pytestmark = pytest.mark.wall_clock


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


# sympy evaluates these towers exactly: minutes of big-integer work that holds the GIL (verified:
# still running after 8 s alone). A huge factorial such as 100000! is not one: it is checked in 0.2 s.
RUNAWAYS = ["\\boxed{9^{9^{9^{9}}}}", "\\boxed{10^{10^{10}}}"]
DISTINCT = (
    [(f"so the answer is \\boxed{{{k}}}.", str(k)) for k in range(10)]  # correct
    + [(f"\\boxed{{{k + 1}}}", str(k)) for k in range(10)]  # wrong
    + [
        ("\\boxed{\\frac{3}{4}}", "0.75"),
        ("\\boxed{2\\sqrt{3}}", "\\sqrt{12}"),
        ("\\boxed{x^2+1}", "1+x^2"),
        ("\\boxed{\\frac{1}{3}}", "\\frac{2}{5}"),
        ("\\boxed{\\text{}}", "5"),  # unparsable
        ("\\boxed{\\text{}}", "\\frac{1}{2}"),
        ("no box at all", "5"),  # no_answer
        (None, "5"),  # bad_input
    ]
)


def _run_threads(target, count, timeout=180.0):
    """Runs target(i) in ``count`` threads; returns their results, re-raising nothing but recording errors."""
    results, errors = [None] * count, []

    def call(i):
        try:
            results[i] = target(i)
        except BaseException as err:  # the point of the tests: nothing may escape
            errors.append(err)

    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), f"threads still running after {timeout} s"
    assert errors == []
    return results


def test_under_64_threads_every_outcome_is_the_one_by_one_outcome_and_a_runaway_costs_only_its_own():
    timeout = 2.0
    expected = {item: reward.judge(*item, timeout=timeout) for item in DISTINCT}  # one by one
    assert set(expected.values()) == {"correct", "wrong", "unparsable", "no_answer", "bad_input"}
    rng = random.Random(0)
    jobs = [rng.choice(DISTINCT) for _ in range(296)] + [(answer, "1") for answer in RUNAWAYS * 2]
    rng.shuffle(jobs)
    timeouts_before = reward.timeouts()
    threads = 64

    def score_share(t):
        return [reward.judge(*jobs[i], timeout=timeout) for i in range(t, len(jobs), threads)]

    shares = _run_threads(score_share, threads)
    outcomes = [None] * len(jobs)
    for t, share in enumerate(shares):
        outcomes[t::threads] = share
    assert outcomes == ["timeout" if job[0] in RUNAWAYS else expected[job] for job in jobs]
    assert reward.timeouts() - timeouts_before == 4


def _sleep_then(seconds, outcome):
    time.sleep(seconds)
    return outcome


def test_waiting_for_a_free_checker_does_not_count_against_the_time_limit():
    pool = checkers._CheckerPool(2)
    try:
        assert pool.wait_ready(120)
        # 8 one-second checks on 2 processes: the last ones wait about 3 s, twice their limit.
        assert _run_threads(lambda i: pool.run(_sleep_then, (1.0, "correct"), 1.5), 8) == ["correct"] * 8
    finally:
        pool.close()


def test_an_overrun_kills_only_its_own_process_and_close_leaves_no_process_behind():
    psutil = pytest.importorskip("psutil")
    pool = checkers._CheckerPool(2)
    try:
        assert pool.wait_ready(120)
        first = set(pool.pids())
        # both processes busy at once: each loads this test module once (outside any limit)
        assert _run_threads(lambda i: pool.run(_sleep_then, (0.5, "correct"), 10), 2) == ["correct"] * 2

        def slow_or_runaway(i):
            if i == 0:
                return pool.run(_sleep_then, (2.0, "correct"), 10)
            time.sleep(0.2)
            return pool.run(_sleep_then, (60.0, "correct"), 0.5)  # killed while the other check runs

        assert _run_threads(slow_or_runaway, 2) == ["correct", "timeout"]
        assert pool.run(_sleep_then, (0.0, "wrong"), 10) == "wrong"
        assert pool.wait_ready(120)
        now = set(pool.pids())
        assert len(now) == 2 and len(now & first) == 1  # only the overrunning process was replaced
    finally:
        pool.close()
    children = {child.pid for child in psutil.Process().children(recursive=True)}  # zombies included
    assert not (first | now) & children
    assert not (first | now) & {process.pid for process in multiprocessing.active_children()}


def test_a_checker_killed_from_outside_is_replaced_and_the_check_rerun():
    pool = checkers._CheckerPool(1)
    try:
        assert pool.wait_ready(120)
        (pid,) = pool.pids()

        def check_or_kill(i):
            if i == 0:
                return pool.run(_sleep_then, (1.0, "correct"), 10)
            time.sleep(0.5)
            os.kill(pid, 9)

        assert _run_threads(check_or_kill, 2)[0] == "correct"
        assert pool.pids() != [pid]
    finally:
        pool.close()


def test_judge_scores_unparsable_when_no_checker_can_start_and_recovers_after(monkeypatch):
    def cannot_start(self, context):
        raise OSError("no more processes")

    checkers.shutdown()
    monkeypatch.setattr(checkers._Checker, "__init__", cannot_start)
    assert reward.judge("\\boxed{1}", "1") == "unparsable"
    monkeypatch.undo()
    assert reward.judge("\\boxed{1}", "1") == "correct"  # the broken pool is replaced on the next check


def test_the_shutdown_at_exit_kills_the_checker_processes():
    assert reward.judge("\\boxed{2}", "2") == "correct"
    pids = set(checkers._pool.pids())
    checkers.shutdown()
    assert not pids & {process.pid for process in multiprocessing.active_children()}
    assert reward.judge("\\boxed{2}", "2") == "correct"  # a new pool on the next check


@pytest.mark.parametrize("value, expected", [("3", 3), ("1", 1), ("zero", None), ("0", None), ("", None)])
def test_the_number_of_checker_processes(monkeypatch, value, expected):
    monkeypatch.setenv("REINFORCE_ADA_VERIFY_WORKERS", value)
    count = checkers._worker_count()
    assert count == expected if expected is not None else 2 <= count <= 4
