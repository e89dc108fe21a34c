"""Successive elimination: how many samples each prompt gets, and when it stops.

One :class:`PromptSampler` per prompt per training step. The rollout asks every unfinished
prompt for its :meth:`~PromptSampler.next_request`, generates that many responses, scores
them, and hands the rewards back with :meth:`~PromptSampler.record`. The policy does not
change in between, so every reward drawn is a sample of the same pass rate, and all of them
count towards the prompt's statistics (the pool), including every sample of the round in
which the exit rule first holds.

:func:`run_rounds` is the synchronous round loop of the reference implementation, written
against a plain callback so that it can be tested without a model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from reinforce_ada.config import SamplerConfig


class RewardError(ValueError):
    """A reward handed to the sampler is unusable (not a finite number, wrong count)."""


@dataclass
class PromptSampler:
    """Sampling state of one prompt during one step.

    Attributes:
        config: The sampler settings.
        rewards: Every reward drawn so far, in generation order (the pool).
        rounds: Rounds recorded so far.
        num_pos: Rewards strictly above ``config.threshold``.
        num_neg: The other rewards.
        resolved: True once the exit rule held (then no more samples are asked for).
    """

    config: SamplerConfig
    rewards: list[float] = field(default_factory=list)
    rounds: int = 0
    num_pos: int = 0
    num_neg: int = 0
    resolved: bool = False

    @property
    def drawn(self) -> int:
        return len(self.rewards)

    @property
    def finished(self) -> bool:
        """True once the prompt asks for nothing more: resolved, or out of rounds or budget."""
        return self.resolved or self.rounds >= self.config.max_rounds or self.drawn >= self.config.budget

    def next_request(self) -> int:
        """Samples to draw in this prompt's next round (0 once finished)."""
        if self.finished:
            return 0
        return min(self.config.round_size, self.config.budget - self.drawn)

    def record(self, rewards: Sequence[float]) -> None:
        """Adds one round's rewards, then applies the exit rule.

        Args:
            rewards: The rewards of exactly ``next_request()`` new samples, in generation order.

        Raises:
            RewardError: On a count other than the one requested, or a non-finite reward.
        """
        expected = self.next_request()
        if expected == 0:
            raise RewardError("record() called on a prompt that asked for no samples (it is finished)")
        if len(rewards) != expected:
            raise RewardError(f"expected {expected} rewards for this round, got {len(rewards)}")
        for reward in rewards:
            if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
                raise RewardError(f"reward must be a finite number, got {reward!r}")
            self.rewards.append(float(reward))
            if reward > self.config.threshold:
                self.num_pos += 1
            else:
                self.num_neg += 1
        self.rounds += 1
        self.resolved = self.rule_holds()

    def rule_holds(self) -> bool:
        """The exit rule: enough correct (and, for ``balance``, incorrect) samples, and at
        least n samples drawn so that a full group can be formed."""
        cfg = self.config
        return (
            self.num_pos >= cfg.positives_needed
            and self.num_neg >= cfg.negatives_needed
            and self.drawn >= cfg.n
        )


RoundGenerator = Callable[[Mapping[int, int]], Mapping[int, Sequence[float]]]
"""Generates and scores one round: ``{prompt: count} -> {prompt: rewards}``."""


def run_rounds(samplers: Sequence[PromptSampler], generate: RoundGenerator) -> int:
    """Runs synchronous rounds until every prompt is finished.

    Each round asks ``generate`` once, for all unfinished prompts together (one generate
    call per round, as the reference does), and waits for all of them.

    Args:
        samplers: One sampler per prompt; indices into this list name the prompts.
        generate: Draws and scores the requested samples.

    Returns:
        The number of rounds run.
    """
    rounds = 0
    while True:
        requests = {i: s.next_request() for i, s in enumerate(samplers) if not s.finished}
        if not requests:
            return rounds
        results = generate(requests)
        missing = sorted(set(requests) - set(results))
        if missing:
            raise RewardError(f"round {rounds + 1}: no rewards returned for prompts {missing[:5]}")
        for prompt in requests:
            samplers[prompt].record(results[prompt])
        rounds += 1
