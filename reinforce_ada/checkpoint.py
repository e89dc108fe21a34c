"""The class path a verl config names (``trainer.checkpoint_callback_class``); the callback lives in
:mod:`reinforce_ada.integration.checkpoint`."""

from reinforce_ada.integration.checkpoint import TrackerCheckpointCallback

__all__ = ["TrackerCheckpointCallback"]
