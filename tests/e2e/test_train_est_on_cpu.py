"""End to end: Reinforce-Ada-Est and warm-started Seq through verl's V1 trainer on a CPU, and a
kill-and-resume that must allocate exactly as the run it replaces; the warm start runs through verl's
own entry point in async mode.

The tiny dataset has 8 training prompts and each step takes 4 (no shuffling), so step 3 asks the
prompts of step 1 again and the pass-rate tracker decides its allocation. Each run takes one to
two minutes on two cores; marked slow.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "run_cpu_tiny.sh"

pytestmark = pytest.mark.slow

TRAIN_PROMPTS = 8


def tiny(out: Path) -> None:
    """The tiny model with 8 training prompts (run_cpu_tiny.sh keeps a model it finds in OUT/tiny)."""
    subprocess.run(
        [sys.executable, "-m", "reinforce_ada.tools.tiny", str(out / "tiny"), "--train", str(TRAIN_PROMPTS)],
        check=True, capture_output=True, cwd=ROOT,
    )


def start(out: Path, name: str, env_extra: dict, *overrides: str) -> subprocess.Popen:
    env = {**os.environ, "OUT": str(out), "VERL_FILE_LOGGER_PATH": str(out / f"{name}.jsonl"), **env_extra}
    log = open(out / f"{name}.log", "w")
    # its own process group, so that a kill takes Ray's and vLLM's processes with it
    return subprocess.Popen(["bash", str(SCRIPT), *overrides], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def finish(proc: subprocess.Popen, out: Path, name: str) -> tuple[list[dict], str]:
    proc.wait(timeout=900)
    log = (out / f"{name}.log").read_text()
    assert proc.returncode == 0, log[-6000:]
    records = [json.loads(line) for line in (out / f"{name}.jsonl").read_text().splitlines()]
    return records, log


def allocations(log: str, what: str = "allocation") -> dict[int, list[int]]:
    """``{step: counts}`` from the manager's ``step S allocation: c1 c2 ...`` lines."""
    return {int(s): [int(c) for c in counts.split()] for s, counts in re.findall(rf"step (\d+) {what}: ([\d ]+)", log)}


def test_est_trains_and_a_killed_run_resumes_with_identical_allocations(tmp_path):
    out = tmp_path
    tiny(out)
    # 8 steps so that the run is still going when killed; checkpoints every 2 steps.
    killed = start(out, "killed", {"STEPS": "8", "SAVE_FREQ": "2", "VARIANT": "est"})
    deadline = time.time() + 900
    try:
        # Let it write the step-2 checkpoint and plan step 3, then kill it mid-step (no clean shutdown).
        while "step 3 allocation:" not in (out / "killed.log").read_text():
            assert killed.poll() is None, (out / "killed.log").read_text()[-6000:]
            assert time.time() < deadline, "the run did not reach step 3"
            time.sleep(0.1)
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
    time.sleep(5)  # Ray's and vLLM's processes die with their parents
    killed_log = (out / "killed.log").read_text()
    checkpoints = out / "checkpoints"
    # normally 2; 4 if the machine was quick enough to finish steps 3 and 4 before the kill landed
    last = int((checkpoints / "latest_checkpointed_iteration.txt").read_text())
    assert last >= 2 and (checkpoints / f"global_step_{last}" / "reinforce_ada_tracker.json").exists()

    env = {"STEPS": str(last + 2), "SAVE_FREQ": "2", "VARIANT": "est"}
    resumed, resumed_log = finish(start(out, "resumed", env), out, "resumed")
    assert re.search(rf"pass-rate tracker of \d+ prompts restored from .*global_step_{last}\b", resumed_log)
    before, after = allocations(killed_log), allocations(resumed_log)
    assert set(after) == {last + 1, last + 2} and last + 1 in before
    # The first resumed step is planned from the saved tracker alone: it must be the killed run's plan
    # (later steps depend on new rewards, which vLLM samples afresh).
    assert after[last + 1] == before[last + 1], "the resumed run allocated differently from the run it replaces"
    for counts in [*before.values(), *after.values()]:
        assert sum(counts) == 4 * 4 and all(2 <= c <= 32 for c in counts)  # GRPO-4's budget, [N_min, N_max]

    # the resumed run trained on every sample drawn, with the tracker's view of the repeated prompts
    assert [r["step"] for r in resumed] == [last + 1, last + 2]
    for record in resumed:
        data = record["data"]
        assert data["reinforce_ada/samples_total"] == 16 == data["reinforce_ada/kept_samples"]
        assert data["reinforce_ada/rounds"] == 1 and data["reinforce_ada/first_request_min"] >= 2
        assert data["reinforce_ada/tracker/prompts_seen_before"] == 4  # from step 3 on, every prompt comes round again
        assert data["reinforce_ada/tracker/size"] == TRAIN_PROMPTS
        assert 0 < data["reinforce_ada/tracker/p_hat_min"] <= data["reinforce_ada/tracker/p_hat_max"] < 1
    saved = json.loads((checkpoints / f"global_step_{last + 2}" / "reinforce_ada_tracker.json").read_text())
    assert saved["global_step"] == last + 2 and len(saved["tracker"]["prompts"]) == TRAIN_PROMPTS


# Two of every worker a cluster multiplies: trainer ranks (on two logical GPUs), vLLM replicas (one per GPU),
# agent-loop workers, reward workers and TransferQueue storage units.
CLUSTER_SHAPED = ["trainer.n_gpus_per_node=2", "ray_kwargs.ray_init.num_gpus=2",
                  "actor_rollout_ref.rollout.agent.num_workers=2", "reward.num_workers=2",
                  "transfer_queue.backend.SimpleStorage.num_data_storage_units=2",
                  # verl pads a step to a multiple of ppo_mini_batch_size x n = 16 samples, 8 per rank
                  "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
                  "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4"]


def test_verls_own_entry_point_runs_async_warm_started_sampling_that_drops_unresolved_prompts(tmp_path):
    """verl's own ``python -m verl.trainer.main_ppo`` with the V1 options stacked in one run (each run costs
    minutes): async mode, warm start, ``pos``, unresolved prompts dropped, a reward call that fails now and
    then, two of every worker, and a sample budget of 2. Two rounds at most make unresolved prompts likely, so
    that verl pads the shrunken batch."""
    tiny(tmp_path)
    env = {"STEPS": "3", "SAVE_FREQ": "3", "VARIANT": "pos", "ENTRY": "verl"}
    overrides = ["reinforce_ada.mode=async", "reinforce_ada.warm_start=true", "reinforce_ada.unresolved=drop",
                 "reinforce_ada.max_rounds=2", "reinforce_ada.sample_budget=2",
                 f"reward.custom_reward_function.path={ROOT / 'tests' / 'e2e' / 'flaky_reward.py'}",
                 *CLUSTER_SHAPED]
    records, log = finish(start(tmp_path, "warm", env, *overrides), tmp_path, "warm")
    assert [r["step"] for r in records] == [1, 2, 3]
    data = {r["step"]: r["data"] for r in records}
    for step in data.values():
        assert step["reinforce_ada/prompts"] == 4
        # first requests of n; at most 2 x 4 prompts x n samples drawn, failed ones included
        drawn = step["reinforce_ada/samples_total"] + step["reinforce_ada/samples_failed"]
        assert 4 * 4 <= step["reinforce_ada/samples_total"] and drawn <= 2 * 4 * 4
        assert step["reinforce_ada/budget_used_frac"] == pytest.approx(drawn / 32)
        assert step["reinforce_ada/prompts_budget_stopped"] <= step["reinforce_ada/prompts_unresolved"]
        dropped = step["reinforce_ada/prompts_dropped"]
        assert dropped == step["reinforce_ada/prompts_unresolved"]
        # a step where all four are dropped trains on n of each with zero advantage
        assert step["reinforce_ada/kept_samples"] == 4 * (4 - dropped if dropped < 4 else 4)
        assert step["reinforce_ada/empty_step"] == float(dropped == 4)
        assert not any(k.startswith("reinforce_ada/round_") for k in step)  # async: no rounds to time
    assert re.search(r"\[reinforce_ada\] step 1 async: \d+ requests scored", log)  # progress while sampling
    assert "requests a prompt" in log and "round 1/2" not in log
    # the flaky reward (about 8% of calls fail) ends no step: failed samples are redrawn and counted
    assert sum(step["reinforce_ada/samples_failed"] for step in data.values()) > 0
    # two of every worker ran (the async requests went to both agent-loop workers)
    for actor in (
        "WorkerDict",
        "vLLMHttpServer",
        "_AdaptiveAgentLoopWorkerTQ",
        "RewardLoopWorker",
        "SimpleStorageUnit",
    ):
        assert len(set(re.findall(rf"\({actor} pid=(\d+)", log))) == 2, actor
    assert (tmp_path / "checkpoints" / "global_step_3" / "actor" / "model_world_size_2_rank_1.pt").exists()

    first = allocations(log, "first requests")
    assert first[1] == [4] * 4 and first[2] == [4] * 4  # nothing known yet: n, as under any budget
    assert all(4 <= c <= 16 for c in first[3])  # known prompts: K/p_hat in [n, N_max = M * R]
    assert data[3]["reinforce_ada/tracker/prompts_seen_before"] == 4
    assert data[3]["reinforce_ada/first_request_mean"] == pytest.approx(sum(first[3]) / 4)
    assert (tmp_path / "checkpoints" / "global_step_3" / "reinforce_ada_tracker.json").exists()
