"""The file a verl config names as ``reward.custom_reward_function.path`` for the math reward; the reward
lives in :mod:`reinforce_ada.tasks.reward`."""

from reinforce_ada.tasks.reward import compute_score

__all__ = ["compute_score"]
