"""verl's own entry point with the config group appended: the group switches a GRPO script, and the preparation
before Ray starts runs at verl's first call with the config."""

import pytest
from hydra import compose, initialize_config_module

from reinforce_ada.core.config import ConfigError
from reinforce_ada.integration import verl_entry
from reinforce_ada.integration.verl_config import MANAGER_CLASS, SAMPLER_NAME, SAMPLER_PATH

GRPO_SCRIPT = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4"]  # what a GRPO script sets


def compose_verl(*overrides):
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


@pytest.mark.parametrize("variant", ["balance", "pos", "est"])
def test_the_appended_group_switches_a_grpo_script_to_reinforce_ada(variant):
    from reinforce_ada.integration.verl_config import prepare_config

    config = compose_verl(*GRPO_SCRIPT, "hydra.searchpath=[pkg://reinforce_ada.configs]", f"+reinforce_ada={variant}",
                          "reinforce_ada.round_size=16")
    sampler = prepare_config(config)
    assert (sampler.variant, sampler.round_size, sampler.n) == (variant, 16, 4)
    # the script's own adv_estimator=grpo outranks the group: the group's global_stat_est=true turns it into ours
    assert config.algorithm.adv_estimator == "reinforce_ada" and "global_stat_est" not in config.algorithm
    assert config.actor_rollout_ref.rollout.agent.agent_loop_manager_class == MANAGER_CLASS
    assert (config.trainer.v1.sampler.custom_sampler.path, config.trainer.v1.sampler.custom_sampler.name) == (
        SAMPLER_PATH, SAMPLER_NAME)
    assert config.trainer.checkpoint_callback_class.endswith("TrackerCheckpointCallback")


def test_the_kept_groups_baseline_stays_one_appended_key_away():
    from reinforce_ada.integration.verl_config import prepare_config

    config = compose_verl(*GRPO_SCRIPT, "hydra.searchpath=[pkg://reinforce_ada.configs]", "+reinforce_ada=balance",
                          "algorithm.global_stat_est=false")
    prepare_config(config)
    assert config.algorithm.adv_estimator == "grpo"


def test_a_group_hydra_did_not_find_is_refused_naming_the_searchpath():
    config = compose_verl(*GRPO_SCRIPT, "+reinforce_ada=balance")  # no hydra.searchpath: a plain string
    assert config.reinforce_ada == "balance"
    with pytest.raises(ConfigError, match=r"hydra.searchpath=\[pkg://reinforce_ada.configs\] before \+reinforce_ada"):
        verl_entry.prepare(config)


def test_verls_first_call_with_the_config_runs_the_preparation_and_leaves_other_configs_alone(monkeypatch):
    import verl.utils.device as device

    verl_entry.install()
    assert device.auto_set_device._reinforce_ada
    prepared = []
    monkeypatch.setattr(verl_entry, "prepare", prepared.append)
    plain = compose_verl(*GRPO_SCRIPT)
    device.auto_set_device(plain)
    assert prepared == []
    ours = compose_verl(*GRPO_SCRIPT, "hydra.searchpath=[pkg://reinforce_ada.configs]", "+reinforce_ada=pos")
    device.auto_set_device(ours)
    assert prepared == [ours]
    verl_entry.install()  # idempotent: one wrapper
    assert device.auto_set_device.__wrapped__.__module__ == "verl.utils.device"


def test_a_bad_key_exits_with_status_2_and_the_keys_name(monkeypatch, capsys):
    import verl.utils.device as device

    verl_entry.install()
    config = compose_verl(*GRPO_SCRIPT, "hydra.searchpath=[pkg://reinforce_ada.configs]", "+reinforce_ada=pos",
                          "reinforce_ada.round_size=0")
    with pytest.raises(SystemExit) as exit_:
        device.auto_set_device(config)
    assert exit_.value.code == 2 and "error: reinforce_ada.round_size: must be >= 1" in capsys.readouterr().err
