"""The learning study's data phase: a seeded pool of the demo task's questions, their base-model pass rates by the
project's data prep (kept under RESULTS as they come, so no question is sampled twice), the paper's "easy" filter
into training prompts and a filtered held-out set, and an unfiltered held-out set; or, for ``--report-only``, the
summary the results were last written with."""

from __future__ import annotations

import datetime
import functools
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.results import machine
from reinforce_ada.core.messages import say
from reinforce_ada.demo import run as demo
from reinforce_ada.demo import task as demo_task
from studies.learning.protocol import FILTERED, UNFILTERED, Size

ROOT = Path(__file__).resolve().parents[2]


_say = functools.partial(say, speaker="learning")


def _pass_rate_rows(path: Path) -> dict[tuple[str, int], dict]:
    """(question id, k) -> data prep's pass-rate row, from a ``pass_rates.jsonl``."""
    return {(row["id"], int(row["k"])): row for row in demo.read_jsonl(path)}


def merge_pass_rates(source: Path, target: Path, k: int | None = None) -> None:
    """Adds ``source``'s pass-rate rows (those sampled ``k`` times, if given) that ``target`` lacks."""
    have = _pass_rate_rows(target)
    new = [row for key, row in _pass_rate_rows(source).items() if key not in have and (k is None or key[1] == k)]
    if new:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a") as f:
            f.writelines(json.dumps(row) + "\n" for row in new)


def prepare_data(
    work: Path, results: Path, model: Path, size: Size, pass_range: tuple[float, float], data_seed: int
) -> dict:
    """The filtered training and held-out sets and the unfiltered held-out set; returns the counts.

    Resumable: data prep keeps the pass rates it has sampled in ``work/data/filtered/pass_rates.jsonl``,
    and they are copied to ``results/pass_rates.jsonl`` as they come, so a new machine (an empty
    ``work``) samples only the questions never sampled before.

    Raises:
        SystemExit: If fewer prompts than one batch pass the filter, or data prep fails.
    """
    data = work / "data"
    summary_file = data / "data.json"
    if summary_file.exists():
        summary = json.loads(summary_file.read_text())
        if not size.differs_from(summary["size"]) and summary["pass_range"] == list(pass_range):
            return summary
    pool, heldout_all = demo_task.questions(size.pool, size.heldout_all, seed=data_seed)
    data.mkdir(parents=True, exist_ok=True)
    sampled, kept = data / "filtered" / "pass_rates.jsonl", results / "pass_rates.jsonl"
    merge_pass_rates(kept, sampled, size.filter_k)
    with open(data / "pool.jsonl", "w") as f:
        for level, expression, answer in pool:
            f.write(json.dumps({"id": expression, "problem": f"What is {expression}?", "answer": answer,
                                "prompt": demo_task.messages(expression), "level": level}) + "\n")
    demo_task.write_parquet(heldout_all, data / "heldout_all.parquet", "test", data_source=UNFILTERED)
    # the project's data prep, as a user runs it (scripts/prepare_data.sh)
    command = [
        "bash", str(ROOT / "scripts" / "prepare_data.sh"), "--id-key", "id", "--prompt-key", "prompt",
        "--data-source", FILTERED, "--min-pass-rate", str(pass_range[0]), "--max-pass-rate", str(pass_range[1]),
        "--max-prompt-tokens", "256", "--chunk", "128", "--seed", str(data_seed),
    ]
    prep_env = {
        "PYTHON": sys.executable, "INPUT": str(data / "pool.jsonl"), "MODEL": str(model),
        "OUTPUT": str(data / "filtered"), "DIFFICULTY": "", "K": str(size.filter_k),
        "MAX_TOKENS": str(size.run.max_response_tokens), "TEST_SIZE": str(size.heldout_filtered),
    }
    _say(f"1/4 data: {size.pool} questions x {size.filter_k} samples of the base model (vLLM), "
         f"keeping pass rates in ({pass_range[0]:g}, {pass_range[1]:g}]")
    log = data / "data_prep.log"
    with open(log, "w") as stream:
        process = subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT, env=demo.trainer_env(prep_env))
        shown = 0
        while process.poll() is None:
            time.sleep(5)
            lines = [line for line in log.read_text(errors="replace").splitlines() if "[data_prep]" in line]
            for line in lines[shown:]:
                _say(f"1/4 data: {line.split('] ', 1)[-1]}")
            if len(lines) != shown:  # a chunk was saved: keep it
                merge_pass_rates(sampled, kept)
            shown = len(lines)
    merge_pass_rates(sampled, kept)
    if process.returncode != 0:
        demo.fail(f"data prep exited with status {process.returncode}", log, "learning")
    report = json.loads((data / "filtered" / "report.json").read_text())
    counts = report["counts"]
    if counts.get("train", 0) < size.run.batch:
        raise SystemExit(
            f"[learning] only {counts.get('train', 0)} training prompts passed the pass-rate filter "
            f"({pass_range[0]:g}, {pass_range[1]:g}] (counts: {counts}); need at least one batch ({size.run.batch}): "
            "raise --pool or widen --pass-rate-range"
        )
    import pandas as pd

    rates = [float(info["pass_rate"]) for info in pd.read_parquet(data / "filtered" / "train.parquet")["extra_info"]]
    summary = {
        "size": size.record(), "pass_range": list(pass_range), "data_seed": data_seed, "counts": counts,
        "train_pass_rates": rates, "date": datetime.date.today().isoformat(), "machine": machine(),
        "files": {"train": str(data / "filtered" / "train.parquet"), "heldout_filtered": str(data / "filtered" /
                  "test.parquet"), "heldout_all": str(data / "heldout_all.parquet")},
    }
    summary_file.write_text(json.dumps(summary, indent=1))
    return summary


def recorded_data(work: Path, results: Path, size: Size) -> dict:
    """The data phase's summary without running it, for ``--report-only``: ``work``'s, else the one the results
    were last written with (``results/runs.json``, without the files, which only training reads), so that the
    committed records alone regenerate the results on a machine that never ran the benchmark.

    Raises:
        SystemExit: If neither exists for these sizes.
    """
    for path, key in ((work / "data" / "data.json", None), (results / "runs.json", "data")):
        if path.exists():
            summary = json.loads(path.read_text())
            summary = summary[key] if key else summary
            if not size.differs_from(summary["size"]):
                return summary
    raise SystemExit(f"[learning] --report-only: no data summary for these sizes in {work / 'data' / 'data.json'} "
                     f"or {results / 'runs.json'}: run the benchmark (its data phase) first")
