"""The paper's launch scripts as a user runs them: the configuration they compose (reward, baseline, validation,
checkpoint folder, logger), and what is checked or said before Ray starts about rewards and checkpoints."""

import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_module

from reinforce_ada.core.config import ConfigError
from reinforce_ada.integration import default_reward, verl_entry

ROOT = Path(__file__).resolve().parents[2]
FAKE_PYTHON = '#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_FILE"\n'  # records the command line instead of training


def launch(tmp_path: Path, script: str, *args: str, **env: str) -> tuple[list[str], str]:
    """Runs scripts/<script> with `python` replaced by a recorder, from tmp_path with HOME there; returns the
    overrides it passed to `python -m reinforce_ada.main_ppo` and what it printed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python").write_text(FAKE_PYTHON)
    (bin_dir / "python").chmod(0o755)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "REWARD_", "CKPT_", "LOGGER"))}
    environ = {**clean, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path),
               "ARGS_FILE": str(tmp_path / "args"), **env}
    done = subprocess.run(["bash", str(ROOT / "scripts" / script), *args], cwd=tmp_path, env=environ,
                          capture_output=True, text=True, check=True)
    argv = (tmp_path / "args").read_text().splitlines()
    assert argv[:2] == ["-m", "reinforce_ada.main_ppo"]
    return argv[2:], done.stderr


def compose_ours(overrides: list[str]):
    with initialize_config_module(config_module="reinforce_ada.configs", version_base=None):
        return compose(config_name="reinforce_ada", overrides=overrides)


def math_data(tmp_path: Path) -> Path:
    """Two questions as data preparation writes them (data_source "math")."""
    path = tmp_path / "train.parquet"
    pd.DataFrame({"data_source": ["math", "math"], "prompt": [[{"role": "user", "content": "1+1?"}]] * 2,
                  "reward_model": [{"style": "rule", "ground_truth": "2"}] * 2}).to_parquet(path)
    return path


def test_the_reinforce_ada_script_scores_validates_and_checkpoints_as_the_paper(tmp_path):
    overrides, printed = launch(tmp_path, "run_reinforce_ada.sh")
    config = compose_ours(overrides)
    reward = config.reward.custom_reward_function
    assert (reward.path, reward.name) == (default_reward.PACKAGE_REWARD, "compute_score")
    assert not default_reward.uses_default_reward(config)
    val = config.actor_rollout_ref.rollout.val_kwargs
    assert (val.do_sample, val.n, val.temperature) == (False, 1, 0)  # greedy, one response per question
    assert config.algorithm.adv_estimator == "reinforce_ada" and config.algorithm.norm_adv_by_std_in_grpo is False
    assert (config.reinforce_ada.variant, config.reinforce_ada.round_size, config.reinforce_ada.max_rounds,
            config.reinforce_ada.threshold, config.actor_rollout_ref.rollout.n) == ("balance", 8, 4, 0.7, 4)
    # Ray's workers do not run in the launching directory: the checkpoint folder is absolute, under it
    assert config.trainer.default_local_dir == str(tmp_path / "outputs" / "reinforce_ada_balance")
    assert list(config.trainer.logger) == ["console"]
    assert "logger: console only" in printed


def test_the_grpo_script_is_the_papers_grpo_with_a_switch_for_the_unnormalised_variant(tmp_path):
    config = compose_ours(launch(tmp_path, "run_grpo.sh")[0])
    assert config.reinforce_ada.enable is False and config.algorithm.adv_estimator == "grpo"
    assert config.algorithm.norm_adv_by_std_in_grpo is True  # verl's GRPO: (r - mean) / std of the group
    assert config.actor_rollout_ref.rollout.n == 4 and config.trainer.experiment_name == "grpo_n4"
    assert config.reward.custom_reward_function.path == default_reward.PACKAGE_REWARD
    assert config.actor_rollout_ref.rollout.val_kwargs.do_sample is False
    switched = compose_ours(launch(tmp_path, "run_grpo.sh", "algorithm.norm_adv_by_std_in_grpo=false", N="8")[0])
    assert switched.algorithm.norm_adv_by_std_in_grpo is False and switched.actor_rollout_ref.rollout.n == 8


def test_a_users_reward_file_wins_and_verl_leaves_the_reward_to_verl(tmp_path):
    mine = compose_ours(launch(tmp_path, "run_reinforce_ada.sh", REWARD_FILE="/rewards/mine.py", REWARD_FN="score")[0])
    assert (mine.reward.custom_reward_function.path, mine.reward.custom_reward_function.name) == (
        "/rewards/mine.py", "score")
    verls = compose_ours(launch(tmp_path, "run_reinforce_ada.sh", REWARD_FILE="verl")[0])
    assert verls.reward.custom_reward_function.path is None and default_reward.uses_default_reward(verls)


@pytest.mark.parametrize(("env", "netrc", "expected"), [
    ({"WANDB_API_KEY": "k"}, False, ["console", "wandb"]),
    ({"WANDB_MODE": "offline"}, False, ["console", "wandb"]),
    ({}, True, ["console", "wandb"]),
    ({"LOGGER": '["console","file"]'}, False, ["console", "file"]),
])
def test_wandb_joins_the_logger_only_with_a_key_or_a_mode(tmp_path, env, netrc, expected):
    if netrc:
        (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password k\n")
    overrides, printed = launch(tmp_path, "run_reinforce_ada.sh", **env)
    assert list(compose_ours(overrides).trainer.logger) == expected
    assert ("logger:" in printed) == ("LOGGER" not in env)


def test_a_relative_checkpoint_dir_is_made_absolute_and_a_users_absolute_one_kept(tmp_path):
    relative = compose_ours(launch(tmp_path, "run_reinforce_ada.sh", CKPT_DIR="ckpt/run")[0])
    assert relative.trainer.default_local_dir == str(tmp_path / "ckpt" / "run")
    shared = compose_ours(launch(tmp_path, "run_reinforce_ada.sh", CKPT_DIR="/shared/ckpt")[0])
    assert shared.trainer.default_local_dir == "/shared/ckpt"


def test_relative_data_paths_are_made_absolute(tmp_path):
    config = compose_ours(launch(tmp_path, "run_reinforce_ada.sh", TRAIN_FILES="d/train.parquet")[0])
    assert config.data.train_files == str(tmp_path / "d" / "train.parquet")
    assert config.data.val_files == str(tmp_path / "data" / "openr1" / "test.parquet")


def test_a_clones_package_folder_does_not_hide_the_installed_package(tmp_path):
    """Started from a folder holding a `reinforce_ada/` package of its own (a clone's, without the configs that an
    install brings), the script still runs the installed package."""
    import sys

    (tmp_path / "reinforce_ada").mkdir()
    (tmp_path / "reinforce_ada" / "__init__.py").write_text('raise ImportError("the folder hid the package")\n')
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "run_reinforce_ada.sh"), "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_several_nodes_refuse_a_relative_checkpoint_dir_before_ray_starts():
    config = compose_ours(["trainer.nnodes=2", "trainer.default_local_dir=outputs/run"])
    with pytest.raises(ConfigError, match=r"^trainer.default_local_dir: a run on 2 nodes needs an absolute path"):
        verl_entry.check_checkpoint_dir(config)
    verl_entry.check_checkpoint_dir(compose_ours(["trainer.nnodes=1", "trainer.default_local_dir=outputs/run"]))
    verl_entry.check_checkpoint_dir(compose_ours(["trainer.nnodes=2", "trainer.default_local_dir=/shared/run"]))


def test_a_run_on_verls_default_reward_says_which_scorer_its_data_meets(tmp_path, monkeypatch, capsys):
    from reinforce_ada.platform import loopback

    monkeypatch.setattr(loopback, "bind_to_loopback", lambda config: False)  # this process starts no Ray
    overrides, _ = launch(tmp_path, "run_reinforce_ada.sh", REWARD_FILE="verl", TRAIN_FILES=str(math_data(tmp_path)))
    verl_entry.prepare(compose_ours(overrides))
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "default_compute_score" in line]
    assert "'math' -> math_dapo (+1 right, -1 wrong" in line
    assert f"reward.custom_reward_function.path={default_reward.PACKAGE_REWARD}" in line
    verl_entry.prepare(compose_ours(launch(tmp_path, "run_reinforce_ada.sh", TRAIN_FILES=str(math_data(tmp_path)))[0]))
    assert "default_compute_score" not in capsys.readouterr().err  # the package's reward: nothing to say


def test_the_note_says_when_it_could_not_read_the_data(tmp_path):
    note = default_reward.default_reward_note(compose_ours([f"data.train_files={tmp_path / 'missing.parquet'}"]))
    assert "the training data's data_source was not read" in note and "not a local parquet file" in note
    assert default_reward.default_reward_note(compose_ours([
        "reward.custom_reward_function.path=/r.py", "reward.custom_reward_function.name=f"])) is None
    assert default_reward.default_reward_note(compose_ours(["reward.reward_model.enable=true"])) is None


@pytest.mark.parametrize("source", ["openai/gsm8k", "lighteval/MATH", "math", "math_dapo", "aime2024",
                                    "numina_cn_k12", "apps", "hiyouga/geometry3k", "searchR1_nq"])
def test_the_named_scorer_is_the_one_verls_default_reward_calls(monkeypatch, source):
    import importlib

    from verl.utils.reward_score import default_compute_score

    module, _ = default_reward.scorer_of(source)
    scorer = importlib.import_module(f"verl.utils.reward_score.{module}")
    monkeypatch.setattr(scorer, "compute_score", lambda *args, **kwargs: 0.25)
    assert default_compute_score(source, "x", "1") == 0.25


def test_a_source_verl_cannot_score_is_named_so():
    from verl.utils.reward_score import default_compute_score

    assert default_reward.scorer_of("my_task") is None
    with pytest.raises(NotImplementedError):
        default_compute_score("my_task", "x", "1")
