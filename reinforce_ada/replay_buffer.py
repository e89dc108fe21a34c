"""The module a verl config names (``trainer.v1.sampler.custom_sampler.path: pkg://reinforce_ada.replay_buffer``);
the buffer lives in :mod:`reinforce_ada.integration.replay_buffer`."""

from reinforce_ada.integration.replay_buffer import ReinforceAdaReplayBuffer

__all__ = ["ReinforceAdaReplayBuffer"]
