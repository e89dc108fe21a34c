import pytest

from reinforce_ada.core.config import ConfigError, RunConfig, SamplerConfig


def test_reference_defaults():
    cfg = SamplerConfig()
    assert (cfg.n, cfg.round_size, cfg.max_rounds, cfg.threshold) == (4, 8, 4, 0.7)
    assert cfg.n_max == 32
    assert (cfg.positives_needed, cfg.negatives_needed) == (2, 2)


def test_exit_rule_defaults_follow_variant_and_n():
    assert (SamplerConfig(variant="pos").positives_needed, SamplerConfig(variant="pos").negatives_needed) == (1, 0)
    odd = SamplerConfig(n=5)
    assert (odd.positives_needed, odd.negatives_needed) == (2, 3)
    assert SamplerConfig(variant="pos", k_pos=3).positives_needed == 3


def test_budget_cap_shortens_n_max():
    assert SamplerConfig(max_samples_per_prompt=20).n_max == 20
    assert SamplerConfig(max_samples_per_prompt=100).n_max == 32


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"n": 40}, "n:"),
        ({"round_size": 0}, "round_size:"),
        ({"max_rounds": 0}, "max_rounds:"),
        ({"variant": "greedy"}, "variant:"),
        ({"unresolved": "skip"}, "unresolved:"),
        ({"selection": "last"}, "selection:"),
        ({"threshold": "high"}, "threshold:"),
        ({"threshold": float("nan")}, "threshold:"),
        ({"k_neg": 2, "variant": "pos"}, "k_neg:"),
        ({"k_pos": 30, "k_neg": 30}, "k_pos/k_neg:"),
        ({"max_samples_per_prompt": 2}, "n:"),
        ({"n": 2.5}, "n:"),
        ({"prompt_weight": "log"}, "prompt_weight:"),
    ],
)
def test_invalid_settings_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as err:
        SamplerConfig(**kwargs)
    assert str(err.value).startswith(field)


def test_from_mapping_prefixes_field_and_rejects_unknown_keys():
    with pytest.raises(ConfigError, match=r"^reinforce_ada\.round_size: must be >= 1"):
        SamplerConfig.from_mapping({"round_size": 0}, prefix="reinforce_ada.")
    with pytest.raises(ConfigError, match=r"^reinforce_ada\.rounds: unknown setting"):
        SamplerConfig.from_mapping({"rounds": 3}, prefix="reinforce_ada.")


def test_the_former_name_of_selection_seed_is_accepted_with_one_note(capsys):
    config = SamplerConfig.from_mapping({"selection": "random", "seed": 5}, prefix="reinforce_ada.")
    assert config.selection_seed == 5
    (note,) = capsys.readouterr().err.splitlines()
    assert "reinforce_ada.seed" in note and "reinforce_ada.selection_seed=5" in note
    assert SamplerConfig.from_mapping({"seed": None}).selection_seed == 0  # declared in the YAML, unset: no note
    assert SamplerConfig.from_mapping({"seed": 5, "selection_seed": 5}).selection_seed == 5
    assert capsys.readouterr().err.count("\n") == 1


def test_the_former_and_the_current_name_with_different_values_are_refused():
    with pytest.raises(ConfigError, match=r"^reinforce_ada\.seed: the former name of reinforce_ada\.selection_seed"):
        SamplerConfig.from_mapping({"seed": 5, "selection_seed": 6}, prefix="reinforce_ada.")


def test_the_run_settings_are_read_from_a_whole_config_and_checked_with_the_key_named():
    run = RunConfig.from_config({"reinforce_ada": {"enable": True, "loopback": "off", "sampling_seed": 3, "n": 9}})
    assert run == RunConfig(enable=True, loopback="off", sampling_seed=3)
    assert RunConfig.from_config({}) == RunConfig(enable=False)  # no section: nothing to run
    assert not RunConfig.from_config({"reinforce_ada": {"variant": "pos"}}).enable  # a section not from the group
    for section, key in [({"enable": "yes"}, "enable"), ({"loopback": "on"}, "loopback"),
                         ({"sampling_seed": -1}, "sampling_seed"), ({"sampling_seed": 1.5}, "sampling_seed")]:
        with pytest.raises(ConfigError, match=rf"^reinforce_ada\.{key}:"):
            RunConfig.from_config({"reinforce_ada": section})
