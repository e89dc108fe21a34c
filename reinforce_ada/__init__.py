"""Reinforce-Ada: adaptive sampling for RL post-training of LLMs, as a verl plug-in.

The layers, each a subpackage:

* ``core``: the algorithm (sampling state, budgets, schedules, groups, advantages, the pass-rate
  tracker), pure Python and torch, nothing of verl, Ray or vLLM;
* ``integration``: the verl glue that runs the core inside verl's trainers;
* ``platform``: verl on a CPU, and single-machine runs kept off the network;
* ``tasks``: the math reward, data preparation and evaluation;
* ``demo`` and ``tools``: the CPU demo, the replay simulator, the tiny and SmolLM2 models.

The modules at this level (``main_ppo``, ``checkpoint``, ``reward``) are the paths users type, in
commands and verl configs; each forwards to its layer. The paths the package writes into verl's
config itself (the rollout manager, the replay buffer) name the modules in ``integration``.
This namespace re-exports the core's main types.
"""

from reinforce_ada.core.advantage import PoolStats, outcome_advantages, pool_stats
from reinforce_ada.core.config import ConfigError, SamplerConfig
from reinforce_ada.core.groups import PromptGroup, form_group, select_group
from reinforce_ada.core.sampler import PromptSampler, RewardError
from reinforce_ada.core.schedules import run_rounds

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
