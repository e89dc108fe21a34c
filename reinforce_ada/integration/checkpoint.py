"""The pass-rate tracker in verl's checkpoints: saved with each one, restored on resume.

Saving uses verl's own hook: the V1 trainer calls ``trainer.checkpoint_callback_class``'s
``on_save(trainer, global_step, checkpoint_dir)`` on the driver (the TaskRunner, the process
that also holds the rollout manager and its tracker) after writing each ``global_step_N``
folder. :class:`TrackerCheckpointCallback` writes the manager's tracker there as
``reinforce_ada_tracker.json``, with the skip rule's per-prompt streaks when ``reinforce_ada.skip`` is on.

verl has no matching load hook, so the rollout manager restores the tracker itself when it sees
its first training step: a first step s > 1 means verl resumed from step s - 1, and
:func:`resumed_checkpoint_dir` finds that folder the way verl's ``_load_checkpoint`` did
(``trainer.resume_mode`` ``auto``: ``default_local_dir/global_step_{s-1}``; ``resume_path``:
``resume_from_path``).

The file is written after verl's own files and after ``latest_checkpointed_iteration.txt``
(verl calls the hook last): a crash in between leaves a checkpoint without a tracker, which a
resume reports and then continues with an empty tracker.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

from reinforce_ada.core.skip import SkipRule
from reinforce_ada.core.tracker import PassRateTracker

TRACKER_FILE = "reinforce_ada_tracker.json"
CALLBACK_CLASS = "reinforce_ada.checkpoint.TrackerCheckpointCallback"


def save_tracker(tracker: PassRateTracker, checkpoint_dir: str, global_step: int, skip: SkipRule | None = None) -> str:
    """Writes the tracker, and the skip rule's streaks if given, into a checkpoint folder (atomically: a
    temporary file, then a rename).

    Returns:
        The file's path.
    """
    os.makedirs(checkpoint_dir, exist_ok=True)
    path = os.path.join(checkpoint_dir, TRACKER_FILE)
    temporary = f"{path}.tmp"
    state = {"global_step": int(global_step), "tracker": tracker.state_dict()}
    if skip is not None:
        state["skip"] = skip.state_dict()
    with open(temporary, "w") as f:
        json.dump(state, f)
    os.replace(temporary, path)
    return path


def load_tracker(
    tracker: PassRateTracker, checkpoint_dir: str, global_step: int | None = None, skip: SkipRule | None = None
) -> bool:
    """Loads the tracker (and the skip rule's streaks, if ``skip`` is given) saved in a checkpoint folder.

    Args:
        tracker: Receives the saved counts.
        checkpoint_dir: A ``global_step_N`` folder.
        global_step: If given, the step the file must have been saved at.
        skip: Receives the saved streaks; a file saved without skipping leaves it empty.

    Returns:
        False if the folder holds no tracker file (``tracker`` unchanged), True once loaded.

    Raises:
        ValueError: If the file belongs to another step or is malformed.
    """
    path = os.path.join(checkpoint_dir, TRACKER_FILE)
    if not os.path.exists(path):
        return False
    with open(path) as f:
        saved = json.load(f)
    if global_step is not None and saved.get("global_step") != global_step:
        raise ValueError(f"{path} was saved at step {saved.get('global_step')}, expected step {global_step}")
    tracker.load_state_dict(saved["tracker"])
    if skip is not None and "skip" in saved:
        skip.load_state_dict(saved["skip"])
    return True


def resumed_checkpoint_dir(trainer_config: Mapping[str, Any], first_step: int) -> str | None:
    """The checkpoint folder verl resumed from, given the first training step it runs.

    Args:
        trainer_config: verl's ``trainer`` section (``resume_mode``, ``default_local_dir``,
            ``resume_from_path``).
        first_step: The ``global_steps`` of the first training batch this process sees.

    Returns:
        The ``global_step_{first_step - 1}`` folder, or None for a run that starts at step 1
        or has resuming off.
    """
    mode = trainer_config.get("resume_mode", "auto")
    if first_step <= 1 or mode == "disable":
        return None
    if mode == "resume_path":
        folder = str(trainer_config.get("resume_from_path"))
    else:
        folder = os.path.join(str(trainer_config.get("default_local_dir")), f"global_step_{first_step - 1}")
    return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)


class TrackerCheckpointCallback(CheckpointCallback):
    """verl checkpoint callback (``trainer.checkpoint_callback_class``) saving the pass-rate tracker.

    It saves the ``tracker`` attribute of the trainer's rollout manager, if it has one. To add
    your own behaviour, subclass it and call ``super().on_save(...)``.
    """

    def on_save(self, trainer, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs) -> None:
        super().on_save(trainer, global_step, checkpoint_dir, async_save=async_save, **kwargs)
        manager = getattr(trainer, "agent_loop_manager", None)
        tracker = getattr(manager, "tracker", None)
        skipper = getattr(manager, "skipper", None)
        if isinstance(tracker, PassRateTracker):
            save_tracker(tracker, checkpoint_dir, global_step, skip=skipper.rule if skipper is not None else None)
