"""Rollout wall time on a GPU without vLLM: GRPO-n4 against Reinforce-Ada's synchronous rounds.

    python -m benchmarks.gpu_rollout [--device cuda] [--layers 28 --hidden 1536 ...] [--prompts 128]

The lent GPU machine has PyTorch and transformers but no vLLM, and cannot download models, so
this harness measures what it can carry: batched sampling with ``transformers.generate`` on a
randomly initialised decoder of a chosen size (defaults: Qwen2.5-1.5B's shape), and rewards
drawn as Bernoulli(p) with per-prompt pass rates from an early-training Beta(0.5, 2). Response
lengths are drawn too (a random model would always run to the limit): each sample stops at its
drawn length, so a round waits for its longest sample as vLLM rounds do. Reported: seconds,
samples and tokens for GRPO-n4 and for Reinforce-Ada-balance/-pos (n 4, M 8, R 4), and the ratio
in the same run, over repeats. It also runs on a CPU with a small shape, which the tests do.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path


def build_model(args, device):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=args.prompt_len + args.max_tokens + 8,
    )
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    return Qwen2ForCausalLM(config).to(device=device, dtype=dtype).eval()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--hidden", type=int, default=1536)
    parser.add_argument("--intermediate", type=int, default=8960)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--mean-tokens", type=int, default=256, help="mean of the drawn response lengths")
    parser.add_argument("--batch", type=int, default=256, help="sequences per generate call at most")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the raw results here")
    args = parser.parse_args(argv)

    import torch

    from reinforce_ada.core.config import SamplerConfig
    from reinforce_ada.core.step import run_step

    device = args.device
    model = build_model(args, device)
    rng = random.Random(args.seed)
    pass_rates = [rng.betavariate(0.5, 2.0) for _ in range(args.prompts)]
    prompt_ids = torch.randint(
        10, args.vocab, (args.prompts, args.prompt_len), generator=torch.Generator().manual_seed(0)
    )

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def generate(rows: list[int]) -> int:
        """Samples one response per row; each stops at a drawn length. Returns generated tokens."""
        tokens = 0
        for start in range(0, len(rows), args.batch):
            chunk = rows[start : start + args.batch]
            lengths = [max(1, min(args.max_tokens, int(rng.expovariate(1 / args.mean_tokens)))) for _ in chunk]
            inputs = prompt_ids[chunk].to(device)
            with torch.no_grad():
                # the batch runs until its longest sample: the synchronous cost being measured
                model.generate(
                    inputs,
                    attention_mask=torch.ones_like(inputs),
                    do_sample=True,
                    max_new_tokens=max(lengths),
                    min_new_tokens=max(lengths),
                    pad_token_id=0,
                )
            tokens += sum(lengths)
        sync()
        return tokens

    def grpo() -> dict:
        start = time.perf_counter()
        tokens = generate([i for i in range(args.prompts) for _ in range(4)])
        return {"seconds": time.perf_counter() - start, "samples": 4 * args.prompts, "tokens": tokens, "rounds": 1}

    def adaptive(variant: str) -> dict:
        tokens = 0

        def round_(requests):
            nonlocal tokens
            tokens += generate([i for i, k in requests.items() for _ in range(k)])
            return {i: [float(rng.random() < pass_rates[i]) for _ in range(k)] for i, k in requests.items()}

        start = time.perf_counter()
        step = run_step([str(i) for i in range(args.prompts)], SamplerConfig(variant=variant), round_)
        return {
            "seconds": time.perf_counter() - start,
            "samples": sum(s.drawn for s in step.samplers),
            "tokens": tokens,
            "rounds": len(step.round_seconds),
        }

    grpo()  # warm-up
    runs: dict[str, list[dict]] = {"grpo_n4": [], "balance": [], "pos": []}
    for r in range(args.repeats):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))
        for name in order:
            runs[name].append(grpo() if name == "grpo_n4" else adaptive(name))
            print(f"repeat {r + 1}: {name}: {runs[name][-1]}", flush=True)
    name_of = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    print(
        f"\n{name_of}, {args.layers} layers x {args.hidden} hidden, {args.prompts} prompts, "
        f"torch {torch.__version__}"
    )
    print("| method | seconds (mean, min-max) | samples | tokens | rounds | time / GRPO-n4 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, results in runs.items():
        secs = [x["seconds"] for x in results]
        ratios = [x["seconds"] / g["seconds"] for x, g in zip(results, runs["grpo_n4"])]
        print(
            f"| {name} | {statistics.mean(secs):.2f} ({min(secs):.2f}-{max(secs):.2f}) | "
            f"{statistics.mean(x['samples'] for x in results):.0f} | "
            f"{statistics.mean(x['tokens'] for x in results):.0f} | "
            f"{statistics.mean(x['rounds'] for x in results):.1f} | {', '.join(f'{q:.2f}' for q in ratios)} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"device": name_of, "args": vars(args), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
