"""One training step of Reinforce-Ada-Seq, independent of any trainer.

:func:`run_step` is the whole algorithm for one batch of prompts: successive elimination, in
synchronous rounds or asynchronously (``SamplerConfig.mode``), then group formation and pool
statistics. The caller supplies the rollout: a :data:`~reinforce_ada.core.schedules.RoundGenerator`
(draw and score one round) or an :class:`~reinforce_ada.core.schedules.AsyncRollout` (submit one
prompt's request, wait for scored ones). The verl glue passes ones backed by vLLM, the replay
tool one backed by recorded rewards. Either kind works in either mode.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from reinforce_ada.core.budget import StepBudget, fit_first_requests, step_budget
from reinforce_ada.core.config import SamplerConfig
from reinforce_ada.core.groups import PromptGroup, form_group, without_signal
from reinforce_ada.core.metrics import summarize
from reinforce_ada.core.sampler import PromptSampler
from reinforce_ada.core.schedules import (
    AsyncProgress,
    AsyncRollout,
    RoundGenerator,
    SynchronousRollout,
    round_barrier,
    run_async,
    run_rounds,
)


@dataclass
class StepResult:
    """What one step's sampling produced.

    Attributes:
        samplers: Per prompt, its finished sampler (the pool of rewards).
        groups: Per prompt, its group (kept indices into the pool) and pool statistics.
        round_seconds: Wall time of each round, generation and scoring included (``rounds``
            mode; empty in ``async`` mode, which has no rounds).
        rollout_seconds: Wall time of the whole sampling phase.
        empty: True if every prompt was dropped, so that ``groups`` are the zero-advantage
            groups of :func:`reinforce_ada.core.groups.without_signal`.
        budget: The step's sample budget and what was spent of it (None without one).
    """

    samplers: list[PromptSampler]
    groups: list[PromptGroup]
    round_seconds: list[float] = field(default_factory=list)
    rollout_seconds: float = 0.0
    empty: bool = False
    budget: StepBudget | None = None

    def metrics(self) -> dict[str, float]:
        """The summary of :func:`reinforce_ada.core.metrics.summarize` plus timings."""
        metrics = summarize(self.samplers, self.groups)
        if self.empty:  # the rule dropped every prompt; the groups are only there to train on nothing
            metrics["prompts_dropped"] = float(len(self.samplers))
        metrics["empty_step"] = float(self.empty)
        if self.budget is not None:
            metrics["budget_used_frac"] = self.budget.spent / self.budget.total
        metrics["rollout_seconds"] = self.rollout_seconds
        if self.round_seconds:  # rounds mode: a prompt the budget made wait sat out a round, so count them here
            metrics["rounds"] = float(len(self.round_seconds))
        for i, seconds in enumerate(self.round_seconds):
            metrics[f"round_{i + 1}_seconds"] = seconds
        return metrics


RoundReport = Callable[[int, int, int, float], None]
"""``(round, prompts sampled, samples drawn, seconds) -> None``, called after each round."""

ProgressReport = Callable[[AsyncProgress], None]
"""Called in ``async`` mode after each batch of scored requests is recorded."""


def run_step(
    prompt_keys: Sequence[str],
    config: SamplerConfig,
    rollout: RoundGenerator | AsyncRollout,
    clock: Callable[[], float] = time.perf_counter,
    on_round: RoundReport | None = None,
    on_progress: ProgressReport | None = None,
    first_requests: Sequence[int] | None = None,
    on_start: Callable[[list[int]], None] | None = None,
) -> StepResult:
    """Samples every prompt until it is finished (in ``config.mode``), then forms its group.

    Args:
        prompt_keys: One key per prompt; seeds the ``random`` selection, so use something
            stable across runs (e.g. step and position), not a random uid.
        config: Sampler settings, ``config.mode`` included.
        rollout: Draws and scores samples: either a round generator, ``{prompt index: count}
            -> {prompt index: rewards in generation order}``, or an :class:`AsyncRollout`.
            A round generator in ``async`` mode generates all pending requests at once (the
            same rounds, nothing to overlap); an async rollout in ``rounds`` mode gets one
            barrier per round.
        clock: Time source for the timings.
        on_round: Called after each round (``rounds`` mode), e.g. to show progress.
        on_progress: Called after each batch of scored requests (``async`` mode).
        first_requests: Per prompt, the size of its first request (Est's allocation or a warm
            start, from :func:`reinforce_ada.core.tracker.plan_first_requests`); None: ``round_size``
            (n for ``est``). Under ``config.sample_budget`` the default is n, and first requests
            are cut to fit the budget (:func:`reinforce_ada.core.budget.fit_first_requests`): here, and
            nowhere else.
        on_start: Called once before anything is drawn, with each prompt's first request as it will be
            made (after the budget's cut), e.g. to log a tracker's allocation.
    """
    if first_requests is not None and len(first_requests) != len(prompt_keys):
        raise ValueError(f"{len(first_requests)} first requests for {len(prompt_keys)} prompts")
    firsts = list(first_requests) if first_requests is not None else [None] * len(prompt_keys)
    total = step_budget(config, len(prompt_keys))
    budget = None if total is None else StepBudget(total)
    if budget is not None:
        floor = config.min_samples_per_prompt if config.variant == "est" else config.n
        firsts = fit_first_requests(
            [min(config.n if f is None else f, config.n_max) for f in firsts], total, min(floor, config.n_max)
        )
    samplers = [PromptSampler(config, first_request=first) for first in firsts]
    if on_start is not None:
        on_start([s.next_request() for s in samplers])
    round_seconds: list[float] = []
    start = clock()
    if config.mode == "async":
        async_rollout = rollout if isinstance(rollout, AsyncRollout) else SynchronousRollout(rollout)
        run_async(samplers, async_rollout, on_progress=on_progress, clock=clock, budget=budget)
    else:
        generate = round_barrier(rollout) if isinstance(rollout, AsyncRollout) else rollout

        def timed_generate(requests: Mapping[int, int]) -> Mapping[int, Sequence[float]]:
            round_start = clock()
            results = generate(requests)
            round_seconds.append(clock() - round_start)
            if on_round is not None:
                on_round(len(round_seconds), len(requests), sum(requests.values()), round_seconds[-1])
            return results

        run_rounds(samplers, timed_generate, budget=budget)
    # rounds: the sum of the rounds, so that the round metrics add up to it exactly
    rollout_seconds = clock() - start if config.mode == "async" else sum(round_seconds)
    groups = [form_group(s, key) for s, key in zip(samplers, prompt_keys)]
    zero_groups = without_signal(samplers, groups, prompt_keys)
    return StepResult(
        samplers=samplers,
        groups=zero_groups or groups,
        round_seconds=round_seconds,
        rollout_seconds=rollout_seconds,
        empty=zero_groups is not None,
        budget=budget,
    )
