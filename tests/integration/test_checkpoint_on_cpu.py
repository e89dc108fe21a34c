"""The pass-rate tracker in verl's checkpoints: the file, the callback verl builds, and the folder a resume reads."""

import json

import pytest

from reinforce_ada.core.tracker import PassRateTracker


def test_checkpoint_file_round_trip(tmp_path):
    from reinforce_ada.integration.checkpoint import TRACKER_FILE, load_tracker, save_tracker

    tracker = PassRateTracker()
    tracker.update("a", 8, 3)
    folder = tmp_path / "global_step_4"
    save_tracker(tracker, str(folder), 4)
    assert json.loads((folder / TRACKER_FILE).read_text())["global_step"] == 4
    restored = PassRateTracker()
    assert load_tracker(restored, str(folder), 4)
    assert restored.state_dict() == tracker.state_dict()
    with pytest.raises(ValueError, match="saved at step 4, expected step 5"):
        load_tracker(PassRateTracker(), str(folder), 5)
    assert not load_tracker(restored, str(tmp_path / "global_step_9"))


def test_callback_saves_the_managers_tracker(tmp_path):
    from types import SimpleNamespace

    from reinforce_ada.integration.checkpoint import TRACKER_FILE, TrackerCheckpointCallback

    tracker = PassRateTracker()
    tracker.update("a", 4, 1)
    trainer = SimpleNamespace(agent_loop_manager=SimpleNamespace(tracker=tracker))
    TrackerCheckpointCallback(config=None).on_save(trainer=trainer, global_step=2, checkpoint_dir=str(tmp_path))
    assert json.loads((tmp_path / TRACKER_FILE).read_text())["tracker"] == tracker.state_dict()
    # no manager or no tracker (e.g. the adaptive rollout off): nothing written, no error
    TrackerCheckpointCallback().on_save(trainer=SimpleNamespace(), global_step=3, checkpoint_dir=str(tmp_path / "x"))
    assert not (tmp_path / "x").exists()


def test_callback_is_what_verl_builds_from_the_config():
    from omegaconf import OmegaConf
    from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback

    from reinforce_ada.integration.checkpoint import CALLBACK_CLASS, TrackerCheckpointCallback

    config = OmegaConf.create({"trainer": {"checkpoint_callback_class": CALLBACK_CLASS}})
    assert isinstance(build_checkpoint_callback(config), TrackerCheckpointCallback)


@pytest.mark.parametrize(
    "trainer, first_step, expected",
    [
        ({"resume_mode": "auto", "default_local_dir": "/ck"}, 1, None),
        ({"resume_mode": "auto", "default_local_dir": "/ck"}, 5, "/ck/global_step_4"),
        ({"resume_mode": "disable", "default_local_dir": "/ck"}, 5, None),
        ({"resume_mode": "resume_path", "resume_from_path": "/other/global_step_4"}, 5, "/other/global_step_4"),
    ],
)
def test_resumed_checkpoint_dir_mirrors_verls_lookup(trainer, first_step, expected):
    from reinforce_ada.integration.checkpoint import resumed_checkpoint_dir

    assert resumed_checkpoint_dir(trainer, first_step) == expected


def test_resumed_checkpoint_dir_resolves_relative_paths_like_verl(tmp_path, monkeypatch):
    from reinforce_ada.integration.checkpoint import resumed_checkpoint_dir

    monkeypatch.chdir(tmp_path)
    assert resumed_checkpoint_dir({"default_local_dir": "ck"}, 3) == str(tmp_path / "ck" / "global_step_2")
