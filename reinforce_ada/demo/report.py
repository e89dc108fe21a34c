"""The demo's report: one row per method and step, the CSV, the curves, the base model's
pass-rate histogram, and report.md (see :mod:`reinforce_ada.demo.run`, whose last phase this is)."""

from __future__ import annotations

import csv
from pathlib import Path

from reinforce_ada.demo import task as demo_task
from reinforce_ada.demo.config import DemoSize


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def training_reward(values: dict) -> float:
    """The mean pass rate of the step's prompts: GRPO's score mean, Reinforce-Ada's pool means."""
    return float(values.get("reinforce_ada/pass_rate_mean", values.get("critic/score/mean", float("nan"))))


def samples_drawn(values: dict, size: DemoSize) -> float:
    """Responses generated in the step: Reinforce-Ada's pools, or GRPO's batch x n."""
    return float(values.get("reinforce_ada/samples_total", size.batch * size.group_size))


def held_out_accuracy(values: dict) -> float | None:
    """verl's validation reward mean@k on the held-out set, if this step evaluated."""
    keys = [k for k in values if k.startswith(f"val-core/{demo_task.DATA_SOURCE}/reward/mean@")]
    return float(values[keys[0]]) if keys else None




def step_table(runs: dict[str, list[dict]], base_accuracy: float, size: DemoSize) -> list[dict]:
    """One row per method and step (step 0: the base model), with cumulative samples."""
    table = []
    for method, rows in runs.items():
        table.append({"method": method, "step": 0, "train_reward": "", "samples": 0, "samples_cumulative": 0,
                      "held_out_accuracy": base_accuracy, "step_seconds": "", "rollout_seconds": ""})
        cumulative = 0.0
        for row in rows:
            values = row["data"]
            samples = samples_drawn(values, size)
            cumulative += samples
            held_out = held_out_accuracy(values)
            table.append({
                "method": method, "step": row["step"], "train_reward": training_reward(values), "samples": samples,
                "samples_cumulative": cumulative, "held_out_accuracy": "" if held_out is None else held_out,
                "step_seconds": values.get("timing_s/step", ""),
                "rollout_seconds": values.get("reinforce_ada/rollout_seconds", values.get("timing_s/gen", "")),
            })
    return table


def write_csv(table: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)


def plot_curves(table: list[dict], size: DemoSize, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 2, figsize=(11, 8))
    for method in dict.fromkeys(r["method"] for r in table):
        rows = [r for r in table if r["method"] == method]
        trained = [r for r in rows if r["train_reward"] != ""]
        evaluated = [r for r in rows if r["held_out_accuracy"] != ""]
        for column, x in enumerate(("step", "samples_cumulative")):
            axes[0][column].plot([r[x] for r in trained], [r["train_reward"] for r in trained], marker="o",
                                 label=method)
            axes[1][column].plot([r[x] for r in evaluated], [r["held_out_accuracy"] for r in evaluated], marker="o",
                                 label=method)
    for column, label in enumerate(("training step", "responses generated (cumulative)")):
        axes[0][column].set(xlabel=label, ylabel="training reward (mean pass rate of the batch)")
        axes[1][column].set(xlabel=label, ylabel=f"held-out accuracy (Avg@{size.eval_k})")
    for axis in axes.flat:
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle("SmolLM2-135M-Instruct on arithmetic: GRPO-n4 vs Reinforce-Ada-balance (CPU)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_base_histogram(base: list[dict], size: DemoSize, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted({b["level"] for b in base})
    bins = [i / size.eval_k for i in range(size.eval_k + 2)]
    figure, axis = plt.subplots(figsize=(7, 4))
    axis.hist([[b["pass_rate"] for b in base if b["level"] == lv] for lv in levels], bins=bins, stacked=True,
              label=[f"level {lv}" for lv in levels], align="left", rwidth=0.8)
    axis.set(xlabel=f"base pass rate (k = {size.eval_k} samples)", ylabel="held-out questions",
             title="SmolLM2-135M-Instruct before training")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def histogram_counts(base: list[dict], size: DemoSize) -> dict[str, int]:
    counts = {f"{c}/{size.eval_k}": 0 for c in range(size.eval_k + 1)}
    for b in base:
        counts[f"{round(b['pass_rate'] * size.eval_k)}/{size.eval_k}"] += 1
    return counts


def report(summary: dict, base: list[dict], size: DemoSize) -> str:
    k = size.eval_k
    lines = [
        "# Reinforce-Ada demo: GRPO-n4 vs Reinforce-Ada-balance on SmolLM2-135M-Instruct (CPU)",
        "",
        f"Run on {summary['date']} ({summary['machine']}); total wall time {minutes(summary['total_seconds'])}.",
        "",
        f"| method | held-out Avg@{k}, start | held-out Avg@{k}, end | change | responses generated | "
        "training wall time | mean step time |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for method, result in summary["methods"].items():
        lines.append(
            f"| {method} | {100 * summary['base_accuracy']:.1f}% | {100 * result['final_accuracy']:.1f}% | "
            f"{100 * (result['final_accuracy'] - summary['base_accuracy']):+.1f} pts | {result['samples']:.0f} | "
            f"{minutes(result['wall_seconds'])} | {result['mean_step_seconds']:.0f} s |"
        )
    counts = histogram_counts(base, size)
    by_level = {}
    for b in base:
        by_level.setdefault(b["level"], []).append(b["pass_rate"])
    lines += [
        "",
        f"Base pass rates of the {len(base)} held-out questions (k = {k} samples each):",
        "",
        "| correct of k | " + " | ".join(counts) + " |",
        "|---|" + "---:|" * len(counts),
        "| questions | " + " | ".join(str(v) for v in counts.values()) + " |",
        "",
        "By level (mean base pass rate): "
        + ", ".join(f"level {lv} {sum(v) / len(v):.2f} ({len(v)} questions)" for lv, v in sorted(by_level.items()))
        + ".",
        "",
        "Wall time per phase: " + ", ".join(f"{name} {minutes(s)}" for name, s in summary["phases"].items()) + ".",
        "",
        "![curves](curves.png)",
        "",
        "![base pass rates](base_pass_rates.png)",
        "",
        "## Settings (the same for both methods)",
        "",
        f"{size.train_prompts} training and {size.test_prompts} held-out questions ({demo_task.__name__}, "
        f"seed {summary['seed']}); {size.steps} steps of {size.batch} prompts; n = {size.group_size} samples per "
        f"prompt in the update; AdamW lr {size.lr}, {size.batch // size.mini_batch} optimiser steps per training step; "
        f"temperature 1.0; responses up to {size.max_response_tokens} tokens; held-out Avg@{k} every "
        f"{size.eval_every} steps. Reinforce-Ada-balance: rounds of 8 samples, at most 4 rounds, stop once a prompt "
        "has 2 correct and 2 incorrect samples; baseline from every sample drawn.",
        "",
        "Files: `metrics.csv` (per step), `runs/<method>/metrics.jsonl` (everything verl logged), "
        "`base_pass_rates.json` (base model per held-out question, from verl's validation before the first "
        "run's first step), `logs/` (full trainer logs).",
    ]
    return "\n".join(lines) + "\n"
