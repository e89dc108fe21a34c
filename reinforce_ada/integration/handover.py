"""What the adaptive rollout hands over to the rest of verl's training step.

verl gives an advantage estimator only the rewards, the response mask, the ``algorithm`` config
and each sample's ``uid`` (as ``index``), and the V1 trainer logs only the metrics its replay
buffer returns. In both verl trainers the rollout manager, the estimator and the replay buffer
run in one process (verl's TaskRunner), so each step the rollout leaves here the pool statistics
of every kept prompt, by uid (the one per-sample field every trainer carries unchanged through
reordering, balancing and storage), and its step metrics; the estimator and the replay buffer
(or, on the legacy trainer, the rollout's own ``timing`` dict) take them.

The other way, the V1 replay buffer leaves here the trainer's refill function (fetch prompts from the data and
submit them to the rollout), which the rollout calls to replace the prompts it skips.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from reinforce_ada.core.advantage import PoolStats

METRIC_PREFIX = "reinforce_ada/"

_pools: dict[str, PoolStats] = {}
_metrics: dict[str, float] = {}
_refill: list[Callable[[int], int]] = []


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


def offer_refill(refill_fn: Callable[[int], int] | None) -> None:
    """The V1 trainer's ``refill_fn`` (``count -> prompts submitted``), as its replay buffer received it."""
    _refill.clear()
    if refill_fn is not None:
        _refill.append(refill_fn)


def refill(count: int) -> int:
    """Fetches ``count`` more prompts from the training data and submits them to the rollout.

    Raises:
        RuntimeError: If no replay buffer offered verl's refill function.
    """
    if not _refill:
        raise RuntimeError(
            "reinforce_ada: skipping prompts needs verl's V1 replay buffer to refill the batch, and none was offered "
            "(trainer.v1.sampler.custom_sampler must be reinforce_ada's)"
        )
    return _refill[0](count)
