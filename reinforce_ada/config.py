"""Settings of the Reinforce-Ada sampler: what to draw, when to stop, what to keep.

Pure Python: no verl, Ray or vLLM. The verl glue builds a :class:`SamplerConfig` from the
``reinforce_ada`` section of the Hydra config; the replay tool builds one from JSON. Both
report errors with the field's name, so every message says which key to change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping

VARIANTS = ("balance", "pos")
UNRESOLVED_POLICIES = ("keep", "drop")
SELECTIONS = ("first", "random")
PROMPT_WEIGHTS = ("none", "inverse", "inverse_sqrt")
MODES = ("rounds", "async")


class ConfigError(ValueError):
    """An invalid setting. The message names the field and what is allowed."""


@dataclass(frozen=True)
class SamplerConfig:
    """Reinforce-Ada-Seq settings (SPEC.md section 2; reference defaults).

    Attributes:
        n: Group size kept per prompt for the update (verl's ``rollout.n``).
        round_size: Samples drawn per active prompt in each round (M).
        max_rounds: Rounds at most (R).
        variant: Exit rule. ``"balance"``: stop once the prompt has ``k_pos`` correct and
            ``k_neg`` incorrect samples. ``"pos"``: stop once it has ``k_pos`` correct.
        threshold: A sample is correct iff its reward is strictly greater than this.
        k_pos: Correct samples the exit rule needs. None means 1 for ``pos`` and ``n // 2``
            for ``balance``.
        k_neg: Incorrect samples the ``balance`` rule needs. None means ``n - n // 2``.
            Must stay None for ``pos``.
        max_samples_per_prompt: Hard cap on samples drawn per prompt per step; the last
            round is shortened to respect it. None means ``round_size * max_rounds``.
        unresolved: What to do with a prompt whose rule never held: ``"keep"`` n of its
            samples (the reference) or ``"drop"`` it from the update batch.
        selection: Which samples form the group: ``"first"`` generated on each side (the
            reference) or a seeded ``"random"`` choice.
        seed: Seed of the ``random`` selection.
        prompt_weight: Multiplies each prompt's advantages by w(p), p the pool's mean
            reward: ``"none"`` (1), ``"inverse"`` (1 / max(p, eps)) or ``"inverse_sqrt"``
            (1 / sqrt(max(p, eps))), the v3 paper's log-objective correction.
        prompt_weight_eps: The eps of ``prompt_weight``.
        mode: How requests are scheduled; the decisions are the same in both. ``"rounds"``:
            synchronous rounds, each waiting for all of its samples (the reference).
            ``"async"``: no round barrier, a prompt's next ``round_size`` samples are
            requested as soon as its previous ones are scored.
    """

    n: int = 4
    round_size: int = 8
    max_rounds: int = 4
    variant: str = "balance"
    threshold: float = 0.7
    k_pos: int | None = None
    k_neg: int | None = None
    max_samples_per_prompt: int | None = None
    unresolved: str = "keep"
    selection: str = "first"
    seed: int = 0
    prompt_weight: str = "none"
    prompt_weight_eps: float = 0.01
    mode: str = "rounds"

    def __post_init__(self) -> None:
        _check_int(self, "n", minimum=1)
        _check_int(self, "round_size", minimum=1)
        _check_int(self, "max_rounds", minimum=1)
        _check_choice(self, "variant", VARIANTS)
        _check_choice(self, "unresolved", UNRESOLVED_POLICIES)
        _check_choice(self, "selection", SELECTIONS)
        _check_choice(self, "prompt_weight", PROMPT_WEIGHTS)
        _check_choice(self, "mode", MODES)
        _check_int(self, "seed", minimum=None)
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)):
            raise ConfigError(f"threshold: must be a number, got {self.threshold!r}")
        if not math.isfinite(self.threshold):
            raise ConfigError(f"threshold: must be finite, got {self.threshold!r}")
        if not isinstance(self.prompt_weight_eps, (int, float)) or not self.prompt_weight_eps > 0:
            raise ConfigError(f"prompt_weight_eps: must be > 0, got {self.prompt_weight_eps!r}")
        if self.k_pos is not None:
            _check_int(self, "k_pos", minimum=0)
        if self.k_neg is not None:
            if self.variant == "pos":
                raise ConfigError("k_neg: only the 'balance' variant counts incorrect samples; leave it unset (null) for 'pos'")
            _check_int(self, "k_neg", minimum=0)
        if self.max_samples_per_prompt is not None:
            _check_int(self, "max_samples_per_prompt", minimum=1)
        if self.n > self.budget:
            raise ConfigError(
                f"n: the group size ({self.n}) exceeds the samples a prompt may draw "
                f"(N_max = {self.budget} = min(round_size * max_rounds, max_samples_per_prompt)); "
                "lower n or raise round_size / max_rounds / max_samples_per_prompt"
            )
        if self.positives_needed + self.negatives_needed > self.budget:
            raise ConfigError(
                f"k_pos/k_neg: the exit rule needs {self.positives_needed + self.negatives_needed} samples "
                f"but a prompt may draw at most {self.budget}; lower k_pos/k_neg or raise the budget"
            )

    @property
    def budget(self) -> int:
        """N_max: the most samples one prompt may draw in one step."""
        by_rounds = self.round_size * self.max_rounds
        if self.max_samples_per_prompt is None:
            return by_rounds
        return min(by_rounds, self.max_samples_per_prompt)

    @property
    def positives_needed(self) -> int:
        """K_pos: correct samples the exit rule asks for."""
        if self.k_pos is not None:
            return self.k_pos
        return 1 if self.variant == "pos" else self.n // 2

    @property
    def negatives_needed(self) -> int:
        """K_neg: incorrect samples the exit rule asks for (0 for ``pos``)."""
        if self.variant == "pos":
            return 0
        return self.k_neg if self.k_neg is not None else self.n - self.n // 2

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, prefix: str = "") -> "SamplerConfig":
        """Builds a config from a dict, rejecting unknown keys.

        Args:
            values: Field name to value; missing fields keep their defaults.
            prefix: Prepended to field names in error messages (e.g. ``"reinforce_ada."``).
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"{prefix}{unknown[0]}: unknown setting; allowed: {', '.join(sorted(known))}")
        try:
            return cls(**dict(values))
        except ConfigError as err:
            raise ConfigError(f"{prefix}{err}") from None


def _check_int(cfg: SamplerConfig, name: str, minimum: int | None) -> None:
    value = getattr(cfg, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name}: must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}: must be >= {minimum}, got {value}")


def _check_choice(cfg: SamplerConfig, name: str, allowed: tuple[str, ...]) -> None:
    value = getattr(cfg, name)
    if value not in allowed:
        raise ConfigError(f"{name}: must be one of {', '.join(repr(a) for a in allowed)}, got {value!r}")
