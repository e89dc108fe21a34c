"""The rollout managers' round logic against fake rollouts with known rewards (no Ray, no vLLM)."""

import numpy as np
import pytest
import torch

from reinforce_ada.core.config import SamplerConfig
from reinforce_ada.core.sampler import RewardError
from reinforce_ada.core.tracker import make_tracker

# Rewards each prompt gets, in generation order (n=4, M=8, R=4, balance):
REWARDS = {
    "easy": [1, 0, 1, 1, 0, 1, 0, 1] + [0] * 24,  # resolves in round 1
    "late": [0] * 17 + [1] + [0] * 2 + [1] + [0] * 11,  # second positive at 20: resolves in round 3
    "never": [0] * 32,  # unresolved after 4 rounds
}
UIDS = list(REWARDS)
# (round -> {uid: (samples requested, first session id)})
EXPECTED_REQUESTS = [
    {"easy": (8, 0), "late": (8, 0), "never": (8, 0)},
    {"late": (8, 8), "never": (8, 8)},
    {"late": (8, 16), "never": (8, 16)},
    {"never": (8, 24)},
]
EXPECTED_KEPT = {"easy": [0, 1, 2, 4], "late": [0, 1, 17, 20], "never": [0, 1, 2, 3]}


@pytest.fixture
def published():
    """The pool statistics the rollout hands to the estimator (cleared after the test, with the metrics)."""
    from reinforce_ada.integration import handover

    yield handover._pools
    handover.publish({}, {})
    handover.pop_step_metrics()


def v1_manager(config, drop_session=None, rewards=None, outputs=1):
    """The V1 manager on fake workers; ``drop_session`` (uid, session) or a set of them come back without a record;
    ``outputs``: what a sample stores in TransferQueue (a multi-turn agent loop may store several)."""
    from reinforce_ada.integration.agent_loop_v1 import SESSION_OFFSET, AdaptiveManagerV1
    from reinforce_ada.integration.agents import Episode
    from reinforce_ada.integration.rollout import SampleRecord

    rewards = rewards or REWARDS
    dropped = drop_session if isinstance(drop_session, set) else {drop_session}
    manager = object.__new__(AdaptiveManagerV1)
    manager.sampler_config, manager.reward_name = config, "the test reward"
    manager.tracker, manager._tracker_checked = make_tracker(config), True  # a fresh run, nothing to restore
    manager.requests, manager.cleared, manager._outputs_checked = [], [], 1

    def dispatch(batch):
        uids = [str(u) for u in batch["uid"]]
        counts, offsets = list(batch["__rollout_n__"]), list(batch[SESSION_OFFSET])
        manager.requests.append({u: (c, o) for u, c, o in zip(uids, counts, offsets)})
        return [
            SampleRecord(u, s, float(rewards[u][s]), outputs, 0.001, {"no_answer": 1.0 - rewards[u][s]}, 5,
                         Episode(2 + 2 * (s % 2), s % 2, 3 * (s % 2)))  # odd sessions: an episode with a tool call
            for u, c, o in zip(uids, counts, offsets)
            for s in range(o, o + c)
            if (u, s) not in dropped
        ]

    manager._dispatch_round = dispatch
    manager._clear_samples = manager.cleared.extend
    return manager


def v1_prompts(step=7):
    from verl.utils import tensordict_utils as tu

    batch = tu.get_tensordict(
        {"input_ids": torch.zeros(len(UIDS), 3, dtype=torch.long), "uid": np.array(UIDS, dtype=object)}
    )
    tu.assign_non_tensor_data(batch, "global_steps", step)
    return batch


def test_v1_requests_exactly_the_active_prompts_each_round(published):
    from reinforce_ada.integration.handover import pop_step_metrics

    manager = v1_manager(SamplerConfig())
    manager.generate_sequences(v1_prompts())
    assert manager.requests == EXPECTED_REQUESTS
    kept_keys = {f"{u}_{s}_0" for u, sessions in EXPECTED_KEPT.items() for s in sessions}
    drawn = {"easy": 8, "late": 24, "never": 32}
    all_keys = {f"{u}_{s}_0" for u, count in drawn.items() for s in range(count)}
    assert sorted(manager.cleared) == sorted(all_keys - kept_keys)
    assert published["late"].count == 24 and published["late"].mean == pytest.approx(2 / 24)
    assert published["never"].mean == 0.0 and published["easy"].mean == pytest.approx(5 / 8)
    metrics = pop_step_metrics()
    assert metrics["reinforce_ada/samples_total"] == 64 and metrics["reinforce_ada/rounds"] == 4
    assert metrics["reinforce_ada/prompts_unresolved"] == 1
    assert metrics["reinforce_ada/reward_latency_mean"] == pytest.approx(0.001)
    assert metrics["reinforce_ada/response_tokens_total"] == 64 * 5  # every draw counted, kept or not
    assert metrics["reinforce_ada/critical_path_tokens"] == 4 * 5  # 4 rounds, each as long as its longest response
    assert metrics["reinforce_ada/reward/no_answer"] == pytest.approx(1 - 7 / 64)  # 7 of 64 drawn were correct
    assert pop_step_metrics() == {}  # reported once


def test_v1_drop_policy_clears_every_sample_of_unresolved_prompts(published):
    manager = v1_manager(SamplerConfig(unresolved="drop"))
    manager.generate_sequences(v1_prompts())
    assert {f"never_{s}_0" for s in range(32)} <= set(manager.cleared)
    assert "never" not in published and "late" in published


def test_v1_failed_sample_is_redrawn_by_the_next_request_and_counted(published, capsys):
    from reinforce_ada.integration.handover import pop_step_metrics

    manager = v1_manager(SamplerConfig(), drop_session=("late", 10))
    manager.generate_sequences(v1_prompts())
    late = [r["late"] for r in manager.requests if "late" in r]
    assert late == [(8, 0), (8, 8), (1, 16), (8, 17)]  # the redraw is session 16, then the rounds go on
    metrics = pop_step_metrics()
    assert metrics["reinforce_ada/samples_failed"] == 1 and metrics["reinforce_ada/prompts_failed"] == 0
    assert metrics["reinforce_ada/empty_step"] == 0
    # session 10 failed: no pool index points at it, and the pool of late is sessions 0-9 and 11-24
    assert published["late"].count == 24
    assert "1 of 16 samples failed" in capsys.readouterr().err


def test_v1_non_finite_score_counts_as_failed_and_its_sample_is_cleared(published, capsys):
    from reinforce_ada.integration.handover import pop_step_metrics

    rewards = {**REWARDS, "easy": [1, float("nan")] + REWARDS["easy"][2:]}
    manager = v1_manager(SamplerConfig(), rewards=rewards)
    manager.generate_sequences(v1_prompts())
    assert "easy_1_0" in manager.cleared  # the stored sample with the NaN score never reaches the update
    assert pop_step_metrics()["reinforce_ada/samples_failed"] == 1
    assert "the test reward returned a non-finite score" in capsys.readouterr().err


def test_v1_logs_turns_tool_calls_and_tool_tokens_over_drawn_and_kept_episodes(published):
    from reinforce_ada.integration.handover import pop_step_metrics

    manager = v1_manager(SamplerConfig())
    manager.generate_sequences(v1_prompts())
    drawn = [s for u in UIDS for s in range(sum(r[u][0] for r in manager.requests if u in r))]
    kept = [s for u in UIDS for s in range(sum(r[u][0] for r in manager.requests if u in r))
            if f"{u}_{s}_0" not in manager.cleared]
    assert len(kept) == 12 < len(drawn)
    metrics = pop_step_metrics()
    for prefix, sessions in (("", drawn), ("kept_", kept)):
        odd = sum(s % 2 for s in sessions) / len(sessions)
        assert metrics[f"reinforce_ada/agent/{prefix}turns_mean"] == pytest.approx(2 + 2 * odd)
        assert metrics[f"reinforce_ada/agent/{prefix}tool_calls_mean"] == pytest.approx(odd)
        assert metrics[f"reinforce_ada/agent/{prefix}env_tokens_mean"] == pytest.approx(3 * odd)


def test_v1_prompt_whose_redraw_fails_keeps_what_it_has(published):
    from reinforce_ada.integration.handover import pop_step_metrics

    manager = v1_manager(SamplerConfig(), drop_session={("late", 3), ("late", 8)})
    manager.generate_sequences(v1_prompts())
    assert [r["late"] for r in manager.requests if "late" in r] == [(8, 0), (1, 8)]
    metrics = pop_step_metrics()
    assert metrics["reinforce_ada/prompts_failed"] == 1 and metrics["reinforce_ada/samples_failed"] == 2
    assert published["late"].count == 7  # kept as unresolved (n of its 7 samples), baseline from the 7
    assert metrics["reinforce_ada/kept_samples"] == 12


def test_v1_step_where_every_prompt_is_dropped_trains_with_zero_advantage(published, capsys):
    from reinforce_ada.integration.handover import pop_step_metrics

    manager = v1_manager(SamplerConfig(unresolved="drop", threshold=1.0))  # nothing is ever correct
    manager.generate_sequences(v1_prompts())
    metrics = pop_step_metrics()
    assert metrics["reinforce_ada/empty_step"] == 1 and metrics["reinforce_ada/prompts_dropped"] == 3
    assert metrics["reinforce_ada/kept_samples"] == 12 and metrics["reinforce_ada/kept_groups_with_signal_frac"] == 0
    assert set(published) == set(UIDS) and all(p.weight == 0.0 for p in published.values())
    assert len(manager.cleared) == 3 * 32 - 12
    assert "every prompt was dropped" in capsys.readouterr().err


def test_v1_step_where_every_sample_fails_is_a_clear_error(published):
    everything = {(u, s) for u in UIDS for s in range(40)}
    manager = v1_manager(SamplerConfig(), drop_session=everything)
    with pytest.raises(RuntimeError, match="every sample of every prompt failed.*the test reward"):
        manager.generate_sequences(v1_prompts())


def test_v1_validation_batches_go_to_verl_unchanged(monkeypatch):
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ
    from verl.utils import tensordict_utils as tu

    seen = []
    monkeypatch.setattr(AgentLoopManagerTQ, "generate_sequences", lambda self, prompts: seen.append(prompts))
    manager = v1_manager(SamplerConfig())
    batch = v1_prompts()
    tu.assign_non_tensor_data(batch, "validate", True)
    manager.generate_sequences(batch)
    assert seen == [batch] and manager.requests == []


def fake_records(uid, count, offset, drop_session=None):
    from reinforce_ada.integration.rollout import SampleRecord

    return [
        SampleRecord(uid, s, float(REWARDS[uid][s]), 1, 0.001, {"no_answer": 1.0 - REWARDS[uid][s]}, 5)
        for s in range(offset, offset + count)
        if (uid, s) != drop_session
    ]


def v1_async_manager(config, order_seed, drop_session=None, workers=2):
    """The V1 manager in async mode on a fake engine that finishes requests in a random order."""
    import random

    from reinforce_ada.integration.agent_loop_v1 import SESSION_OFFSET, AdaptiveManagerV1

    manager = object.__new__(AdaptiveManagerV1)
    manager.sampler_config, manager.reward_name = config, "the test reward"
    manager.tracker, manager._tracker_checked, manager._outputs_checked = make_tracker(config), True, 1
    manager.agent_loop_workers = [object()] * workers
    manager.requests, manager.cleared, manager.workers_used = [], [], []
    in_flight: dict[int, list] = {}
    rng = random.Random(order_seed)

    def start(worker, batch):
        (uid,), (count,), (offset,) = [str(u) for u in batch["uid"]], batch["__rollout_n__"], batch[SESSION_OFFSET]
        assert all(records[0].uid != uid for records in in_flight.values() if records), "two requests of one prompt"
        manager.requests.append((uid, count, offset))
        manager.workers_used.append(worker)
        ref = len(manager.requests)
        in_flight[ref] = fake_records(uid, count, offset, drop_session)
        return ref

    def finished(pending):
        assert sorted(pending) == sorted(in_flight)
        done = rng.sample(sorted(pending), rng.randint(1, len(pending)))
        return [(ref, in_flight.pop(ref)) for ref in done]

    manager._start_request, manager._finished_requests = start, finished
    manager._clear_samples = manager.cleared.extend
    return manager


@pytest.mark.parametrize("order_seed", range(5))
def test_v1_async_requests_each_prompt_as_the_rounds_do_and_keeps_the_same_samples(published, order_seed, capsys):
    from reinforce_ada.integration.handover import pop_step_metrics

    rounds = v1_manager(SamplerConfig())
    rounds.generate_sequences(v1_prompts())
    rounds_pools, rounds_metrics = dict(published), pop_step_metrics()
    published.clear()

    manager = v1_async_manager(SamplerConfig(mode="async"), order_seed)
    manager.generate_sequences(v1_prompts())
    def per_uid(reqs):
        return {u: [(c, o) for uu, c, o in reqs if uu == u] for u in UIDS}

    assert per_uid(manager.requests) == {u: [r[u] for r in EXPECTED_REQUESTS if u in r] for u in UIDS}
    assert sorted(manager.cleared) == sorted(rounds.cleared)
    assert published == rounds_pools
    metrics = pop_step_metrics()
    # (the agent counts are over the samples drawn, whose sessions differ when async asks in another order)
    timings = {k for k in rounds_metrics if k.endswith("_seconds") or "/agent/" in k}
    assert {k: v for k, v in metrics.items() if k not in timings} == pytest.approx({  # float sums in another order
        k: v for k, v in rounds_metrics.items() if k not in timings
    })
    assert metrics["reinforce_ada/rollout_seconds"] > 0 and "reinforce_ada/round_1_seconds" not in metrics
    assert set(manager.workers_used) == {0, 1}  # spread over the workers
    err = capsys.readouterr().err
    assert "[reinforce_ada] step 7 async: " in err and "at most 4 requests a prompt" in err


def test_v1_async_failed_sample_is_redrawn_as_in_the_rounds(published):
    from reinforce_ada.integration.handover import pop_step_metrics

    manager = v1_async_manager(SamplerConfig(mode="async"), 0, drop_session=("late", 10))
    manager.generate_sequences(v1_prompts())
    assert [(c, o) for u, c, o in manager.requests if u == "late"] == [(8, 0), (8, 8), (1, 16), (8, 17)]
    assert pop_step_metrics()["reinforce_ada/samples_failed"] == 1


def test_worker_keeps_concurrent_requests_apart(monkeypatch):
    """Two run_requests calls on one worker, their samples interleaved: each gets its own records, with each
    episode's turns, tool calls and tool tokens (odd sessions are episodes with one tool call)."""
    import asyncio
    import random
    from types import SimpleNamespace

    from verl.utils import tensordict_utils as tu

    from reinforce_ada.integration.agent_loop_v1 import SESSION_OFFSET, _AdaptiveAgentLoopWorkerTQ

    base = _AdaptiveAgentLoopWorkerTQ.__mro__[1]
    rng = random.Random(0)

    async def fake_run_prompt(self, prompt, sampling_params, trajectory, trace=False):
        async def session(i):
            await asyncio.sleep(rng.random() / 100)
            score = float(REWARDS[prompt["uid"]][i])
            tool = i % 2  # the model's tokens, then the tool's 5 (masked), then the model's answer
            output = SimpleNamespace(
                reward_score=score, metrics=SimpleNamespace(compute_score=0.0),
                extra_fields={"reward_extra_info": {}, "tool_calls": tool},
                response_mask=[1] * (i % 3 + 1) + [0] * 5 * tool + [1] * tool, num_turns=2 + 2 * tool,
            )
            await self._agent_loop_postprocess(output, False, uid=prompt["uid"], session_id=i)

        offset = prompt[SESSION_OFFSET]
        await asyncio.gather(*(session(offset + i) for i in range(prompt["__rollout_n__"])))

    async def fake_postprocess(self, output, validate, **kwargs):
        await asyncio.sleep(0)

    monkeypatch.setattr(base, "_run_prompt", fake_run_prompt)
    monkeypatch.setattr(base, "_agent_loop_postprocess", fake_postprocess)
    worker = object.__new__(_AdaptiveAgentLoopWorkerTQ)
    worker._records, worker._prompt_done = {}, {}

    async def generate_sequences(batch):
        for i, uid in enumerate(batch["uid"]):
            prompt = {
                "uid": str(uid),
                "__rollout_n__": batch["__rollout_n__"][i],
                SESSION_OFFSET: batch[SESSION_OFFSET][i],
            }
            asyncio.ensure_future(worker._run_prompt(prompt, {}, {"validate": False}))

    worker.generate_sequences = generate_sequences

    def request(uid, count, offset):
        batch = tu.get_tensordict({"input_ids": torch.zeros(1, 3), "uid": np.array([uid], dtype=object)})
        tu.assign_non_tensor_stack(batch, "__rollout_n__", [count])
        tu.assign_non_tensor_stack(batch, SESSION_OFFSET, [offset])
        return worker.run_requests(batch)

    async def both():
        return await asyncio.gather(request("late", 8, 16), request("easy", 8, 0), request("never", 4, 28))

    late, easy, never = asyncio.run(both())
    assert sorted(r.session for r in late) == list(range(16, 24)) and {r.uid for r in late} == {"late"}
    assert [r.reward for r in sorted(late)] == [float(x) for x in REWARDS["late"][16:24]]
    assert sorted(r.session for r in easy) == list(range(8)) and {r.uid for r in easy} == {"easy"}
    assert sorted(r.session for r in never) == list(range(28, 32))
    assert all(r.response_tokens == r.session % 3 + 1 + r.session % 2 for r in late + easy + never)
    assert all(r.episode == (2 + 2 * (r.session % 2), r.session % 2, 5 * (r.session % 2)) for r in late + easy + never)
    assert worker._records == {} and worker._prompt_done == {}  # nothing left behind


def legacy_manager(config):
    from verl.protocol import DataProto

    from reinforce_ada.integration.agent_loop_legacy import AdaptiveManagerLegacy

    manager = object.__new__(AdaptiveManagerLegacy)
    manager.sampler_config, manager.reward_name = config, "the test reward"
    manager.requests = []
    drawn = {u: 0 for u in UIDS}

    def generate_round(batch):
        uids = [str(u) for u in batch.non_tensor_batch["uid"]]
        counts = {u: uids.count(u) for u in dict.fromkeys(uids)}
        manager.requests.append({u: (c, drawn[u]) for u, c in counts.items()})
        sessions = []
        for u in uids:
            sessions.append(drawn[u])
            drawn[u] += 1
        rewards = torch.tensor([float(REWARDS[u][s]) for u, s in zip(uids, sessions)])
        rm_scores = torch.zeros(len(uids), 4)
        rm_scores[:, -1] = rewards
        # 3 generated tokens, then padding; an odd session is an episode: 1 generated, 2 of a tool's, 1 generated
        tool = torch.tensor(sessions) % 2
        response_mask = torch.tensor([[1, 1, 1, 0]] * len(uids))
        response_mask[tool == 1] = torch.tensor([1, 0, 0, 1])
        attention_mask = torch.tensor([[1, 1, 1, 1, 1, 0]] * len(uids))  # 2 prompt tokens, then the response
        attention_mask[tool == 1, -1] = 1
        out = DataProto.from_dict(
            tensors={"rm_scores": rm_scores, "session": torch.tensor(sessions), "response_mask": response_mask,
                     "attention_mask": attention_mask},
            non_tensors={"uid": np.array(uids, dtype=object), "acc": rewards.numpy().astype(object),
                         "__num_turns__": (2 + 2 * tool).numpy(), "tool_calls": tool.numpy().astype(object)},
            meta_info={"timing": {"agent_loop/compute_score/mean": 0.002}, "reward_extra_keys": ["acc"]},
        )
        return out

    manager._generate_round = generate_round
    return manager


def legacy_prompts(n=4):
    from verl.protocol import DataProto

    uids = np.array([u for u in UIDS for _ in range(n)], dtype=object)
    return DataProto.from_dict(
        tensors={"input_ids": torch.zeros(len(uids), 3, dtype=torch.long)},
        non_tensors={"uid": uids},
        meta_info={"global_steps": 3},
    )


def test_legacy_returns_n_samples_per_prompt_in_prompt_order(published):
    manager = legacy_manager(SamplerConfig())
    output = manager.generate_sequences(legacy_prompts())
    assert manager.requests == EXPECTED_REQUESTS
    assert list(output.non_tensor_batch["uid"]) == [u for u in UIDS for _ in range(4)]
    sessions = output.batch["session"].view(len(UIDS), 4).tolist()
    assert {u: sorted(s) for u, s in zip(UIDS, sessions)} == EXPECTED_KEPT
    assert output.meta_info["timing"]["reinforce_ada/samples_total"] == 64
    assert output.meta_info["timing"]["reinforce_ada/reward/acc"] == pytest.approx(7 / 64)
    assert output.meta_info["timing"]["reinforce_ada/reward_latency_mean"] == pytest.approx(0.002)
    # odd sessions are episodes with a tool call: 2 generated tokens, 2 of the tool's, 4 turns
    timing = output.meta_info["timing"]
    drawn = [s for u in UIDS for s in range(sum(request[u][0] for request in manager.requests if u in request))]
    kept = [s for u in UIDS for s in EXPECTED_KEPT[u]]
    assert len(drawn) == 64 and timing["reinforce_ada/response_tokens_total"] == sum(3 - s % 2 for s in drawn)
    assert timing["reinforce_ada/critical_path_tokens"] == 4 * 3  # every round has an even session's 3 tokens
    for prefix, sessions in (("", drawn), ("kept_", kept)):
        odd = sum(s % 2 for s in sessions) / len(sessions)
        assert timing[f"reinforce_ada/agent/{prefix}turns_mean"] == pytest.approx(2 + 2 * odd)
        assert timing[f"reinforce_ada/agent/{prefix}tool_calls_mean"] == pytest.approx(odd)
        assert timing[f"reinforce_ada/agent/{prefix}env_tokens_mean"] == pytest.approx(2 * odd)
    assert set(output.meta_info) == {"timing", "reward_extra_keys"}
    assert published["late"].mean == pytest.approx(2 / 24)


def test_legacy_rejects_input_that_is_not_n_copies_per_prompt(published):
    from verl.protocol import DataProto

    manager = legacy_manager(SamplerConfig())
    shuffled = DataProto.from_dict(
        tensors={"input_ids": torch.zeros(8, 3)}, non_tensors={"uid": np.array(list("abababab"), dtype=object)}
    )
    with pytest.raises(ValueError, match="not n copies"):
        manager.generate_sequences(shuffled)


def test_legacy_non_finite_score_is_an_error_naming_the_reward_and_the_way_out(published, monkeypatch):
    monkeypatch.setitem(REWARDS, "easy", [1, float("nan")] + REWARDS["easy"][2:])
    manager = legacy_manager(SamplerConfig())
    with pytest.raises(RewardError, match="the test reward returned a non-finite score.*trainer.use_v1=true"):
        manager.generate_sequences(legacy_prompts())


def test_legacy_episode_that_raises_is_an_error_naming_the_agent_loop_and_the_way_out(monkeypatch):
    import asyncio

    from verl.experimental.agent_loop import AgentLoopWorker

    from reinforce_ada.integration.agent_loop_legacy import SAMPLE_SEED, _SeededAgentLoopWorker

    seen = {}

    async def episode(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
        seen.update(sampling_params)
        raise RuntimeError("the environment failed")

    monkeypatch.setattr(AgentLoopWorker, "_run_agent_loop", episode)
    worker = object.__new__(_SeededAgentLoopWorker)  # the class Ray runs, without verl's start-up
    with pytest.raises(RuntimeError, match=r"agent loop 'ask_again' raised .*the environment failed.*use_v1=true"):
        asyncio.run(worker._run_agent_loop({}, {}, agent_name="ask_again", **{SAMPLE_SEED: 11}))
    assert seen == {"seed": 11}  # the row's seed reached the request before the episode failed


def test_one_round_of_n_is_grpo_on_the_adaptive_path(published):
    """round_size=n, max_rounds=1: one request of n per prompt, every sample kept, the pool is the group (so
    algorithm.adv_estimator=grpo computes verl's GRPO advantages), and a sampling seed can apply to GRPO too."""
    from reinforce_ada.integration.handover import pop_step_metrics

    manager = v1_manager(SamplerConfig(n=4, round_size=4, max_rounds=1))
    manager.generate_sequences(v1_prompts())
    assert manager.requests == [{u: (4, 0) for u in UIDS}] and manager.cleared == []
    assert {u: p.count for u, p in published.items()} == {u: 4 for u in UIDS}
    metrics = pop_step_metrics()
    assert metrics["reinforce_ada/samples_total"] == 12 == metrics["reinforce_ada/kept_samples"]


@pytest.mark.parametrize("trainer", ["v1", "legacy"])
def test_both_trainers_hand_the_stratified_correction_to_the_estimator(published, trainer):
    """The correction is formed in the core and travels with each prompt's pool statistics, in either trainer."""
    config = SamplerConfig(downsample_correction="stratified")
    if trainer == "v1":
        v1_manager(config).generate_sequences(v1_prompts())
    else:
        legacy_manager(config).generate_sequences(legacy_prompts())
    late = published["late"]  # 2 correct of 24 drawn; the group keeps both with 2 incorrect
    assert (late.strata.correct, late.strata.incorrect) == (pytest.approx((2 / 24) / (2 / 4)),
                                                            pytest.approx((22 / 24) / (2 / 4)))
    assert (published["never"].strata.correct, published["never"].strata.incorrect) == (1.0, 1.0)  # all wrong


def test_a_multi_output_agent_loop_is_checked_against_transfer_queues_capacity(published):
    """3 outputs per sample: a step of 3 prompts may hold 3 x 32 x 3 = 288 entries, and the kept ones padded to the
    mini-batch (3 + 2) x 4 x 3 = 60; a storage of 200 cannot, and the error says what to set."""
    from omegaconf import OmegaConf

    def config(capacity):
        return OmegaConf.create({"data": {"train_batch_size": 3},
                                 "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 2}},
                                 "transfer_queue": {"backend": {"SimpleStorage": {"total_storage_size": capacity}}}})

    manager = v1_manager(SamplerConfig(), outputs=3)
    manager.config = config(200)
    with pytest.raises(RuntimeError, match=r"3 outputs per sample .* = 288 entries.* raise it to at least 288"):
        manager.generate_sequences(v1_prompts())
    manager = v1_manager(SamplerConfig(), outputs=3)
    manager.config = config(288)
    manager.generate_sequences(v1_prompts())
    assert manager._outputs_checked == 3
    # the keys it clears are every stored output of a sample not kept
    assert {"never_31_0", "never_31_1", "never_31_2"} <= set(manager.cleared)
