"""The adaptive rollout on verl's legacy trainer (``RayPPOTrainer``, ``trainer.use_v1=false``).

Each round goes through verl's own agent-loop manager as one ``DataProto``. Between rounds only the
samples that may still enter a group are held (:func:`reinforce_ada.core.groups.candidates`), and the
trainer gets back exactly ``n`` samples per prompt, in prompt order, as from GRPO-n. The step's
metrics ride in the rollout's ``timing`` dict, which the legacy trainer logs as ``timing_s/...``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np
import ray
from verl.experimental.agent_loop import AgentLoopManager, AgentLoopWorker
from verl.protocol import DataProto, pad_dataproto_to_divisor, unpad_dataproto

from reinforce_ada.core.config import SamplerConfig
from reinforce_ada.core.groups import candidates
from reinforce_ada.core.metrics import CriticalPath
from reinforce_ada.core.sampler import RewardError
from reinforce_ada.core.seeding import sample_seed
from reinforce_ada.core.tracker import prompt_identities
from reinforce_ada.integration.agents import (
    TOOL_CALLS,
    Episode,
    TurnSeededClient,
    count_tool_calls,
    episode_metrics,
    seeded_episode,
)
from reinforce_ada.integration.handover import pop_step_metrics
from reinforce_ada.integration.rollout import (
    RewardTally,
    check_streaming_reward,
    is_number,
    publish_step,
    reward_name,
    run_sampling,
)

SAMPLE_SEED = "__reinforce_ada_sample_seed__"


class _SeededAgentLoopWorker(AgentLoopWorker):
    """verl's legacy agent-loop worker; a row's ``SAMPLE_SEED`` becomes its episode's seed (each model turn's
    derived from it), ``tool_agent`` counts its tool calls, and an agent loop that raises stops the step with an
    error that says what to do."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        count_tool_calls()
        self.llm_client = TurnSeededClient(self.llm_client)  # what verl hands each agent loop: seeds its turns

    async def _run_agent_loop(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
        seed = kwargs.pop(SAMPLE_SEED, None)
        if seed is not None:
            seed = int(seed)
            sampling_params = {**sampling_params, "seed": seed}
        try:
            with seeded_episode(seed):
                return await super()._run_agent_loop(
                    sampling_params, trajectory, agent_name=agent_name, trace=trace, **kwargs
                )
        except Exception as error:
            raise RuntimeError(
                f"reinforce_ada: agent loop {agent_name!r} raised {error!r}; the legacy trainer cannot leave an "
                "episode out (verl's legacy trainer also stops at a failed sample): return the failure as an episode "
                "with a zero reward, or use trainer.use_v1=true, where a failed episode is redrawn once and counted"
            ) from error


class AdaptiveManagerLegacy(AgentLoopManager):
    def __init__(self, config, *args, sampler_config: SamplerConfig, **kwargs):
        self.agent_loop_workers_class = ray.remote(_SeededAgentLoopWorker)  # verl keeps a class set before
        super().__init__(config, *args, **kwargs)
        self.sampler_config = sampler_config
        self.reward_name = reward_name(config)
        check_streaming_reward(self.reward_loop_worker_handles)

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
        critical_path = CriticalPath()  # the legacy rollout runs in rounds
        drawn_episodes: list[Episode] = []

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
                int(output.batch["response_mask"].sum()),
                round_timing.get("agent_loop/compute_score/mean", 0.0) * len(output),
                {
                    k: float(np.sum(extra[k].astype(float)))
                    for k in output.meta_info.get("reward_extra_keys", [])
                    if k in extra and all(is_number(v) for v in extra[k])
                },
            )
            drawn_episodes.extend(_episodes(output))
            critical_path.add_round(output.batch["response_mask"].sum(-1).tolist())
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

        result = run_sampling(len(base), step, self.sampler_config, generate)
        kept_rows = [held_rows[(p, i)] for p, group in enumerate(result.groups) for i in group.kept]
        output = held.select_idxs(np.array(kept_rows, dtype=np.int64))
        publish_step(result, [str(u) for u in base.non_tensor_batch["uid"]], reward_tally,
                     {**episode_metrics(drawn_episodes, _episodes(output)), **critical_path.metrics()})
        # The legacy trainer logs the rollout's `timing` dict (as timing_s/...); our metrics ride along.
        timing.update(pop_step_metrics())
        output.meta_info = {"timing": timing, "reward_extra_keys": reward_extra_keys}
        return output


def _episodes(output: DataProto) -> list[Episode]:
    """Each row's counts: verl's ``__num_turns__``, the ``tool_calls`` its agent loop reported, and its response
    tokens outside the ``response_mask``."""
    turns = output.non_tensor_batch.get("__num_turns__")
    turns = [2] * len(output) if turns is None else turns.tolist()
    calls = output.non_tensor_batch.get(TOOL_CALLS)
    calls = [0] * len(output) if calls is None else [0 if c is None else int(c) for c in calls]
    response_length = output.batch["response_mask"].shape[1]
    real = output.batch["attention_mask"][:, -response_length:].sum(-1)  # response tokens, padding left out
    env_tokens = (real - output.batch["response_mask"].sum(-1)).tolist()
    return [Episode(int(t), c, int(e)) for t, c, e in zip(turns, calls, env_tokens)]


class _RowSeeds:
    """The legacy rollout's per-row vLLM seeds (see :mod:`reinforce_ada.core.seeding`); falsy when unseeded."""

    def __init__(self, base: DataProto, step: int, run_seed: int | None):
        self.run_seed, self.step = run_seed, int(step)
        if run_seed is None:
            return
        if "raw_prompt" not in base.non_tensor_batch:
            raise RuntimeError(
                "reinforce_ada.sampling_seed needs each prompt's `raw_prompt` (verl's RLHFDataset provides it) to "
                "seed its samples the same in every run"
            )
        self.keys = prompt_identities(base.non_tensor_batch["raw_prompt"], base.non_tensor_batch.get("data_source"))

    def __bool__(self) -> bool:
        return self.run_seed is not None

    def of(self, rows: np.ndarray, pool_sizes: Sequence[int]) -> np.ndarray:
        """Seeds of a round's rows (prompt indices, a prompt's rows together): pool indices continue."""
        seeds, next_index = [], list(pool_sizes)
        for prompt in rows.tolist():
            seeds.append(sample_seed(self.run_seed, self.keys[prompt], self.step, next_index[prompt]))
            next_index[prompt] += 1
        return np.array(seeds, dtype=object)
