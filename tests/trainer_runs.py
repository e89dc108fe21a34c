"""Running verl's trainer on this CPU for the end-to-end tests: the launch, what a run left behind.

Each run costs a verl start-up (Ray, the FSDP worker, the vLLM server: about a minute and a half on two cores),
so each run carries several checks; the tests say which.
"""

import contextlib
import ipaddress
import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "run_cpu_tiny.sh"
# a reward that fails on about 20% of calls and gives the training prompts from index 4 on nothing to learn
HOSTILE_REWARD = ROOT / "tests" / "e2e" / "hostile_reward.py"
DEADLINE = 900


# The environment runs start from: the session's, taken before any test runs. Jobs start runs while in-process tests
# run, and a test may change os.environ for a while (monkeypatch.setenv).
ENV = dict(os.environ)
STARTED: list[subprocess.Popen] = []  # every run the tests started, killed at the session's end if still running

# Two jobs run at once (e2e_jobs.LANES), but two Ray nodes never start at once: on two busy cores a Ray node once
# missed Ray's fixed 30 s start-up limit. A run starts once every other run has its Ray node up, which its log (or
# the log of a trainer a harness starts) says, or has been starting for STARTUP_LIMIT s.
RAY_UP = ("Started a local Ray instance", "Connecting to existing Ray cluster")
STARTUP_LIMIT = 240.0
_TURN = threading.Lock()
_RAY_LOGS: dict[subprocess.Popen, tuple[Path, tuple[str, ...]]] = {}  # run -> (folder, globs of its Ray-starting logs)
_UP: set[Path] = set()  # the logs that say their Ray node is up


@contextlib.contextmanager
def start_turn():
    """Waits until no run is starting a Ray node, and keeps every other start waiting while held."""
    with _TURN:
        while any(_starting_ray(proc, folder, globs) for proc, (folder, globs) in _RAY_LOGS.items()):
            time.sleep(1.0)
        yield


def _starting_ray(proc: subprocess.Popen, folder: Path, globs: tuple[str, ...]) -> bool:
    if proc.poll() is not None:
        return False
    for log in (path for pattern in globs for path in folder.glob(pattern)):
        if log in _UP or time.time() - log.stat().st_ctime > STARTUP_LIMIT:
            continue
        if any(line in log.read_text(errors="replace") for line in RAY_UP):
            _UP.add(log)
            continue
        return True
    return False


def start(out: Path, name: str, env: dict, command: list[str], ray_logs: tuple[str, ...] | None = None
          ) -> subprocess.Popen:
    """Starts a launch command in its own process group (so that a kill takes Ray and vLLM with it), logging to
    ``out/<name>.log`` and verl's metrics to ``out/<name>.jsonl``, once no other run is starting a Ray node.

    Args:
        ray_logs: Globs under ``out`` of the logs of the Ray nodes the command starts (default: its own log).
    """
    env = {**ENV, "OUT": str(out), "VERL_FILE_LOGGER_PATH": str(out / f"{name}.jsonl"), **env}
    with start_turn(), open(out / f"{name}.log", "w") as log:
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True)
        _RAY_LOGS[proc] = (out, (f"{name}.log",) if ray_logs is None else ray_logs)  # within the turn: the next sees it
    STARTED.append(proc)
    return proc


def run(out: Path, name: str, command: list[str], env: dict | None = None, timeout: float = DEADLINE,
        ray_logs: tuple[str, ...] | None = None) -> tuple[int, str]:
    """Runs a command to its end (killed after ``timeout`` s), logging to ``out/<name>.log``; its exit code and log."""
    proc = start(out, name, env or {}, command, ray_logs)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return proc.returncode, (out / f"{name}.log").read_text()


def kill_started() -> None:
    """Kills what is left of every run started (a session cut short), with everything it started."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):  # SIGTERM first: a harness stops its trainer
        for proc in STARTED:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(timeout=wait)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass


def tiny_run(out: Path, name: str, env: dict, *overrides: str) -> subprocess.Popen:
    """``scripts/run_cpu_tiny.sh`` with Hydra overrides (environment: STEPS, SAVE_FREQ, VARIANT, TRAINER, ENTRY)."""
    return start(out, name, env, ["bash", str(SCRIPT), *overrides])


def finish(proc: subprocess.Popen, out: Path, name: str, listeners: "Listeners | None" = None) -> tuple[list, str]:
    """Waits for a run (polling its sockets, if asked), then returns its metrics rows and its log."""
    deadline = time.monotonic() + DEADLINE
    while proc.poll() is None:
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            break
        if listeners is not None:
            listeners.poll(proc.pid)
        time.sleep(1.0)
    log = (out / f"{name}.log").read_text()
    assert proc.returncode == 0, log[-6000:]
    return metrics(out, name), log


def kill_when(proc: subprocess.Popen, out: Path, name: str, line: str, listeners: "Listeners | None" = None) -> str:
    """Kills a run (SIGKILL, no clean shutdown) once its log shows ``line``; returns the log."""
    deadline = time.monotonic() + DEADLINE
    try:
        while line not in (out / f"{name}.log").read_text():
            assert proc.poll() is None, (out / f"{name}.log").read_text()[-6000:]
            assert time.monotonic() < deadline, f"{name} never logged {line!r}"
            if listeners is not None:
                listeners.poll(proc.pid)
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    time.sleep(5)  # Ray's and vLLM's processes die with their parents
    return (out / f"{name}.log").read_text()


def metrics(out: Path, name: str) -> list[dict]:
    path = out / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def checkpoint_weights(checkpoints: Path, step: int) -> dict:
    import torch

    state = torch.load(checkpoints / f"global_step_{step}" / "actor" / "model_world_size_1_rank_0.pt",
                       map_location="cpu", weights_only=False)
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in state.items()}


def dumped_samples(folder: Path, step: int) -> list[tuple]:
    """verl's dump of a step's training samples (trainer.rollout_data_dir), order-free."""
    rows = [json.loads(line) for line in (folder / f"{step}.jsonl").read_text().splitlines()]
    return sorted((row["input"], row["output"], row["score"]) for row in rows)


class Listeners:
    """The listening sockets (TCP in LISTEN, unconnected UDP) of a process tree, polled while it runs (at most once
    a second), and the environment of its Ray processes. Reads the kernel's tables only: no traffic is sent
    anywhere. One read of the machine's socket table a poll: 28 ms of CPU over a 26-process run, where asking each
    process for its own sockets took 194 ms."""

    def __init__(self):
        self.sockets: set[tuple[str, int, str]] = set()  # (address, port, process name)
        self.auth_modes: set[str | None] = set()
        self._last = 0.0

    def poll(self, root_pid: int) -> None:
        import psutil

        if time.monotonic() - self._last < 1.0:
            return
        self._last = time.monotonic()
        try:
            root = psutil.Process(root_pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        names = {}
        for process in processes:
            try:
                cmdline = process.cmdline()  # Ray workers retitle theirs as ray::<actor class>
                names[process.pid] = name = os.path.basename(cmdline[0]) if cmdline else process.name()
                if name in ("gcs_server", "raylet"):
                    self.auth_modes.add(process.environ().get("RAY_AUTH_MODE"))
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        for conn in psutil.net_connections(kind="inet"):
            if conn.pid in names and (
                    conn.status == psutil.CONN_LISTEN or (conn.type == socket.SOCK_DGRAM and not conn.raddr)):
                self.sockets.add((conn.laddr.ip, conn.laddr.port, names[conn.pid]))

    def not_on_loopback(self) -> list[tuple[str, int, str]]:
        def loopback(ip: str) -> bool:
            address = ipaddress.ip_address(ip.split("%")[0])
            mapped = getattr(address, "ipv4_mapped", None)
            return address.is_loopback or (mapped is not None and mapped.is_loopback)

        return sorted(s for s in self.sockets if not loopback(s[0]))


def assert_sane_sampler_metrics(
    data: dict, prefix: str = "reinforce_ada/", prompts: int = 4, n: int = 4, m: int = 8, r: int = 4,
    mode: str = "rounds", budget: float | None = None,
):
    """What every step of a Seq run must log, whatever its rewards."""
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


# Two of every worker a cluster multiplies: trainer ranks (on two logical GPUs), vLLM replicas (one per GPU),
# agent-loop workers, reward workers and TransferQueue storage units.
CLUSTER_SHAPED = ["trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.agent.num_workers=2", "reward.num_workers=2",
                  "transfer_queue.backend.SimpleStorage.num_data_storage_units=2",
                  # verl pads a step to a multiple of ppo_mini_batch_size x n = 16 samples, 8 per rank
                  "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
                  "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4"]
