"""Successive elimination for one prompt: how many samples it asks for, and when it stops.

One :class:`PromptSampler` per prompt per training step. A schedule
(:mod:`reinforce_ada.core.schedules`) asks every unfinished prompt for its
:meth:`~PromptSampler.next_request`, has that many responses generated and scored, and hands the
rewards back with :meth:`~PromptSampler.record`. The policy does not change in between, so every
reward drawn is a sample of the same pass rate, and all of them count towards the prompt's
statistics (the pool), including every sample of the request in which the exit rule first holds.

A sample whose generation or reward call failed comes back as ``None``. It is not part of the
pool, and the prompt's next request redraws it, once; a prompt one of whose redraws fails again
is *failed*: it stops sampling and forms its group from what it has (see
:func:`reinforce_ada.core.groups.form_group`). A failure is more likely the prompt's own (its gold
answer breaks the reward function, its text breaks the template) than bad luck, so a second
try is all it gets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from reinforce_ada.core.config import SamplerConfig


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
            N_x, or a warm start's estimate (see :func:`reinforce_ada.core.tracker.plan_first_requests`).
            Still capped by the budget. Est without one asks for n.
        samples_failed: Samples that came back failed, redraws included.
        redraw: Failed samples of the last request, to be drawn again by the next one.
        failed: True once a redraw failed too: the prompt asks for nothing more.
        budget_stopped: True once the step's sample budget had nothing left for it
            (:mod:`reinforce_ada.core.budget`): it asks for nothing more and is unresolved.
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
        return not self.redraw and (self.rounds >= self.config.max_rounds or self.drawn >= self.config.n_max)

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
        return min(size, self.config.n_max - self.drawn)

    def set_next_request(self, count: int) -> None:
        """Sets the next request's size (the step budget's grant): at least 1, within N_max."""
        room = self.redraw or self.config.n_max - self.drawn
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
