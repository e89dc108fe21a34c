"""A sample budget per step, and where it is spent.

With ``sample_budget = b`` a step of P prompts draws at most ``B = floor(b * P * n)`` samples, failed
ones included, whatever the data. Every prompt still ends with a full group of n or is handled as
unresolved (``unresolved``: keep or drop), as without a budget. The rule:

1. **First requests are small.** Each prompt first asks for n samples (the fewest that form a
   group), not ``round_size``: a first round of M for everyone would spend the budget on prompts
   that resolve anyway, which is GRPO with M samples and nothing left to adapt with. First requests
   from the tracker (warm start, Est) are kept if they fit; otherwise the largest are cut, never
   below n, until they do (:func:`fit_first_requests`).
2. **Later requests go where a gradient is likeliest.** Each round the unfinished prompts'
   requests are granted in order of :func:`priority` until the budget is spent; the last one granted
   may get fewer samples than it asked for, and a prompt granted nothing stops
   (``budget_stopped``) and is handled as unresolved. The order: redraws of failed samples first (a
   prompt needs n samples for a group); then prompts whose pool is still uniform (all correct or all
   incorrect, so no gradient yet), by the chance that the request draws the other kind; then prompts
   with a mixed pool that the exit rule still wants more of, by the chance that the request
   completes the rule. The chances are beta-binomial under a Beta(``tracker_prior_pos``,
   ``tracker_prior_neg``) prior updated with the prompt's pool, so a prompt with 0 of 12 correct
   comes after one with 0 of 4.
3. **Async mode** grants a request at once while the budget cannot run short (the unfinished
   prompts could not ask for more than is left); once it can, requests wait until nothing is in
   flight and are then granted together by the same order. The budget is never exceeded in either
   mode.

Pure Python: the samplers of :mod:`reinforce_ada.core.sampler` are all it reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from reinforce_ada.core.config import SamplerConfig
from reinforce_ada.core.sampler import PromptSampler


def step_budget(config: SamplerConfig, num_prompts: int) -> int | None:
    """B, the most samples the step may draw; None without a budget."""
    if config.sample_budget is None:
        return None
    return math.floor(config.sample_budget * num_prompts * config.n + 1e-9)


def fit_first_requests(firsts: Sequence[int], total: int, floor: int) -> list[int]:
    """First requests cut, the largest first and never below ``floor``, until they sum to at most ``total``.

    Raises:
        ValueError: If even ``floor`` each does not fit.
    """
    firsts = list(firsts)
    if floor * len(firsts) > total and sum(firsts) > total:
        raise ValueError(f"{len(firsts)} first requests of at least {floor} do not fit a budget of {total}")
    excess = sum(firsts) - total
    if excess <= 0:
        return firsts
    # water-filling: lower a common ceiling until the excess is gone
    low, high = floor, max(firsts)
    while low < high:
        ceiling = (low + high + 1) // 2
        if sum(min(f, ceiling) for f in firsts) <= total:
            low = ceiling
        else:
            high = ceiling - 1
    capped = [min(f, low) for f in firsts]
    spare = total - sum(capped)
    for i, f in enumerate(firsts):  # the ceiling's rounding: hand the rest out in prompt order
        if spare and f > low:
            capped[i] += 1
            spare -= 1
    return capped


def request_size(sampler: PromptSampler, left: int, uniform_prompts: int) -> int:
    """A request's size under a budget.

    The first request and redraws are what the sampler asks for, and so is a request of a prompt
    whose pool is mixed already. A prompt whose pool is still uniform gets its share of what is
    left, spread evenly over its remaining rounds: ceil(left / (uniform prompts x rounds left)),
    within N_max. Small requests first, larger ones as fewer prompts are left uniform: more
    samples of a uniform prompt pay less and less, so the budget is spread over many prompts.

    Args:
        left: Samples left in the step's budget.
        uniform_prompts: Unfinished prompts whose pools are uniform, this one included.
    """
    own = sampler.next_request()
    if sampler.rounds == 0 or sampler.redraw or not _uniform(sampler):
        return own
    rounds_left = max(1, sampler.config.max_rounds - sampler.rounds)
    share = math.ceil(left / (max(1, uniform_prompts) * rounds_left))
    return max(1, min(sampler.config.n_max - sampler.drawn, share))


def _uniform(sampler: PromptSampler) -> bool:
    return sampler.num_pos == 0 or sampler.num_neg == 0


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def _beta_binomial(k: int, m: int, a: float, b: float) -> float:
    """P(k correct of the next m) with a Beta(a, b) belief in the pass rate."""
    return math.exp(math.lgamma(m + 1) - math.lgamma(k + 1) - math.lgamma(m - k + 1)
                    + _log_beta(k + a, m - k + b) - _log_beta(a, b))


def priority(sampler: PromptSampler, count: int) -> tuple[int, float]:
    """How much a request of ``count`` samples is worth to this prompt; larger is granted first.

    Returns:
        ``(tier, chance)``: tier 2 for a redraw of failed samples, 1 for a uniform pool (chance:
        the request draws the other kind), 0 for a mixed pool (chance: it completes the exit rule).
    """
    if sampler.redraw:
        return 2, 1.0
    cfg = sampler.config
    a, b = cfg.tracker_prior_pos + sampler.num_pos, cfg.tracker_prior_neg + sampler.num_neg
    if _uniform(sampler):
        # the chance of drawing the kind the pool lacks (the prior alone for an empty pool)
        none_of_it = _beta_binomial(0 if sampler.num_pos == 0 else count, count, a, b)
        return 1, 1.0 - none_of_it
    need_pos = max(0, cfg.positives_needed - sampler.num_pos)
    need_neg = max(0, cfg.negatives_needed - sampler.num_neg)
    chance = sum(_beta_binomial(k, count, a, b) for k in range(need_pos, count - need_neg + 1))
    return 0, chance


class StepBudget:
    """The samples left to one step, granted by :func:`priority`.

    Attributes:
        total: B.
        spent: Samples granted so far (each is drawn: the rollout draws what it is asked for).
    """

    def __init__(self, total: int):
        self.total, self.spent = total, 0

    @property
    def left(self) -> int:
        return self.total - self.spent

    def grant(self, samplers: Sequence[PromptSampler], prompts: Iterable[int]) -> dict[int, int]:
        """Grants the next requests of ``prompts`` (unfinished ones) by priority until the budget is spent.

        Each request is :func:`request_size`, cut to what is left for the last one granted. A
        prompt whose pool is mixed already waits (is left out, not stopped) while the prompts whose
        pools are uniform could still use what is left; a prompt granted nothing when nothing is
        left is stopped (``budget_stopped``). Ties keep prompt order.

        Returns:
            ``{prompt: granted count}`` for the prompts granted something, in prompt order.
        """
        uniform_prompts = sum(1 for s in samplers if not s.finished and _uniform(s))
        wants = {p: request_size(samplers[p], self.left, uniform_prompts) for p in prompts}
        tiers = {p: priority(samplers[p], wants[p]) for p in wants}
        order = sorted(wants, key=lambda p: (tiers[p], -p), reverse=True)
        # what the prompts without a gradient yet could still ask for, this round and later
        reserve = sum(s.config.n_max - s.drawn for s in samplers if not s.finished and _uniform(s))
        granted: dict[int, int] = {}
        for prompt in order:
            sampler = samplers[prompt]
            if self.left <= 0:
                sampler.stop_for_budget()
                continue
            uniform = tiers[prompt][0] > 0
            if not uniform and reserve > 0 and self.left - reserve < wants[prompt]:
                continue  # waits: a uniform prompt may need the rest
            count = min(wants[prompt], self.left)
            if count != sampler.next_request():
                sampler.set_next_request(count)
            self.spent += count
            if uniform:
                reserve -= count
            granted[prompt] = count
        return dict(sorted(granted.items()))

    def uncontested(self, samplers: Sequence[PromptSampler], in_flight: Mapping[int, int]) -> bool:
        """True if the unfinished prompts could not ask for more than is left (``in_flight``:
        samples requested and not yet recorded, per prompt)."""
        could_want = sum(
            max(0, s.config.n_max - s.drawn - in_flight.get(p, 0)) + s.redraw
            for p, s in enumerate(samplers)
            if not s.finished
        )
        return could_want <= self.left
