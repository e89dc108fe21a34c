"""One training step of Reinforce-Ada-Seq, independent of any trainer.

:func:`run_step` is the whole algorithm for one batch of prompts: synchronous rounds of
successive elimination, then group formation and pool statistics. The caller supplies the
rollout (``generate``: draw and score samples); the verl glue passes one backed by vLLM, the
replay tool one backed by recorded rewards.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from reinforce_ada.config import SamplerConfig
from reinforce_ada.groups import PromptGroup, form_group
from reinforce_ada.metrics import summarize
from reinforce_ada.sampling import PromptSampler, RoundGenerator, run_rounds


@dataclass
class StepResult:
    """What one step's sampling produced.

    Attributes:
        samplers: Per prompt, its finished sampler (the pool of rewards).
        groups: Per prompt, its group (kept indices into the pool) and pool statistics.
        round_seconds: Wall time of each round, generation and scoring included.
    """

    samplers: list[PromptSampler]
    groups: list[PromptGroup]
    round_seconds: list[float] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        """The summary of :func:`reinforce_ada.metrics.summarize` plus round timings."""
        metrics = summarize(self.samplers, self.groups)
        metrics["rollout_seconds"] = sum(self.round_seconds)
        for i, seconds in enumerate(self.round_seconds):
            metrics[f"round_{i + 1}_seconds"] = seconds
        return metrics


RoundReport = Callable[[int, int, int, float], None]
"""``(round, prompts sampled, samples drawn, seconds) -> None``, called after each round."""


def run_step(
    prompt_keys: Sequence[str],
    config: SamplerConfig,
    generate: RoundGenerator,
    clock: Callable[[], float] = time.perf_counter,
    on_round: RoundReport | None = None,
) -> StepResult:
    """Samples every prompt in rounds until it is finished, then forms its group.

    Args:
        prompt_keys: One key per prompt; seeds the ``random`` selection, so use something
            stable across runs (e.g. step and position), not a random uid.
        config: Sampler settings.
        generate: Draws and scores ``{prompt index: count}`` samples, returning
            ``{prompt index: rewards in generation order}``.
        clock: Time source for the round timings.
        on_round: Called after each round, e.g. to show progress.
    """
    samplers = [PromptSampler(config) for _ in prompt_keys]
    round_seconds: list[float] = []

    def timed_generate(requests: Mapping[int, int]) -> Mapping[int, Sequence[float]]:
        start = clock()
        results = generate(requests)
        round_seconds.append(clock() - start)
        if on_round is not None:
            on_round(len(round_seconds), len(requests), sum(requests.values()), round_seconds[-1])
        return results

    run_rounds(samplers, timed_generate)
    groups = [form_group(s, key) for s, key in zip(samplers, prompt_keys)]
    return StepResult(samplers=samplers, groups=groups, round_seconds=round_seconds)
