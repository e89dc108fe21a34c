"""The end-to-end runs as background jobs, started while the in-process tests run, two at a time.

A job is a function of its own output folder (and of the results of the jobs it comes ``after``) registered with
:func:`job` in its test module; its module's fixture returns :meth:`Jobs.result`. Only the jobs of the selected
tests run, with the jobs they need. Tests that check time limits against the wall clock (marker ``wall_clock``) run
first, before any job starts. Every process a job starts (through :mod:`trainer_runs`) is killed when the session
ends.

``REINFORCE_ADA_E2E_JOBS`` says when jobs start: ``early`` (the default) beside the in-process tests, ``late`` once
pytest reaches the end-to-end tests (each job after the in-process tests, as a plain fixture would run it).
``REINFORCE_ADA_E2E_LANES`` is how many jobs run at once (default 2). A verl run keeps about one core of two busy
(its processes start one after another, each importing torch, verl and vLLM), so a second job fills the other
core. Two Ray nodes never start at once (:func:`trainer_runs.start_turn`).
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The order jobs start in: a job after the jobs it needs; the first run first (two jobs need it), then the longest.
PRIORITY = ["first_run", "demo", "resumed_run", "skip_runs", "two_node_run", "async_run", "learning_run",
            "launch_script_run"]
LANES = int(os.environ.get("REINFORCE_ADA_E2E_LANES", "2"))


@dataclass
class Job:
    name: str
    run: Callable[..., Any]
    module: str  # the test module that registered it (its tests read its result)
    after: tuple[str, ...] = ()
    out: Path | None = None
    started: float | None = None
    ended: float | None = None
    result: Any = None
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)


REGISTRY: dict[str, Job] = {}


def job(after: tuple[str, ...] = ()):
    """Registers ``fn(out, **results of after)`` as a background job named after the function."""

    def register(fn):
        REGISTRY[fn.__name__] = Job(fn.__name__, fn, fn.__module__, tuple(after))
        return fn

    return register


class Jobs:
    """Runs the selected jobs in :data:`LANES` threads, once started: each takes the first job in :data:`PRIORITY`
    order whose jobs ``after`` are done."""

    def __init__(self, names: set[str], make_out: Callable[[str], Path]):
        wanted = set()
        stack = list(names)
        while stack:
            name = stack.pop()
            if name not in wanted:
                wanted.add(name)
                stack.extend(REGISTRY[name].after)
        rank = {name: i for i, name in enumerate(PRIORITY)}
        self.jobs = sorted((REGISTRY[n] for n in wanted), key=lambda j: rank.get(j.name, len(rank)))
        order = [j.name for j in self.jobs]
        for j in self.jobs:
            if any(order.index(a) > order.index(j.name) for a in j.after):
                raise ValueError(f"e2e_jobs.PRIORITY must list {j.after} before {j.name}")
            j.out = make_out(j.name)  # in the main thread: pytest's folders are not made for threads
        self.clock = time.monotonic()
        self._go = threading.Event()
        self._changed = threading.Condition()
        for lane in range(LANES):
            threading.Thread(target=self._lane, args=(lane,), name=f"e2e-jobs-{lane}", daemon=True).start()

    def start(self) -> None:
        """Lets the jobs start (they wait until then; a second call does nothing)."""
        self._go.set()

    def result(self, name: str) -> Any:
        """Waits for a job (starting the jobs if they have not started) and returns its result."""
        self.start()
        j = REGISTRY[name]
        j.done.wait()
        if j.error is not None:
            raise RuntimeError(f"end-to-end job {name} failed:\n{j.error}")
        return j.result

    def summary(self) -> list[str]:
        lines = []
        for j in self.jobs:
            if j.started is None:
                lines.append(f"{j.name}: not started")
                continue
            end = j.ended if j.ended is not None else time.monotonic()
            state = "failed" if j.error else ("done" if j.ended else "running")
            lines.append(f"{j.name}: {state}, started at {j.started - self.clock:.0f} s, ran {end - j.started:.0f} s")
        return lines

    def _next(self) -> Job | None:
        """The next job to start, waiting for the jobs it needs; None when every job has started."""
        with self._changed:
            while True:
                waiting = [j for j in self.jobs if j.started is None]
                if not waiting:
                    return None
                ready = [j for j in waiting if all(REGISTRY[a].done.is_set() for a in j.after)]
                if ready:
                    ready[0].started = time.monotonic()
                    return ready[0]
                self._changed.wait()

    def _lane(self, lane: int) -> None:
        self._go.wait()
        if lane:
            self._wait_for_the_first_launch()
        while (j := self._next()) is not None:
            try:
                failed = [a for a in j.after if REGISTRY[a].error is not None]
                if failed:
                    raise RuntimeError(f"needs {failed}, which failed")
                j.result = j.run(j.out, **{a: REGISTRY[a].result for a in j.after})
            except BaseException:  # reported to the tests that read the result
                j.error = traceback.format_exc()
            finally:
                j.ended = time.monotonic()
                j.done.set()
                with self._changed:
                    self._changed.notify_all()

    def _wait_for_the_first_launch(self) -> None:
        """Until the first job has launched a process (or ended). Jobs build their tiny models in their own threads
        before they launch, and two threads resolving transformers' lazy names at once fail ("cannot import name
        'GenerationConfig' from 'transformers'"); once one build is done the names are resolved."""
        import trainer_runs  # not at the top: it copies the environment, which conftest sets up first

        while self.jobs and not (trainer_runs.STARTED or self.jobs[0].done.is_set()):
            time.sleep(1.0)
