"""Avg@k and pass@k of one or more checkpoints on math benchmarks, as the paper reports them.

    python -m reinforce_ada.tasks.evaluate --checkpoint outputs/run/global_step_400 [more ...] \\
        --benchmark math500=data/math500.parquet --benchmark minerva=data/minerva.parquet \\
        [--k 32] [--temperature 1.0] [--max-tokens 4096] [--output eval/]

A checkpoint is a Hugging Face model folder or a verl checkpoint folder (``global_step_N`` or
its ``actor``), which is merged to a Hugging Face folder once with verl's own model merger (bfloat16), or with
``--merge-dtype float32`` in float32, the weights as trained (a checkpoint saved by one rank).
Benchmarks are verl parquet files (``prompt`` chat messages, ``reward_model.ground_truth``,
``data_source``). Each problem gets k samples from vLLM; a sample's score comes from the reward
module (default :mod:`reinforce_ada.tasks.reward`, math-verify on the last ``\\boxed{}``).

* Avg@k: mean score over the k samples, averaged over problems (the paper's metric, k = 32).
* pass@j: the unbiased estimator 1 - C(k - c, j) / C(k, j) with c correct of k, averaged.
* "weighted": each benchmark weighted by its number of problems.

Writes ``results.json`` (per checkpoint, benchmark and problem) and ``results.md`` (a table like
the paper's Table 1) to ``--output``.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from math import comb
from pathlib import Path

from reinforce_ada.tasks.vllm_sampling import ChatSampler as Sampler
from reinforce_ada.tasks.vllm_sampling import chat_sampler, close_engine


def pass_at(k: int, correct: int, j: int) -> float:
    """Unbiased pass@j from k samples of which ``correct`` are correct (Chen et al., 2021)."""
    if j > k:
        raise ValueError(f"pass@{j} needs at least {j} samples per problem, got k={k}")
    if k - correct < j:
        return 1.0
    return 1.0 - comb(k - correct, j) / comb(k, j)


MERGE_DTYPES = ("bfloat16", "float32")


def hf_folder(checkpoint: str | Path, dtype: str = "bfloat16") -> Path:
    """A Hugging Face folder for ``checkpoint``, merging a verl FSDP checkpoint on first use.

    Args:
        dtype: ``bfloat16`` (default): verl's own model merger (``actor/merged_hf``), which casts every weight to
            bfloat16, so a small update can vanish (an update of 2e-5 leaves most bfloat16 weights unchanged);
            ``float32``: the weights as trained (``actor/merged_hf_float32``, :func:`merge_float32`; a world-size-1
            checkpoint only). A Hugging Face folder is returned as it is, whatever ``dtype``.
    """
    if dtype not in MERGE_DTYPES:
        raise ValueError(f"dtype {dtype!r}: one of {MERGE_DTYPES}")
    path = Path(checkpoint)
    if (path / "config.json").exists() and any(path.glob("*.safetensors")):
        return path
    actor = path / "actor" if (path / "actor").is_dir() else path
    merged = actor / ("merged_hf" if dtype == "bfloat16" else "merged_hf_float32")
    if (merged / "config.json").exists():  # merged before: the shards may have gone since
        return merged
    if not any(actor.glob("model_world_size_*_rank_*.pt")):
        raise FileNotFoundError(
            f"--checkpoint {checkpoint}: neither a Hugging Face folder (config.json + *.safetensors) nor a verl "
            "checkpoint (global_step_N or its actor/ with model_world_size_*_rank_*.pt)"
        )
    partial = merged.with_name(merged.name + ".partial")  # renamed when whole: a killed merge is redone
    shutil.rmtree(partial, ignore_errors=True)
    if dtype == "float32":
        print(f"[evaluate] merging {actor} into {merged} in float32", file=sys.stderr, flush=True)
        merge_float32(actor, partial)
    else:
        print(f"[evaluate] merging {actor} into {merged} with verl's model merger", file=sys.stderr, flush=True)
        subprocess.run(
            [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(actor),
             "--target_dir", str(partial)],
            check=True,
        )
    partial.rename(merged)
    return merged


def merge_float32(actor: Path, target: Path) -> None:
    """Writes a world-size-1 verl FSDP actor checkpoint (``model_world_size_1_rank_0.pt``, with ``huggingface/``'s
    config and tokenizer) as a Hugging Face folder in float32: every weight as the trainer held it.

    Raises:
        ValueError: If the checkpoint was saved by more than one rank (its shards would need joining: verl's merger,
            ``hf_folder(..., dtype="bfloat16")``, does that) or a tensor is not whole.
    """
    import torch
    from torch.distributed.tensor import DTensor
    from transformers import AutoConfig, AutoModelForCausalLM

    sizes = sorted({int(f.name.split("_")[3]) for f in actor.glob("model_world_size_*_rank_*.pt")})
    if sizes != [1]:
        raise ValueError(f"{actor}: a float32 merge reads a checkpoint saved by one rank "
                         f"(model_world_size_1_rank_0.pt) only, this one has world size {sizes}; merge it with verl's "
                         "model merger (bfloat16)")
    saved = torch.load(actor / "model_world_size_1_rank_0.pt", map_location="cpu", weights_only=False)
    weights = {}
    for key, tensor in saved.items():
        if isinstance(tensor, DTensor):  # one rank's shard of a one-rank mesh: the whole tensor
            local = tensor.to_local()
            if local.shape != tensor.shape:
                raise ValueError(f"{actor}: {key} holds {tuple(local.shape)} of {tuple(tensor.shape)}, not the whole")
            tensor = local
        weights[key] = tensor.detach().to(torch.float32) if tensor.is_floating_point() else tensor.detach()
    config = AutoConfig.from_pretrained(actor / "huggingface")
    config.dtype = torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(weights, strict=True)
    model.save_pretrained(target)
    for extra in (actor / "huggingface").iterdir():  # the tokenizer, chat template and generation config as saved
        if extra.is_file() and extra.name != "config.json":
            shutil.copyfile(extra, target / extra.name)


def load_benchmark(path: str) -> tuple[list[list[dict]], list[str], list[str]]:
    import pandas as pd

    frame = pd.read_parquet(path)
    missing = {"prompt", "reward_model"} - set(frame.columns)
    if missing:
        raise ValueError(f"--benchmark {path}: missing columns {sorted(missing)} (verl parquet expected)")
    prompts = [[dict(m) for m in p] for p in frame["prompt"]]
    truths = [str(r["ground_truth"]) for r in frame["reward_model"]]
    sources = list(frame["data_source"]) if "data_source" in frame else ["math"] * len(frame)
    return prompts, truths, sources


def evaluate_model(
    sample: Sampler, benchmarks: dict[str, str], k: int, pass_ks: Sequence[int], compute_score
) -> dict:
    results: dict = {"benchmarks": {}}
    total, weighted = 0, {"avg": 0.0, **{f"pass@{j}": 0.0 for j in pass_ks}}
    for name, path in benchmarks.items():
        prompts, truths, sources = load_benchmark(path)
        responses = sample(prompts, k)
        problems = []
        for texts, truth, source in zip(responses, truths, sources):
            scores = [_score(compute_score(source, t, truth)) for t in texts]
            correct = sum(s > 0.5 for s in scores)
            problems.append(
                {"avg": sum(scores) / k, "correct": correct, **{f"pass@{j}": pass_at(k, correct, j) for j in pass_ks}}
            )
        summary = {key: sum(p[key] for p in problems) / len(problems) for key in weighted}
        results["benchmarks"][name] = {"problems": len(problems), **summary, "per_problem": problems}
        total += len(problems)
        for key in weighted:
            weighted[key] += summary[key] * len(problems)
        print(
            f"[evaluate] {name}: Avg@{k} {summary['avg']:.4f} over {len(problems)} problems",
            file=sys.stderr,
            flush=True,
        )
    results["weighted"] = {key: value / total for key, value in weighted.items()}
    return results


def _score(result) -> float:
    return float(result["score"] if isinstance(result, dict) else result)


def markdown(all_results: dict, k: int, benchmarks: Sequence[str]) -> str:
    head = (
        "| checkpoint | "
        + " | ".join(f"{b} Avg@{k}" for b in benchmarks)
        + f" | weighted Avg@{k} | weighted pass@{k} |"
    )
    lines = [head, "|---|" + "---:|" * (len(benchmarks) + 2)]
    for name, res in all_results.items():
        cells = [f"{100 * res['benchmarks'][b]['avg']:.1f}" for b in benchmarks]
        lines.append(
            f"| {name} | " + " | ".join(cells) + f" | {100 * res['weighted']['avg']:.1f} | "
            f"{100 * res['weighted'].get(f'pass@{k}', float('nan')):.1f} |"
        )
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m reinforce_ada.tasks.evaluate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--checkpoint", nargs="+", required=True, help="HF folders or verl checkpoint folders")
    parser.add_argument("--benchmark", action="append", required=True, metavar="NAME=PARQUET")
    parser.add_argument("--k", type=int, default=32, help="samples per problem (paper: 32)")
    parser.add_argument("--pass-at", default="1,8,32", help="pass@j values to report (j <= k)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--reward-module", default="reinforce_ada.tasks.reward", help="module with compute_score")
    parser.add_argument("--output", default="eval", help="folder for results.json and results.md")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--merge-dtype", choices=MERGE_DTYPES, default="bfloat16",
                        help="how a verl checkpoint is merged: bfloat16 (verl's model merger) or float32 (as trained)")
    return parser.parse_args(argv)


def main(argv=None, sampler_factory=None) -> dict:
    args = parse_args(argv)
    benchmarks = {}
    for spec in args.benchmark:
        name, sep, path = spec.partition("=")
        if not sep or not Path(path).exists():
            raise SystemExit(f"error: --benchmark {spec!r}: expected NAME=PATH to an existing parquet file")
        benchmarks[name] = path
    pass_ks = [j for j in (int(x) for x in args.pass_at.split(",")) if j <= args.k]
    compute_score = importlib.import_module(args.reward_module).compute_score
    all_results = {}
    for checkpoint in args.checkpoint:
        model = hf_folder(checkpoint, args.merge_dtype)
        if sampler_factory is None:
            llm, sample = chat_sampler(model, args.temperature, args.max_tokens, args.seed)
        else:
            llm, sample = None, sampler_factory(model)
        all_results[str(checkpoint)] = evaluate_model(sample, benchmarks, args.k, pass_ks, compute_score)
        close_engine(llm)  # before the next checkpoint's engine asks for its memory
        del llm, sample
        gc.collect()
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"k": args.k, "temperature": args.temperature, "max_tokens": args.max_tokens, "seed": args.seed}
    (out / "results.json").write_text(json.dumps({"settings": meta, "results": all_results}, indent=1))
    table = markdown(all_results, args.k, list(benchmarks))
    (out / "results.md").write_text(table + "\n")
    print(table)
    return all_results


if __name__ == "__main__":
    main()
