"""The adaptive multi-round rollout as a verl agent-loop manager, for both verl trainers.

verl 0.9 builds its rollout manager from ``actor_rollout_ref.rollout.agent.agent_loop_manager_class``
in both the V1 trainer (TransferQueue, ``trainer.use_v1=true``) and the legacy ``RayPPOTrainer``.
:class:`AdaptiveAgentLoopManager` is that class: its ``create`` returns the implementation for
the configured trainer. Each training step it runs :func:`reinforce_ada.step.run_step`, whose
``generate`` callback asks verl's agent-loop workers (async vLLM servers, streaming reward
workers) for one round of samples of the still-active prompts and returns their rewards. The
policy is frozen during the rounds: both trainers sync weights only between steps.
Validation batches pass through to verl unchanged.

What each trainer gets back:
* V1: samples live in TransferQueue under ``{uid}_{session}_{i}``; session ids continue across
  rounds, so a prompt's pool index is its session id. Samples not kept are deleted before the
  replay buffer reads the step's batch; dropped prompts leave no samples.
* Legacy: a ``DataProto`` of exactly ``n`` samples per prompt, in prompt order, as GRPO-n.

Both publish the pool statistics for the estimator (:func:`reinforce_ada.estimator.publish_pools`)
and the step metrics (:func:`pop_step_metrics`).
"""

from __future__ import annotations

import asyncio
import sys
from collections import defaultdict
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np
import ray
from verl.experimental.agent_loop import AgentLoopManager
from verl.protocol import DataProto, pad_dataproto_to_divisor, unpad_dataproto
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ
from verl.utils import tensordict_utils as tu

from reinforce_ada.config import SamplerConfig
from reinforce_ada.estimator import publish_pools
from reinforce_ada.sampling import RewardError
from reinforce_ada.step import StepResult, run_step
from reinforce_ada.verl_config import prepare_config

METRIC_PREFIX = "reinforce_ada/"
_step_metrics: dict[str, float] = {}


def pop_step_metrics() -> dict[str, float]:
    """The metrics of the last training step's rollout (once; empty if already taken)."""
    metrics = dict(_step_metrics)
    _step_metrics.clear()
    return metrics


class SampleRecord(NamedTuple):
    """What an agent-loop worker reports for one generated and scored sample."""

    uid: str
    session: int
    reward: float
    outputs: int  # TransferQueue entries (a multi-turn agent loop stores one per output)
    reward_seconds: float
    reward_extra: dict  # the numeric extra keys a reward function returned next to its score


class RewardTally:
    """Per-step totals of the reward side: latency and the reward function's extra keys."""

    def __init__(self):
        self.samples, self.seconds, self.extra = 0, 0.0, defaultdict(float)

    def add(self, samples: int, seconds: float, extra: Mapping[str, float] = ()) -> None:
        self.samples += samples
        self.seconds += seconds
        for key, value in dict(extra).items():
            self.extra[key] += value

    def metrics(self) -> dict[str, float]:
        """``reward_latency_mean`` and, per extra key, its mean over the step's samples as ``reward/<key>``."""
        n = max(self.samples, 1)
        return {"reward_latency_mean": self.seconds / n, **{f"reward/{k}": v / n for k, v in sorted(self.extra.items())}}


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.number))


def _publish(result: StepResult, uids: Sequence[str], rewards: RewardTally) -> None:
    publish_pools({uid: g.stats for uid, g in zip(uids, result.groups) if not g.dropped})
    _step_metrics.clear()
    # reward_latency_mean: seconds from a sample's reward request to its score; scoring overlaps
    # with the generation of other samples, so it is not added to rollout_seconds.
    metrics = {**result.metrics(), **rewards.metrics()}
    _step_metrics.update({METRIC_PREFIX + k: v for k, v in metrics.items()})
    _progress(
        f"{len(uids)} prompts: {metrics['samples_total']:.0f} samples in {metrics['rounds']:.0f} rounds "
        f"({metrics['rollout_seconds']:.1f} s); {metrics['prompts_resolved']:.0f} resolved, "
        f"{metrics['prompts_unresolved']:.0f} unresolved, {metrics['prompts_dropped']:.0f} dropped"
    )


def _progress(message: str) -> None:
    print(f"[reinforce_ada] {message}", file=sys.stderr, flush=True)


def _run(prompt_count: int, global_step: Any, config, generate) -> StepResult:
    def on_round(round_index: int, prompts: int, samples: int, seconds: float) -> None:
        _progress(
            f"step {global_step} round {round_index}/{config.max_rounds}: {prompts} active prompts, "
            f"{samples} samples, {seconds:.1f} s"
        )

    # uids are random per run; step and position are stable, so the `random` selection reproduces.
    keys = [f"{global_step}:{i}" for i in range(prompt_count)]
    return run_step(keys, config, generate, on_round=on_round)


class AdaptiveAgentLoopManager:
    """Set as ``actor_rollout_ref.rollout.agent.agent_loop_manager_class``; picks the trainer's flavour."""

    @classmethod
    def create(cls, config, *args, **kwargs):
        use_v1 = config.trainer.get("use_v1", True)
        settings = prepare_config(config)
        if settings is None:  # reinforce_ada.enable=false: verl's own rollout
            return (AgentLoopManagerTQ if use_v1 else AgentLoopManager).create(config, *args, **kwargs)
        manager = _AdaptiveManagerV1 if use_v1 else _AdaptiveManagerLegacy
        return manager.create(config, *args, sampler_config=settings, **kwargs)


def _check_streaming_reward(reward_loop_worker_handles) -> None:
    if reward_loop_worker_handles is None:
        raise RuntimeError(
            "reinforce_ada: the rounds need each sample's reward as soon as it is generated (verl's streaming "
            "reward workers), but verl gave the rollout none; this happens with a reward model sharing the actor's "
            "GPUs: set reward.reward_model.enable_resource_pool=true"
        )


def _round_rewards(records: Sequence[SampleRecord], requests: Mapping[int, int], uids, offsets):
    """Groups the records by prompt, rewards in session order, checking that none is missing."""
    by_uid: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for record in records:
        by_uid[record.uid].append((record.session, record.reward))
    results = {}
    for prompt, count in requests.items():
        got = sorted(by_uid.get(uids[prompt], []))
        expected = list(range(offsets[prompt], offsets[prompt] + count))
        if [s for s, _ in got] != expected:
            missing = sorted(set(expected) - {s for s, _ in got})
            raise RewardError(
                f"reinforce_ada: prompt uid {uids[prompt]} got {len(got)} of its {count} samples this round "
                f"(missing sessions {missing[:8]}); a generation or reward call failed, see the agent loop worker "
                "log above"
            )
        results[prompt] = [r for _, r in got]
    return results


# ------------------------------------------------------------------------------------------
# V1 trainer (TransferQueue)
# ------------------------------------------------------------------------------------------
SESSION_OFFSET = "__reinforce_ada_session_offset__"


class _AdaptiveAgentLoopWorkerTQ(AgentLoopWorkerTQ.__ray_actor_class__):
    """verl's V1 agent-loop worker, plus a blocking ``run_round`` that reports each sample's reward.

    verl numbers a prompt's sessions from 0 on every call; a per-prompt offset makes later
    rounds continue the numbering, so that TransferQueue keys never collide.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._records: list[SampleRecord] = []

    async def _run_agent_loop(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
        offset = kwargs.pop(SESSION_OFFSET, None)
        if offset is not None:
            kwargs["session_id"] = int(offset) + int(kwargs["session_id"])
        return await super()._run_agent_loop(sampling_params, trajectory, agent_name=agent_name, trace=trace, **kwargs)

    async def _agent_loop_postprocess(self, output, validate, **kwargs):
        await super()._agent_loop_postprocess(output, validate, **kwargs)
        outputs = output if isinstance(output, list) else [output]
        if not validate and outputs:
            final = outputs[-1]
            if final.reward_score is None:
                raise RuntimeError(f"reinforce_ada: no reward was computed for prompt uid {kwargs['uid']}")
            self._records.append(
                SampleRecord(
                    uid=kwargs["uid"],
                    session=int(kwargs["session_id"]),
                    reward=float(final.reward_score),
                    outputs=len(outputs),
                    reward_seconds=float(final.metrics.compute_score or 0.0),
                    reward_extra={
                        k: float(v) for k, v in (final.extra_fields.get("reward_extra_info") or {}).items() if _is_number(v)
                    },
                )
            )

    async def run_round(self, batch) -> list[SampleRecord]:
        """Generates and scores the requested samples, waits for all, returns one record each."""
        self._records = []
        await self.generate_sequences(batch)
        await asyncio.gather(*list(self.background_tasks), return_exceptions=True)
        records, self._records = self._records, []
        return records


class _AdaptiveManagerV1(AgentLoopManagerTQ):
    def __init__(self, config, *args, sampler_config: SamplerConfig, **kwargs):
        super().__init__(config, *args, **kwargs)
        self.agent_loop_workers_class = ray.remote(_AdaptiveAgentLoopWorkerTQ)
        self.sampler_config = sampler_config
        _check_streaming_reward(self.reward_loop_worker_handles)

    def _dispatch_round(self, batch) -> list[SampleRecord]:
        """One round on the workers: a record per generated and scored sample."""
        chunks = batch.chunk(len(self.agent_loop_workers))
        done = ray.get([w.run_round.remote(c) for w, c in zip(self.agent_loop_workers, chunks)])
        return [record for records in done for record in records]

    def _clear_samples(self, keys: list[str]) -> None:
        import transfer_queue as tq

        tq.kv_clear(keys=keys, partition_id="train")

    def generate_sequences(self, prompts) -> None:
        if tu.get_non_tensor_data(prompts, "validate", False):
            return super().generate_sequences(prompts)
        uids = [str(u) for u in prompts["uid"]]
        offsets = [0] * len(uids)
        outputs_per_sample: dict[tuple[str, int], int] = {}
        reward_tally = RewardTally()

        def generate(requests: Mapping[int, int]) -> Mapping[int, list[float]]:
            active = list(requests)
            batch = tu.index_select_tensor_dict(prompts, active)
            tu.assign_non_tensor_stack(batch, "__rollout_n__", [requests[i] for i in active])
            tu.assign_non_tensor_stack(batch, SESSION_OFFSET, [offsets[i] for i in active])
            records = self._dispatch_round(batch)
            results = _round_rewards(records, requests, uids, offsets)
            outputs_per_sample.update({(r.uid, r.session): r.outputs for r in records})
            for r in records:
                reward_tally.add(1, r.reward_seconds, r.reward_extra)
            for prompt, count in requests.items():
                offsets[prompt] += count
            return results

        step = tu.get_non_tensor_data(prompts, "global_steps", 0)
        result = _run(len(uids), step, self.sampler_config, generate)

        kept = {(uids[p], i) for p, g in enumerate(result.groups) for i in g.kept}
        unkept = [
            f"{uid}_{session}_{i}"
            for (uid, session), count in outputs_per_sample.items()
            if (uid, session) not in kept
            for i in range(count)
        ]
        if unkept:
            self._clear_samples(unkept)
        _publish(result, uids, reward_tally)


# ------------------------------------------------------------------------------------------
# Legacy trainer (RayPPOTrainer, DataProto)
# ------------------------------------------------------------------------------------------

class _AdaptiveManagerLegacy(AgentLoopManager):
    def __init__(self, config, *args, sampler_config: SamplerConfig, **kwargs):
        super().__init__(config, *args, **kwargs)
        self.sampler_config = sampler_config
        _check_streaming_reward(self.reward_loop_worker_handles)

    def _generate_round(self, batch: DataProto) -> DataProto:
        """One round through verl's own manager (its workers need equal chunks: pad, then unpad)."""
        padded, pad = pad_dataproto_to_divisor(batch, len(self.agent_loop_workers))
        return unpad_dataproto(super().generate_sequences(padded), pad)

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        if prompts.meta_info.get("validate", False):
            return super().generate_sequences(prompts)
        n = self.sampler_config.n
        # The trainer repeated every prompt n times (interleaved); one copy of each is the input.
        if len(prompts) % n:
            raise ValueError(f"reinforce_ada: expected a multiple of rollout.n={n} rows, got {len(prompts)}")
        uids = prompts.non_tensor_batch["uid"]
        base = prompts.select_idxs(np.arange(0, len(prompts), n))
        if any(len(set(uids[i : i + n])) != 1 for i in range(0, len(prompts), n)):
            raise ValueError("reinforce_ada: the legacy trainer's rollout input is not n copies of each prompt in a row")
        rounds: list[DataProto] = []
        pool_rows: list[list[tuple[int, int]]] = [[] for _ in range(len(base))]  # (round, row) per pool index
        timing: dict[str, float] = {}
        reward_tally = RewardTally()

        def generate(requests: Mapping[int, int]) -> Mapping[int, list[float]]:
            rows = np.repeat(np.array(list(requests)), [requests[p] for p in requests])
            batch = base.select_idxs(rows)
            batch.meta_info = dict(prompts.meta_info)
            output = self._generate_round(batch)
            if "rm_scores" not in output.batch.keys():
                raise RuntimeError("reinforce_ada: the rollout returned no rm_scores (streaming reward is off)")
            round_timing = output.meta_info.get("timing", {})
            timing.update(round_timing)
            extra = output.non_tensor_batch
            reward_tally.add(
                len(output),
                round_timing.get("agent_loop/compute_score/mean", 0.0) * len(output),
                {
                    k: float(np.sum(extra[k].astype(float)))
                    for k in output.meta_info.get("reward_extra_keys", [])
                    if k in extra and all(_is_number(v) for v in extra[k])
                },
            )
            rewards = output.batch["rm_scores"].sum(dim=-1).tolist()
            results: dict[int, list[float]] = defaultdict(list)
            for row, prompt in enumerate(rows.tolist()):
                pool_rows[prompt].append((len(rounds), row))
                results[prompt].append(rewards[row])
            rounds.append(output)
            return results

        result = _run(len(base), prompts.meta_info.get("global_steps", 0), self.sampler_config, generate)

        reward_extra_keys = rounds[0].meta_info.get("reward_extra_keys", [])
        for output in rounds:
            output.meta_info = {}  # DataProto.concat insists on equal meta_info
        round_start = np.cumsum([0] + [len(r) for r in rounds])
        kept_rows = [
            round_start[r] + row for p, group in enumerate(result.groups) for r, row in (pool_rows[p][i] for i in group.kept)
        ]
        output = DataProto.concat(rounds).select_idxs(np.array(kept_rows, dtype=np.int64))
        _publish(result, [str(u) for u in base.non_tensor_batch["uid"]], reward_tally)
        # The legacy trainer logs the rollout's `timing` dict (as timing_s/...); our metrics ride along.
        timing.update(pop_step_metrics())
        output.meta_info = {"timing": timing, "reward_extra_keys": reward_extra_keys}
        return output
