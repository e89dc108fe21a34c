"""The `reinforce_ada` section of the verl config: defaults, reference keys, validation before Ray."""

import subprocess
import sys

import pytest
from hydra import compose, initialize_config_module

from reinforce_ada.core.config import ConfigError
from reinforce_ada.integration.checkpoint import TrackerCheckpointCallback
from reinforce_ada.integration.verl_config import MANAGER_CLASS, SAMPLER_NAME, SAMPLER_PATH, prepare_config


def load(*overrides):
    with initialize_config_module(config_module="reinforce_ada.configs", version_base=None):
        return compose(config_name="reinforce_ada", overrides=list(overrides))


def load_verl(*overrides):
    """verl's own ppo_trainer config, as a user of `python -m verl.trainer.main_ppo` has it."""
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def test_defaults_are_the_reference_settings():
    cfg = load("actor_rollout_ref.rollout.n=4")
    sampler = prepare_config(cfg)
    assert (sampler.n, sampler.round_size, sampler.max_rounds, sampler.variant) == (4, 8, 4, "balance")
    assert sampler.threshold == 0.7 and sampler.unresolved == "keep" and sampler.selection == "first"
    assert sampler.mode == "rounds"
    assert cfg.algorithm.adv_estimator == "reinforce_ada" and cfg.algorithm.norm_adv_by_std_in_grpo is False
    assert cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class == MANAGER_CLASS
    assert (cfg.trainer.v1.sampler.custom_sampler.path, cfg.trainer.v1.sampler.custom_sampler.name) == (
        SAMPLER_PATH,
        SAMPLER_NAME,
    )


def test_overrides_reach_the_sampler():
    cfg = load("actor_rollout_ref.rollout.n=8", "reinforce_ada.variant=pos", "reinforce_ada.round_size=16",
               "reinforce_ada.max_rounds=2", "reinforce_ada.selection=random", "reinforce_ada.unresolved=drop")
    sampler = prepare_config(cfg)
    assert (sampler.n, sampler.variant, sampler.n_max, sampler.selection, sampler.unresolved) == (
        8, "pos", 32, "random", "drop")


def test_disabled_section_gives_plain_verl():
    cfg = load("reinforce_ada.enable=false", "algorithm.adv_estimator=grpo")
    assert prepare_config(cfg) is None


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["actor_rollout_ref.rollout.n=40"], "actor_rollout_ref.rollout.n:"),
        (["reinforce_ada.round_size=0"], "reinforce_ada.round_size:"),
        (["reinforce_ada.variant=balanced"], "reinforce_ada.variant:"),
        (["reinforce_ada.enable=false"], "algorithm.adv_estimator:"),
        (["algorithm.adv_estimator=gae"], "algorithm.adv_estimator:"),
        (["algorithm.use_kl_in_reward=true"], "algorithm.use_kl_in_reward:"),
        (["algorithm.filter_groups.enable=true"], "algorithm.filter_groups.enable:"),
        (["trainer.v1.trainer_mode=colocate_async"], "trainer.v1.trainer_mode:"),
        (["reward.reward_model.enable=true"], "reward.reward_model.enable_resource_pool:"),
        (["trainer.use_v1=false", "reinforce_ada.unresolved=drop"], "reinforce_ada.unresolved:"),
        (["trainer.use_v1=false", "reinforce_ada.mode=async"], "reinforce_ada.mode:"),
        (["reinforce_ada.mode=barrier"], "reinforce_ada.mode:"),
        (["reinforce_ada.sample_budget=0.5"], "reinforce_ada.sample_budget:"),
        (["+reinforce_ada.rounds=3"], "reinforce_ada.rounds:"),
        (["trainer.v1.sampler.sync_refill_failed_groups=true"], "trainer.v1.sampler.sync_refill_failed_groups:"),
        (["data.train_batch_size=4096"], "transfer_queue.backend.SimpleStorage.total_storage_size:"),  # 4096 x 32
        (["transfer_queue.backend.SimpleStorage.total_storage_size=1000", "data.train_batch_size=32",
          "reinforce_ada.max_rounds=8"], "transfer_queue.backend.SimpleStorage.total_storage_size:"),
        (["actor_rollout_ref.rollout.agent.agent_loop_manager_class=my.Manager"],
         "actor_rollout_ref.rollout.agent.agent_loop_manager_class:"),
        (["reinforce_ada.enable=maybe"], "reinforce_ada.enable:"),
        # read on their own by the platform and the workers, so checked even with the rollout off
        (["reinforce_ada.enable=false", "algorithm.adv_estimator=grpo", "reinforce_ada.loopback=on"],
         "reinforce_ada.loopback:"),
        (["reinforce_ada.enable=false", "algorithm.adv_estimator=grpo", "reinforce_ada.sampling_seed=-1"],
         "reinforce_ada.sampling_seed:"),
    ],
)
def test_invalid_combinations_name_the_key(overrides, key):
    cfg = load("actor_rollout_ref.rollout.n=4", *overrides)
    with pytest.raises(ConfigError) as err:
        prepare_config(cfg)
    assert str(err.value).startswith(key), err.value


def test_reference_keys_are_mapped():
    cfg = load_verl(
        "actor_rollout_ref.rollout.n=4",
        "algorithm.adv_estimator=grpo",
        "+algorithm.multiround_adaptive_downsampling=True",
        "+algorithm.reinforce_ada_choice=positive_focused",
        "+algorithm.positive_threshold=0.5",
        "+algorithm.max_rounds=3",
        "+algorithm.round_repeat=6",
        "+algorithm.global_stat_est=True",
    )
    sampler = prepare_config(cfg)
    assert (sampler.variant, sampler.threshold, sampler.max_rounds, sampler.round_size) == ("pos", 0.5, 3, 6)
    assert cfg.algorithm.adv_estimator == "reinforce_ada"
    assert "multiround_adaptive_downsampling" not in cfg.algorithm and "global_stat_est" not in cfg.algorithm
    assert cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class == MANAGER_CLASS
    assert prepare_config(cfg) == sampler  # idempotent: the manager calls it again


def test_reference_without_global_stats_keeps_grpo_baseline():
    cfg = load_verl("+algorithm.multiround_adaptive_downsampling=True", "+algorithm.global_stat_est=False",
                    "algorithm.adv_estimator=grpo")
    assert prepare_config(cfg).variant == "balance"
    assert cfg.algorithm.adv_estimator == "grpo"


def test_reference_choice_is_checked():
    cfg = load_verl(
        "+algorithm.multiround_adaptive_downsampling=True", "+algorithm.reinforce_ada_choice=positive-focused"
    )
    with pytest.raises(ConfigError, match="^algorithm.reinforce_ada_choice:"):
        prepare_config(cfg)


@pytest.mark.slow
def test_entry_point_rejects_bad_config_before_ray_starts():
    proc = subprocess.run(
        [sys.executable, "-m", "reinforce_ada.main_ppo", "reinforce_ada.round_size=0"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: reinforce_ada.round_size: must be >= 1")
    assert "Started a local Ray instance" not in proc.stdout + proc.stderr and "ray init kwargs" not in proc.stdout


def test_disabling_hands_the_rollout_back_to_verl():
    cfg = load("reinforce_ada.enable=false", "algorithm.adv_estimator=grpo")
    prepare_config(cfg)
    assert cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class is None
    assert cfg.trainer.v1.sampler.custom_sampler.path is None


def test_the_former_seed_key_moves_to_selection_seed_with_one_note(capsys):
    cfg = load("reinforce_ada.selection=random", "reinforce_ada.seed=5")
    assert prepare_config(cfg).selection_seed == 5
    assert prepare_config(cfg).selection_seed == 5  # the manager prepares the same config again: no second note
    notes = [line for line in capsys.readouterr().err.splitlines() if "reinforce_ada.seed" in line]
    assert len(notes) == 1 and "reinforce_ada.selection_seed=5" in notes[0]
    assert "seed" not in cfg.reinforce_ada and cfg.reinforce_ada.selection_seed == 5
    with pytest.raises(ConfigError, match=r"^reinforce_ada\.seed:"):
        prepare_config(load("reinforce_ada.seed=5", "reinforce_ada.selection_seed=6"))


@pytest.mark.parametrize("enable", ["true", "false"])
def test_the_former_forwarding_paths_still_mean_this_package(enable):
    """A saved config or a script may name the forwarding modules the package once had; they are gone, so the
    paths are pointed at the real modules (or cleared, with the rollout off), not refused as someone else's."""
    cfg = load(f"reinforce_ada.enable={enable}", "algorithm.adv_estimator=grpo",
               "actor_rollout_ref.rollout.agent.agent_loop_manager_class=reinforce_ada.agent_loop.AdaptiveAgentLoopManager",
               "trainer.v1.sampler.custom_sampler.path=pkg://reinforce_ada.replay_buffer")
    prepare_config(cfg)
    expected = (MANAGER_CLASS, SAMPLER_PATH) if enable == "true" else (None, None)
    assert (cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class,
            cfg.trainer.v1.sampler.custom_sampler.path) == expected


def test_disabled_config_makes_the_manager_class_build_verls_own(monkeypatch):
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ

    from reinforce_ada.integration.agent_loop import AdaptiveAgentLoopManager

    built = []
    monkeypatch.setattr(AgentLoopManagerTQ, "create", classmethod(lambda cls, config, **kw: built.append(cls) or cls))
    cfg = load("reinforce_ada.enable=false", "algorithm.adv_estimator=grpo")
    assert AdaptiveAgentLoopManager.create(cfg, llm_client=None) is AgentLoopManagerTQ and built == [AgentLoopManagerTQ]


def test_est_and_warm_start_settings_reach_the_sampler_and_the_checkpoint_hook():
    from reinforce_ada.integration.verl_config import CALLBACK_CLASS

    cfg = load("reinforce_ada.variant=est", "reinforce_ada.min_samples_per_prompt=1", "reinforce_ada.tracker_decay=0.8")
    sampler = prepare_config(cfg)
    assert (sampler.variant, sampler.min_samples_per_prompt, sampler.tracker_decay) == ("est", 1, 0.8)
    assert sampler.weight_rule == "inverse_sqrt" and cfg.trainer.checkpoint_callback_class == CALLBACK_CLASS
    warm = prepare_config(load("reinforce_ada.warm_start=true"))
    assert warm.warm_start and warm.uses_tracker
    verl_cfg = load_verl("+reinforce_ada.enable=true", "+reinforce_ada.variant=est", "actor_rollout_ref.rollout.n=4",
                         "algorithm.adv_estimator=reinforce_ada", "algorithm.norm_adv_by_std_in_grpo=false")
    prepare_config(verl_cfg)
    assert verl_cfg.trainer.checkpoint_callback_class == CALLBACK_CLASS
    off = load("reinforce_ada.enable=false", "algorithm.adv_estimator=grpo")
    prepare_config(off)
    assert off.trainer.checkpoint_callback_class is None


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["reinforce_ada.variant=est", "trainer.use_v1=false"], "trainer.use_v1:"),
        (["reinforce_ada.warm_start=true", "trainer.use_v1=false"], "trainer.use_v1:"),
        (["reinforce_ada.variant=est", "algorithm.adv_estimator=grpo"], "algorithm.adv_estimator:"),
        (["reinforce_ada.variant=est", "algorithm.norm_adv_by_std_in_grpo=true"], "algorithm.norm_adv_by_std_in_grpo:"),
        (
            ["reinforce_ada.variant=est", "reinforce_ada.min_samples_per_prompt=8"],
            "reinforce_ada.min_samples_per_prompt:",
        ),
        (["reinforce_ada.variant=est", "reinforce_ada.warm_start=true"], "reinforce_ada.warm_start:"),
        (["reinforce_ada.tracker_decay=0"], "reinforce_ada.tracker_decay:"),
        (
            [
                "reinforce_ada.variant=est",
                "trainer.checkpoint_callback_class=verl.trainer.ppo.checkpoint_callback.CheckpointCallback",
            ],
            "trainer.checkpoint_callback_class:",
        ),
        (["reinforce_ada.variant=est", "trainer.checkpoint_callback_class=no.such.Callback"],
         "trainer.checkpoint_callback_class:"),
    ],
)
def test_est_and_warm_start_misconfigurations_name_the_key(overrides, key):
    with pytest.raises(ConfigError, match=f"^{key}"):
        prepare_config(load("actor_rollout_ref.rollout.n=4", *overrides))


def test_a_subclass_of_the_tracker_callback_is_accepted():
    cfg = load("reinforce_ada.variant=est", "actor_rollout_ref.rollout.n=4",
               f"trainer.checkpoint_callback_class={__name__}.MyCallback")
    prepare_config(cfg)
    assert cfg.trainer.checkpoint_callback_class == f"{__name__}.MyCallback"
    plain_seq = load("trainer.checkpoint_callback_class=verl.trainer.ppo.checkpoint_callback.CheckpointCallback")
    prepare_config(plain_seq)  # Seq without warm start needs no tracker saved: the user's callback stays
    assert plain_seq.trainer.checkpoint_callback_class.endswith(".CheckpointCallback")


class MyCallback(TrackerCheckpointCallback):
    pass


def test_storage_capacity_check_counts_the_cap_and_can_be_lifted():
    cfg = load("actor_rollout_ref.rollout.n=4", "data.train_batch_size=4096", "reinforce_ada.max_samples_per_prompt=16")
    prepare_config(cfg)  # 4096 x 16 = 65536 fits in 100000
    cfg = load("actor_rollout_ref.rollout.n=4", "data.train_batch_size=4096",
               "transfer_queue.backend.SimpleStorage.total_storage_size=null")
    prepare_config(cfg)
    with pytest.raises(
        ConfigError, match=r"= 131072 entries, .* more than the 100000 it holds; raise it to at least 131072"
    ):
        prepare_config(load("actor_rollout_ref.rollout.n=4", "data.train_batch_size=4096"))


def test_the_downsampling_correction_needs_the_pool_estimator():
    with pytest.raises(ConfigError, match="downsample_correction: 'stratified'.*adv_estimator=reinforce_ada"):
        prepare_config(load("reinforce_ada.downsample_correction=stratified", "algorithm.adv_estimator=grpo",
                            "actor_rollout_ref.rollout.n=4"))
    chosen = prepare_config(load("reinforce_ada.downsample_correction=stratified", "actor_rollout_ref.rollout.n=4"))
    assert chosen.downsample_correction == "stratified"
