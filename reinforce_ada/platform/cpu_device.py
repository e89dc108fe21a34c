"""The device API verl asks of an accelerator, answered for a CPU: verl's ``cpu`` platform and the
``torch.cuda`` stand-in it hands out as its device module.

verl reaches the device two ways: through its platform (``verl.plugin.platform``: device name, collectives
backend, Ray resource, RNG, profiling) and through ``get_torch_device()``, the platform's device module, on which
it calls torch.cuda's functions (memory statistics, RNG state, synchronisation). On a CPU most of them have
nothing to do: :func:`_nothing` answers those, once for both.
"""

from __future__ import annotations

import contextlib
import os
import types

PLATFORM = "cpu"


def _nothing(*args, **kwargs) -> None:
    """What a CPU does to set up, wait for, profile or free an accelerator."""


class TorchCudaStandIn(types.ModuleType):
    """What verl reaches through ``get_torch_device()``: torch.cuda's API, answered for a CPU."""

    set_device = synchronize = empty_cache = ipc_collect = staticmethod(_nothing)
    set_per_process_memory_fraction = reset_peak_memory_stats = staticmethod(_nothing)

    def __init__(self):
        super().__init__("reinforce_ada.platform.cpu.device")
        import torch

        self._torch = torch

    def __getattr__(self, name):  # Stream, current_stream, ...
        return getattr(self._torch.cpu, name)

    def is_available(self):
        return True

    def device_count(self):
        return 1

    def current_device(self):
        return 0

    def get_device_name(self, *args, **kwargs):
        return "cpu"

    def memory_stats(self, *args, **kwargs):
        return {}

    def mem_get_info(self, *args, **kwargs):
        import psutil

        memory = psutil.virtual_memory()
        return memory.available, memory.total

    def memory_allocated(self, *args, **kwargs):
        import psutil

        return psutil.Process().memory_info().rss

    memory_reserved = memory_allocated

    def max_memory_allocated(self, *args, **kwargs):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    max_memory_reserved = max_memory_allocated

    def get_rng_state(self, *args, **kwargs):
        return self._torch.get_rng_state()

    def set_rng_state(self, state, *args, **kwargs):
        self._torch.set_rng_state(state)

    def manual_seed(self, seed):
        self._torch.manual_seed(seed)

    manual_seed_all = manual_seed


def register_platform() -> None:
    """Registers verl's ``cpu`` platform in this process (idempotent)."""
    import torch
    from verl.plugin.platform import PlatformBase, PlatformRegistry

    if PlatformRegistry.get(PLATFORM) is not None:
        return

    @PlatformRegistry.register(platform=PLATFORM)
    class PlatformCPU(PlatformBase):
        """verl on plain CPUs: torch's CPU build, gloo collectives, vLLM-CPU rollout."""

        _device_module = None
        set_device = synchronize = set_allocator_settings = empty_cache = staticmethod(_nothing)
        profiler_start = profiler_stop = staticmethod(_nothing)

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self):
            if PlatformCPU._device_module is None:
                PlatformCPU._device_module = TorchCudaStandIn()
            return PlatformCPU._device_module

        def is_available(self) -> bool:
            return True

        def current_device(self):
            return torch.device("cpu")

        def device_count(self) -> int:
            return 1

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        manual_seed_all = manual_seed

        def get_device_capability(self, device_index: int = 0):
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"  # set by Ray for the logical GPUs; harmless on CPU

        @contextlib.contextmanager
        def nvtx_range(self, msg: str):
            yield

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False  # weight sync falls back to shared memory

        def rollout_env_vars(self) -> dict[str, str]:
            # verl puts these into the vLLM server's Ray runtime env; its engine processes inherit them.
            names = ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "VERL_PLATFORM", "VERL_ENGINE_DEVICE")
            return {name: os.environ[name] for name in names if name in os.environ}

        def cudart(self):
            return None
