"""The adaptive rollout on verl's V1 trainer (TransferQueue, ``trainer.use_v1=true``).

Samples live in TransferQueue under ``{uid}_{session}_{i}``. Session ids continue across a
prompt's requests, so a sample's session is its index among everything the prompt asked for;
a failed sample's session is not in the pool, so :class:`RequestBook` maps pool indices to
sessions. Samples not kept are deleted before the replay buffer reads the step's batch; dropped
prompts leave none. In ``mode=async`` each prompt request is its own Ray call, on the worker
with the fewest in flight.

The manager also keeps the pass-rate tracker (:mod:`reinforce_ada.core.tracker`), keyed by a hash of
each prompt's messages: it plans Est's allocation or the warm start's first requests, learns from
every sample drawn, is saved in each verl checkpoint by
:class:`reinforce_ada.checkpoint.TrackerCheckpointCallback`, and is restored from the checkpoint
verl resumed from at the first training step.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import socket
from collections.abc import Mapping
from typing import Any

import ray
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ
from verl.utils import tensordict_utils as tu

from reinforce_ada.core.config import RunConfig, SamplerConfig
from reinforce_ada.core.messages import say
from reinforce_ada.core.seeding import sample_seed
from reinforce_ada.core.skip import SkipRule
from reinforce_ada.core.tracker import (
    PassRateTracker,
    make_tracker,
    plan_first_requests,
    prompt_identities,
    prompt_identity,
)
from reinforce_ada.integration.agents import (
    Episode,
    TurnSeededClient,
    count_tool_calls,
    episode_metrics,
    seeded_episode,
    tool_calls_of,
)
from reinforce_ada.integration.checkpoint import load_tracker, resumed_checkpoint_dir
from reinforce_ada.integration.prompt_skip import PromptSkipper
from reinforce_ada.integration.request_book import SEED_REDRAW, SEED_SLOTS, SESSION_OFFSET, RequestBook
from reinforce_ada.integration.rollout import (
    SampleRecord,
    check_streaming_reward,
    is_number,
    publish_step,
    reward_name,
    run_sampling,
)
from reinforce_ada.integration.verl_config import storage_shortfall


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
        count_tool_calls()
        self.llm_client = TurnSeededClient(self.llm_client)  # what verl hands each agent loop: seeds its turns
        self._records: dict[str, list[SampleRecord]] = {}  # uid -> records of its running request
        self._prompt_done: dict[str, asyncio.Future] = {}  # uid -> set when its request settles
        self._sampling_seed = RunConfig.from_config(config).sampling_seed

    async def _run_agent_loop(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
        offset = kwargs.pop(SESSION_OFFSET, None)
        slots, redraw = kwargs.pop(SEED_SLOTS, None), bool(kwargs.pop(SEED_REDRAW, False))
        local = int(kwargs["session_id"])
        if offset is not None:
            kwargs["session_id"] = int(offset) + local
        seed = None
        if self._sampling_seed is not None and not trajectory.get("validate", False):
            key = prompt_identity(kwargs.get("raw_prompt"), kwargs.get("data_source"))
            slot = int(slots[local]) if slots is not None else int(kwargs["session_id"])
            seed = sample_seed(self._sampling_seed, key, int(kwargs.get("global_steps", 0)), slot, redraw=redraw)
            sampling_params = {**sampling_params, "seed": seed}  # the prompt's sessions share the dict
        with seeded_episode(seed):
            return await super()._run_agent_loop(
                sampling_params, trajectory, agent_name=agent_name, trace=trace, **kwargs
            )

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
                        if is_number(v)
                    },
                    response_tokens=sum(sum(o.response_mask) for o in outputs),
                    episode=Episode(
                        turns=int(final.num_turns),
                        tool_calls=sum(tool_calls_of(o.extra_fields) for o in outputs),
                        env_tokens=sum(len(o.response_mask) - sum(o.response_mask) for o in outputs),
                    ),
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


class AdaptiveManagerV1(AgentLoopManagerTQ):
    skipper: PromptSkipper | None = None  # reinforce_ada.skip

    def __init__(self, config, *args, sampler_config: SamplerConfig, **kwargs):
        super().__init__(config, *args, **kwargs)
        self.agent_loop_workers_class = ray.remote(_AdaptiveAgentLoopWorkerTQ)
        self.sampler_config = sampler_config
        self.tracker: PassRateTracker = make_tracker(sampler_config)
        if sampler_config.skip:
            rule = SkipRule(sampler_config.skip_growth, sampler_config.skip_cap, seed=sampler_config.sampling_seed or 0)
            self.skipper = PromptSkipper(rule, self._clear_samples, _required_prompt_keys)
        self.reward_name = reward_name(config)
        self._tracker_checked = False  # restored from verl's resumed checkpoint at the first training step
        self._outputs_checked = 1  # the most outputs per sample TransferQueue's capacity was checked for
        check_streaming_reward(self.reward_loop_worker_handles)

    def _check_storage(self, book: RequestBook) -> None:
        """An agent loop that returns several outputs per sample stores one entry per output: checks, the first time
        it stores more than before, that a whole step still fits TransferQueue's storage."""
        outputs = max(book.outputs_per_sample.values(), default=1)
        if outputs <= self._outputs_checked:
            return
        problem = storage_shortfall(self.config, self.sampler_config, outputs)
        if problem:
            raise RuntimeError(f"reinforce_ada: {problem}")
        self._outputs_checked = outputs

    def _restore_tracker(self, step: int) -> None:
        """At the first training step: loads the tracker saved with the checkpoint verl resumed from."""
        self._tracker_checked = True
        folder = resumed_checkpoint_dir(self.config.trainer, step)
        if folder is None:
            return
        skip = self.skipper.rule if self.skipper is not None else None
        if load_tracker(self.tracker, folder, global_step=step - 1, skip=skip):
            streaks = f", skip streaks of {len(skip)} prompts" if skip is not None else ""
            say(f"step {step}: pass-rate tracker of {len(self.tracker)} prompts{streaks} restored from {folder}")
        elif not os.path.isdir(folder):
            say(
                f"step {step}: WARNING: verl resumed from {folder}, which this node ({socket.gethostname()}) does not "
                "see: on several nodes trainer.default_local_dir must be storage every node mounts at the same path; "
                "starting with an empty tracker"
            )
        else:
            say(
                f"step {step}: WARNING: {folder} holds no pass-rate tracker (a checkpoint from before it was saved, "
                "or a crash between verl's save and ours); starting with an empty tracker"
            )

    def _plan(self, prompts, step: int) -> tuple[list[str] | None, list[int] | None, dict[str, float]]:
        """The step's tracker keys, planned first requests (Est / warm start) and tracker metrics."""
        if not self._tracker_checked:
            self._restore_tracker(step)
        keys = _prompt_keys(prompts)
        if keys is None:
            if self.sampler_config.keys_prompts:
                _required_prompt_keys(prompts)  # raises, naming what is missing
            return None, None, {}
        return keys, plan_first_requests(self.tracker, keys, self.sampler_config), self.tracker.summary(keys)

    def _first_requests_report(self, step: int, metrics: dict[str, float]):
        """``run_step``'s ``on_start``: logs the first requests a tracker planned, as made (after a step budget's
        cut), and adds their summary to ``metrics``."""
        what = "allocation" if self.sampler_config.variant == "est" else "first requests"

        def report(first_requests: list[int]) -> None:
            metrics.update({
                "first_request_mean": sum(first_requests) / len(first_requests),
                "first_request_min": float(min(first_requests)),
                "first_request_max": float(max(first_requests)),
            })
            counts = " ".join(str(c) for c in first_requests)
            if len(first_requests) > 64:  # a digest keeps the line short and still shows a resume allocates the same
                digest = hashlib.blake2b(counts.encode(), digest_size=8).hexdigest()
                counts = f"{len(first_requests)} prompts, {min(first_requests)}..{max(first_requests)}, digest {digest}"
            say(f"step {step} {what}: {counts}")

        return report

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
        if self.skipper is not None:
            if self.skipper.collect(prompts):  # verl's refill of prompts the skip left out: sampled with the rest
                return None
            prompts = self.skipper.select(prompts, int(tu.get_non_tensor_data(prompts, "global_steps", 0)))
        book = RequestBook(prompts, self.reward_name, rounds=self.sampler_config.mode == "rounds")

        def generate_round(requests: Mapping[int, int]) -> dict[int, list[float | None]]:
            rewards = book.record(self._dispatch_round(book.batch(requests)), requests)
            self._check_storage(book)
            return rewards

        rollout = _WorkerRequests(self, book) if self.sampler_config.mode == "async" else generate_round

        step = tu.get_non_tensor_data(prompts, "global_steps", 0)
        keys, first_requests, tracker_metrics = self._plan(prompts, int(step))
        on_start = None if first_requests is None else self._first_requests_report(int(step), tracker_metrics)
        result = run_sampling(len(book.uids), step, self.sampler_config, rollout, first_requests, on_start)
        if keys is not None:
            self.tracker.update_many((k, s.drawn, s.num_pos) for k, s in zip(keys, result.samplers))
        if result.empty:
            say(
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
        episodes = episode_metrics(book.episode.values(), (book.episode[key] for key in kept))
        extra = {**tracker_metrics, **episodes, **book.critical_path.metrics()}
        if self.skipper is not None:
            extra.update(self.skipper.observe(keys, result.samplers))
        publish_step(result, book.uids, book.reward_tally, extra)


def _prompt_keys(prompts) -> list[str] | None:
    """Each prompt's :func:`~reinforce_ada.core.tracker.prompt_identity` (messages and data source); None
    without messages."""
    if "raw_prompt" not in prompts.keys():
        return None
    sources = list(prompts["data_source"]) if "data_source" in prompts.keys() else None
    return prompt_identities(list(prompts["raw_prompt"]), sources)


def _required_prompt_keys(prompts) -> list[str]:
    keys = _prompt_keys(prompts)
    if keys is None:
        raise RuntimeError(
            "reinforce_ada: variant=est, warm_start, sampling_seed and skip need each prompt's `raw_prompt` (verl's "
            "RLHFDataset provides it) to recognise prompts across steps and runs; the rollout got none"
        )
    return keys


class _WorkerRequests:
    """The async mode's :class:`~reinforce_ada.core.schedules.AsyncRollout` on verl's agent-loop workers.

    Each prompt request is its own Ray call, sent to the worker with the fewest in flight.
    """

    def __init__(self, manager: AdaptiveManagerV1, book: RequestBook):
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
        self.manager._check_storage(self.book)
        return scored
