"""Skipping prompts that will give no signal: the rule, its per-prompt state, and what a step reports of it.

Pure Python: no verl, Ray or torch. A prompt whose pool was all correct or all wrong (no signal: every
advantage zero) at its last ``z`` visits in a row is skipped at its next visit with probability

    p_skip(z) = min(cap, 1 - (1 - growth) ** z)

so one uninformative visit gives ``growth``, each further one closes the remaining gap by the same factor,
and the probability never passes ``cap`` < 1: every prompt is still probed at least ``1 - cap`` of the
time, and a probed prompt whose pool has both outcomes again goes back to z = 0 (never skipped). A
skipped visit adds no evidence, so it leaves z as it was.

Decisions are a function of (seed, prompt, step) only: a hash, not a random stream, so a resumed run decides
exactly as an uninterrupted one, whatever order prompts arrive in. The state (each prompt's z) is plain
JSON data, saved with the pass-rate tracker in verl's checkpoints.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

STATE_VERSION = 1
MAX_REFILLS = 8  # then the rest of a batch is sampled whatever the rule says, so a step always ends


@dataclass(frozen=True)
class SkipDecision:
    """One prompt's decision at one visit.

    Attributes:
        key: The prompt's identity (:func:`reinforce_ada.core.tracker.prompt_identity`).
        streak: Its consecutive visits without signal before this one (z).
        probability: p_skip(z).
        skipped: Whether it is skipped at this visit.
    """

    key: str
    streak: int
    probability: float
    skipped: bool


class SkipRule:
    """Per-prompt streaks of visits without signal, and the skip decisions they lead to.

    Args:
        growth: In (0, 1]: the skip probability after one visit without signal; each further one closes the
            remaining gap to 1 by the same factor.
        cap: In [0, 1): the highest skip probability.
        seed: Seeds the decisions (with the prompt and the step).
    """

    def __init__(self, growth: float = 0.5, cap: float = 0.9, seed: int = 0):
        if not 0 < growth <= 1:
            raise ValueError(f"growth must be in (0, 1], got {growth!r}")
        if not 0 <= cap < 1:
            raise ValueError(f"cap must be in [0, 1), got {cap!r}")
        self.growth, self.cap, self.seed = float(growth), float(cap), int(seed)
        self._streaks: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._streaks)

    def streak(self, key: str) -> int:
        """Consecutive visits without signal (0 for a prompt never seen or last seen with signal)."""
        return self._streaks.get(key, 0)

    def probability(self, key: str) -> float:
        """p_skip of the prompt at its next visit."""
        z = self.streak(key)
        return 0.0 if z == 0 else min(self.cap, 1.0 - (1.0 - self.growth) ** z)

    def decide(self, keys: Sequence[str], step: int) -> list[SkipDecision]:
        """Each prompt's decision at this step (a prompt asked twice in one step gets the same one)."""
        decisions = []
        for key in keys:
            p = self.probability(key)
            decisions.append(SkipDecision(key, self.streak(key), p, p > 0 and _uniform(self.seed, key, step) < p))
        return decisions

    def observe(self, key: str, had_signal: bool) -> None:
        """Records a visit's outcome: a pool with both outcomes ends the streak, a uniform pool extends it."""
        if had_signal:
            self._streaks.pop(key, None)
        else:
            self._streaks[key] = self.streak(key) + 1

    def observe_many(self, outcomes: Iterable[tuple[str, bool]]) -> None:
        for key, had_signal in outcomes:
            self.observe(key, had_signal)

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON data: the settings and every streak."""
        return {"version": STATE_VERSION, "growth": self.growth, "cap": self.cap, "seed": self.seed,
                "streaks": dict(self._streaks)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores the streaks saved by :meth:`state_dict` (the settings stay this rule's own).

        Raises:
            ValueError: On another version or a malformed state.
        """
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"skip state version {state.get('version')!r}, expected {STATE_VERSION}")
        streaks = state.get("streaks")
        if not isinstance(streaks, Mapping) or not all(isinstance(v, int) and v > 0 for v in streaks.values()):
            raise ValueError("skip state: 'streaks' must map prompt keys to positive integers")
        self._streaks = {str(k): int(v) for k, v in streaks.items()}


def fill(rule: SkipRule, keys: Sequence[str], step: int,
         refill: Callable[[list[SkipDecision]], Sequence[str]]) -> list[SkipDecision]:
    """Decides on a batch and on the replacements of its skipped prompts, round after round.

    Args:
        rule: The skip rule.
        keys: The batch's prompt keys.
        step: The training step.
        refill: Given a round's skipped decisions, the keys of as many next prompts of the data.

    Returns:
        Every decision in the order made (the batch's, then each refill's); the prompts not skipped are the
        batch to sample, as many as ``keys``. After :data:`MAX_REFILLS` refills nothing more is skipped.
    """
    decisions: list[SkipDecision] = []
    for attempt in range(MAX_REFILLS + 1):
        made = rule.decide(keys, step)
        if attempt == MAX_REFILLS:
            made = [replace(d, skipped=False) for d in made]
        decisions += made
        skipped = [d for d in made if d.skipped]
        if not skipped:
            break
        keys = refill(skipped)
    return decisions


def skip_metrics(decisions: Sequence[SkipDecision], signal: Mapping[str, bool]) -> dict[str, float]:
    """What the rule did in one step.

    Args:
        decisions: Every decision of the step, the replacements' included.
        signal: Whether each prompt sampled this step had a pool with both outcomes, by key.

    Returns:
        ``skipped`` (prompts skipped), ``fetched`` (prompts considered, skipped ones included),
        ``candidates_probed`` (prompts sampled although p_skip > 0), ``probe_signal_frac`` (of those, the share
        whose pool had both outcomes: how often skipping them would have lost a group with signal; absent when
        none was probed) and ``skip_probability_mean`` (over the prompts considered).
    """
    probed = [d for d in decisions if d.probability > 0 and not d.skipped]
    metrics = {
        "skipped": float(sum(d.skipped for d in decisions)),
        "fetched": float(len(decisions)),
        "candidates_probed": float(len(probed)),
        "skip_probability_mean": sum(d.probability for d in decisions) / len(decisions) if decisions else 0.0,
    }
    if probed:
        metrics["probe_signal_frac"] = sum(bool(signal.get(d.key)) for d in probed) / len(probed)
    return metrics


def _uniform(seed: int, key: str, step: int) -> float:
    """A uniform draw in [0, 1) from (seed, prompt, step)."""
    digest = hashlib.blake2b(f"skip:{int(seed)}:{key}:{int(step)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
