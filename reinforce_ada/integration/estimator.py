"""The ``reinforce_ada`` advantage estimator, registered in verl's estimator registry.

Importing this module registers it, so ``algorithm.adv_estimator=reinforce_ada`` selects it in
every process that imported the package (the package's ``verl.plugins`` entry point makes
``import verl`` do that everywhere). Registering again, e.g. after a module reload, replaces
our own earlier function instead of raising verl's "already registered" error.

The pool statistics reach it through :mod:`reinforce_ada.integration.handover`: verl hands an estimator
only the rewards, the response mask, the ``algorithm`` config and each sample's ``uid`` (as
``index``), and the adaptive rollout publishes each prompt's :class:`PoolStats` there under its uid.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from verl.trainer.ppo import core_algos

from reinforce_ada.core.advantage import PoolStats, outcome_advantages
from reinforce_ada.integration import handover

NAME = "reinforce_ada"


def compute_reinforce_ada_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    epsilon: float = 1e-6,
    config: Any | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages against the baseline of every sample drawn for the prompt.

    Args:
        token_level_rewards: Shape (bs, response_length); summed to one score per sample.
        response_mask: Shape (bs, response_length).
        index: The uid of each sample, shape (bs,). Its pool statistics must have been
            published with :func:`reinforce_ada.integration.handover.publish_pools`, except for samples with an all-zero
            response mask (verl's padding rows), which get a zero advantage.
        epsilon: Added to the pool std when dividing by it.
        config: verl's ``algorithm`` config; ``norm_adv_by_std_in_grpo`` switches the std
            division on, as for GRPO.
        **kwargs: Other inputs verl may pass; unused.

    Returns:
        advantages and returns, both of shape (bs, response_length).
    """
    if index is None:
        raise ValueError("reinforce_ada needs each sample's uid (verl passes it as `index`); none was given")
    has_response = (response_mask.sum(dim=-1) > 0).tolist()
    pools = []
    for uid, real in zip(index, has_response):
        stats = handover.pool_stats(uid)
        if stats is None:
            if real:
                raise ValueError(
                    f"no Reinforce-Ada pool statistics for sample uid {uid!r}: "
                    "algorithm.adv_estimator=reinforce_ada needs the adaptive rollout (reinforce_ada.enable=true)"
                )
            stats = PoolStats(count=1, mean=0.0, m2=0.0, weight=0.0)  # a padding row, masked out anyway
        pools.append(stats)
    norm_by_std = bool(config.get("norm_adv_by_std_in_grpo", True)) if config is not None else True
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        advantages = outcome_advantages(scores, pools, response_mask, norm_by_std=norm_by_std, epsilon=epsilon)
    return advantages, advantages


def register() -> None:
    """Registers the estimator under ``reinforce_ada``; safe to call any number of times."""
    registry = core_algos.ADV_ESTIMATOR_REGISTRY
    existing = registry.get(NAME)
    if existing is None or existing is compute_reinforce_ada_outcome_advantage:
        core_algos.register_adv_est(NAME)(compute_reinforce_ada_outcome_advantage)
    elif getattr(existing, "__module__", None) == __name__:
        registry[NAME] = compute_reinforce_ada_outcome_advantage  # an earlier copy of this module
    else:
        raise ValueError(f"another advantage estimator is registered as {NAME!r}: {existing!r}")


register()
