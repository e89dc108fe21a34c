"""Megatron-LM as verl's training engine (`model_engine=megatron`), on this CPU without Megatron-LM installed: the
package's config and the config group compose with it, pass the checks before Ray and verl's own config checks, and get
the same hooks, sampler settings and refusals as with FSDP.

No training step runs here. The adaptive rollout sets only the rollout manager, the replay buffer, the estimator and
the checkpoint callback, which run on verl's driver and rollout side and read nothing of the engine; the engine's own
path (Megatron's process groups, weight sync to vLLM, checkpoint shards) is not exercised by any test.
"""

import os
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from reinforce_ada.core.config import ConfigError
from reinforce_ada.integration import verl_entry
from reinforce_ada.integration.verl_config import (
    CALLBACK_CLASS,
    MANAGER_CLASS,
    SAMPLER_NAME,
    SAMPLER_PATH,
    prepare_config,
)

ROOT = Path(__file__).resolve().parents[2]
MEGATRON = ["model_engine=megatron"]
# Sizes verl's own checks accept (its defaults leave the micro-batch sizes unset), on one node of 2 GPUs.
SMALL = ["actor_rollout_ref.rollout.n=4", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
         "trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.use_dynamic_bsz=true",
         "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true"]
GRPO_SCRIPT = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4"]  # what a GRPO script sets
GROUP = ["hydra.searchpath=[pkg://reinforce_ada.configs]", "+reinforce_ada=balance"]


def compose_ours(*overrides):
    """configs/reinforce_ada.yaml, as `python -m reinforce_ada.main_ppo` composes it."""
    with initialize_config_module(config_module="reinforce_ada.configs", version_base=None):
        return compose(config_name="reinforce_ada", overrides=list(overrides))


def compose_verl(config_name, *overrides):
    """One of verl's own trainer configs, as `python -m verl.trainer.main_ppo` composes it."""
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name=config_name, overrides=list(overrides))


def engines(config) -> set:
    return {config.actor_rollout_ref.actor.strategy, config.actor_rollout_ref.ref.strategy, config.critic.strategy}


def hooks(config) -> tuple:
    """What the adaptive rollout puts into verl's config."""
    custom = config.trainer.v1.sampler.custom_sampler
    return (config.actor_rollout_ref.rollout.agent.agent_loop_manager_class, custom.path, custom.name,
            config.trainer.checkpoint_callback_class, config.algorithm.adv_estimator)


OURS = (MANAGER_CLASS, SAMPLER_PATH, SAMPLER_NAME, CALLBACK_CLASS, "reinforce_ada")


def verl_checks(config) -> None:
    """What verl's main_ppo runs on the config after the package's preparation and before Ray starts."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


def test_the_packages_config_composes_on_megatron_and_passes_the_checks_before_ray():
    config = compose_ours(*MEGATRON, *SMALL, "reinforce_ada.variant=balance")
    assert config.model_engine == "megatron" and engines(config) == {"megatron"}
    sampler = prepare_config(config)
    assert (sampler.variant, sampler.n, sampler.round_size, sampler.max_rounds) == ("balance", 4, 8, 4)
    assert hooks(config) == OURS
    verl_checks(config)


def test_the_engine_changes_nothing_the_adaptive_rollout_sets():
    fsdp = compose_ours(*SMALL, "reinforce_ada.variant=balance")
    megatron = compose_ours(*MEGATRON, *SMALL, "reinforce_ada.variant=balance")
    assert engines(fsdp) == {"fsdp"} and engines(megatron) == {"megatron"}
    assert prepare_config(fsdp) == prepare_config(megatron)
    assert hooks(fsdp) == hooks(megatron) == OURS
    assert OmegaConf.to_container(fsdp.reinforce_ada) == OmegaConf.to_container(megatron.reinforce_ada)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["reinforce_ada.round_size=0"], "reinforce_ada.round_size:"),
        (["+reinforce_ada.rounds=3"], "reinforce_ada.rounds:"),  # a key the section does not have
        (["actor_rollout_ref.rollout.n=40"], "actor_rollout_ref.rollout.n:"),
        (["data.train_batch_size=4096"], "transfer_queue.backend.SimpleStorage.total_storage_size:"),
        (["trainer.use_v1=false", "reinforce_ada.mode=async"], "reinforce_ada.mode:"),
        (["reinforce_ada.variant=est", "algorithm.norm_adv_by_std_in_grpo=true"], "algorithm.norm_adv_by_std_in_grpo:"),
    ],
)
def test_a_bad_setting_is_still_refused_on_megatron_naming_the_key(overrides, key):
    config = compose_ours(*MEGATRON, "actor_rollout_ref.rollout.n=4", "reinforce_ada.variant=balance", *overrides)
    with pytest.raises(ConfigError) as err:
        prepare_config(config)
    assert str(err.value).startswith(key), err.value


def test_verls_entry_point_exits_with_status_2_on_a_bad_key_on_megatron(capsys):
    import verl.utils.device as device

    verl_entry.install()
    config = compose_verl("ppo_trainer", *GRPO_SCRIPT, *MEGATRON, *GROUP, "reinforce_ada.round_size=0")
    with pytest.raises(SystemExit) as exit_:
        device.auto_set_device(config)  # verl's first call with the config, where the plug-in prepares the run
    assert exit_.value.code == 2 and "error: reinforce_ada.round_size: must be >= 1" in capsys.readouterr().err


def test_two_megatron_nodes_need_an_absolute_checkpoint_folder(tmp_path):
    relative = compose_ours(*MEGATRON, *SMALL, "trainer.nnodes=2", "trainer.default_local_dir=checkpoints/run")
    with pytest.raises(ConfigError, match="^trainer.default_local_dir:"):
        verl_entry.prepare(relative)
    shared = compose_ours(*MEGATRON, *SMALL, "trainer.nnodes=2", f"trainer.default_local_dir={tmp_path}")
    verl_entry.prepare(shared)  # a cluster run: no loopback, nothing else changed
    assert hooks(shared) == OURS and shared.ray_kwargs.ray_init.get("_node_ip_address") is None


@pytest.mark.parametrize("config_name, engine", [("ppo_trainer", MEGATRON), ("ppo_megatron_trainer", [])])
def test_the_config_group_switches_a_megatron_grpo_script(config_name, engine):
    config = compose_verl(config_name, *GRPO_SCRIPT, *engine, *SMALL, *GROUP)
    assert engines(config) == {"megatron"}
    assert prepare_config(config).variant == "balance"
    # the script's adv_estimator=grpo is turned into the pool baseline by the group's global_stat_est=true
    assert hooks(config) == OURS and "global_stat_est" not in config.algorithm
    verl_checks(config)


def test_the_papers_script_on_two_megatron_nodes(tmp_path):
    """scripts/run_reinforce_ada.sh with `model_engine=megatron` appended composes as it is: the script sets no
    key that only the FSDP actor has (its grad_clip; Megatron clips at its optimiser's clip_grad, 1.0 by default,
    as FSDP does by default)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_FILE"\n')  # records, trains nothing
    (bin_dir / "python").chmod(0o755)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "REWARD_", "CKPT_", "LOGGER"))}
    env = {**clean, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path),
           "ARGS_FILE": str(tmp_path / "args"), "NNODES": "2", "CKPT_DIR": str(tmp_path / "checkpoints")}
    subprocess.run(["bash", str(ROOT / "scripts" / "run_reinforce_ada.sh"), *MEGATRON], cwd=tmp_path, env=env,
                   capture_output=True, text=True, check=True)
    argv = (tmp_path / "args").read_text().splitlines()[2:]  # after `-m reinforce_ada.main_ppo`
    config = compose_ours(*argv)  # no FSDP-only key (the actor's grad_clip) in the script: Hydra would refuse it
    assert engines(config) == {"megatron"} and config.actor_rollout_ref.actor.optim.clip_grad == 1.0
    assert (config.trainer.nnodes, config.trainer.n_gpus_per_node) == (2, 8)
    verl_entry.prepare(config)
    assert hooks(config) == OURS and config.reinforce_ada.variant == "balance"
    verl_checks(config)
