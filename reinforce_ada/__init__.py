"""Reinforce-Ada: adaptive sampling for RL post-training of LLMs, as a verl plug-in.

The algorithm core (this package's top-level modules ``config``, ``sampling``, ``groups``,
``advantage``, ``metrics``) is pure Python and torch. The verl glue (``estimator`` and the
modules that import verl) is loaded by verl itself through the ``verl.plugins`` entry point.
"""

from reinforce_ada.advantage import PoolStats, outcome_advantages, pool_stats
from reinforce_ada.config import ConfigError, SamplerConfig
from reinforce_ada.groups import PromptGroup, form_group, select_group
from reinforce_ada.sampling import PromptSampler, RewardError, run_rounds

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "PoolStats",
    "PromptGroup",
    "PromptSampler",
    "RewardError",
    "SamplerConfig",
    "form_group",
    "outcome_advantages",
    "pool_stats",
    "run_rounds",
    "select_group",
]
