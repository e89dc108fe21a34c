"""End to end: the V1 options stacked in one run of verl's own entry point with this package's config (one verl
start-up costs over a minute): async mode, ``pos``, a warm start, unresolved prompts dropped, a sample budget of 2,
at most two rounds, two of every worker a cluster multiplies, and a reward that fails on a fifth of its calls and
gives the prompts of step 2 nothing to learn from, so that every one of them is dropped and the step has nothing
to keep.

Every sample is a multi-turn episode, each row naming its agent loop as verl selects it (agent_task.py): verl's
``tool_agent`` with a calculator tool (calculator_tool.py) that raises on some input, and ``ask_again``, a loop whose
environment checks the answer, asks once more when it is wrong, and fails midway now and then. The tiny model was
taught the tool-call format, so that some episodes call the tool.
"""

import json
import re

import agent_task
import pytest

import trainer_runs
from e2e_jobs import job
from trainer_runs import CLUSTER_SHAPED, HOSTILE_REWARD

pytestmark = pytest.mark.slow


@job()
def async_run(out):
    agent_task.build(out / "tiny", train=8)  # rows alternate: tool_agent, ask_again
    env = {"STEPS": "3", "SAVE_FREQ": "3", "VARIANT": "pos", "ENTRY": "verl",
           "PYTHONPATH": agent_task.python_path(trainer_runs.ENV)}
    proc = trainer_runs.tiny_run(
        out, "async", env,
        "reinforce_ada.mode=async", "reinforce_ada.warm_start=true", "reinforce_ada.unresolved=drop",
        "reinforce_ada.max_rounds=2", "reinforce_ada.sample_budget=2", "reinforce_ada.sampling_seed=3",
        f"reward.custom_reward_function.path={HOSTILE_REWARD}", f"trainer.rollout_data_dir={out / 'rollouts'}",
        *agent_task.overrides(out / "tiny"),
        *CLUSTER_SHAPED,
    )
    rows, log = trainer_runs.finish(proc, out, "async")
    return out, {r["step"]: r["data"] for r in rows}, log


@pytest.fixture(scope="module")
def run(e2e):
    return e2e.result("async_run")


def test_every_step_stays_within_the_budget_and_drops_unresolved_prompts(run):
    _, data, log = run
    assert sorted(data) == [1, 2, 3]
    for step in data.values():
        assert step["reinforce_ada/prompts"] == 4
        # first requests of n; at most 2 x 4 prompts x n samples drawn, failed ones included
        drawn = step["reinforce_ada/samples_total"] + step["reinforce_ada/samples_failed"]
        assert 4 * 4 <= drawn <= 2 * 4 * 4  # failed samples are drawn, and not in the pools
        assert step["reinforce_ada/budget_used_frac"] == pytest.approx(drawn / 32)
        assert step["reinforce_ada/prompts_budget_stopped"] <= step["reinforce_ada/prompts_unresolved"]
        dropped = step["reinforce_ada/prompts_dropped"]
        assert dropped == step["reinforce_ada/prompts_unresolved"]
        # a kept prompt has a full group; a step where all four are dropped trains on up to n of each (fewer where
        # failed samples left a pool short) with zero advantage
        if dropped < 4:
            assert step["reinforce_ada/kept_samples"] == 4 * (4 - dropped)
        else:
            assert 0 < step["reinforce_ada/kept_samples"] <= 16
        assert step["reinforce_ada/empty_step"] == float(dropped == 4)
        assert not any(k.startswith("reinforce_ada/round_") for k in step)  # async: no rounds to time
    assert re.search(r"\[reinforce_ada\] step 1 async: \d+ requests scored", log)  # progress while sampling
    assert "requests a prompt" in log and "round 1/2" not in log


def test_a_step_with_nothing_to_keep_trains_on_with_zero_advantage(run):
    _, data, log = run
    step = data[2]  # the hostile reward gives its prompts (indices 4-7) only zeros: pos never holds
    assert step["reinforce_ada/empty_step"] == 1 and step["reinforce_ada/prompts_dropped"] == 4
    assert 0 < step["reinforce_ada/kept_samples"] <= 16 and step["reinforce_ada/kept_groups_with_signal_frac"] == 0
    assert "every prompt was dropped" in log


def test_failed_reward_calls_are_redrawn_and_counted(run):
    _, data, log = run
    assert sum(step["reinforce_ada/samples_failed"] for step in data.values()) > 0
    assert "hostile_reward: a simulated failure" in log and "samples failed (generation or reward call); redrawn" in log


def test_two_of_every_worker_ran(run):
    out, _, log = run
    for actor in ("WorkerDict", "vLLMHttpServer", "_AdaptiveAgentLoopWorkerTQ", "RewardLoopWorker",
                  "SimpleStorageUnit"):
        assert len(set(re.findall(rf"\({actor} pid=(\d+)", log))) == 2, actor
    assert (out / "checkpoints" / "global_step_3" / "actor" / "model_world_size_2_rank_1.pt").exists()


def test_the_warm_start_sizes_known_prompts_from_the_tracker(run):
    out, data, log = run
    first = {int(s): [int(c) for c in counts.split()]
             for s, counts in re.findall(r"step (\d+) first requests: ([\d ]+)", log)}
    assert first[1] == [4] * 4 and first[2] == [4] * 4  # nothing known yet: n, as under any budget
    assert all(4 <= c <= 16 for c in first[3])  # known prompts: K/p_hat in [n, N_max = M * R]
    assert data[3]["reinforce_ada/tracker/prompts_seen_before"] == 4
    assert data[3]["reinforce_ada/first_request_mean"] == pytest.approx(sum(first[3]) / 4)
    assert (out / "checkpoints" / "global_step_3" / "reinforce_ada_tracker.json").exists()


def dumped(out, step) -> list[dict]:
    return [json.loads(line) for line in (out / "rollouts" / f"{step}.jsonl").read_text().splitlines()]


def test_episodes_called_the_tool_and_took_turns_and_the_logger_has_the_counts(run):
    _, data, _ = run
    drawn = {name: [step[f"reinforce_ada/agent/{name}_mean"] for step in data.values()]
             for name in ("turns", "tool_calls", "env_tokens")}
    assert all(t > 2 for t in drawn["turns"])  # single-turn samples have 2 (the prompt and the answer)
    assert max(drawn["tool_calls"]) > 0
    # the tool's and the environment's tokens are in the responses and out of the loss (response_mask 0)
    assert all(e > 0 for e in drawn["env_tokens"])
    assert max(step["reinforce_ada/agent/kept_turns_mean"] for step in data.values()) > 2


def test_kept_groups_hold_whole_episodes_one_reward_each(run):
    out, data, _ = run
    every = [row for step in data for row in dumped(out, step)]  # verl's dump of what each step trained on
    assert all(row["score"] in (0.0, 1.0) for row in every)  # one reward per episode, not one per turn
    tool_rows = [row for row in every if "Use add" in row["input"]]
    ask_rows = [row for row in every if "Use add" not in row["input"]]
    # a kept episode is whole: the call, the tool's answer and the model's last turn; the environment's question
    # and the second answer
    assert any(agent_task.CALL_PIECES[2] in row["output"] for row in tool_rows)
    # a call that raised (a > 5, or a number missing) ends no episode: verl gives the model the error as the answer
    assert any("Error executing tool" in row["output"] for row in tool_rows)
    assert any(agent_task.ASK_AGAIN in row["output"] for row in ask_rows)


def test_an_episode_that_fails_midway_is_redrawn_and_counted(run):
    _, _, log = run
    assert agent_task.ENVIRONMENT_FAILURE in log  # counted in samples_failed with the reward's failures (above)
