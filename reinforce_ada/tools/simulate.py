"""See what the Reinforce-Ada sampler would do, without a model.

Two sources of rewards:

* ``--replay FILE``: a JSON file listing, for each prompt, the rewards it would get in
  generation order (at least N_max = round_size * max_rounds of them)::

      {"variant": "balance", "n": 4, "round_size": 8, "max_rounds": 4, "threshold": 0.7,
       "unresolved": "keep", "selection": "first",
       "prompts": [{"id": "p0", "rewards": [0, 1, 0, ...]}, ...]}

  Any other sampler setting (``k_pos``, ``k_neg``, ``selection_seed``, ``max_samples_per_prompt``,
  ``prompt_weight``, ``prompt_weight_eps``) and ``norm_adv_by_std_in_grpo`` may be given too.
* ``--pass-rates 0.1,0.5,...`` or ``--beta A B --num-prompts K``: Bernoulli 1/0 rewards from
  those pass rates (or from pass rates drawn from Beta(A, B)), seeded by ``--seed``.

The simulation is one training step with an empty pass-rate tracker: ``variant=est``
allocates n samples to every prompt and ``warm_start`` changes nothing (the multi-step
benchmark, benchmarks/sampling_efficiency.py, shows what the tracker does over training).

Both print JSON: one record per prompt (samples drawn, rounds, correct/incorrect counts,
resolved, kept indices, baseline, advantages) and a summary. Bad input exits with status 2
and one line naming the field.

Examples:
    python -m reinforce_ada.tools.simulate --replay cases.json
    python -m reinforce_ada.tools.simulate --beta 0.5 2 --num-prompts 512 --seed 0 --summary-only
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

import torch

from reinforce_ada.core.advantage import outcome_advantages
from reinforce_ada.core.config import ConfigError, SamplerConfig
from reinforce_ada.core.groups import PromptGroup
from reinforce_ada.core.metrics import summarize
from reinforce_ada.core.sampler import PromptSampler
from reinforce_ada.core.step import run_step

RewardSource = Callable[[int, int], list[float]]
"""``(prompt, count) -> rewards`` of the prompt's next ``count`` samples."""


class InputError(ValueError):
    """Bad user input; the message starts with the offending field."""


def simulate(
    prompt_ids: Sequence[str], draw: RewardSource, config: SamplerConfig, norm_by_std: bool = False
) -> dict[str, Any]:
    """Runs the round loop, forms the groups and computes the advantages.

    Args:
        prompt_ids: One id per prompt (also the key of the seeded random selection).
        draw: Produces each prompt's next rewards.
        config: Sampler settings.
        norm_by_std: Divide advantages by the pool std (verl's ``norm_adv_by_std_in_grpo``).

    Returns:
        ``{"prompts": [...], "summary": {...}}`` as printed by the command.
    """
    step = run_step(prompt_ids, config, lambda requests: {p: draw(p, k) for p, k in requests.items()})
    records = [_record(pid, s, g, norm_by_std) for pid, s, g in zip(prompt_ids, step.samplers, step.groups)]
    summary = summarize(step.samplers, step.groups)
    if step.budget is not None:
        summary["budget_used_frac"] = step.budget.spent / step.budget.total
    return {"prompts": records, "summary": summary}


def _record(prompt_id: str, sampler: PromptSampler, group: PromptGroup, norm_by_std: bool) -> dict[str, Any]:
    kept = group.kept
    if kept:
        scores = torch.tensor([sampler.rewards[i] for i in kept], dtype=torch.float64)
        mask = torch.ones(len(kept), 1, dtype=torch.float64)
        advantages = outcome_advantages(scores, [group.stats] * len(kept), mask, norm_by_std)[:, 0].tolist()
    else:
        advantages = []
    return {
        "id": prompt_id,
        "samples_drawn": sampler.drawn,
        "rounds": sampler.rounds,
        "pos": sampler.num_pos,
        "neg": sampler.num_neg,
        "resolved": sampler.resolved,
        "budget_stopped": sampler.budget_stopped,
        "dropped": group.dropped,
        "kept": kept,
        "baseline": group.stats.mean,
        "advantages": advantages,
    }


def load_replay(path: str) -> tuple[SamplerConfig, list[str], list[list[float]], bool]:
    """Reads and validates a replay file. Raises InputError naming the bad field."""
    try:
        with open(path) as f:
            spec = json.load(f)
    except OSError as err:
        raise InputError(f"--replay: cannot read {path}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise InputError(f"--replay: {path} is not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(spec, dict):
        raise InputError("--replay: the file must hold a JSON object with 'prompts' and the sampler settings")
    if "prompts" not in spec:
        raise InputError("prompts: missing; give a list of {\"id\": ..., \"rewards\": [...]}")
    norm_by_std = spec.get("norm_adv_by_std_in_grpo", False)
    if not isinstance(norm_by_std, bool):
        raise InputError(f"norm_adv_by_std_in_grpo: must be true or false, got {norm_by_std!r}")
    settings = {k: v for k, v in spec.items() if k not in ("prompts", "norm_adv_by_std_in_grpo")}
    config = _config(settings)
    prompts = spec["prompts"]
    if not isinstance(prompts, list) or not prompts:
        raise InputError("prompts: must be a non-empty list of {\"id\": ..., \"rewards\": [...]}")
    ids, rewards = [], []
    for i, prompt in enumerate(prompts):
        where = f"prompts[{i}]"
        if not isinstance(prompt, dict):
            raise InputError(f"{where}: must be an object with 'id' and 'rewards'")
        pid = prompt.get("id", f"p{i}")
        if not isinstance(pid, (str, int)) or isinstance(pid, bool):
            raise InputError(f"{where}.id: must be a string, got {pid!r}")
        if str(pid) in ids:
            raise InputError(f"{where}.id: duplicate id {pid!r}; ids must be unique")
        values = prompt.get("rewards")
        if not isinstance(values, list):
            raise InputError(f"{where}.rewards: missing or not a list of numbers")
        for j, r in enumerate(values):
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r):
                raise InputError(f"{where}.rewards[{j}]: must be a finite number, got {r!r}")
        if len(values) < config.n_max:
            raise InputError(
                f"{where}.rewards: needs at least {config.n_max} rewards "
                f"(N_max = round_size * max_rounds), got {len(values)}"
            )
        ids.append(str(pid))
        rewards.append([float(r) for r in values])
    return config, ids, rewards, norm_by_std


def _config(settings: dict[str, Any]) -> SamplerConfig:
    try:
        return SamplerConfig.from_mapping(settings)
    except ConfigError as err:
        raise InputError(str(err)) from None


def _replay_source(rewards: list[list[float]]) -> RewardSource:
    drawn = [0] * len(rewards)

    def draw(prompt: int, count: int) -> list[float]:
        start = drawn[prompt]
        drawn[prompt] += count
        return rewards[prompt][start : start + count]

    return draw


def _bernoulli_source(pass_rates: Sequence[float], seed: int) -> RewardSource:
    rngs = [random.Random(f"{seed}:{i}") for i in range(len(pass_rates))]
    return lambda prompt, count: [float(rngs[prompt].random() < pass_rates[prompt]) for _ in range(count)]


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m reinforce_ada.tools.simulate",
        description="Run the Reinforce-Ada sampler on recorded or simulated rewards, without a model.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--replay", metavar="FILE", help="JSON file of settings and per-prompt reward sequences")
    source.add_argument("--pass-rates", metavar="P1,P2,...", help="comma-separated pass rates, one per prompt")
    source.add_argument("--beta", nargs=2, type=float, metavar=("A", "B"), help="draw pass rates from Beta(A, B)")
    parser.add_argument("--num-prompts", type=int, default=512, help="prompts drawn with --beta (default 512)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulated rewards and pass rates")
    parser.add_argument("--summary-only", action="store_true", help="print only the summary")
    parser.add_argument("--norm-adv-by-std", action="store_true", help="divide advantages by the pool std")
    defaults = SamplerConfig()
    for f in fields(SamplerConfig):
        if f.name == "selection_seed":  # --seed above seeds both the rewards and the random selection
            continue
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        kind = {"threshold": float, "prompt_weight_eps": float, "sample_budget": float}.get(
            f.name,
            (
                _flag
                if isinstance(default, bool)
                else float if isinstance(default, float) else str if isinstance(default, str) else int
            ),
        )
        parser.add_argument(
            flag,
            dest=f"cfg_{f.name}",
            type=kind,
            default=None,
            help=f"sampler setting (default {getattr(defaults, f.name)})",
        )
    return parser.parse_args(argv)


def _flag(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        overrides = {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg_") and v is not None}
        if args.replay:
            config, ids, rewards, norm_by_std = load_replay(args.replay)
            if overrides:
                raise InputError(
                    f"--{next(iter(overrides)).replace('_', '-')}: with --replay, put settings in the file"
                )
            draw = _replay_source(rewards)
        else:
            config, norm_by_std = _config({**overrides, "selection_seed": args.seed}), args.norm_adv_by_std
            pass_rates = _pass_rates(args)
            ids = [f"p{i}" for i in range(len(pass_rates))]
            draw = _bernoulli_source(pass_rates, args.seed)
        result = simulate(ids, draw, config, norm_by_std=norm_by_std)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not args.replay:
        result["summary"]["pass_rate_mean"] = sum(pass_rates) / len(pass_rates)
    print(json.dumps(result["summary"] if args.summary_only else result, indent=1))
    return 0


def _pass_rates(args: argparse.Namespace) -> list[float]:
    if args.pass_rates is not None:
        try:
            rates = [float(p) for p in args.pass_rates.split(",")]
        except ValueError:
            raise InputError(f"--pass-rates: must be comma-separated numbers, got {args.pass_rates!r}") from None
        bad = [p for p in rates if not 0.0 <= p <= 1.0]
        if bad:
            raise InputError(f"--pass-rates: each must lie in [0, 1], got {bad[0]}")
        return rates
    a, b = args.beta
    if not (a > 0 and b > 0):
        raise InputError(f"--beta: both parameters must be > 0, got {a} {b}")
    if args.num_prompts < 1:
        raise InputError(f"--num-prompts: must be >= 1, got {args.num_prompts}")
    rng = random.Random(args.seed)
    return [rng.betavariate(a, b) for _ in range(args.num_prompts)]


if __name__ == "__main__":
    sys.exit(main())
