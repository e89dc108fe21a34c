"""Per-prompt pass-rate tracker across training steps, and what it decides (docs/algorithm.md, Est).

Pure Python: no verl, Ray or torch. Reinforce-Ada-Est sizes each prompt's sampling from an
estimate of its pass rate carried over from earlier steps; warm-started Reinforce-Ada-Seq sizes
each prompt's first round from the same estimate.

The estimate ("Ada-EMA") is a decayed Beta posterior. Each time prompt x is sampled, with
``n_t`` samples of which ``k_t`` are correct:

    N_tot <- lambda * N_tot + n_t
    N_pos <- lambda * N_pos + k_t
    p_hat = (N_pos + alpha) / (N_tot + alpha + beta)

Defaults and why:

* ``lambda = 0.5`` (``tracker_decay``), applied per *visit* of the prompt, not per training
  step. A prompt is visited about once per epoch, so per-step decay would erase it between
  visits; per visit, the last visit weighs as much as all earlier ones together (memory of about
  two visits), since the policy moves a lot in an epoch.
* ``alpha = beta = 1`` (``tracker_prior_pos`` / ``tracker_prior_neg``): the uniform Beta(1, 1)
  prior (Laplace's rule). An unseen prompt gets p_hat = 0.5, the middle of the range, and a
  prompt seen with N samples stays in [1/(N+2), (N+1)/(N+2)], never 0 or 1, so
  ``1/sqrt(p_hat)`` stays bounded without relying on eps.

Prompt identity: verl's ``uid`` is random per step, so the tracker is keyed by
:func:`prompt_identity`, a hash of the data source and the prompt's chat messages; the same
question asked twice in a dataset shares one entry.

State: :meth:`PassRateTracker.state_dict` is plain JSON data (floats round-trip exactly through
JSON), saved in verl's checkpoint folder, so a resumed run allocates exactly as an uninterrupted
one (see :mod:`reinforce_ada.integration.checkpoint`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from reinforce_ada.core.config import SamplerConfig

STATE_VERSION = 1


class AllocationError(ValueError):
    """The step's sample budget cannot be split within the per-prompt bounds."""


def prompt_identity(raw_prompt: Any, data_source: Any = None) -> str:
    """A stable key for one dataset prompt, the same in every step and every run.

    Args:
        raw_prompt: The prompt as verl's dataset gives it (``raw_prompt``: a list of chat
            messages ``{"role", "content"}``), or a plain string; anything JSON can encode
            (numpy arrays and scalars are converted).
        data_source: The row's ``data_source``, so that equal text in two datasets stays apart.

    Returns:
        A 32-character hex digest.
    """
    payload = json.dumps([_plain(data_source), _plain(raw_prompt)], sort_keys=True, ensure_ascii=False)
    return hashlib.blake2b(payload.encode("utf-8"), digest_size=16).hexdigest()


def prompt_identities(raw_prompts: Sequence[Any], data_sources: Sequence[Any] | None = None) -> list[str]:
    """:func:`prompt_identity` of each prompt of a batch (``data_sources`` None: none given)."""
    sources = list(data_sources) if data_sources is not None else [None] * len(raw_prompts)
    return [prompt_identity(m, s) for m, s in zip(raw_prompts, sources)]


def _plain(value: Any) -> Any:
    """Turns numpy containers and scalars into lists and Python scalars, recursively."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class PassRateTracker:
    """Decayed Beta estimate of each prompt's pass rate, keyed by :func:`prompt_identity`.

    Args:
        decay: lambda in (0, 1]: the weight of a prompt's earlier evidence at each new visit.
        prior_pos: alpha > 0, pseudo-count of correct samples.
        prior_neg: beta > 0, pseudo-count of incorrect samples.
    """

    def __init__(self, decay: float = 0.5, prior_pos: float = 1.0, prior_neg: float = 1.0):
        if not 0 < decay <= 1:
            raise ValueError(f"decay must be in (0, 1], got {decay!r}")
        if not (prior_pos > 0 and prior_neg > 0):
            raise ValueError(f"prior counts must be > 0, got alpha={prior_pos!r}, beta={prior_neg!r}")
        self.decay = float(decay)
        self.prior_pos = float(prior_pos)
        self.prior_neg = float(prior_neg)
        self._counts: dict[str, tuple[float, float]] = {}  # key -> (N_tot, N_pos)

    def __len__(self) -> int:
        return len(self._counts)

    def __contains__(self, key: str) -> bool:
        return key in self._counts

    def counts(self, key: str) -> tuple[float, float]:
        """(N_tot, N_pos) of a prompt; (0, 0) if never seen."""
        return self._counts.get(key, (0.0, 0.0))

    def pass_rate(self, key: str) -> float:
        """p_hat of one prompt (the prior mean alpha / (alpha + beta) if never seen)."""
        total, positive = self.counts(key)
        return (positive + self.prior_pos) / (total + self.prior_pos + self.prior_neg)

    def pass_rates(self, keys: Sequence[str]) -> list[float]:
        """p_hat of each key, shape (len(keys),)."""
        return [self.pass_rate(k) for k in keys]

    def update(self, key: str, drawn: int, correct: int) -> None:
        """Adds one visit's outcome: ``drawn`` samples, ``correct`` of them correct."""
        if drawn < 0 or not 0 <= correct <= drawn:
            raise ValueError(f"need 0 <= correct <= drawn, got correct={correct}, drawn={drawn}")
        total, positive = self.counts(key)
        self._counts[key] = (self.decay * total + drawn, self.decay * positive + correct)

    def update_many(self, outcomes: Iterable[tuple[str, int, int]]) -> None:
        """:meth:`update` for each ``(key, drawn, correct)``, in order (a key may repeat)."""
        for key, drawn, correct in outcomes:
            self.update(key, drawn, correct)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume, as JSON-encodable data (str, float, dict, list)."""
        return {
            "version": STATE_VERSION,
            "decay": self.decay,
            "prior_pos": self.prior_pos,
            "prior_neg": self.prior_neg,
            "prompts": {k: [t, p] for k, (t, p) in sorted(self._counts.items())},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replaces the counts with those of :meth:`state_dict`.

        The decay and prior are this tracker's (the run's current settings); a saved state
        with other settings is still loaded, since its counts mean the same thing.

        Raises:
            ValueError: On a state of another format version or with malformed counts.
        """
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"tracker state version {state.get('version')!r}; this code reads {STATE_VERSION}")
        counts: dict[str, tuple[float, float]] = {}
        for key, pair in dict(state.get("prompts", {})).items():
            total, positive = (float(v) for v in pair)
            if not (math.isfinite(total) and 0 <= positive <= total):
                raise ValueError(f"tracker state: bad counts for prompt {key!r}: {pair!r}")
            counts[str(key)] = (total, positive)
        self._counts = counts

    def summary(self, keys: Sequence[str]) -> dict[str, float]:
        """Metrics of the step's prompts: p_hat mean/min/max, how many were seen before, tracker size."""
        rates = self.pass_rates(keys)
        return {
            "tracker/p_hat_mean": sum(rates) / len(rates) if rates else 0.0,
            "tracker/p_hat_min": min(rates, default=0.0),
            "tracker/p_hat_max": max(rates, default=0.0),
            "tracker/prompts_seen_before": float(sum(k in self._counts for k in keys)),
            "tracker/size": float(len(self._counts)),
        }


def allocate_samples(
    pass_rates: Sequence[float], total: int, min_samples: int, max_samples: int, eps: float = 0.01
) -> list[int]:
    """Reinforce-Ada-Est's allocation: N_x proportional to 1/sqrt(p_hat_x + eps), clipped, summing to ``total``.

    Finds the scale c with sum_x clip(c / sqrt(p_x + eps), N_min, N_max) = total (bisection;
    the sum is continuous and non-decreasing in c), then rounds to integers by largest
    remainder: every prompt gets the floor of its share and the leftover samples go to the
    largest fractional parts, ties to the earlier prompt. Deterministic for given inputs.

    Args:
        pass_rates: p_hat of each prompt, shape (B,).
        total: The step's sample budget (B * n for Est, the samples GRPO-n would draw).
        min_samples: N_min, the fewest samples any prompt gets.
        max_samples: N_max, the most samples any prompt gets.
        eps: Added to p_hat before the square root.

    Returns:
        Integer counts, shape (B,), each in [N_min, N_max], summing to exactly ``total``.

    Raises:
        AllocationError: If B * N_min > total or B * N_max < total, or the bounds are crossed.
    """
    count = len(pass_rates)
    if count == 0:
        if total:
            raise AllocationError(f"a budget of {total} samples but no prompts")
        return []
    if not 1 <= min_samples <= max_samples:
        raise AllocationError(f"need 1 <= N_min <= N_max, got N_min={min_samples}, N_max={max_samples}")
    if not count * min_samples <= total <= count * max_samples:
        raise AllocationError(
            f"{count} prompts cannot share {total} samples with {min_samples}..{max_samples} each "
            f"(feasible budgets: {count * min_samples}..{count * max_samples})"
        )
    weights = [1.0 / math.sqrt(max(p, 0.0) + eps) for p in pass_rates]

    def clipped(scale: float) -> list[float]:
        return [min(max(scale * w, min_samples), max_samples) for w in weights]

    low, high = 0.0, max_samples / min(weights)  # at `high` every prompt is at N_max
    for _ in range(200):
        mid = (low + high) / 2
        if mid in (low, high):
            break
        if math.fsum(clipped(mid)) < total:
            low = mid
        else:
            high = mid
    shares = clipped(high)
    counts = [min(int(math.floor(s)), max_samples) for s in shares]
    leftover = total - sum(counts)
    order = sorted(range(count), key=lambda i: (-(shares[i] - counts[i]), i))
    if leftover > 0:
        for i in [i for i in order if counts[i] < max_samples][:leftover]:
            counts[i] += 1
    elif leftover < 0:  # only from float round-off at the top of the bisection
        for i in [i for i in reversed(order) if counts[i] > min_samples][:-leftover]:
            counts[i] -= 1
    if sum(counts) != total:  # unreachable when feasible; kept as a guard for the invariant
        raise AllocationError(f"allocation summed to {sum(counts)}, not {total}")
    return counts


def warm_start_size(
    pass_rate: float, positives_needed: int, negatives_needed: int, min_size: int, max_size: int
) -> int:
    """First-round size for warm-started Seq: the expected samples to meet the exit rule.

    Drawing until K correct samples takes K / p samples on average (and K_neg / (1 - p) for
    K_neg incorrect ones), so the first round asks for max(K_pos / p, K_neg / (1 - p)),
    rounded up and clipped. It is the mean, not a high quantile: about half the prompts still
    need a second round, which keeps the first round from overspending on prompts whose pass
    rate rose since the estimate.

    Args:
        pass_rate: p_hat of the prompt, in (0, 1).
        positives_needed: K_pos of the exit rule.
        negatives_needed: K_neg of the exit rule (0 for ``pos``).
        min_size: Lower clip (n: a prompt cannot exit with fewer than n samples anyway).
        max_size: Upper clip (N_max, the per-prompt cap).
    """
    p = min(max(pass_rate, 1e-9), 1 - 1e-9)
    expected = max(positives_needed / p, negatives_needed / (1 - p) if negatives_needed else 0.0)
    return int(min(max(math.ceil(expected - 1e-9), min_size), max_size))


def make_tracker(config: SamplerConfig) -> PassRateTracker:
    """The tracker with the config's lambda, alpha and beta."""
    return PassRateTracker(config.tracker_decay, config.tracker_prior_pos, config.tracker_prior_neg)


def plan_first_requests(tracker: PassRateTracker, keys: Sequence[str], config: SamplerConfig) -> list[int] | None:
    """Each prompt's first request of the step, from the tracker; None where the tracker decides nothing.

    * ``variant="est"``: the whole step's allocation, :func:`allocate_samples` of a budget of
      ``len(keys) * n`` (what GRPO-n draws) in [``min_samples_per_prompt``, N_max], eps =
      ``prompt_weight_eps``. Est makes this one request per prompt and no other.
    * ``warm_start=True`` (Seq): :func:`warm_start_size` in [n, N_max] for prompts the tracker
      has seen, ``round_size`` for new ones (no estimate: the plain first round; n under a
      ``sample_budget``, whose first requests are n). Later rounds and the exit rule are unchanged.
      A step budget cuts these in :func:`reinforce_ada.core.step.run_step`, the one place it is cut.
    * otherwise None: every first round is ``round_size``.

    Args:
        tracker: Pass-rate estimates from earlier steps.
        keys: The step's prompts (:func:`prompt_identity`), shape (B,).
        config: The sampler settings.

    Returns:
        Sample counts, shape (B,), or None.
    """
    if config.variant == "est":
        return allocate_samples(
            tracker.pass_rates(keys), len(keys) * config.n, config.min_samples_per_prompt, config.n_max,
            config.prompt_weight_eps,
        )
    if config.warm_start:
        return [
            warm_start_size(
                tracker.pass_rate(k), config.positives_needed, config.negatives_needed, config.n, config.n_max
            )
            if k in tracker
            else (config.n if config.sample_budget is not None else min(config.round_size, config.n_max))
            for k in keys
        ]
    return None
