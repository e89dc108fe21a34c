"""The adaptive multi-round rollout as a verl agent-loop manager, for both verl trainers.

verl 0.9 builds its rollout manager from ``actor_rollout_ref.rollout.agent.agent_loop_manager_class``
in both the V1 trainer (TransferQueue, ``trainer.use_v1=true``) and the legacy ``RayPPOTrainer``.
:class:`AdaptiveAgentLoopManager` is that class: its ``create`` returns the implementation for
the configured trainer. Each training step it runs :func:`reinforce_ada.step.run_step` on verl's
agent-loop workers (async vLLM servers, streaming reward workers):

* ``reinforce_ada.mode=rounds``: one request per round for all still-active prompts, split over
  the workers, and a barrier until every sample of the round is scored;
* ``reinforce_ada.mode=async`` (V1 trainer): one Ray call per prompt request (that prompt's M
  samples) on the least-loaded worker; as soon as one is scored its prompt's next request is
  sent, while the other prompts are still generating.

The policy is frozen during the sampling: both trainers sync weights only between steps.
Validation batches pass through to verl unchanged.

What each trainer gets back:
* V1: samples live in TransferQueue under ``{uid}_{session}_{i}``; session ids continue across
  a prompt's requests, so its pool index is its session id. Samples not kept are deleted before the
  replay buffer reads the step's batch; dropped prompts leave no samples.
* Legacy: a ``DataProto`` of exactly ``n`` samples per prompt, in prompt order, as GRPO-n.

Both publish the pool statistics for the estimator (:func:`reinforce_ada.estimator.publish_pools`)
and the step metrics (:func:`pop_step_metrics`).

The V1 manager also keeps the pass-rate tracker (:mod:`reinforce_ada.tracker`), keyed by a hash
of each prompt's messages: it plans Est's allocation (``variant=est``: one request of N_x samples
per prompt, all of them kept) or the warm start's first requests, learns from every sample drawn,
is saved in each verl checkpoint by :class:`reinforce_ada.checkpoint.TrackerCheckpointCallback`,
and is restored from the checkpoint verl resumed from at the first training step.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import ray
from verl.experimental.agent_loop import AgentLoopManager, AgentLoopWorker
from verl.protocol import DataProto, pad_dataproto_to_divisor, unpad_dataproto
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ
from verl.utils import tensordict_utils as tu

from reinforce_ada.checkpoint import load_tracker, resumed_checkpoint_dir
from reinforce_ada.config import SamplerConfig
from reinforce_ada.estimator import publish_pools
from reinforce_ada.groups import candidates
from reinforce_ada.sampling import FAILED, AsyncProgress, RewardError
from reinforce_ada.seeding import sample_seed
from reinforce_ada.step import StepResult, run_step
from reinforce_ada.tracker import PassRateTracker, make_tracker, plan_first_requests, prompt_identity
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
        return {
            "reward_latency_mean": self.seconds / n,
            **{f"reward/{k}": v / n for k, v in sorted(self.extra.items())},
        }


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.number))


def _publish(
    result: StepResult, uids: Sequence[str], rewards: RewardTally, extra: Mapping[str, float] | None = None
) -> None:
    publish_pools({uid: g.stats for uid, g in zip(uids, result.groups) if not g.dropped})
    _step_metrics.clear()
    # reward_latency_mean: seconds from a sample's reward request to its score; scoring overlaps
    # with the generation of other samples, so it is not added to rollout_seconds.
    metrics = {**result.metrics(), **rewards.metrics(), **(extra or {})}
    _step_metrics.update({METRIC_PREFIX + k: v for k, v in metrics.items()})
    rounds = (
        f"{metrics['rounds']:.0f} rounds"
        if result.round_seconds
        else f"at most {metrics['rounds']:.0f} requests a prompt"
    )
    _progress(
        f"{len(uids)} prompts: {metrics['samples_total']:.0f} samples in {rounds} "
        f"({metrics['rollout_seconds']:.1f} s); {metrics['prompts_resolved']:.0f} resolved, "
        f"{metrics['prompts_unresolved']:.0f} unresolved, {metrics['prompts_dropped']:.0f} dropped"
        + (f"; {metrics['samples_failed']:.0f} samples failed, {metrics['prompts_failed']:.0f} prompts failed"
           if metrics["samples_failed"] else "")
    )


def _progress(message: str) -> None:
    print(f"[reinforce_ada] {message}", file=sys.stderr, flush=True)


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        _progress(message)


def _run(
    prompt_count: int, global_step: Any, config: SamplerConfig, rollout, first_requests: Sequence[int] | None = None
) -> StepResult:
    def on_round(round_index: int, prompts: int, samples: int, seconds: float) -> None:
        of = f"/{config.max_rounds}" if round_index <= config.max_rounds else f" (past {config.max_rounds}: redraws)"
        _progress(
            f"step {global_step} round {round_index}{of}: {prompts} active prompts, {samples} samples, {seconds:.1f} s"
        )

    # async: a line every quarter of the prompt count in scored requests (about 12 lines a step)
    report_every = max(1, prompt_count // 4)
    last_report = 0

    def on_progress(progress: AsyncProgress) -> None:
        nonlocal last_report
        if progress.requests_scored - last_report >= report_every:
            last_report = progress.requests_scored
            _progress(
                f"step {global_step} async: {progress.requests_scored} requests scored, "
                f"{progress.prompts_finished}/{prompt_count} prompts finished, {progress.prompts_in_flight} in flight, "
                f"{progress.samples_drawn} samples, {progress.seconds:.1f} s"
            )

    # uids are random per run; step and position are stable, so the `random` selection reproduces.
    keys = [f"{global_step}:{i}" for i in range(prompt_count)]
    return run_step(keys, config, rollout, on_round=on_round, on_progress=on_progress, first_requests=first_requests)


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


def _round_rewards(
    records: Sequence[SampleRecord], requests: Mapping[int, int], uids, offsets
) -> dict[int, list[tuple[int, float | None]]]:
    """Groups the records by prompt: ``(session, reward)`` in session order, the reward
    :data:`~reinforce_ada.sampling.FAILED` for a session that came back without a record
    (its generation or reward call raised; verl's worker logs why).

    Args:
        records: What the workers reported for the requests' samples.
        requests: Prompt index to the number of samples requested.
        uids: Prompt index to its uid.
        offsets: Prompt index to the first session id (pool index) of its request.
    """
    by_uid: dict[str, dict[int, float]] = defaultdict(dict)
    for record in records:
        by_uid[record.uid][record.session] = record.reward
    results = {}
    for prompt, count in requests.items():
        got = by_uid.get(uids[prompt], {})
        expected = range(offsets[prompt], offsets[prompt] + count)
        stray = sorted(set(got) - set(expected))
        if stray:
            raise RuntimeError(
                f"reinforce_ada: prompt uid {uids[prompt]} got samples it did not ask for (sessions {stray[:8]})"
            )
        results[prompt] = [(session, got.get(session, FAILED)) for session in expected]
    return results


# ------------------------------------------------------------------------------------------
# V1 trainer (TransferQueue)
# ------------------------------------------------------------------------------------------
SESSION_OFFSET = "__reinforce_ada_session_offset__"


class _AdaptiveAgentLoopWorkerTQ(AgentLoopWorkerTQ.__ray_actor_class__):
    """verl's V1 agent-loop worker, plus a blocking ``run_requests`` that reports each sample's reward.

    verl numbers a prompt's sessions from 0 on every call; a per-prompt offset makes later
    requests continue the numbering, so that TransferQueue keys never collide.

    Several ``run_requests`` calls run at once on one worker in ``async`` mode (Ray runs an async
    actor's calls concurrently), so records and completion are tracked per prompt uid: a uid has
    at most one request in flight.
    """

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        self._records: dict[str, list[SampleRecord]] = {}  # uid -> records of its running request
        self._prompt_done: dict[str, asyncio.Future] = {}  # uid -> set when its request settles
        self._sampling_seed = _sampling_seed(config)

    async def _run_agent_loop(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
        offset = kwargs.pop(SESSION_OFFSET, None)
        if offset is not None:
            kwargs["session_id"] = int(offset) + int(kwargs["session_id"])
        if self._sampling_seed is not None and not trajectory.get("validate", False):
            key = prompt_identity(kwargs.get("raw_prompt"), kwargs.get("data_source"))
            seed = sample_seed(self._sampling_seed, key, int(kwargs.get("global_steps", 0)), int(kwargs["session_id"]))
            sampling_params = {**sampling_params, "seed": seed}  # the prompt's sessions share the dict
        return await super()._run_agent_loop(sampling_params, trajectory, agent_name=agent_name, trace=trace, **kwargs)

    async def _run_prompt(self, prompt: dict, sampling_params: dict, trajectory: dict, trace: bool = False) -> None:
        uid = str(prompt["uid"])
        try:
            await super()._run_prompt(prompt, sampling_params, trajectory, trace=trace)
        finally:
            done = self._prompt_done.get(uid)
            if done is not None and not done.done():
                done.set_result(None)

    async def _agent_loop_postprocess(self, output, validate, **kwargs):
        await super()._agent_loop_postprocess(output, validate, **kwargs)
        outputs = output if isinstance(output, list) else [output]
        records = self._records.get(str(kwargs["uid"]))
        if not validate and outputs and records is not None:
            final = outputs[-1]
            # a sample without a score is stored already: report it as NaN, so that it counts as failed and is cleared
            score = math.nan if final.reward_score is None else float(final.reward_score)
            records.append(
                SampleRecord(
                    uid=kwargs["uid"],
                    session=int(kwargs["session_id"]),
                    reward=score,
                    outputs=len(outputs),
                    reward_seconds=float(final.metrics.compute_score or 0.0),
                    reward_extra={
                        k: float(v)
                        for k, v in (final.extra_fields.get("reward_extra_info") or {}).items()
                        if _is_number(v)
                    },
                )
            )

    async def run_requests(self, batch) -> list[SampleRecord]:
        """Generates and scores the batch's requests, waits for them, returns one record per sample.

        Args:
            batch: One row per prompt (distinct uids), with ``__rollout_n__`` samples to draw and
                the session offset of the first.

        Returns:
            The records of this batch's samples only (other calls may be running).
        """
        uids = [str(u) for u in batch["uid"]]
        busy = [u for u in uids if u in self._records]
        if busy or len(set(uids)) != len(uids):
            raise RuntimeError(
                f"reinforce_ada: prompt uid {(busy or uids)[0]} has two requests in flight on one worker"
            )
        loop = asyncio.get_running_loop()
        for uid in uids:
            self._records[uid] = []
            self._prompt_done[uid] = loop.create_future()
        try:
            await self.generate_sequences(batch)
            await asyncio.gather(*(self._prompt_done[uid] for uid in uids))
            return [record for uid in uids for record in self._records[uid]]
        finally:
            for uid in uids:
                self._records.pop(uid, None)
                self._prompt_done.pop(uid, None)


class _AdaptiveManagerV1(AgentLoopManagerTQ):
    def __init__(self, config, *args, sampler_config: SamplerConfig, **kwargs):
        super().__init__(config, *args, **kwargs)
        self.agent_loop_workers_class = ray.remote(_AdaptiveAgentLoopWorkerTQ)
        self.sampler_config = sampler_config
        self.tracker: PassRateTracker = make_tracker(sampler_config)
        self.reward_name = _reward_name(config)
        self._tracker_checked = False  # restored from verl's resumed checkpoint at the first training step
        _check_streaming_reward(self.reward_loop_worker_handles)

    def _restore_tracker(self, step: int) -> None:
        """At the first training step: loads the tracker saved with the checkpoint verl resumed from."""
        self._tracker_checked = True
        folder = resumed_checkpoint_dir(self.config.trainer, step)
        if folder is None:
            return
        if load_tracker(self.tracker, folder, global_step=step - 1):
            _progress(f"step {step}: pass-rate tracker of {len(self.tracker)} prompts restored from {folder}")
        else:
            _progress(
                f"step {step}: WARNING: {folder} holds no pass-rate tracker (a checkpoint from before it was saved, "
                "or a crash between verl's save and ours); starting with an empty tracker"
            )

    def _plan(self, prompts, step: int) -> tuple[list[str] | None, list[int] | None, dict[str, float]]:
        """The step's tracker keys, first requests (Est / warm start) and tracker metrics."""
        if not self._tracker_checked:
            self._restore_tracker(step)
        keys = _prompt_keys(prompts)
        if keys is None:
            if self.sampler_config.uses_tracker or self.sampler_config.sampling_seed is not None:
                raise RuntimeError(
                    "reinforce_ada: variant=est, warm_start and sampling_seed need each prompt's `raw_prompt` (verl's "
                    "RLHFDataset provides it) to recognise prompts across steps and runs; the rollout got none"
                )
            return None, None, {}
        first_requests = plan_first_requests(self.tracker, keys, self.sampler_config)
        metrics = self.tracker.summary(keys)
        if first_requests is not None:
            metrics.update(
                {
                    "first_request_mean": sum(first_requests) / len(first_requests),
                    "first_request_min": float(min(first_requests)),
                    "first_request_max": float(max(first_requests)),
                }
            )
            what = "allocation" if self.sampler_config.variant == "est" else "first requests"
            counts = " ".join(str(c) for c in first_requests)
            if len(first_requests) > 64:  # a digest keeps the line short and still shows a resume allocates the same
                digest = hashlib.blake2b(counts.encode(), digest_size=8).hexdigest()
                counts = f"{len(first_requests)} prompts, {min(first_requests)}..{max(first_requests)}, digest {digest}"
            _progress(f"step {step} {what}: {counts}")
        return keys, first_requests, metrics

    def _dispatch_round(self, batch) -> list[SampleRecord]:
        """One round on the workers: a record per generated and scored sample."""
        chunks = batch.chunk(len(self.agent_loop_workers))
        done = ray.get([w.run_requests.remote(c) for w, c in zip(self.agent_loop_workers, chunks)])
        return [record for records in done for record in records]

    def _start_request(self, worker: int, batch) -> ray.ObjectRef:
        """Sends one prompt's request to a worker without waiting (async mode)."""
        return self.agent_loop_workers[worker].run_requests.remote(batch)

    def _finished_requests(self, pending: list[ray.ObjectRef]) -> list[tuple[ray.ObjectRef, list[SampleRecord]]]:
        """Blocks until a request is scored; returns it and every other one already scored."""
        ready, rest = ray.wait(pending, num_returns=1)
        if rest:
            ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        return list(zip(ready, ray.get(ready)))

    def _clear_samples(self, keys: list[str]) -> None:
        import transfer_queue as tq

        tq.kv_clear(keys=keys, partition_id="train")

    def generate_sequences(self, prompts) -> None:
        if tu.get_non_tensor_data(prompts, "validate", False):
            return super().generate_sequences(prompts)
        book = _RequestBook(prompts, self.reward_name)

        def generate_round(requests: Mapping[int, int]) -> dict[int, list[float | None]]:
            return book.record(self._dispatch_round(book.batch(requests)), requests)

        rollout = _WorkerRequests(self, book) if self.sampler_config.mode == "async" else generate_round

        step = tu.get_non_tensor_data(prompts, "global_steps", 0)
        keys, first_requests, tracker_metrics = self._plan(prompts, int(step))
        result = _run(len(book.uids), step, self.sampler_config, rollout, first_requests)
        if keys is not None:
            self.tracker.update_many((k, s.drawn, s.num_pos) for k, s in zip(keys, result.samplers))
        if result.empty:
            _progress(
                f"step {step}: WARNING: every prompt was dropped (reinforce_ada.unresolved=drop) or failed; this "
                "step trains on their samples with zero advantage, so the policy gradient is zero "
                "(reinforce_ada/empty_step=1)"
            )
        kept = {(book.uids[p], book.pool_sessions[p][i]) for p, g in enumerate(result.groups) for i in g.kept}
        if not kept:
            raise RuntimeError(
                f"reinforce_ada: step {step}: every sample of every prompt failed (generation or reward call, twice), "
                f"so there is nothing to train on; see the agent loop worker log for the error ({self.reward_name})"
            )
        unkept = [
            f"{uid}_{session}_{i}"
            for (uid, session), count in book.outputs_per_sample.items()
            if (uid, session) not in kept
            for i in range(count)
        ]
        if unkept:
            self._clear_samples(unkept)
        _publish(result, book.uids, book.reward_tally, tracker_metrics)


def _sampling_seed(config) -> int | None:
    """``reinforce_ada.sampling_seed`` (None: unseeded)."""
    seed = (config.get("reinforce_ada") or {}).get("sampling_seed")
    return None if seed is None else int(seed)


def _reward_name(config) -> str:
    """The custom reward function as the user named it, for warnings."""
    custom = (config.get("reward") or {}).get("custom_reward_function") or {}
    if custom.get("path"):
        return f"the reward function {custom.get('name') or 'compute_score'} of {custom.get('path')}"
    return "the reward function"


def _prompt_keys(prompts) -> list[str] | None:
    """Each prompt's :func:`~reinforce_ada.tracker.prompt_identity` (messages and data source); None
    without messages."""
    if "raw_prompt" not in prompts.keys():
        return None
    messages = list(prompts["raw_prompt"])
    sources = list(prompts["data_source"]) if "data_source" in prompts.keys() else [None] * len(messages)
    return [prompt_identity(m, s) for m, s in zip(messages, sources)]


class _RequestBook:
    """A V1 step's requests: builds their input rows and checks and books what comes back.

    Session ids continue across a prompt's requests; a failed sample's session is not in the
    prompt's pool, so ``pool_sessions`` maps pool index to session.
    """

    def __init__(self, prompts, reward_name: str = "the reward function"):
        self.prompts = prompts
        self.uids = [str(u) for u in prompts["uid"]]
        self.reward_name = reward_name
        self.offsets = [0] * len(self.uids)  # per prompt: samples asked for = the next session id
        self.pool_sessions: list[list[int]] = [[] for _ in self.uids]
        self.outputs_per_sample: dict[tuple[str, int], int] = {}
        self.reward_tally = RewardTally()

    def batch(self, requests: Mapping[int, int]):
        """The input rows of ``{prompt index: count}``: ``count`` samples each, sessions continuing."""
        active = list(requests)
        batch = tu.index_select_tensor_dict(self.prompts, active)
        tu.assign_non_tensor_stack(batch, "__rollout_n__", [requests[i] for i in active])
        tu.assign_non_tensor_stack(batch, SESSION_OFFSET, [self.offsets[i] for i in active])
        return batch

    def record(self, records: Sequence[SampleRecord], requests: Mapping[int, int]) -> dict[int, list[float | None]]:
        """The rewards of ``requests`` in session order (None for a failed sample); advances the offsets."""
        results = _round_rewards(records, requests, self.uids, self.offsets)
        self.outputs_per_sample.update({(r.uid, r.session): r.outputs for r in records})
        rewards: dict[int, list[float | None]] = {}
        for prompt, sessions in results.items():
            rewards[prompt] = []
            for session, reward in sessions:
                if reward is not FAILED and not math.isfinite(reward):
                    _warn_once(
                        f"WARNING: {self.reward_name} returned a non-finite score ({reward}); such a sample is "
                        "redrawn once, like a failed one, and counted in reinforce_ada/samples_failed"
                    )
                    reward = FAILED
                if reward is not FAILED:
                    self.pool_sessions[prompt].append(session)
                rewards[prompt].append(reward)
            self.offsets[prompt] += requests[prompt]
        failed = sum(r is FAILED for values in rewards.values() for r in values)
        if failed:
            _progress(f"{failed} of {sum(requests.values())} samples failed (generation or reward call); redrawn once")
        for r in records:
            if math.isfinite(r.reward):
                self.reward_tally.add(1, r.reward_seconds, r.reward_extra)
        return rewards


class _WorkerRequests:
    """The async mode's :class:`~reinforce_ada.sampling.AsyncRollout` on verl's agent-loop workers.

    Each prompt request is its own Ray call, sent to the worker with the fewest in flight.
    """

    def __init__(self, manager: _AdaptiveManagerV1, book: _RequestBook):
        self.manager, self.book = manager, book
        self.load = [0] * len(manager.agent_loop_workers)  # requests in flight per worker
        self.pending: dict[Any, tuple[int, int, int]] = {}  # Ray ref -> (prompt, count, worker)

    def submit(self, prompt: int, count: int) -> None:
        worker = min(range(len(self.load)), key=self.load.__getitem__)
        ref = self.manager._start_request(worker, self.book.batch({prompt: count}))
        self.load[worker] += 1
        self.pending[ref] = (prompt, count, worker)

    def wait(self) -> list[tuple[int, list[float]]]:
        scored = []
        for ref, records in self.manager._finished_requests(list(self.pending)):
            prompt, count, worker = self.pending.pop(ref)
            self.load[worker] -= 1
            scored.append((prompt, self.book.record(records, {prompt: count})[prompt]))
        return scored


# ------------------------------------------------------------------------------------------
# Legacy trainer (RayPPOTrainer, DataProto)
# ------------------------------------------------------------------------------------------

SAMPLE_SEED = "__reinforce_ada_sample_seed__"


class _SeededAgentLoopWorker(AgentLoopWorker):
    """verl's legacy agent-loop worker; a row's ``SAMPLE_SEED`` becomes its vLLM request's seed."""

    async def _run_agent_loop(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
        seed = kwargs.pop(SAMPLE_SEED, None)
        if seed is not None:
            sampling_params = {**sampling_params, "seed": int(seed)}
        return await super()._run_agent_loop(sampling_params, trajectory, agent_name=agent_name, trace=trace, **kwargs)


class _AdaptiveManagerLegacy(AgentLoopManager):
    def __init__(self, config, *args, sampler_config: SamplerConfig, **kwargs):
        self.agent_loop_workers_class = ray.remote(_SeededAgentLoopWorker)  # verl keeps a class set before
        super().__init__(config, *args, **kwargs)
        self.sampler_config = sampler_config
        self.reward_name = _reward_name(config)
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
            raise ValueError(
                "reinforce_ada: the legacy trainer's rollout input is not n copies of each prompt in a row"
            )
        # Only the samples that may still enter a group are held between rounds (at most 2n per
        # prompt with the `first` selection), not every round's whole batch.
        held: DataProto | None = None
        held_rows: dict[tuple[int, int], int] = {}  # (prompt, pool index) -> row of `held`
        pools: list[list[float]] = [[] for _ in range(len(base))]
        timing: dict[str, float] = {}
        reward_extra_keys: list[str] = []
        reward_tally = RewardTally()

        step = prompts.meta_info.get("global_steps", 0)
        seeds = _RowSeeds(base, step, self.sampler_config.sampling_seed)

        def generate(requests: Mapping[int, int]) -> Mapping[int, list[float]]:
            nonlocal held, held_rows, reward_extra_keys
            rows = np.repeat(np.array(list(requests)), [requests[p] for p in requests])
            batch = base.select_idxs(rows)
            batch.meta_info = dict(prompts.meta_info)
            if seeds:
                batch.non_tensor_batch[SAMPLE_SEED] = seeds.of(rows, [len(pools[p]) for p in range(len(pools))])
            output = self._generate_round(batch)
            if "rm_scores" not in output.batch.keys():
                raise RuntimeError("reinforce_ada: the rollout returned no rm_scores (streaming reward is off)")
            round_timing = output.meta_info.get("timing", {})
            timing.update(round_timing)
            reward_extra_keys = reward_extra_keys or output.meta_info.get("reward_extra_keys", [])
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
            if not all(math.isfinite(r) for r in rewards):
                raise RewardError(
                    f"reinforce_ada: {self.reward_name} returned a non-finite score; the legacy trainer "
                    "cannot leave a sample out (verl's legacy trainer also stops at a failed sample): fix the reward "
                    "function, or use trainer.use_v1=true, where such a sample is redrawn once and counted"
                )
            results: dict[int, list[float]] = defaultdict(list)
            offset = len(held) if held is not None else 0
            rows_by_sample = dict(held_rows)
            for row, prompt in enumerate(rows.tolist()):
                rows_by_sample[(prompt, len(pools[prompt]))] = offset + row
                pools[prompt].append(rewards[row])
                results[prompt].append(rewards[row])
            output.meta_info = {}  # DataProto.concat insists on equal meta_info
            keep = [(p, i) for p in range(len(pools)) for i in candidates(pools[p], self.sampler_config)]
            keep.sort(key=rows_by_sample.__getitem__)  # the earlier rounds' rows first, then this round's
            rows = [rows_by_sample[k] for k in keep]
            old_rows, new_rows = [r for r in rows if r < offset], [r - offset for r in rows if r >= offset]
            parts = []  # a part kept whole is not copied
            if old_rows:
                parts.append(held if len(old_rows) == offset else held.select_idxs(np.array(old_rows, dtype=np.int64)))
            if new_rows:
                whole = len(new_rows) == len(output)
                parts.append(output if whole else output.select_idxs(np.array(new_rows, dtype=np.int64)))
            held = parts[0] if len(parts) == 1 else DataProto.concat(parts)
            held_rows = {k: row for row, k in enumerate(keep)}
            return results

        result = _run(len(base), step, self.sampler_config, generate)
        kept_rows = [held_rows[(p, i)] for p, group in enumerate(result.groups) for i in group.kept]
        output = held.select_idxs(np.array(kept_rows, dtype=np.int64))
        _publish(result, [str(u) for u in base.non_tensor_batch["uid"]], reward_tally)
        # The legacy trainer logs the rollout's `timing` dict (as timing_s/...); our metrics ride along.
        timing.update(pop_step_metrics())
        output.meta_info = {"timing": timing, "reward_extra_keys": reward_extra_keys}
        return output


class _RowSeeds:
    """The legacy rollout's per-row vLLM seeds (see :mod:`reinforce_ada.seeding`); falsy when unseeded."""

    def __init__(self, base: DataProto, step: int, run_seed: int | None):
        self.run_seed, self.step = run_seed, int(step)
        if run_seed is None:
            return
        if "raw_prompt" not in base.non_tensor_batch:
            raise RuntimeError(
                "reinforce_ada.sampling_seed needs each prompt's `raw_prompt` (verl's RLHFDataset provides it) to "
                "seed its samples the same in every run"
            )
        sources = base.non_tensor_batch.get("data_source", [None] * len(base))
        self.keys = [prompt_identity(m, s) for m, s in zip(base.non_tensor_batch["raw_prompt"], sources)]

    def __bool__(self) -> bool:
        return self.run_seed is not None

    def of(self, rows: np.ndarray, pool_sizes: Sequence[int]) -> np.ndarray:
        """Seeds of a round's rows (prompt indices, a prompt's rows together): pool indices continue."""
        seeds, next_index = [], list(pool_sizes)
        for prompt in rows.tolist():
            seeds.append(sample_seed(self.run_seed, self.keys[prompt], self.step, next_index[prompt]))
            next_index[prompt] += 1
        return np.array(seeds, dtype=object)
