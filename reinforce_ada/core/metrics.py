"""What the sampler did in one step, as flat scalar metrics.

The same summary is printed by the replay tool and logged by the verl rollout (there under
the ``reinforce_ada/`` prefix), so a user can compare a simulation with a real run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from reinforce_ada.core.groups import PromptGroup
from reinforce_ada.core.sampler import PromptSampler

_ZERO = 1e-12


def group_has_signal(sampler: PromptSampler, group: PromptGroup) -> bool:
    """True if some kept sample's reward differs from the pool baseline (non-zero advantage)."""
    return any(abs(sampler.rewards[i] - group.stats.mean) > _ZERO for i in group.kept) and group.stats.weight != 0


def summarize(samplers: Sequence[PromptSampler], groups: Sequence[PromptGroup]) -> dict[str, float]:
    """Step metrics: samples drawn, rounds, resolution and the make-up of the kept groups.

    Args:
        samplers: The finished samplers of the step's prompts.
        groups: Their groups, in the same order.
    """
    if len(samplers) != len(groups):
        raise ValueError(f"{len(samplers)} samplers but {len(groups)} groups")
    drawn = [s.drawn for s in samplers]
    kept_groups = [(s, g) for s, g in zip(samplers, groups) if not g.dropped]
    kept_pos = sum(1 for s, g in kept_groups for i in g.kept if s.rewards[i] > s.config.threshold)
    kept_total = sum(len(g.kept) for _, g in kept_groups)
    num_prompts = len(samplers)
    with_signal = sum(1 for s, g in kept_groups if group_has_signal(s, g))
    metrics = {
        "prompts": float(num_prompts),
        "samples_total": float(sum(drawn)),
        "samples_per_prompt_mean": sum(drawn) / num_prompts if num_prompts else 0.0,
        "samples_per_prompt_max": float(max(drawn, default=0)),
        # the mean over prompts of each pool's mean reward: the batch's pass rate, comparable to
        # GRPO's critic/score/mean (the kept groups' mean is pulled towards 0.5 by the balancing)
        "pass_rate_mean": (
            sum(sum(s.rewards) / s.drawn for s in samplers if s.drawn) / num_prompts if num_prompts else 0.0
        ),
        # the most requests one prompt made (redraws of failed samples included); a step in rounds
        # mode reports its round count instead (reinforce_ada.core.step.StepResult.metrics)
        "rounds": float(max((s.requests for s in samplers), default=0)),
        "prompts_resolved": float(sum(s.resolved for s in samplers)),
        "prompts_unresolved": float(sum(not s.resolved for s in samplers)),
        "prompts_dropped": float(sum(g.dropped for g in groups)),
        "prompts_no_positive": float(sum(s.num_pos == 0 for s in samplers)),
        # a sample whose generation or reward call failed, redraws included; a prompt whose
        # redraw failed too (it stopped sampling; see reinforce_ada.core.sampler)
        "samples_failed": float(sum(s.samples_failed for s in samplers)),
        "prompts_failed": float(sum(s.failed for s in samplers)),
        # stopped unresolved because the step's sample budget was spent (reinforce_ada.core.budget)
        "prompts_budget_stopped": float(sum(s.budget_stopped for s in samplers)),
        "kept_samples": float(kept_total),
        "kept_positives": float(kept_pos),
        "kept_negatives": float(kept_total - kept_pos),
        "kept_groups_with_signal_frac": with_signal / len(kept_groups) if kept_groups else 0.0,
    }
    corrected = [g.stats.strata.of(s.rewards[i]) for s, g in kept_groups if g.stats.strata for i in g.kept]
    if corrected:  # downsample_correction=stratified: the spread of the weights it put on the kept samples
        metrics["stratified_weight_min"], metrics["stratified_weight_max"] = min(corrected), max(corrected)
    return metrics


class CriticalPath:
    """The step's generation latency in tokens, which holds on any machine: on a GPU a batch of requests lasts
    about as long as its longest response.

    In ``rounds`` mode every round waits for its longest response: the path is the sum over rounds of each
    round's longest. In ``async`` mode a prompt's requests follow one another and prompts run side by side: the
    path is the longest chain, over prompts, of the sum of each request's longest response.
    """

    def __init__(self):
        self.rounds = 0
        self.chains: dict[int, int] = defaultdict(int)

    def add_round(self, lengths: Sequence[int]) -> None:
        self.rounds += max(lengths, default=0)

    def add_request(self, prompt: int, lengths: Sequence[int]) -> None:
        self.chains[prompt] += max(lengths, default=0)

    def metrics(self) -> dict[str, float]:
        """``critical_path_tokens``."""
        return {"critical_path_tokens": float(max(self.rounds, max(self.chains.values(), default=0)))}
