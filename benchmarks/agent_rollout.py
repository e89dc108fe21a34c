"""Episodes drawn and rollout time on an agent task: Reinforce-Ada (balance) against GRPO-n4, through verl's trainer.

    python -m benchmarks.agent_rollout [--steps 3] [--write benchmarks/RESULTS.md]

The task is the test suite's agent task (tests/e2e/agent_task.py): the tiny model, taught verl's hermes tool-call
format, on 8 training prompts whose rows alternate between verl's ``tool_agent`` (a calculator tool) and
``ask_again`` (an environment that asks once more after a wrong answer), 4 prompts a step. Both methods run the
same seeded steps (``reinforce_ada.sampling_seed=0``) through scripts/run_cpu_tiny.sh (V1 trainer, rounds, one
agent-loop worker), one after the other on this machine:

* GRPO-n4: one round of 4 episodes per prompt, verl's GRPO advantage;
* balance: rounds of M = 8, at most R = 4, groups of n = 4.

Reported per method and step, from verl's file logger: episodes drawn per prompt, turns, tool calls and tool or
environment tokens per episode, rollout seconds (generation, tools, environment and reward), and balance's rollout
time over GRPO-n4's at the same step. The tiny model's rewards say nothing about learning; the figures show what
the rounds cost on multi-turn episodes. Results: benchmarks/results/agent_rollout.json and the ``agent_rollout``
section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from benchmarks.results import machine, write_section

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "tests" / "e2e"
METHODS = {
    "grpo_n4": ["algorithm.adv_estimator=grpo", "reinforce_ada.round_size=4", "reinforce_ada.max_rounds=1"],
    "balance": ["reinforce_ada.variant=balance", "reinforce_ada.round_size=8", "reinforce_ada.max_rounds=4"],
}
COLUMNS = ("samples_per_prompt_mean", "agent/turns_mean", "agent/tool_calls_mean", "agent/env_tokens_mean",
           "agent/kept_turns_mean", "rollout_seconds")


def build_task(out: Path) -> Path:
    spec = importlib.util.spec_from_file_location("agent_task", TASK / "agent_task.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["agent_task"] = module
    spec.loader.exec_module(module)
    return module.build(out / "tiny", train=8)


def run_method(method: str, out: Path, steps: int) -> list[dict]:
    """One run of ``method`` on the task in ``out/tiny``; the steps' metrics from verl's file logger."""
    folder = out / method
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "tiny").exists():
        (folder / "tiny").symlink_to(out / "tiny")
    metrics = folder / "metrics.jsonl"
    metrics.unlink(missing_ok=True)
    python_path = os.pathsep.join([str(TASK), os.environ.get("PYTHONPATH", "")])  # agent_task, for Ray's workers
    env = {**os.environ, "OUT": str(folder), "STEPS": str(steps), "SAVE_FREQ": "-1", "RAY_ADDRESS": "local",
           "VERL_FILE_LOGGER_PATH": str(metrics), "PYTHONPATH": python_path}
    command = ["bash", str(ROOT / "scripts" / "run_cpu_tiny.sh"), *METHODS[method], "reinforce_ada.sampling_seed=0",
               f"actor_rollout_ref.rollout.multi_turn.function_tool_path={TASK / 'calculator_tool.py'}",
               f"actor_rollout_ref.rollout.agent.agent_loop_config_path={out / 'tiny' / 'agent_loops.yaml'}"]
    print(f"[agent_rollout] {method}: verl's trainer, {steps} steps (log: {folder / 'run.log'})", flush=True)
    with open(folder / "run.log", "w") as log:
        subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, check=True, cwd=ROOT)
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    return [{"step": r["step"], **{c: r["data"].get(f"reinforce_ada/{c}") for c in COLUMNS}} for r in rows]


def table(results: dict) -> str:
    lines = ["| step | method | episodes / prompt | turns / episode | tool calls / episode | tool or environment "
             "tokens / episode | kept: turns / episode | rollout s | balance / GRPO-n4 rollout time |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    grpo = {r["step"]: r for r in results["grpo_n4"]}
    for method, rows in results.items():
        for r in rows:
            ratio = r["rollout_seconds"] / grpo[r["step"]]["rollout_seconds"] if method == "balance" else None
            lines.append(f"| {r['step']} | {method} | {r['samples_per_prompt_mean']:.1f} | "
                         f"{r['agent/turns_mean']:.2f} | {r['agent/tool_calls_mean']:.2f} | "
                         f"{r['agent/env_tokens_mean']:.1f} | "
                         f"{r['agent/kept_turns_mean']:.2f} | {r['rollout_seconds']:.1f} | "
                         + (f"{ratio:.2f} |" if ratio is not None else "|"))
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agent_rollout", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--work", default=str(ROOT / "outputs" / "agent_rollout"))
    parser.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "agent_rollout.json"))
    parser.add_argument("--write", help="RESULTS.md to write the section into")
    args = parser.parse_args(argv)
    work = Path(args.work)
    if not (work / "tiny" / "model").exists():
        build_task(work)
    results = {method: run_method(method, work, args.steps) for method in METHODS}
    record = {"date": datetime.date.today().isoformat(), "machine": machine(),
              "command": "python -m benchmarks.agent_rollout " + shlex.join(argv if argv is not None else sys.argv[1:]),
              "methods": results}
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results).write_text(json.dumps(record, indent=1) + "\n")
    body = table(results)
    print(body)
    if args.write:
        write_section(args.write, "agent_rollout", "Agents: episodes drawn and rollout time, balance against GRPO-n4",
                      f"Command: `{record['command']}`\n\n{body}")


if __name__ == "__main__":
    main()
