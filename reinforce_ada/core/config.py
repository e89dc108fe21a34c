"""Settings of the ``reinforce_ada`` section: the sampler's (what to draw, when to stop, what to keep) and the run's.

Pure Python: no verl, Ray or vLLM. The verl glue builds a :class:`SamplerConfig` from the
``reinforce_ada`` section of the Hydra config; the replay tool builds one from JSON. The keys read
without the sampler's settings (by the platform before Ray starts, by every rollout worker) go
through :class:`RunConfig`. Errors carry the field's name, so every message says which key to change.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, fields
from typing import Any

SECTION = "reinforce_ada"
VARIANTS = ("balance", "pos", "est")
UNRESOLVED_POLICIES = ("keep", "drop")
SELECTIONS = ("first", "random")
PROMPT_WEIGHTS = ("auto", "none", "inverse", "inverse_sqrt")
CORRECTIONS = ("none", "stratified")
MODES = ("rounds", "async")
LOOPBACK_MODES = ("auto", "off")
# Former key names, still accepted (:func:`rename_former_keys`): `seed` said nothing of what it seeds, next to
# `sampling_seed`.
RENAMED_KEYS = {"seed": "selection_seed"}


class ConfigError(ValueError):
    """An invalid setting. The message names the field and what is allowed."""


@dataclass(frozen=True)
class SamplerConfig:
    """Reinforce-Ada settings: Seq (reference defaults) and Est; docs/algorithm.md explains each.

    The fields are grouped by what they control, in the order of the YAML section and of
    docs/configuration.md.

    Attributes:
        n: Group size kept per prompt for the update (verl's ``rollout.n``).
        variant: Exit rule. ``"balance"``: stop once the prompt has ``k_pos`` correct and
            ``k_neg`` incorrect samples. ``"pos"``: stop once it has ``k_pos`` correct.
            ``"est"`` (Reinforce-Ada-Est): no exit rule and no rounds; each prompt gets one
            request of N_x samples allocated from the pass-rate tracker (N_x ~ 1/sqrt(p_hat),
            in [``min_samples_per_prompt``, N_max], summing to n per prompt over the batch),
            and every sample is trained on.
        round_size: Samples drawn per active prompt in each round (M).
        max_rounds: Rounds at most (R).
        max_samples_per_prompt: Hard cap on samples drawn per prompt per step; the last
            round is shortened to respect it. None means ``round_size * max_rounds``.
        threshold: A sample is correct iff its reward is strictly greater than this.
        k_pos: Correct samples the exit rule needs. None means 1 for ``pos`` and ``n // 2``
            for ``balance``.
        k_neg: Incorrect samples the ``balance`` rule needs. None means ``n - n // 2``.
            Must stay None for ``pos``.
        unresolved: What to do with a prompt whose rule never held: ``"keep"`` n of its
            samples (the reference) or ``"drop"`` it from the update batch.
        selection: Which samples form the group: ``"first"`` generated on each side (the
            reference) or a seeded ``"random"`` choice.
        selection_seed: Seed of the ``random`` selection (formerly ``seed``).
        prompt_weight: Multiplies each prompt's advantages by w(p), p the pool's mean
            reward: ``"none"`` (1), ``"inverse"`` (1 / max(p, eps)) or ``"inverse_sqrt"``
            (1 / sqrt(max(p, eps))), the v3 paper's log-objective correction. ``"auto"``: the
            variant's own, ``"inverse_sqrt"`` for ``est`` (Est's explicit weight) and
            ``"none"`` for ``balance``/``pos``; see :attr:`weight_rule`.
        downsample_correction: ``"none"`` (the reference) or ``"stratified"``: each kept sample's
            advantage is multiplied by its outcome's share in the pool over its share in the group, so that
            the group's expected update is the whole pool's (see :func:`reinforce_ada.core.groups.stratum_weights`).
            No effect on ``est``, which keeps every sample.
        prompt_weight_eps: The eps of ``prompt_weight``, also Est's allocation eps
            (N_x ~ 1/sqrt(p_hat + eps)).
        min_samples_per_prompt: Est's N_min, at most n (the mean). 2 by default: the fewest
            that can hold a correct and an incorrect sample.
        warm_start: Seq only: size each prompt's first request from the pass-rate tracker,
            max(k_pos / p_hat, k_neg / (1 - p_hat)) in [n, N_max], for prompts seen in
            earlier steps; later rounds and the exit rule are unchanged.
        tracker_decay: lambda of the pass-rate tracker, applied at each visit of a prompt.
        tracker_prior_pos: alpha, the tracker's prior count of correct samples.
        tracker_prior_neg: beta, the tracker's prior count of incorrect samples.
        mode: How requests are scheduled; the decisions are the same in both. ``"rounds"``:
            synchronous rounds, each waiting for all of its samples (the reference).
            ``"async"``: no round barrier, a prompt's next ``round_size`` samples are
            requested as soon as its previous ones are scored.
        sample_budget: None (no budget) or the most samples one step may draw, failed ones
            included, as a multiple b >= 1 of the batch's ``n`` per prompt: at most
            floor(b * prompts * n). First requests shrink to n and later ones go to the prompts
            likeliest to gain a gradient (:mod:`reinforce_ada.core.budget`).
        sampling_seed: None (vLLM's own randomness, as verl leaves it) or the run seed from
            which every training sample's vLLM seed is derived
            (:func:`reinforce_ada.core.seeding.sample_seed`), for reproducible rollouts.
        skip: Skip prompts whose recent pools had no signal (all correct or all wrong), with a
            probability that grows with each such visit, and sample the next prompts of the data
            in their place (V1 trainer; :mod:`reinforce_ada.core.skip`).
        skip_growth: The skip probability after one visit without signal; each further one
            closes the gap to 1 by the same factor.
        skip_cap: The highest skip probability, below 1, so that every prompt is still probed.
    """

    n: int = 4
    # Exit rule: what to draw and when to stop
    variant: str = "balance"
    round_size: int = 8
    max_rounds: int = 4
    max_samples_per_prompt: int | None = None
    threshold: float = 0.7
    k_pos: int | None = None
    k_neg: int | None = None
    # Groups and advantage: what is trained on
    unresolved: str = "keep"
    selection: str = "first"
    selection_seed: int = 0
    prompt_weight: str = "auto"
    prompt_weight_eps: float = 0.01
    downsample_correction: str = "none"
    # Est and the pass-rate tracker
    min_samples_per_prompt: int = 2
    warm_start: bool = False
    tracker_decay: float = 0.5
    tracker_prior_pos: float = 1.0
    tracker_prior_neg: float = 1.0
    # Scheduling
    mode: str = "rounds"
    # Step budget
    sample_budget: float | None = None
    # Reproducibility
    sampling_seed: int | None = None
    # Skipping prompts without signal
    skip: bool = False
    skip_growth: float = 0.5
    skip_cap: float = 0.9

    def __post_init__(self) -> None:
        _check_int(self, "n", minimum=1)
        _check_int(self, "round_size", minimum=1)
        _check_int(self, "max_rounds", minimum=1)
        _check_choice(self, "variant", VARIANTS)
        _check_choice(self, "unresolved", UNRESOLVED_POLICIES)
        _check_choice(self, "selection", SELECTIONS)
        _check_choice(self, "prompt_weight", PROMPT_WEIGHTS)
        _check_choice(self, "mode", MODES)
        _check_choice(self, "downsample_correction", CORRECTIONS)
        _check_int(self, "selection_seed", minimum=None)
        if self.sampling_seed is not None:
            _check_int(self, "sampling_seed", minimum=0)
        if self.sample_budget is not None:
            _check_number(self, "sample_budget", low=1.0)
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)):
            raise ConfigError(f"threshold: must be a number, got {self.threshold!r}")
        if not math.isfinite(self.threshold):
            raise ConfigError(f"threshold: must be finite, got {self.threshold!r}")
        if not isinstance(self.prompt_weight_eps, (int, float)) or not self.prompt_weight_eps > 0:
            raise ConfigError(f"prompt_weight_eps: must be > 0, got {self.prompt_weight_eps!r}")
        if self.k_pos is not None:
            _check_int(self, "k_pos", minimum=0)
        _check_int(self, "min_samples_per_prompt", minimum=1)
        if not isinstance(self.warm_start, bool):
            raise ConfigError(f"warm_start: must be true or false, got {self.warm_start!r}")
        if not isinstance(self.skip, bool):
            raise ConfigError(f"skip: must be true or false, got {self.skip!r}")
        _check_number(self, "skip_growth", low=0.0, high=1.0, low_open=True)
        _check_number(self, "skip_cap", low=0.0, high=1.0)
        if self.skip_cap >= 1:
            raise ConfigError(f"skip_cap: must be below 1 (a prompt skipped for good is never probed again), got "
                              f"{self.skip_cap!r}")
        _check_number(self, "tracker_decay", low=0.0, high=1.0, low_open=True)
        _check_number(self, "tracker_prior_pos", low=0.0, low_open=True)
        _check_number(self, "tracker_prior_neg", low=0.0, low_open=True)
        if self.variant == "est":
            self._check_est()
        if self.k_neg is not None:
            if self.variant == "pos":
                raise ConfigError(
                    "k_neg: only the 'balance' variant counts incorrect samples; leave it unset (null) for 'pos'"
                )
            _check_int(self, "k_neg", minimum=0)
        if self.max_samples_per_prompt is not None:
            _check_int(self, "max_samples_per_prompt", minimum=1)
        if self.n > self.n_max:
            raise ConfigError(
                f"n: the group size ({self.n}) exceeds the samples a prompt may draw "
                f"(N_max = {self.n_max} = min(round_size * max_rounds, max_samples_per_prompt)); "
                "lower n or raise round_size / max_rounds / max_samples_per_prompt"
            )
        if self.downsample_correction == "stratified" and self.n < 2 and self.variant != "est":
            raise ConfigError(
                "downsample_correction: 'stratified' needs a group of n >= 2 (a group of one cannot hold both "
                f"outcomes), got n={self.n}; raise actor_rollout_ref.rollout.n or use 'none'"
            )
        if self.positives_needed + self.negatives_needed > self.n_max:
            raise ConfigError(
                f"k_pos/k_neg: the exit rule needs {self.positives_needed + self.negatives_needed} samples "
                f"but a prompt may draw at most {self.n_max}; lower k_pos/k_neg or raise the budget"
            )

    def _check_est(self) -> None:
        if self.warm_start:
            raise ConfigError("warm_start: 'est' always allocates from the tracker; warm start is for 'balance'/'pos'")
        if self.unresolved != "keep":
            raise ConfigError("unresolved: 'est' has no exit rule and trains on every sample; leave it 'keep'")
        for name in ("k_pos", "k_neg"):
            if getattr(self, name) is not None:
                raise ConfigError(f"{name}: 'est' has no exit rule; leave it unset (null)")
        if self.min_samples_per_prompt > self.n:
            raise ConfigError(
                f"min_samples_per_prompt: Est's N_min ({self.min_samples_per_prompt}) exceeds n ({self.n}), the mean "
                "samples per prompt of the step's budget; lower it (below n, or allocation cannot vary)"
            )

    @property
    def weight_rule(self) -> str:
        """``prompt_weight`` with ``"auto"`` resolved for the variant."""
        if self.prompt_weight != "auto":
            return self.prompt_weight
        return "inverse_sqrt" if self.variant == "est" else "none"

    @property
    def uses_tracker(self) -> bool:
        """True when the pass-rate tracker decides something (Est's allocation or warm start)."""
        return self.variant == "est" or self.warm_start

    @property
    def keys_prompts(self) -> bool:
        """True when something needs each prompt's identity across steps: the tracker, seeds or the skip rule."""
        return self.uses_tracker or self.sampling_seed is not None or self.skip

    @property
    def n_max(self) -> int:
        """N_max, the per-prompt cap: the most samples one prompt may draw in one step (not the step budget,
        ``sample_budget``, which caps the whole batch)."""
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
    def from_mapping(cls, values: Mapping[str, Any], *, prefix: str = "") -> SamplerConfig:
        """Builds a config from a dict, rejecting unknown keys; a former key name is accepted, with a printed note.

        Args:
            values: Field name to value; missing fields keep their defaults.
            prefix: Prepended to field names in error messages (e.g. ``"reinforce_ada."``).
        """
        values = dict(values)
        for note in rename_former_keys(values, prefix):
            print(f"[reinforce_ada] {note}", file=sys.stderr)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"{prefix}{unknown[0]}: unknown setting; allowed: {', '.join(sorted(known))}")
        try:
            return cls(**dict(values))
        except ConfigError as err:
            raise ConfigError(f"{prefix}{err}") from None


@dataclass(frozen=True)
class RunConfig:
    """The keys of the ``reinforce_ada`` section that are read on their own, without the sampler's settings: by the
    glue before it builds those, by the platform before Ray starts (CPU settings, loopback) and by each rollout
    worker (the seeds). :meth:`from_config` is the one way they are read, so each is checked, with its key named,
    wherever it is read; the glue reads them first, on the driver, before Ray starts.

    ``sampling_seed`` is a :class:`SamplerConfig` field too, where the managers read it; it is checked alike.
    """

    enable: bool = True
    loopback: str = "auto"
    sampling_seed: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.enable, bool):
            raise ConfigError(f"enable: must be true or false, got {self.enable!r}")
        _check_choice(self, "loopback", LOOPBACK_MODES)
        if self.sampling_seed is not None:
            _check_int(self, "sampling_seed", minimum=0)

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> RunConfig:
        """The run settings of a whole config (a verl ``DictConfig`` or any mapping) that may hold the section.

        A config without the section, or a section without ``enable`` (one not from the config group: verl's own
        config with ``+reinforce_ada.*`` keys), leaves the adaptive rollout off.

        Raises:
            ConfigError: On a bad value, naming ``reinforce_ada.<key>``.
        """
        section = (config or {}).get(SECTION) or {}
        values = {f.name: section[f.name] for f in fields(cls) if f.name in section}
        values.setdefault("enable", False)
        try:
            return cls(**values)
        except ConfigError as err:
            raise ConfigError(f"{SECTION}.{err}") from None


def rename_former_keys(values: MutableMapping[str, Any], prefix: str = "") -> list[str]:
    """Moves each value set under a former key name (:data:`RENAMED_KEYS`) to its current name, in place.

    A former key left unset (None, as the YAML declares it) is only removed. The current key counts as set when it
    differs from its default: the YAML always holds it, so a value equal to the default cannot be told from none.

    Args:
        values: Key to value, e.g. the ``reinforce_ada`` section (a mutable one: a verl config under ``open_dict``).
        prefix: Prepended to key names in messages (e.g. ``"reinforce_ada."``).

    Returns:
        One note per value moved, naming the current key.

    Raises:
        ConfigError: If both names are set, to different values.
    """
    defaults = {f.name: f.default for f in fields(SamplerConfig)}
    notes = []
    for former, current in RENAMED_KEYS.items():
        if former not in values:
            continue
        value = values[former]
        del values[former]
        if value is None:
            continue
        given = values.get(current, defaults[current])
        if given != defaults[current] and given != value:
            raise ConfigError(
                f"{prefix}{former}: the former name of {prefix}{current}, but the two are set to different values "
                f"({value!r} and {given!r}); set {prefix}{current} only"
            )
        values[current] = value
        notes.append(f"{prefix}{former} is now called {prefix}{current}; using {prefix}{current}={value!r}")
    return notes


def _check_int(cfg: object, name: str, minimum: int | None) -> None:
    value = getattr(cfg, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name}: must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}: must be >= {minimum}, got {value}")


def _check_number(
    cfg: SamplerConfig, name: str, low: float, high: float | None = None, low_open: bool = False
) -> None:
    value = getattr(cfg, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name}: must be a finite number, got {value!r}")
    if value < low or (low_open and value == low) or (high is not None and value > high):
        interval = (
            f"{'(' if low_open else '['}{low}, {high if high is not None else 'inf'}"
            f"{']' if high is not None else ')'}"
        )
        raise ConfigError(f"{name}: must be in {interval}, got {value!r}")


def _check_choice(cfg: object, name: str, allowed: tuple[str, ...]) -> None:
    value = getattr(cfg, name)
    if value not in allowed:
        raise ConfigError(f"{name}: must be one of {', '.join(repr(a) for a in allowed)}, got {value!r}")
