"""What both trainers' adaptive rollouts share: the per-sample record, the reward tally, the step's
summary and progress lines, and the sampling run itself (:func:`reinforce_ada.core.step.run_step`
with verl-facing progress reporting).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from reinforce_ada.core.config import SamplerConfig
from reinforce_ada.core.messages import say
from reinforce_ada.core.schedules import AsyncProgress
from reinforce_ada.core.step import StepResult, run_step
from reinforce_ada.integration import handover
from reinforce_ada.integration.agents import Episode


class SampleRecord(NamedTuple):
    """What an agent-loop worker reports for one generated and scored sample."""

    uid: str
    session: int
    reward: float
    outputs: int  # TransferQueue entries (a multi-turn agent loop stores one per output)
    reward_seconds: float
    reward_extra: dict  # the numeric extra keys a reward function returned next to its score
    response_tokens: int  # tokens the model generated (a multi-turn loop's tool outputs are not counted)
    episode: Episode = Episode(2, 0, 0)  # a single-turn sample's


class RewardTally:
    """Per-step totals of the scored samples: generated tokens, reward latency and the reward
    function's extra keys."""

    def __init__(self):
        self.samples, self.tokens, self.seconds, self.extra = 0, 0, 0.0, defaultdict(float)

    def add(self, samples: int, tokens: int, seconds: float, extra: Mapping[str, float] = ()) -> None:
        self.samples += samples
        self.tokens += tokens
        self.seconds += seconds
        for key, value in dict(extra).items():
            self.extra[key] += value

    def metrics(self) -> dict[str, float]:
        """``response_tokens_total``, ``reward_latency_mean`` and, per extra key, its mean over the
        step's samples as ``reward/<key>``."""
        n = max(self.samples, 1)
        return {
            "response_tokens_total": float(self.tokens),
            "reward_latency_mean": self.seconds / n,
            **{f"reward/{k}": v / n for k, v in sorted(self.extra.items())},
        }


def is_number(value) -> bool:
    return isinstance(value, (int, float, np.number))


def publish_step(
    result: StepResult, uids: Sequence[str], rewards: RewardTally, extra: Mapping[str, float] | None = None
) -> None:
    """Hands the step's pool statistics and metrics over (:mod:`reinforce_ada.integration.handover`) and prints
    its summary line."""
    # reward_latency_mean: seconds from a sample's reward request to its score; scoring overlaps
    # with the generation of other samples, so it is not added to rollout_seconds.
    metrics = {**result.metrics(), **rewards.metrics(), **(extra or {})}
    handover.publish({uid: g.stats for uid, g in zip(uids, result.groups) if not g.dropped}, metrics)
    rounds = (
        f"{metrics['rounds']:.0f} rounds"
        if result.round_seconds
        else f"at most {metrics['rounds']:.0f} requests a prompt"
    )
    say(
        f"{len(uids)} prompts: {metrics['samples_total']:.0f} samples in {rounds} "
        f"({metrics['rollout_seconds']:.1f} s); {metrics['prompts_resolved']:.0f} resolved, "
        f"{metrics['prompts_unresolved']:.0f} unresolved, {metrics['prompts_dropped']:.0f} dropped"
        + (f"; {metrics['samples_failed']:.0f} samples failed, {metrics['prompts_failed']:.0f} prompts failed"
           if metrics["samples_failed"] else "")
    )


def run_sampling(
    prompt_count: int, global_step: Any, config: SamplerConfig, rollout, first_requests: Sequence[int] | None = None,
    on_start=None,
) -> StepResult:
    def on_round(round_index: int, prompts: int, samples: int, seconds: float) -> None:
        of = f"/{config.max_rounds}" if round_index <= config.max_rounds else f" (past {config.max_rounds}: redraws)"
        say(
            f"step {global_step} round {round_index}{of}: {prompts} active prompts, {samples} samples, {seconds:.1f} s"
        )

    # async: a line every quarter of the prompt count in scored requests (about 12 lines a step)
    report_every = max(1, prompt_count // 4)
    last_report = 0

    def on_progress(state: AsyncProgress) -> None:
        nonlocal last_report
        if state.requests_scored - last_report >= report_every:
            last_report = state.requests_scored
            say(
                f"step {global_step} async: {state.requests_scored} requests scored, "
                f"{state.prompts_finished}/{prompt_count} prompts finished, {state.prompts_in_flight} in flight, "
                f"{state.samples_drawn} samples, {state.seconds:.1f} s"
            )

    # uids are random per run; step and position are stable, so the `random` selection reproduces.
    keys = [f"{global_step}:{i}" for i in range(prompt_count)]
    return run_step(keys, config, rollout, on_round=on_round, on_progress=on_progress, first_requests=first_requests,
                    on_start=on_start)


def check_streaming_reward(reward_loop_worker_handles) -> None:
    if reward_loop_worker_handles is None:
        raise RuntimeError(
            "reinforce_ada: the rounds need each sample's reward as soon as it is generated (verl's streaming "
            "reward workers), but verl gave the rollout none; this happens with a reward model sharing the actor's "
            "GPUs: set reward.reward_model.enable_resource_pool=true"
        )


def reward_name(config) -> str:
    """The custom reward function as the user named it, for warnings."""
    custom = (config.get("reward") or {}).get("custom_reward_function") or {}
    if custom.get("path"):
        return f"the reward function {custom.get('name') or 'compute_score'} of {custom.get('path')}"
    return "the reward function"
