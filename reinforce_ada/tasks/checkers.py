"""A pool of checker processes: run a picklable function with a time limit, from many threads at once.

Used by :mod:`reinforce_ada.tasks.reward` for math-verify's checks, which cannot be timed out inside a
thread (math-verify's own limit uses ``signal.alarm``, main thread only, and a runaway sympy
computation such as ``9^{9^{9^{9}}}`` holds the GIL). The design:

* ``REINFORCE_ADA_VERIFY_WORKERS`` long-lived "spawn" processes, one pipe each, started on the
  first check, reused, and killed at exit; they import math-verify and this package's light
  modules only (not its ``__init__``, which imports torch);
* a calling thread checks out an idle process (waiting for one does not count), sends it the
  job, and waits at most the time limit from the moment the process starts running it;
* each process runs one job at a time, so an overrun costs only its own answer: that process
  alone is killed, the job returns "timeout" (counted by :func:`timeouts`), and a replacement
  starts in the background, its start-up counted against no one;
* a job that raises, or whose process dies three times under it, returns "unparsable", with one
  warning on stderr; :func:`run` never raises.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from reinforce_ada.core.messages import say_once

SPEAKER = "reinforce_ada.tasks.reward"  # what the user configured: the reward, whose checks these are
STARTUP_SECONDS = 300.0


def run(fn: Callable[..., Any], args: tuple, timeout: float) -> Any:
    """Runs ``fn(*args)`` in this process's checker pool; see :meth:`_CheckerPool.run`."""
    return _default_pool().run(fn, args, timeout)


def timeouts() -> int:
    """How many jobs in this process ran past their time limit (each returned "timeout")."""
    return _timeouts


def _worker_count() -> int:
    """Checker processes per Python process: ``REINFORCE_ADA_VERIFY_WORKERS``, else min(4, cores), at least 2.

    A check is single-threaded CPU work, so more processes than cores add no throughput and
    only make concurrent checks slow each other down towards the time limit (outcomes would
    then depend on the load). At most 4 because verl runs several reward workers per node,
    each with its own pool: inside a reward worker (a Ray actor) a checker takes about 76 MB
    (USS; it re-imports Ray, its parent's main module), 50 MB in a plain process
    (``python -m benchmarks.checker_memory``). At least 2 so that one runaway check
    does not stall every other answer for the whole time limit.
    """
    raw = os.environ.get("REINFORCE_ADA_VERIFY_WORKERS", "").strip()
    if raw:
        if raw.isdigit() and int(raw) >= 1:
            return int(raw)
        say_once(
            f"REINFORCE_ADA_VERIFY_WORKERS={raw!r} is not a positive integer; ignored", SPEAKER
        )
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(2, min(4, cores))


# A checker process imports this file without running the package's __init__ (it imports torch:
# 5x the start-up time and memory of math-verify alone); the jobs' modules must be as light. The
# target is the builtin exec, so that nothing of this package is unpickled, hence imported, before
# the code below runs.
_BOOT = """
import os, sys, types
if "reinforce_ada" not in sys.modules:
    package = types.ModuleType("reinforce_ada")
    package.__path__ = [os.path.dirname(path)]
    sys.modules["reinforce_ada"] = package
import reinforce_ada.tasks.checkers
reinforce_ada.tasks.checkers._serve(conn)
"""


def _serve(conn: Connection) -> None:
    """A checker process's loop: import math-verify, say "ready", then run one check at a time."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the parent decides
    try:
        import math_verify  # noqa: F401  (seconds on a busy machine: before "ready", so in no check's time)

        for name in ("math_verify.parser", "math_verify.grader"):  # the limit is ours, not math-verify's
            logging.getLogger(name).addFilter(lambda record: not record.getMessage().startswith("Timeout is disabled"))
    except BaseException as err:
        conn.send(("failed", _describe(err)))
        return
    conn.send(("ready", None))
    while True:
        try:
            job = conn.recv_bytes()
        except (EOFError, OSError):  # the parent closed the pipe or exited
            return
        try:
            fn, args = pickle.loads(job)  # may import fn's module: before "started", so not in the time limit
        except BaseException as err:
            conn.send(("error", _describe(err)))
            continue
        conn.send(("started", None))
        try:
            reply = ("ok", fn(*args))
        except BaseException as err:  # the parent classifies it
            reply = ("error", _describe(err))
        conn.send(reply)


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


class _Checker:
    """One checker process and the parent's end of its pipe."""

    _start_lock = threading.Lock()  # process starts and reaps, one at a time (multiprocessing's child list)

    def __init__(self, context: multiprocessing.context.SpawnContext) -> None:
        self.conn, child_end = context.Pipe()
        self.process = context.Process(
            target=exec,
            args=(_BOOT, {"conn": child_end, "path": os.path.abspath(__file__)}),
            name="reinforce-ada-checker",
            daemon=True,
        )
        with self._start_lock:
            self.process.start()
        child_end.close()

    def reply(self, seconds: float) -> tuple[str, Any] | None:
        """The process's next message, or None if none came within ``seconds``.

        Raises:
            EOFError: The process died.
            OSError: The pipe is closed (the pool was shut down).
        """
        return self.conn.recv() if self.conn.poll(seconds) else None

    def kill(self) -> None:
        """Kills the process and reaps it (no zombie); a no-op the second time."""
        with self._start_lock:
            self.process.kill()
            self.process.join()
        with contextlib.suppress(OSError):
            self.conn.close()


class _Waiter:
    """A thread waiting for a free checker: the pool hands it one (None: none left) and sets the event."""

    __slots__ = ("checker", "event")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.checker: _Checker | None = None


class _CheckerPool:
    """``size`` checker processes, each running one check at a time; freed ones go to the longest waiter.

    Args:
        size: The number of checker processes.
    """

    def __init__(self, size: int) -> None:
        self._context = multiprocessing.get_context("spawn")  # fork from a threaded Ray worker is unsafe
        self._lock = threading.Lock()
        self._live: set[_Checker] = set()  # starting, idle or busy
        self._idle: list[_Checker] = []  # never non-empty while threads are waiting
        self._waiting: collections.deque[_Waiter] = collections.deque()  # oldest first
        self._closed = False
        self._failure = "none"
        for _ in range(size):
            self._spawn()

    @property
    def broken(self) -> bool:
        """No checker process is left (they all failed to start), or the pool was closed."""
        with self._lock:
            return self._closed or not self._live

    def pids(self) -> list[int]:
        """The process ids of the live checker processes."""
        with self._lock:
            return [checker.process.pid for checker in self._live]

    def wait_ready(self, timeout: float) -> bool:
        """Waits until every live checker process is started and idle; False if not within ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self._idle) == len(self._live):
                    return True
            time.sleep(0.05)
        return False

    def run(self, fn: Callable[..., Any], args: tuple, timeout: float) -> Any:
        """Runs ``fn(*args)`` in an idle checker process; never raises.

        Args:
            fn: A picklable function (defined at the top level of an importable module).
            args: Its picklable arguments.
            timeout: Seconds ``fn`` may run, counted from when the process starts it.

        Returns:
            What ``fn`` returned; "timeout" if it ran past ``timeout`` (its process is killed and
            replaced); "unparsable" if it raised, could not be sent, or no process could run it.
        """
        try:
            job = pickle.dumps((fn, args))
        except Exception as err:
            return self._failed(f"the check could not be pickled ({_describe(err)})")
        for _ in range(3):  # a process that dies (killed from outside, out of memory): again on a fresh one
            checker = self._checkout()
            if checker is None:
                return self._failed(f"no checker process is running ({self._failure})")
            try:
                checker.conn.send_bytes(job)
                message = checker.reply(STARTUP_SECONDS)  # "started" once fn is unpickled (imports its module)
                if message is not None and message[0] == "started":
                    message = checker.reply(timeout)
            except (EOFError, OSError):
                self._replace(checker)
                continue
            if message is None:
                self._replace(checker)
                return self._timed_out(timeout)
            self._checkin(checker)
            status, value = message
            return value if status == "ok" else self._failed(f"the answer check failed ({value})")
        return self._failed("the checker process died three times under the same check")

    def close(self) -> None:
        """Kills every checker process (and reaps it); checks still running score "unparsable"."""
        with self._lock:
            self._closed, self._failure = True, "the pool was shut down"
            checkers, self._idle, self._live = list(self._live), [], set()
            self._release_waiters_if_none_left()
        for checker in checkers:
            checker.kill()

    def _spawn(self) -> None:
        """Starts a checker process in a new slot; a background thread hands it out once it is ready."""
        try:
            checker = _Checker(self._context)
        except Exception as err:
            with self._lock:
                self._failure = f"starting a checker process failed: {_describe(err)}"
            return
        with self._lock:
            closed = self._closed
            if not closed:
                self._live.add(checker)
        if closed:
            checker.kill()
            return
        threading.Thread(target=self._await_ready, args=(checker,), name="reinforce-ada-start", daemon=True).start()

    def _await_ready(self, checker: _Checker) -> None:
        try:
            message = checker.reply(STARTUP_SECONDS)
            if message is None or message[0] != "ready":
                raise RuntimeError(message[1] if message else f"not ready after {STARTUP_SECONDS:g} s")
        except Exception as err:  # this slot is lost; with none left, waiting checks score "unparsable"
            with self._lock:
                if checker in self._live:
                    self._live.discard(checker)
                    self._failure = f"a checker process failed to start: {_describe(err)}"
                    self._release_waiters_if_none_left()
            checker.kill()
            return
        self._checkin(checker)

    def _checkout(self) -> _Checker | None:
        """An idle checker, after waiting behind the threads that asked first; None if none is left."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
            if self._closed or not self._live:
                return None
            waiter = _Waiter()
            self._waiting.append(waiter)
        waiter.event.wait()
        return waiter.checker

    def _checkin(self, checker: _Checker) -> None:
        """Hands a free checker to the longest-waiting thread, else makes it idle."""
        with self._lock:
            live = checker in self._live
            if live and self._waiting:
                waiter = self._waiting.popleft()
                waiter.checker = checker
                waiter.event.set()
            elif live:
                self._idle.append(checker)
        if not live:
            checker.kill()  # the pool was closed meanwhile

    def _replace(self, checker: _Checker) -> None:
        """Kills ``checker``'s process and starts another in its slot (its start-up delays no check)."""
        checker.kill()
        with self._lock:
            if checker not in self._live:
                return  # the pool was closed meanwhile
        self._spawn()  # first, so that the slot count never drops to zero on the way
        with self._lock:
            self._live.discard(checker)
            self._release_waiters_if_none_left()  # if the new one failed to start

    def _release_waiters_if_none_left(self) -> None:
        """With the lock held: if no checker is left, the waiting threads get none (and give up)."""
        if self._closed or not self._live:
            while self._waiting:
                self._waiting.popleft().event.set()

    def _timed_out(self, timeout: float) -> str:
        global _timeouts
        with _state_lock:
            _timeouts += 1
        say_once(
            f"an answer check ran past its {timeout:g} s limit; scored 0 as timeout "
            "(reinforce_ada.tasks.reward.timeouts() counts them)", SPEAKER
        )
        return "timeout"

    @staticmethod
    def _failed(reason: str) -> str:
        say_once(f"{reason}; scored 0 as unparsable", SPEAKER)
        return "unparsable"


_pool: _CheckerPool | None = None
_state_lock = threading.Lock()
_timeouts = 0


def _default_pool() -> _CheckerPool:
    """This process's checker pool, started on first use (again if all its processes failed to start)."""
    global _pool
    with _state_lock:
        if _pool is None or _pool.broken:
            _pool = _CheckerPool(_worker_count())
        return _pool


def shutdown() -> None:
    """Kills this process's checker processes; the next job starts a new pool."""
    global _pool
    with _state_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close()


def _forget_pool_after_fork() -> None:
    # A forked child does not own its parent's checker processes: it starts its own if it checks.
    global _pool, _state_lock
    _pool, _state_lock = None, threading.Lock()
    _Checker._start_lock = threading.Lock()


atexit.register(shutdown)
os.register_at_fork(after_in_child=_forget_pool_after_fork)




