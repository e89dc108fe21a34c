"""Per-sample vLLM seeds: a function of (run seed, prompt, step, pool index) only, in both trainers' workers; each
model turn of an episode gets its own, derived from the episode's seed and the turn."""

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from reinforce_ada.core.config import ConfigError, SamplerConfig
from reinforce_ada.core.seeding import sample_seed, turn_seed
from reinforce_ada.core.tracker import prompt_identity

from test_agent_loop_on_cpu import published  # noqa: F401 (a fixture)

MESSAGES = {"a": [{"role": "user", "content": "What is 2 plus 2?"}], "b": [{"role": "user", "content": "What is 3?"}]}


def test_seeds_are_stable_distinct_and_in_range():
    assert sample_seed(7, "k", 1, 0) == sample_seed(7, "k", 1, 0)  # a pure function: no process state
    seeds = {sample_seed(s, k, t, i) for s in (0, 7) for k in ("k", "l") for t in (1, 2) for i in range(32)}
    assert len(seeds) == 2 * 2 * 2 * 32
    assert all(0 <= s < 2**63 for s in seeds)


def test_sampling_seed_is_a_non_negative_integer():
    assert SamplerConfig(sampling_seed=7).sampling_seed == 7
    for bad in (-1, 1.5, "7", True):
        with pytest.raises(ConfigError, match="^sampling_seed:"):
            SamplerConfig(sampling_seed=bad)


def v1_worker(monkeypatch, run_seed):
    from reinforce_ada.integration.agent_loop_v1 import _AdaptiveAgentLoopWorkerTQ

    seen = []

    async def fake_run_agent_loop(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
        seen.append((kwargs["uid"], kwargs["session_id"], sampling_params.get("seed")))

    monkeypatch.setattr(_AdaptiveAgentLoopWorkerTQ.__mro__[1], "_run_agent_loop", fake_run_agent_loop)
    worker = object.__new__(_AdaptiveAgentLoopWorkerTQ)
    worker._sampling_seed = run_seed
    return worker, seen


def run_sessions(worker, uid, offset, count, validate=False, shared=None):
    from reinforce_ada.integration.agent_loop_v1 import SESSION_OFFSET

    shared = {} if shared is None else shared
    prompt = {"uid": uid, "raw_prompt": MESSAGES[uid], "data_source": "tiny", "global_steps": 3, SESSION_OFFSET: offset}

    async def sessions():
        for i in range(count):
            await worker._run_agent_loop(
                shared, {"validate": validate}, agent_name="single_turn", session_id=i, **prompt
            )

    asyncio.run(sessions())


def test_v1_seed_follows_the_pool_index_however_the_requests_are_split(monkeypatch):
    worker, seen = v1_worker(monkeypatch, 7)
    shared = {"temperature": 1.0}
    run_sessions(worker, "a", 0, 8, shared=shared)
    whole = list(seen)
    seen.clear()
    run_sessions(worker, "a", 0, 3)
    run_sessions(worker, "a", 3, 5)  # the same pool in two requests, as in two rounds or an async redraw
    assert seen == whole
    key = prompt_identity(MESSAGES["a"], "tiny")
    assert [seed for _, _, seed in whole] == [sample_seed(7, key, 3, i) for i in range(8)]
    assert shared == {"temperature": 1.0}  # the prompt's sessions share this dict: not written to


def test_v1_validation_and_an_unset_seed_leave_vllm_unseeded(monkeypatch):
    worker, seen = v1_worker(monkeypatch, 7)
    run_sessions(worker, "a", 0, 2, validate=True)
    worker._sampling_seed = None
    run_sessions(worker, "b", 0, 2)
    assert [seed for _, _, seed in seen] == [None] * 4


def test_legacy_rows_carry_the_seed_of_their_pool_index_across_rounds():
    from verl.protocol import DataProto

    from reinforce_ada.integration.agent_loop_legacy import SAMPLE_SEED, AdaptiveManagerLegacy

    rewards = {"a": [0.0] * 8 + [1.0, 0.0, 1.0, 0.0] + [0.0] * 4, "b": [1.0, 0.0] * 4}
    manager = object.__new__(AdaptiveManagerLegacy)
    manager.sampler_config = SamplerConfig(n=4, round_size=8, max_rounds=2, sampling_seed=7)
    manager.reward_name = "the test reward"
    seeds: dict[str, list[int]] = {"a": [], "b": []}

    def generate_round(batch):
        uids = [str(u) for u in batch.non_tensor_batch["uid"]]
        start = {u: len(seeds[u]) for u in set(uids)}
        for u, seed in zip(uids, batch.non_tensor_batch[SAMPLE_SEED]):
            seeds[u].append(seed)
        scores = torch.zeros(len(uids), 2)
        for row, u in enumerate(uids):
            scores[row, -1] = rewards[u][start[u] + uids[:row].count(u)]
        return DataProto.from_dict(
            tensors={"rm_scores": scores, "response_mask": torch.ones(len(uids), 2, dtype=torch.long),
                     "attention_mask": torch.ones(len(uids), 3, dtype=torch.long)},
            non_tensors={"uid": np.array(uids, dtype=object)},
            meta_info={"timing": {}, "reward_extra_keys": []},
        )

    manager._generate_round = generate_round
    uids = np.array([u for u in "ab" for _ in range(4)], dtype=object)
    prompts = DataProto.from_dict(
        tensors={"input_ids": torch.zeros(8, 3, dtype=torch.long)},
        non_tensors={"uid": uids, "raw_prompt": np.array([MESSAGES[u] for u in uids], dtype=object),
                     "data_source": np.array(["tiny"] * 8, dtype=object)},
        meta_info={"global_steps": 5},
    )
    manager.generate_sequences(prompts)
    assert len(seeds["a"]) == 16 and len(seeds["b"]) == 8  # a needed the second round
    for u, got in seeds.items():
        assert got == [sample_seed(7, prompt_identity(MESSAGES[u], "tiny"), 5, i) for i in range(len(got))]


def test_a_redrawn_sample_gets_a_seed_of_its_own_and_shifts_no_other(published):  # noqa: F811
    """Slot 3 fails in the first round: its redraw is seeded for slot 3 as a redraw, and the next round's samples
    keep the seeds of slots 8-15, as in a run where nothing failed."""
    from reinforce_ada.integration.agent_loop_v1 import SEED_REDRAW, SEED_SLOTS  # noqa: I001

    from test_agent_loop_on_cpu import v1_manager, v1_prompts

    manager = v1_manager(SamplerConfig(), drop_session=("late", 3))
    sent = []
    dispatch = manager._dispatch_round

    def recording(batch):
        rows = zip(batch["uid"], batch[SEED_SLOTS], batch[SEED_REDRAW])
        sent.append({str(u): (list(s), bool(r)) for u, s, r in rows})
        return dispatch(batch)

    manager._dispatch_round = recording
    manager.generate_sequences(v1_prompts())
    late = [request["late"] for request in sent if "late" in request]
    assert late[0] == (list(range(8)), False)
    assert late[1] == ([3], True)  # the redraw: slot 3 again, with a redraw's seed
    assert late[2] == (list(range(8, 16)), False)  # not shifted by the failure
    key = "x"
    assert sample_seed(7, key, 1, 3, redraw=True) != sample_seed(7, key, 1, 3)
    assert sample_seed(7, key, 1, 3, redraw=False) == sample_seed(7, key, 1, 3)  # unchanged without failures


def test_the_worker_seeds_each_sample_by_its_slot(monkeypatch):
    from reinforce_ada.integration.agent_loop_v1 import SEED_REDRAW, SEED_SLOTS, SESSION_OFFSET

    worker, seen = v1_worker(monkeypatch, 7)
    prompt = {"uid": "a", "raw_prompt": MESSAGES["a"], "data_source": "tiny", "global_steps": 3, SESSION_OFFSET: 9,
              SEED_SLOTS: [3], SEED_REDRAW: True}
    asyncio.run(worker._run_agent_loop({}, {"validate": False}, agent_name="single_turn", session_id=0, **prompt))
    key = prompt_identity(MESSAGES["a"], "tiny")
    assert seen == [("a", 9, sample_seed(7, key, 3, 3, redraw=True))]  # the session continues; the seed is the slot's


def test_each_turn_gets_a_seed_of_its_own_and_the_first_the_episodes():
    episodes = [sample_seed(7, k, 3, i) for k in ("k", "l") for i in range(8)] + [0, 2**63 - 1]
    for episode in episodes:
        turns = [turn_seed(episode, t) for t in range(64)]
        assert turns[0] == episode  # a single-turn sample draws what it drew before turns were seeded
        assert len(set(turns)) == 64 and len({t % 2**32 for t in turns}) == 64  # torch's CPU generator: low 32 bits
        assert all(0 <= t < 2**63 for t in turns)
        assert turns == [turn_seed(episode, t) for t in range(64)]  # a pure function
    later = {turn_seed(e, t) for e in episodes for t in range(1, 8)}
    assert len(later) == len(episodes) * 7 and not later & set(episodes)  # no episode's turn is another's seed
    with pytest.raises(ValueError, match="turn"):
        turn_seed(1, -1)


class ThreeTurnLoop:
    """A multi-turn agent loop, built by verl for each episode: three model calls with the episode's sampling
    parameters and one request id for all episodes (as verl's loops use under full_determinism)."""

    def __init__(self, server_manager, **kwargs):
        self.server_manager = server_manager

    async def run(self, sampling_params, **kwargs):
        for turn in range(3):
            await self.server_manager.generate(
                request_id="det-0", prompt_ids=[kwargs["session_id"], turn], sampling_params=sampling_params
            )
        return SimpleNamespace(num_turns=4)


class FakeServer:
    """verl's LLM server client: records each call's (session, turn, seed), letting other episodes run meanwhile."""

    name = "the fake server"

    def __init__(self):
        self.calls = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.calls.append((*prompt_ids, sampling_params.get("seed")))
        await asyncio.sleep(0)
        return SimpleNamespace(token_ids=[1])


@pytest.fixture
def multi_turn_worker(monkeypatch):
    """Builds a trainer's worker through its own ``__init__`` (verl's start-up replaced), running verl's
    ``_run_agent_loop`` with :class:`ThreeTurnLoop` registered as ``three_turns`` and :class:`FakeServer` as the
    worker's LLM client."""
    from verl.experimental.agent_loop import agent_loop

    from reinforce_ada.integration.agent_loop_legacy import _SeededAgentLoopWorker
    from reinforce_ada.integration.agent_loop_v1 import _AdaptiveAgentLoopWorkerTQ

    monkeypatch.setattr(agent_loop, "_agent_loop_registry", dict(agent_loop._agent_loop_registry))
    agent_loop._agent_loop_registry["three_turns"] = {"_target_": f"{__name__}.{ThreeTurnLoop.__qualname__}"}

    def start(self, config, llm_client, *args, **kwargs):
        self.config, self.llm_client = config, llm_client
        self.tokenizer = self.processor = self.hf_model_type = self.dataset_cls = None
        self.tools = []

    async def postprocess(self, output, validate, **kwargs):
        return output

    def build(trainer, run_seed=None):
        cls = {"v1": _AdaptiveAgentLoopWorkerTQ, "legacy": _SeededAgentLoopWorker}[trainer]
        monkeypatch.setattr(cls.__mro__[1], "__init__", start)
        monkeypatch.setattr(cls.__mro__[1], "_agent_loop_postprocess", postprocess)
        server = FakeServer()
        config = OmegaConf.create({"reinforce_ada": {"sampling_seed": run_seed}, "data": {}})
        return cls(config, server), server

    return build


def run_episode(worker, trainer, session, seed=None, validate=False):
    """One episode of ``three_turns`` as the trainer's worker runs it: V1 seeds it from the run seed, the legacy
    worker from the row's ``seed``."""
    from reinforce_ada.integration.agent_loop_legacy import SAMPLE_SEED
    from reinforce_ada.integration.agent_loop_v1 import SESSION_OFFSET

    trajectory = {"step": 3, "sample_index": 0, "rollout_n": session, "validate": validate}
    if trainer == "v1":
        row = {"uid": "a", "raw_prompt": MESSAGES["a"], "data_source": "tiny", "global_steps": 3, SESSION_OFFSET: 0}
    else:
        row = {} if seed is None else {SAMPLE_SEED: seed}
    return worker._run_agent_loop({"temperature": 1.0}, trajectory, agent_name="three_turns", session_id=session,
                                  **row)


def episode_seed(trainer, session):
    return sample_seed(7, prompt_identity(MESSAGES["a"], "tiny"), 3, session) if trainer == "v1" else 100 + session


@pytest.mark.parametrize("trainer", ["v1", "legacy"])
def test_each_model_turn_of_an_episode_gets_its_own_seed_and_concurrent_episodes_count_apart(
    multi_turn_worker, trainer
):
    from reinforce_ada.integration.agents import TurnSeededClient

    worker, server = multi_turn_worker(trainer, run_seed=7)
    assert isinstance(worker.llm_client, TurnSeededClient) and worker.llm_client.name == "the fake server"

    async def episodes():
        await asyncio.gather(*(run_episode(worker, trainer, s, seed=episode_seed(trainer, s)) for s in (0, 1)))
        await run_episode(worker, trainer, 1, seed=episode_seed(trainer, 1))  # again, once the others are done
        await worker.llm_client.generate("det-0", prompt_ids=[9, 0], sampling_params={})  # outside any episode

    asyncio.run(episodes())
    assert [session for session, _, _ in server.calls[:6]] == [0, 1] * 3  # the two episodes' turns interleaved
    for session in (0, 1):
        seeds = [seed for s, turn, seed in server.calls[:6] if s == session]
        assert seeds == [turn_seed(episode_seed(trainer, session), turn) for turn in range(3)]
        assert seeds[0] == episode_seed(trainer, session) and len(set(seeds)) == 3
    again = [seed for _, _, seed in server.calls[6:9]]
    assert again == [seed for s, _, seed in server.calls[:6] if s == 1]  # the count ended with the episode
    assert server.calls[9] == (9, 0, None)


@pytest.mark.parametrize("trainer", ["v1", "legacy"])
def test_an_unseeded_or_validation_episode_passes_no_seed(multi_turn_worker, trainer):
    worker, server = multi_turn_worker(trainer, run_seed=None)

    async def episodes():
        await asyncio.gather(*(run_episode(worker, trainer, s) for s in (0, 1)))
        if trainer == "v1":
            worker._sampling_seed = 7
            await run_episode(worker, trainer, 0, validate=True)

    asyncio.run(episodes())
    assert len(server.calls) == (9 if trainer == "v1" else 6)
    assert [seed for _, _, seed in server.calls] == [None] * len(server.calls)
