"""The learning study's run records read back: each finished run's record (``RESULTS/runs/<method>_seed<k>.json``)
and each unfinished run's folder under WORK turned into rows (one per evaluated step, one per training step),
and what one record says about its run (its start, its KV block sizes, its dates, its held-out curve)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from reinforce_ada.demo.run import read_jsonl
from studies.learning.protocol import FILTERED, KV_BLOCK, UNFILTERED, VLLM_BLOCK_SIZE, VLLM_CPU_DEFAULT_BLOCK, Size


def record_path(results: Path, name: str, seed: int) -> Path:
    """Where the record of method ``name``'s finished run at ``seed`` is kept under ``results``."""
    return results / "runs" / f"{name}_seed{seed}.json"


def read_records(results: Path, size: Size) -> list[dict]:
    """Every finished run's record under ``results``.

    Raises:
        SystemExit: If a record was measured with other sizes than ``size`` (mixing them would be wrong).
    """
    records = []
    for path in sorted((results / "runs").glob("*_seed*.json")):
        record = json.loads(path.read_text())
        differ = size.differs_from(record.get("size", {}))
        if differ:
            raise SystemExit(
                f"[learning] {path} was measured with other sizes ({', '.join(differ)} differ from this "
                "benchmark's Size): move the folder's records away or pass another --results"
            )
        record["steps"] = {int(step): values for step, values in record["steps"].items()}
        records.append(record)
    return records


def merged_steps(run_dir: Path) -> dict[int, dict]:
    """Step -> verl's logged values over every attempt; a resumed attempt's rows replace the earlier
    ones of the same step (it redoes the steps after its checkpoint)."""
    steps: dict[int, dict] = {}
    for path in sorted(run_dir.glob("metrics_*.jsonl")):
        for row in read_jsonl(path):
            steps[int(row["step"])] = row["data"]
    return steps


def run_rows(method: str, seed: int, steps: dict[int, dict], eval_k: int) -> tuple[list[dict], list[dict]]:
    """One row per evaluated step (cumulative samples, tokens and wall time) and one per training step."""
    evaluated, per_step = [], []
    samples = tokens = wall = 0.0
    for step in sorted(steps):
        values = steps[step]
        if step > 0:
            row = {
                "method": method, "seed": seed, "step": step,
                "samples": values["reinforce_ada/samples_total"],
                "tokens": values["reinforce_ada/response_tokens_total"],
                "wall_s": values["timing_s/step"],
                "rollout_s": values["reinforce_ada/rollout_seconds"],
                "signal_frac": values["reinforce_ada/kept_groups_with_signal_frac"],
                "train_pass_rate": values["reinforce_ada/pass_rate_mean"],
                "kept_samples": values["reinforce_ada/kept_samples"],
                "no_answer_frac": values.get("reinforce_ada/reward/no_answer"),
            }
            per_step.append(row)
            samples, tokens, wall = samples + row["samples"], tokens + row["tokens"], wall + row["wall_s"]
        accuracy = values.get(f"val-core/{FILTERED}/reward/mean@{eval_k}")
        if accuracy is None:
            continue
        evaluated.append({
            "method": method, "seed": seed, "step": step, "heldout_acc": accuracy,
            "heldout_pass_at_k": values.get(f"val-core/{FILTERED}/reward/best@{eval_k}/mean"),
            "heldout_all_acc": values.get(f"val-core/{UNFILTERED}/reward/mean@{eval_k}"),
            "heldout_all_pass_at_k": values.get(f"val-core/{UNFILTERED}/reward/best@{eval_k}/mean"),
            "samples": samples, "tokens": tokens, "wall_s": wall, "k": eval_k,
        })
    return evaluated, per_step


def collect(work: Path, results: Path, size: Size) -> tuple[list[dict], list[dict], list[dict]]:
    """Rows of every run (finished: its record in ``results``; unfinished: its folder in ``work``),
    per-step rows, and the runs' records without their steps."""
    rows, per_step, runs = [], [], []
    sources = [(r["method"], r["seed"], r["steps"], r, start_of_record(r)) for r in read_records(results, size)]
    finished = {(method, seed) for method, seed, *_ in sources}
    for run_dir in sorted((work / "runs").glob("*/seed*")):
        method, seed = run_dir.parent.name, int(run_dir.name.removeprefix("seed"))
        if (method, seed) not in finished:
            start = (run_dir / "start.txt").read_text().strip() if (run_dir / "start.txt").exists() else None
            sources.append((method, seed, merged_steps(run_dir), None, start))
    for method, seed, steps, record, start in sources:
        done = record is not None
        evaluated, logged = run_rows(method, seed, steps, size.run.eval_k)
        if evaluated and evaluated[0]["step"] != 0:
            evaluated.insert(0, {"method": method, "seed": seed, "step": 0, "base_of": start})  # filled below
        for row in evaluated:
            row.update(finished=done, start=start)
        rows += evaluated
        per_step += logged
        about = {k: v for k, v in record.items() if k != "steps"} if done else {"method": method, "seed": seed}
        runs.append({**about, "finished": done, "steps_logged": len(logged)})
    # step 0 is the start, validated by the first run of a seed from those weights: the seed's other runs from
    # the same weights share it
    base = {(r["seed"], r["start"]): r for r in rows if r["step"] == 0 and "base_of" not in r}
    filled = []
    for row in rows:
        if "base_of" in row:
            if (row["seed"], row["base_of"]) not in base:
                continue  # this start has not been validated for the seed yet
            row = {**base[(row["seed"], row["base_of"])], "method": row["method"], "finished": row["finished"],
                   "base_of_seed": True}
        filled.append(row)
    return filled, per_step, runs


def start_of_record(record: dict) -> str | None:
    """The fingerprint of the start weights a run's record names (None: the first protocol's, from the base model)."""
    return record.get("start", {}).get("fingerprint")


def kv_blocks(record: dict) -> list[int]:
    """Each attempt's vLLM KV block size: today's where its command line names it, vLLM-CPU's own default of 128
    where it does not (attempts made before the CPU platform set it). A record lists its attempts' commands; older
    records name only the last."""
    return [VLLM_BLOCK_SIZE if KV_BLOCK in shlex.split(command) else VLLM_CPU_DEFAULT_BLOCK
            for command in record.get("commands", [record.get("command", "")])]


def run_dates(record: dict) -> list[str]:
    """The days a run was measured on: each attempt's start and the day its record was written."""
    return sorted(set(record.get("attempt_dates", [])) | {record["date"]})


def at_kv_block(record: dict) -> bool:
    """Whether every attempt of a run had vLLM's KV blocks of today's size."""
    return all(size == VLLM_BLOCK_SIZE for size in kv_blocks(record))


def heldout_curve(record: dict, eval_k: int, source: str = FILTERED) -> dict[int, float]:
    """Step -> held-out Avg@k of a run's record (its evaluated steps only)."""
    key = f"val-core/{source}/reward/mean@{eval_k}"
    return {int(step): values[key] for step, values in record["steps"].items() if key in values}
