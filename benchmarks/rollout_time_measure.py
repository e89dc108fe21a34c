"""The rollout-time harness's measurement: :class:`EngineRollout` drives one vLLM engine request by request, and
:func:`time_methods` times one step's rollout of GRPO-n4 and of each Reinforce-Ada setting, in rounds and async,
on the same sample seeds, in an order that changes from repeat to repeat; the settings come from the flags."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

POOL_STRIDE = 1000  # seed spacing between prompts: more than any pool's size


class EngineRollout:
    """An :class:`~reinforce_ada.core.schedules.AsyncRollout` on one vLLM ``LLMEngine``, request by request.

    Args:
        engine: The engine (``LLM.llm_engine``): ``add_request(id, prompt, params)`` and ``step()``.
        prompts: Prompt texts, indexed by prompt.
        score: ``(prompt index, response text) -> reward``.
        make_params: ``(count, seed) -> SamplingParams`` of a request of ``count`` samples, the
            i-th of which is seeded ``seed + i`` (vLLM's rule for ``n`` > 1).
        seed: Seed of this run; a sample's seed is ``seed + prompt * POOL_STRIDE + pool index``.
    """

    def __init__(
        self,
        engine: Any,
        prompts: Sequence[str],
        score: Callable[[int, str], float],
        make_params: Callable[[int, int], Any],
        seed: int,
    ):
        self.engine, self.prompts, self.score, self.make_params, self.seed = engine, prompts, score, make_params, seed
        self.drawn = [0] * len(prompts)
        self.pending: dict[str, int] = {}  # request id -> prompt
        self.tokens = 0
        self.steps = 0  # engine steps: the barrier can only save time by saving steps

    def submit(self, prompt: int, count: int) -> None:
        first = self.drawn[prompt]
        request_id = f"{self.seed}-{prompt}-{first}"
        params = self.make_params(count, self.seed + prompt * POOL_STRIDE + first)
        self.engine.add_request(request_id, self.prompts[prompt], params)
        self.pending[request_id] = prompt
        self.drawn[prompt] += count

    def wait(self) -> list[tuple[int, list[float]]]:
        if not self.pending:
            raise RuntimeError("wait() with no request in flight")
        finished = []
        while not finished:
            self.steps += 1
            finished = [output for output in self.engine.step() if output.finished]
        scored = []
        for output in finished:
            prompt = self.pending.pop(output.request_id)
            completions = sorted(output.outputs, key=lambda c: c.index)
            self.tokens += sum(len(c.token_ids) for c in completions)
            scored.append((prompt, [self.score(prompt, c.text) for c in completions]))
        return scored


def round_settings(
    variants: Sequence[str], round_size: int, max_rounds: int, round_sizes: Sequence[int] | None
) -> list[dict]:
    """The (M, R) settings to time, as :class:`SamplerConfig` fields, checked by it.

    Without ``round_sizes``: ``round_size`` and ``max_rounds`` as given. With them: each M at the
    budget N_max = ``round_size * max_rounds``, R = N_max / M rounded up (and the budget kept as
    ``max_samples_per_prompt`` where M does not divide it, the last round shortened).

    Raises:
        ConfigError: On a value :class:`SamplerConfig` rejects; the message names the field.
    """
    from reinforce_ada.core.config import SamplerConfig

    SamplerConfig(round_size=round_size, max_rounds=max_rounds)  # names the field of a bad flag
    if round_sizes is None:
        settings = [{"round_size": round_size, "max_rounds": max_rounds}]
    else:
        budget = round_size * max_rounds
        settings = []
        for size in round_sizes:
            SamplerConfig(round_size=size)
            rounds = -(-budget // size)
            setting = {"round_size": size, "max_rounds": rounds}
            if size * rounds != budget:
                setting["max_samples_per_prompt"] = budget
            if setting not in settings:
                settings.append(setting)
    for setting in settings:
        for variant in variants:
            SamplerConfig(variant=variant, **setting)
    return settings


def method_order(methods: Sequence[str], repeat: int) -> list[str]:
    """The methods' order in one repeat: rotated by repeat // 2, reversed in odd repeats.

    Over 2 * len(methods) repeats every method holds every position equally often (the engine
    slows down over a run, so position matters), and any two methods swap order between a repeat
    and the next, so a ratio measured in the same repeat is not always that of the earlier one.
    """
    shift = (repeat // 2) % len(methods)
    order = list(methods[shift:]) + list(methods[:shift])
    return order[::-1] if repeat % 2 else order


def with_budgets(settings: list[dict], budgets: Sequence[float] | None) -> list[dict]:
    """Each setting unbudgeted and, for each ``sample_budget`` in ``budgets``, with it."""
    from reinforce_ada.core.config import SamplerConfig

    out = list(settings)
    for budget in budgets or ():
        for setting in settings:
            out.append({**setting, "sample_budget": budget})
            SamplerConfig(**out[-1])  # names the field of a bad value
    return out


def adaptive_methods(variants: Sequence[str], settings: Sequence[dict]) -> dict[str, dict]:
    """Name -> SamplerConfig fields of each Reinforce-Ada run: ``{variant}[_m{M}][_b{budget}][_async]``.

    With one (M, R) setting the names are the variants' (``balance``, ``balance_async``); with
    several, each carries its M (``balance_m8``, ``balance_m2_async``), and a budgeted one its
    budget (``balance_b2``).
    """
    methods = {}
    sizes = {s["round_size"] for s in settings}
    for setting in settings:
        for variant in variants:
            name = variant if len(sizes) == 1 else f"{variant}_m{setting['round_size']}"
            if setting.get("sample_budget"):
                name += f"_b{setting['sample_budget']:g}"
            methods[name] = {"variant": variant, "mode": "rounds", **setting}
            methods[f"{name}_async"] = {"variant": variant, "mode": "async", **setting}
    return methods


def time_methods(
    engine: Any,
    prompts: Sequence[str],
    score: Callable[[int, str], float],
    make_params: Callable[[int, int], Any],
    variants: Sequence[str],
    settings: Sequence[dict],
    repeats: int,
    log: Callable[[str], None] = print,
) -> dict[str, list[dict]]:
    """Times GRPO-n4 and every (variant, setting) in rounds and async mode on one engine.

    Returns:
        Method name -> one result per repeat: seconds, samples, tokens, engine steps, rounds
        (the most requests a prompt made), and for async runs ``same_pools``, the share of
        prompts whose rewards matched the rounds run of the same repeat.
    """
    from reinforce_ada.core.config import SamplerConfig
    from reinforce_ada.core.schedules import round_barrier
    from reinforce_ada.core.step import run_step

    keys = [str(i) for i in range(len(prompts))]

    def rollout(seed: int) -> EngineRollout:
        return EngineRollout(engine, prompts, score, make_params, seed)

    def grpo(seed: int) -> dict:
        drive = rollout(seed)
        start = time.perf_counter()
        round_barrier(drive)({i: 4 for i in range(len(prompts))})
        seconds = time.perf_counter() - start
        samples = 4 * len(prompts)
        return {"seconds": seconds, "samples": samples, "tokens": drive.tokens, "steps": drive.steps, "rounds": 1}

    def adaptive(fields: dict, seed: int) -> dict:
        drive = rollout(seed)
        start = time.perf_counter()
        step = run_step(keys, SamplerConfig(**fields), drive)
        seconds = time.perf_counter() - start
        metrics = step.metrics()
        return {
            "seconds": seconds,
            "samples": int(metrics["samples_total"]),
            "tokens": drive.tokens,
            "steps": drive.steps,
            "rounds": int(metrics["rounds"]),
            "pools": [s.rewards for s in step.samplers],
        }

    adaptive_specs = adaptive_methods(variants, settings)
    methods = ["grpo_n4", *adaptive_specs]
    # warm-up: the engine's first steps are slower, and every method then finds the prompts in the
    # prefix cache (one GRPO pass is enough, and cheap next to an adaptive one with a real model)
    grpo(seed=10**9)
    runs: dict[str, list[dict]] = {name: [] for name in methods}
    for r in range(repeats):
        seed = r * POOL_STRIDE * len(prompts)
        for name in method_order(methods, r):
            result = grpo(seed) if name == "grpo_n4" else adaptive(adaptive_specs[name], seed)
            runs[name].append(result)
            log(f"repeat {r + 1}: {name}: {({k: v for k, v in result.items() if k != 'pools'})}")
    for name in adaptive_specs:  # within a repeat, the same seeds: did the two modes draw the same rewards?
        if name.endswith("_async"):
            for rounds_run, async_run in zip(runs[name.removesuffix("_async")], runs[name]):
                same = sum(a == b for a, b in zip(rounds_run["pools"], async_run["pools"]))
                async_run["same_pools"] = same / len(prompts)
    for results in runs.values():
        for result in results:
            result.pop("pools", None)
    return runs
