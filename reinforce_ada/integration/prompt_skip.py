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

After :data:`reinforce_ada.core.skip.MAX_REFILLS` refills the rest of a batch is sampled whatever the rule says, so
a step always ends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from verl.utils import tensordict_utils as tu

from reinforce_ada.core.messages import say
from reinforce_ada.core.sampler import PromptSampler
from reinforce_ada.core.skip import SkipDecision, SkipRule, fill, skip_metrics
from reinforce_ada.integration import handover


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
        batches = [prompts]

        def refill(skipped: list[SkipDecision]) -> list[str]:
            say(f"step {step}: skipped {len(skipped)} prompts whose recent pools had no signal; fetching "
                f"{len(skipped)} more from the data")
            batches.append(self._refill(len(skipped)))
            return self._keys_of(batches[-1])

        self._decisions = fill(self.rule, self._keys_of(prompts), step, refill)
        everything = prompts if len(batches) == 1 else tu.concat_tensordict(batches)
        uids = [str(u) for u in everything["uid"]]
        skipped = [uids[i] for i, d in enumerate(self._decisions) if d.skipped]
        if not skipped:
            return prompts
        self._forget(skipped)
        return tu.index_select_tensor_dict(everything, [i for i, d in enumerate(self._decisions) if not d.skipped])

    def _refill(self, count: int):
        """verl's refill of ``count`` prompts, which it submits to the manager, who hands them back here."""
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
