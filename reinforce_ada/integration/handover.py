"""What the adaptive rollout hands over to the rest of verl's training step.

verl gives an advantage estimator only the rewards, the response mask, the ``algorithm`` config
and each sample's ``uid`` (as ``index``), and the V1 trainer logs only the metrics its replay
buffer returns. In both verl trainers the rollout manager, the estimator and the replay buffer
run in one process (verl's TaskRunner), so each step the rollout leaves here the pool statistics
of every kept prompt, by uid (the one per-sample field every trainer carries unchanged through
reordering, balancing and storage), and its step metrics; the estimator and the replay buffer
(or, on the legacy trainer, the rollout's own ``timing`` dict) take them.
"""

from __future__ import annotations

from collections.abc import Mapping

from reinforce_ada.core.advantage import PoolStats

METRIC_PREFIX = "reinforce_ada/"

_pools: dict[str, PoolStats] = {}
_metrics: dict[str, float] = {}


def publish(pools: Mapping[str, PoolStats], metrics: Mapping[str, float]) -> None:
    """One step's pool statistics by uid, and its metrics (prefixed with ``reinforce_ada/``),
    replacing the last step's."""
    publish_pools(pools)
    _metrics.clear()
    _metrics.update({METRIC_PREFIX + k: v for k, v in metrics.items()})


def publish_pools(pools: Mapping[str, PoolStats]) -> None:
    """Makes ``pools`` the statistics the estimator uses (replacing the last step's)."""
    _pools.clear()
    _pools.update(pools)


def pool_stats(uid: str) -> PoolStats | None:
    """The published statistics of the prompt with this uid; None if it has none."""
    return _pools.get(uid)


def pop_step_metrics() -> dict[str, float]:
    """The metrics of the last training step's rollout (once; empty if already taken)."""
    metrics = dict(_metrics)
    _metrics.clear()
    return metrics
