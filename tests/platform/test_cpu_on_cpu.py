"""A GPU script on a CPU: its GPU-only settings neutralised one line each, the reference model unpinned, and
VERL_PLATFORM=cpu refused where CUDA GPUs would be ignored."""

import types

import pytest
import torch
from hydra import compose, initialize_config_module

from reinforce_ada.core.config import ConfigError
from reinforce_ada.platform import cpu

GPU_SCRIPT = [  # what tests/e2e/verl_grpo_example.sh sets that a CPU cannot use
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
    "trainer.n_gpus_per_node=8", "trainer.logger=[console,wandb]", "actor_rollout_ref.actor.optim.lr=1e-6",
]


def gpu_config(*extra):
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="ppo_trainer", overrides=[*GPU_SCRIPT, *extra])


def test_gpu_only_settings_are_neutralised_one_printed_line_each(monkeypatch, capsys):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setattr(cpu.os, "cpu_count", lambda: 2)
    config = gpu_config()
    changed = cpu.neutralise_gpu_settings(config)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[reinforce_ada.platform.cpu]")]
    assert config.actor_rollout_ref.ref.fsdp_config.param_offload is False
    assert config.actor_rollout_ref.actor.fsdp_config.optimizer_offload is False
    assert config.actor_rollout_ref.rollout.tensor_model_parallel_size == 1
    assert config.trainer.n_gpus_per_node == 1
    assert config.reward.num_workers == 1 and config.actor_rollout_ref.rollout.agent.num_workers == 1
    assert cpu.os.environ["WANDB_MODE"] == "offline"
    # one line per setting, naming it; the memory share is left as set, with a line saying it is not used
    for key in ("ref.fsdp_config.param_offload=True -> False", "tensor_model_parallel_size=2 -> 1",
                "trainer.n_gpus_per_node=8 -> 1", "reward.num_workers=8 -> 1", "gpu_memory_utilization=0.6 is not used",
                "trainer.logger has wandb"):
        assert sum(key in line for line in lines) == 1, key
    assert len(changed) == len(lines) - 2  # every change but the two notes
    # nothing else the script set is changed
    assert config.actor_rollout_ref.rollout.gpu_memory_utilization == 0.6
    assert config.actor_rollout_ref.actor.optim.lr == 1e-6 and list(config.trainer.logger) == ["console", "wandb"]


def test_a_cpu_sized_script_is_left_as_it_is(monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    config = gpu_config("trainer.n_gpus_per_node=2", "reward.num_workers=2",
                        "actor_rollout_ref.rollout.agent.num_workers=2",
                        "transfer_queue.backend.SimpleStorage.num_data_storage_units=2",
                        "actor_rollout_ref.ref.fsdp_config.param_offload=False",
                        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
                        "actor_rollout_ref.rollout.tensor_model_parallel_size=1")
    monkeypatch.setattr(cpu.os, "cpu_count", lambda: 2)
    assert cpu.neutralise_gpu_settings(config) == []
    assert config.trainer.n_gpus_per_node == 2


def test_the_reference_models_offload_policy_pins_nothing():
    from torch.distributed.fsdp import CPUOffloadPolicy

    module = types.SimpleNamespace(CPUOffloadPolicy=CPUOffloadPolicy)
    cpu._never_pin_offloaded_parameters(module)
    policy = module.CPUOffloadPolicy(pin_memory=True)
    assert isinstance(policy, CPUOffloadPolicy) and policy.pin_memory is False
    cpu._never_pin_offloaded_parameters(module)  # idempotent
    assert module.CPUOffloadPolicy.__mro__[1] is CPUOffloadPolicy
    with pytest.raises(RuntimeError):  # what it avoids: no accelerator, no pinned memory
        torch.empty(2).pin_memory()


def test_verl_platform_cpu_on_a_gpu_machine_is_refused_naming_both_settings(monkeypatch):
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    monkeypatch.setattr(cpu, "_cuda_devices", lambda: 8)
    with pytest.raises(ConfigError, match="trainer.device: VERL_PLATFORM=cpu is set .* 8 CUDA device"):
        cpu.check_platform(gpu_config("trainer.device=cuda"))
    cpu.check_platform(gpu_config("trainer.device=cpu"))  # asked for: a try-out on the CPU
    monkeypatch.setattr(cpu, "_cuda_devices", lambda: 0)
    cpu.check_platform(gpu_config("trainer.device=cuda"))  # no GPU to ignore
    monkeypatch.delenv("VERL_PLATFORM")
    monkeypatch.setattr(cpu, "_cuda_devices", lambda: 8)
    cpu.check_platform(gpu_config("trainer.device=cuda"))


def test_a_local_ray_start_prestarts_no_idle_workers_and_a_cluster_is_left_alone(monkeypatch):
    """verl's actors never take the idle workers Ray prestarts for the driver's job (their runtime environments
    differ): on two cores each would cost a Python start-up for nothing. A running cluster's settings are its own."""
    monkeypatch.delenv("RAY_prestart_worker_first_driver", raising=False)
    monkeypatch.setenv("RAY_ADDRESS", "local")
    cpu.prepare_config(gpu_config("actor_rollout_ref.rollout.name=vllm"))
    assert cpu.os.environ["RAY_prestart_worker_first_driver"] == "0"

    monkeypatch.delenv("RAY_prestart_worker_first_driver")
    cpu.prepare_config(gpu_config("actor_rollout_ref.rollout.name=vllm", "trainer.nnodes=2"))
    assert "RAY_prestart_worker_first_driver" not in cpu.os.environ

    monkeypatch.setenv("RAY_prestart_worker_first_driver", "1")  # the user's own choice stays
    cpu.prepare_config(gpu_config("actor_rollout_ref.rollout.name=vllm"))
    assert cpu.os.environ["RAY_prestart_worker_first_driver"] == "1"


def test_vllm_kv_blocks_are_small_enough_for_prefix_caching_unless_the_user_sized_them(monkeypatch):
    """vLLM-CPU's default block of 128 tokens leaves a shorter prompt uncached, computed again for each of its n
    samples; the platform asks for the smallest block its attention takes, and a size the user set stays."""
    monkeypatch.setenv("RAY_ADDRESS", "local")
    config = gpu_config("actor_rollout_ref.rollout.name=vllm")
    changes = cpu.prepare_config(config)
    assert config.actor_rollout_ref.rollout.engine_kwargs.vllm.block_size == cpu.VLLM_BLOCK_SIZE == 32
    assert "actor_rollout_ref.rollout.engine_kwargs.vllm.block_size=32" in changes
    assert config.actor_rollout_ref.rollout.enable_prefix_caching  # verl's default, which the blocks serve

    own = gpu_config("actor_rollout_ref.rollout.name=vllm",
                     "+actor_rollout_ref.rollout.engine_kwargs.vllm.block_size=64")
    assert not any("block_size" in c for c in cpu.prepare_config(own))
    assert own.actor_rollout_ref.rollout.engine_kwargs.vllm.block_size == 64
