"""Skipping prompts without signal in verl's V1 step, and taking the next prompts of the data in their place.

verl's V1 trainer fetches a step's prompts from its dataloader, registers each in TransferQueue as pending and
hands them to the rollout manager, whose replay buffer then waits for ``train_batch_size`` finished prompts. With
``reinforce_ada.skip`` the manager decides, before drawing anything, which prompts to skip
(:class:`reinforce_ada.core.skip.SkipRule`), removes them from TransferQueue (so the replay buffer does not wait
for them) and asks verl's own refill function (``refill_fn``, which the replay buffer hands over) for as many
new prompts. verl fetches those from the dataloader, where the data would have gone on anyway, and submits them
to the manager again; the manager collects them instead of sampling them at once, decides on them in turn, and
samples the whole batch in one rollout. So a step still trains on ``train_batch_size`` prompts, a skipped prompt
costs one dataloader fetch and no generation, and the dataloader's position, saved in verl's checkpoints,
says where the data stands.

After :data:`MAX_REFILLS` refills the rest of a batch is sampled whatever the rule says, so a step always ends
(at most 10 % of the prompts are skipped at the default cap: a refill finds mostly prompts to keep).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from verl.utils import tensordict_utils as tu

from reinforce_ada.core.messages import say
from reinforce_ada.core.sampler import PromptSampler
from reinforce_ada.core.skip import SkipDecision, SkipRule, skip_metrics
from reinforce_ada.integration import handover

MAX_REFILLS = 8


class PromptSkipper:
    """The skip rule at work in one V1 manager.

    Args:
        rule: The per-prompt streaks and decisions (saved in the checkpoints with the pass-rate tracker).
        forget: Removes prompts from TransferQueue by uid.
        keys_of: The prompt identities of a batch's rows.
    """

    def __init__(self, rule: SkipRule, forget: Callable[[list[str]], None], keys_of: Callable[[object], list[str]]):
        self.rule, self._forget, self._keys_of = rule, forget, keys_of
        self._arrivals: list | None = None  # batches verl submitted while a refill was under way
        self._decisions: list[SkipDecision] = []

    def collect(self, prompts) -> bool:
        """Takes a batch verl submitted in answer to a refill; False when no refill is under way."""
        if self._arrivals is None:
            return False
        self._arrivals.append(prompts)
        return True

    def select(self, prompts, step: int):
        """The prompts to sample this step: ``prompts`` less the skipped ones, topped up with refills.

        Returns:
            The batch to sample, as many rows as ``prompts``.
        """
        parts, self._decisions, batch = [], [], prompts
        for attempt in range(MAX_REFILLS + 1):
            keys = self._keys_of(batch)
            decisions = self.rule.decide(keys, step)
            if attempt == MAX_REFILLS:  # enough: sample the rest
                decisions = [SkipDecision(d.key, d.streak, d.probability, False) for d in decisions]
            self._decisions += decisions
            kept = [i for i, d in enumerate(decisions) if not d.skipped]
            skipped = [str(batch["uid"][i]) for i, d in enumerate(decisions) if d.skipped]
            if kept:
                parts.append(batch if not skipped else tu.index_select_tensor_dict(batch, kept))
            if not skipped:
                break
            self._forget(skipped)
            say(f"step {step}: skipped {len(skipped)} prompts whose recent pools had no signal; fetching "
                     f"{len(skipped)} more from the data")
            batch = self._refill(len(skipped))
        return parts[0] if len(parts) == 1 else tu.concat_tensordict(parts)

    def _refill(self, count: int):
        self._arrivals = []
        try:
            handover.refill(count)
            arrived = self._arrivals
        finally:
            self._arrivals = None
        if sum(len(b) for b in arrived) != count:
            raise RuntimeError(f"reinforce_ada: asked verl for {count} prompts to replace skipped ones, got "
                               f"{sum(len(b) for b in arrived)}")
        return arrived[0] if len(arrived) == 1 else tu.concat_tensordict(arrived)

    def observe(self, keys: Sequence[str], samplers: Sequence[PromptSampler]) -> dict[str, float]:
        """Learns from the sampled prompts' pools and returns the step's ``skip/`` metrics."""
        signal = {key: s.num_pos > 0 and s.num_neg > 0 for key, s in zip(keys, samplers)}
        self.rule.observe_many(signal.items())
        metrics = {f"skip/{k}": v for k, v in skip_metrics(self._decisions, signal).items()}
        self._decisions = []
        return metrics
