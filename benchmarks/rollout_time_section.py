"""The rollout-time harness's results: the table of its timed runs, the JSON summary saved under
``benchmarks/results`` and, with ``--write``, its section of ``benchmarks/RESULTS.md``, named by the model and the
settings timed, with the command that measures it again."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shlex
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.rollout_time_measure import adaptive_methods

RESULTS_DIR = Path(__file__).with_name("results")


def setting_label(setting: dict) -> str:
    """An (M, R) setting as the table and the section's title name it, e.g. ``M = 8, R = 4, budget 2``."""
    cap, budget = setting.get("max_samples_per_prompt"), setting.get("sample_budget")
    return (f"M = {setting['round_size']}, R = {setting['max_rounds']}" + (f", N_max = {cap}" if cap else "")
            + (f", budget {budget:g}" if budget else ""))


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
