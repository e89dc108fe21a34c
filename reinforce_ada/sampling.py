"""Successive elimination: how many samples each prompt gets, and when it stops.

One :class:`PromptSampler` per prompt per training step. The rollout asks every unfinished
prompt for its :meth:`~PromptSampler.next_request`, generates that many responses, scores
them, and hands the rewards back with :meth:`~PromptSampler.record`. The policy does not
change in between, so every reward drawn is a sample of the same pass rate, and all of them
count towards the prompt's statistics (the pool), including every sample of the round in
which the exit rule first holds.

:func:`run_rounds` is the synchronous round loop of the reference implementation, written
against a plain callback so that it can be tested without a model. :func:`run_async` makes the
same decisions without the round barrier: a prompt's next request is submitted as soon as its
previous one is scored, while other prompts are still generating. A prompt's requests depend
only on its own rewards, so with the same rewards per (prompt, pool index) both give the same
pools; only the time differs.

A sample whose generation or reward call failed comes back as ``None``. It is not part of the
pool, and the prompt's next request redraws it, once; a prompt one of whose redraws fails again
is *failed*: it stops sampling and forms its group from what it has (see
:func:`reinforce_ada.groups.form_group`). A failure is more likely the prompt's own (its gold
answer breaks the reward function, its text breaks the template) than bad luck, so a second
try is all it gets.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from reinforce_ada.config import SamplerConfig

if TYPE_CHECKING:  # the budget reads samplers; this module only hands them to it
    from reinforce_ada.budget import StepBudget


class RewardError(ValueError):
    """A reward handed to the sampler is unusable (not a finite number, wrong count)."""


FAILED = None
"""The reward of a sample whose generation or reward call failed."""


@dataclass
class PromptSampler:
    """Sampling state of one prompt during one step.

    Attributes:
        config: The sampler settings.
        rewards: Every reward drawn so far, in generation order (the pool); failed samples
            are not in it.
        rounds: Requests recorded so far, redraws of failed samples not counted; at most
            ``config.max_rounds``.
        requests: Requests recorded so far, redraws included (in ``rounds`` mode, the rounds
            it took part in: an unfinished prompt has a request in every round).
        num_pos: Rewards strictly above ``config.threshold``.
        num_neg: The other rewards.
        resolved: True once the exit rule held (then no more samples are asked for); for
            ``est``, once its single request is recorded.
        first_request: Size of the first request, if not ``round_size``: Est's allocation
            N_x, or a warm start's estimate (see :func:`reinforce_ada.tracker.plan_first_requests`).
            Still capped by the budget. Est without one asks for n.
        samples_failed: Samples that came back failed, redraws included.
        redraw: Failed samples of the last request, to be drawn again by the next one.
        failed: True once a redraw failed too: the prompt asks for nothing more.
        budget_stopped: True once the step's sample budget had nothing left for it
            (:mod:`reinforce_ada.budget`): it asks for nothing more and is unresolved.
        next_size: The size of the next request as the step's budget set it, if it did (cleared
            when the request is recorded).
    """

    config: SamplerConfig
    first_request: int | None = None
    rewards: list[float] = field(default_factory=list)
    rounds: int = 0
    requests: int = 0
    num_pos: int = 0
    num_neg: int = 0
    resolved: bool = False
    samples_failed: int = 0
    redraw: int = 0
    failed: bool = False
    budget_stopped: bool = False
    next_size: int | None = None

    @property
    def drawn(self) -> int:
        """Samples in the pool (failed ones not counted)."""
        return len(self.rewards)

    @property
    def finished(self) -> bool:
        """True once the prompt asks for nothing more: resolved, failed, or out of rounds or
        budget with no failed sample left to redraw, or stopped by the step's sample budget."""
        if self.resolved or self.failed or self.budget_stopped:
            return True
        return not self.redraw and (self.rounds >= self.config.max_rounds or self.drawn >= self.config.budget)

    def next_request(self) -> int:
        """Samples to draw in this prompt's next request (0 once finished)."""
        if self.finished:
            return 0
        if self.next_size is not None:
            return self.next_size
        if self.redraw:
            return self.redraw
        size = self.config.round_size
        if self.rounds == 0:
            if self.first_request is not None:
                size = self.first_request
            elif self.config.variant == "est":
                size = self.config.n
        return min(size, self.config.budget - self.drawn)

    def set_next_request(self, count: int) -> None:
        """Sets the next request's size (the step budget's grant): at least 1, within N_max."""
        room = self.redraw or self.config.budget - self.drawn
        if not 1 <= count <= room:
            raise ValueError(f"a request of {count} samples: must be in [1, {room}]; stop_for_budget() stops a prompt")
        self.next_size = count

    def stop_for_budget(self) -> None:
        """The step's budget is spent: the prompt asks for nothing more and is unresolved."""
        self.budget_stopped, self.redraw = True, 0

    def record(self, rewards: Sequence[float | None]) -> None:
        """Adds one request's rewards, then applies the exit rule.

        Args:
            rewards: The rewards of exactly ``next_request()`` new samples, in generation order;
                :data:`FAILED` (None) for a sample whose generation or reward call failed.

        Raises:
            RewardError: On a count other than the one requested, or a reward that is neither
                a finite number nor :data:`FAILED`.
        """
        expected = self.next_request()
        if expected == 0:
            raise RewardError("record() called on a prompt that asked for no samples (it is finished)")
        if len(rewards) != expected:
            raise RewardError(f"expected {expected} rewards for this request, got {len(rewards)}")
        for reward in rewards:
            if reward is not FAILED and (
                isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward)
            ):
                raise RewardError(f"reward must be a finite number (or None for a failed sample), got {reward!r}")
        was_redraw, failed_now = self.redraw > 0, sum(r is FAILED for r in rewards)
        for reward in rewards:
            if reward is FAILED:
                continue
            self.rewards.append(float(reward))
            if reward > self.config.threshold:
                self.num_pos += 1
            else:
                self.num_neg += 1
        self.samples_failed += failed_now
        self.requests += 1
        self.next_size = None
        if was_redraw:
            self.redraw, self.failed = 0, failed_now > 0
        else:
            self.rounds, self.redraw = self.rounds + 1, failed_now
        self.resolved = self.rule_holds()
        if self.resolved and self.config.variant != "est":  # enough signal already: nothing to redraw
            self.redraw, self.failed = 0, False

    def rule_holds(self) -> bool:
        """The exit rule: enough correct (and, for ``balance``, incorrect) samples, and at
        least n samples drawn so that a full group can be formed."""
        cfg = self.config
        if cfg.variant == "est":  # no exit rule: the allocation (failed samples redrawn) is all of it
            return self.rounds >= 1 and not self.redraw
        return (
            self.num_pos >= cfg.positives_needed
            and self.num_neg >= cfg.negatives_needed
            and self.drawn >= cfg.n
        )


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
                raise RuntimeError("reinforce_ada.budget left unfinished prompts without a request")
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
            nothing is in flight and are granted together by priority (see :mod:`reinforce_ada.budget`).

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
                raise RuntimeError("reinforce_ada.budget granted nothing and stopped nothing")  # a bug, not bad input
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
