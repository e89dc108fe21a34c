"""The schedules that run successive elimination over a batch: synchronous rounds, or no barrier.

:func:`run_rounds` is the synchronous round loop of the reference implementation, written against
a plain callback so that it can be tested without a model. :func:`run_async` makes the same
decisions without the round barrier: a prompt's next request is submitted as soon as its previous
one is scored, while other prompts are still generating. A prompt's requests depend only on its own
rewards, so with the same rewards per (prompt, pool index) both give the same pools; only the time
differs. With a step budget (:mod:`reinforce_ada.core.budget`) each schedule asks the budget, not
the samplers, how much each request may draw.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from reinforce_ada.core.budget import StepBudget
from reinforce_ada.core.sampler import PromptSampler, RewardError

RoundGenerator = Callable[[Mapping[int, int]], Mapping[int, Sequence[float]]]
"""Generates and scores one round: ``{prompt: count} -> {prompt: rewards}``."""


def run_rounds(
    samplers: Sequence[PromptSampler], generate: RoundGenerator, budget: StepBudget | None = None
) -> int:
    """Runs synchronous rounds until every prompt is finished.

    Each round asks ``generate`` once, for all unfinished prompts together (one generate
    call per round, as the reference does), and waits for all of them.

    Args:
        samplers: One sampler per prompt; indices into this list name the prompts.
        generate: Draws and scores the requested samples.
        budget: The step's sample budget: each round's requests are what it grants.

    Returns:
        The number of rounds run.
    """
    rounds = 0
    while True:
        if budget is not None:
            requests = budget.grant(samplers, [i for i, s in enumerate(samplers) if not s.finished])
        else:
            requests = {i: s.next_request() for i, s in enumerate(samplers) if not s.finished}
        if not requests:
            if not all(s.finished for s in samplers):  # a budget that neither grants nor stops: a bug
                raise RuntimeError("reinforce_ada.core.budget left unfinished prompts without a request")
            return rounds
        results = generate(requests)
        missing = sorted(set(requests) - set(results))
        if missing:
            raise RewardError(f"round {rounds + 1}: no rewards returned for prompts {missing[:5]}")
        for prompt in requests:
            samplers[prompt].record(results[prompt])
        rounds += 1


@runtime_checkable
class AsyncRollout(Protocol):
    """Draws and scores samples request by request, with many requests in flight at once.

    The scheduler keeps at most one request per prompt in flight (a prompt's next request
    depends on the rewards of its previous one), so an implementation may key by prompt.
    """

    def submit(self, prompt: int, count: int) -> None:
        """Starts drawing ``count`` more samples of ``prompt``; returns without waiting."""

    def wait(self) -> Sequence[tuple[int, Sequence[float]]]:
        """Blocks until at least one submitted request is scored.

        Returns:
            Every request scored since the last call, as ``(prompt, rewards)`` with the
            rewards of that request's ``count`` samples in generation order.
        """


@dataclass(frozen=True)
class AsyncProgress:
    """Where an asynchronous step stands, reported after each :meth:`AsyncRollout.wait`.

    Attributes:
        requests_scored: Requests recorded so far, over all prompts.
        prompts_finished: Prompts that ask for nothing more.
        prompts_in_flight: Prompts with a request being generated or scored.
        samples_drawn: Samples recorded so far, over all prompts.
        seconds: Wall time since the first request was submitted.
    """

    requests_scored: int
    prompts_finished: int
    prompts_in_flight: int
    samples_drawn: int
    seconds: float


def run_async(
    samplers: Sequence[PromptSampler],
    rollout: AsyncRollout,
    on_progress: Callable[[AsyncProgress], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    budget: StepBudget | None = None,
) -> int:
    """Successive elimination without a round barrier, until every prompt is finished.

    Every prompt's first request is submitted at once; from then on, each time a request is
    scored its prompt records the rewards and, unless finished, submits its next request
    immediately. Exit rules, budgets and the requests themselves are those of
    :func:`run_rounds`; the rollout stays busy until the last prompt is finished.

    Args:
        samplers: One sampler per prompt; indices into this list name the prompts.
        rollout: Draws and scores the submitted requests.
        on_progress: Called after each batch of scored requests is recorded.
        clock: Time source of :attr:`AsyncProgress.seconds`.
        budget: The step's sample budget. First requests are granted at once (they fit it); a
            later one too while the budget cannot run short; once it can, requests wait until
            nothing is in flight and are granted together by priority (see :mod:`reinforce_ada.core.budget`).

    Returns:
        The number of requests scored.

    Raises:
        RewardError: If the rollout returns nothing, rewards for a prompt with no request
            in flight, or a wrong number of rewards.
    """
    start = clock()
    in_flight: dict[int, int] = {}  # prompt -> samples requested
    waiting: list[int] = []  # prompts whose next request waits for the budget's next grant

    def submit(prompt: int, count: int) -> None:
        rollout.submit(prompt, count)
        in_flight[prompt] = count

    def request_more(prompts: Sequence[int], grant_now: bool = False) -> None:
        wanting = [p for p in prompts if samplers[p].next_request()]
        if budget is None:
            for prompt in wanting:
                submit(prompt, samplers[prompt].next_request())
        elif grant_now or budget.uncontested(samplers, in_flight):
            granted = budget.grant(samplers, wanting)
            for prompt, count in granted.items():
                submit(prompt, count)
            waiting.extend(p for p in wanting if p not in granted and not samplers[p].finished)
        else:
            waiting.extend(wanting)

    request_more(range(len(samplers)), grant_now=True)  # first requests fit the budget
    scored = drawn = 0
    while in_flight or waiting:
        if not in_flight:  # the budget may run short: grant the waiting requests together, by priority
            prompts = sorted(waiting)
            waiting.clear()
            request_more(prompts, grant_now=True)
            if not in_flight and waiting:
                # a bug, not bad input
                raise RuntimeError("reinforce_ada.core.budget granted nothing and stopped nothing")
            continue
        results = rollout.wait()
        if not results:
            raise RewardError(f"the rollout's wait() returned no scored request while {len(in_flight)} are in flight")
        for prompt, rewards in results:
            if prompt not in in_flight:
                raise RewardError(f"prompt {prompt}: rewards returned, but no request of it is in flight")
            del in_flight[prompt]
            samplers[prompt].record(rewards)
            scored += 1
            drawn += len(rewards)
        # the batch's prompts ask for more together, so that a budget grants them as it grants a round
        request_more([prompt for prompt, _ in results])
        if on_progress is not None:
            finished = sum(s.finished for s in samplers)
            on_progress(AsyncProgress(scored, finished, len(in_flight), drawn, clock() - start))
    return scored


class SynchronousRollout:
    """An :class:`AsyncRollout` over a :data:`RoundGenerator`: ``wait`` generates everything pending.

    With nothing running concurrently there is nothing to overlap: the asynchronous scheduler
    on this rollout runs exactly the rounds of :func:`run_rounds` (used by the replay tool).
    """

    def __init__(self, generate: RoundGenerator):
        self._generate = generate
        self._pending: dict[int, int] = {}

    def submit(self, prompt: int, count: int) -> None:
        self._pending[prompt] = count

    def wait(self) -> list[tuple[int, Sequence[float]]]:
        requests, self._pending = self._pending, {}
        results = self._generate(requests)
        missing = sorted(set(requests) - set(results))
        if missing:
            raise RewardError(f"no rewards returned for prompts {missing[:5]}")
        return [(prompt, results[prompt]) for prompt in requests]


def round_barrier(rollout: AsyncRollout) -> RoundGenerator:
    """A :data:`RoundGenerator` over an :class:`AsyncRollout`: submits a round, waits for all of it."""

    def generate(requests: Mapping[int, int]) -> Mapping[int, Sequence[float]]:
        for prompt, count in requests.items():
            rollout.submit(prompt, count)
        results: dict[int, Sequence[float]] = {}
        while len(results) < len(requests):
            finished = rollout.wait()
            if not finished:
                raise RewardError(
                    f"the rollout's wait() returned no scored request while {len(requests) - len(results)} "
                    "are in flight"
                )
            results.update(finished)
        return results

    return generate
