"""Driver memory of the legacy trainer's adaptive rollout: what it holds between rounds.

    python -m benchmarks.legacy_memory [--prompts 256] [--compare-ref REV] [--write benchmarks/RESULTS.md]

The legacy trainer's rollout manager runs on the driver and gets each round back as one
``DataProto``. It needs, at the end of the step, only the n samples per prompt that form the
groups; this harness measures the peak resident memory of one step's ``generate_sequences``
(above the memory held before it) on a fake engine that returns samples of realistic size
(1,024 prompt and 2,048 response tokens, the tensors verl's agent loop returns), with each
prompt's pass rate drawn from Beta(0.5, 2) (early training: most prompts need several rounds).
Each measurement runs in a fresh process. ``--compare-ref`` also measures the package as it was
at that git revision (unpacked with ``git archive``), on the same rewards; the revision must have
the manager where it is now (:data:`MANAGER`, since the subpackage layout of 88e2cca).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT_TOKENS, RESPONSE_TOKENS = 1024, 2048
MANAGER = "reinforce_ada/integration/agent_loop_legacy.py"  # the legacy trainer's rollout manager


def sample_bytes() -> int:
    """Bytes of one sample's tensors in the fake round (int64 ids and masks, float32 scores)."""
    ids = PROMPT_TOKENS + RESPONSE_TOKENS
    return 8 * (PROMPT_TOKENS + 2 * RESPONSE_TOKENS + 3 * ids) + 4 * 2 * RESPONSE_TOKENS


def measure(prompts: int, ref: str | None, seed: int) -> dict:
    """Runs in the child process: one step of the legacy manager (of the package it imports: this
    tree's, or with ``--compare-ref`` the one :func:`run_child` unpacked from that revision)."""
    import types

    import numpy as np
    import torch
    from verl.protocol import DataProto

    from reinforce_ada.core.config import SamplerConfig
    from reinforce_ada.integration.agent_loop_legacy import AdaptiveManagerLegacy as manager_class

    config = SamplerConfig()  # balance, n 4, M 8, R 4: the reference settings
    rng = np.random.default_rng(seed)
    pass_rates = rng.beta(0.5, 2.0, size=prompts)
    n, generated = config.n, [0]

    def generate_round(self, batch):
        rows = len(batch)
        prompt_index = np.array([int(u) for u in batch.non_tensor_batch["uid"]])
        scores = torch.zeros(rows, RESPONSE_TOKENS)
        scores[:, -1] = torch.from_numpy((rng.random(rows) < pass_rates[prompt_index]).astype(np.float32))
        ids = PROMPT_TOKENS + RESPONSE_TOKENS
        generated[0] += rows
        return DataProto.from_dict(
            tensors={
                "prompts": torch.ones(rows, PROMPT_TOKENS, dtype=torch.long),
                "responses": torch.ones(rows, RESPONSE_TOKENS, dtype=torch.long),
                "response_mask": torch.ones(rows, RESPONSE_TOKENS, dtype=torch.long),
                "input_ids": torch.ones(rows, ids, dtype=torch.long),
                "attention_mask": torch.ones(rows, ids, dtype=torch.long),
                "position_ids": torch.ones(rows, ids, dtype=torch.long),
                "rm_scores": scores,
                "rollout_log_probs": torch.full((rows, RESPONSE_TOKENS), -1.0),
            },
            non_tensors={"uid": batch.non_tensor_batch["uid"]},
            meta_info={"timing": {}, "reward_extra_keys": []},
        )

    manager = object.__new__(manager_class)
    manager.sampler_config, manager.reward_name = config, "the benchmark reward"
    manager._generate_round = types.MethodType(generate_round, manager)
    uids = np.array([str(p) for p in range(prompts) for _ in range(n)], dtype=object)
    inputs = DataProto.from_dict(
        tensors={"input_ids": torch.ones(len(uids), PROMPT_TOKENS, dtype=torch.long)},
        non_tensors={"uid": uids},
        meta_info={"global_steps": 1},
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    output = manager.generate_sequences(inputs)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "samples_drawn": generated[0],
        "samples_returned": len(output),
        "peak_above_start_mib": (peak - before) / 1024,
        "drawn_mib": generated[0] * sample_bytes() / 2**20,
        "returned_mib": len(output) * sample_bytes() / 2**20,
    }


def check_ref(ref: str) -> None:
    """Refuses a revision without the manager where this harness imports it, before anything is measured.

    Raises:
        SystemExit: If ``ref`` is not a revision, or one from before the layout of 88e2cca.
    """
    if subprocess.run(["git", "cat-file", "-e", f"{ref}:{MANAGER}"], cwd=ROOT, capture_output=True).returncode:
        raise SystemExit(f"error: --compare-ref {ref}: no {MANAGER} there (not a revision, or one from before the "
                         "layout of 88e2cca); measure an older revision with the harness of its own day")


def run_child(prompts: int, ref: str | None, seed: int) -> dict:
    """:func:`measure` in a fresh process; with ``ref``, on the package as it was at that revision."""
    command = [sys.executable, "-m", "benchmarks.legacy_memory", "--child", "--prompts", str(prompts),
               "--seed", str(seed)]
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tree:
        if ref:
            archive = subprocess.run(
                ["git", "archive", ref, "reinforce_ada"], cwd=ROOT, check=True, capture_output=True
            )
            subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
            # the child imports reinforce_ada from here (ahead of the installed package)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, env.get("PYTHONPATH")) if p)
        proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: the measurement{f' at {ref}' if ref else ''} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compare-ref", default=None, help="git revision whose manager to measure too")
    parser.add_argument("--write", default=None, help="RESULTS.md to write the section into")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.prompts < 1:
        parser.error("--prompts must be >= 1")
    if args.child:
        print(json.dumps(measure(args.prompts, args.compare_ref, args.seed)))
        return

    if args.compare_ref:
        check_ref(args.compare_ref)
    rows = [("now", run_child(args.prompts, None, args.seed))]
    if args.compare_ref:
        rows.insert(0, (f"at {args.compare_ref}", run_child(args.prompts, args.compare_ref, args.seed)))
    lines = [
        f"One step of the legacy trainer's adaptive rollout, {args.prompts} prompts, balance (n 4, M 8, R 4), pass "
        f"rates from Beta(0.5, 2), samples of {PROMPT_TOKENS} prompt + {RESPONSE_TOKENS} response tokens "
        f"({sample_bytes() / 1024:.0f} KiB each); peak resident memory of the driver during the step, above what it "
        "held before it.",
        "",
        "| manager | samples drawn | samples returned | drawn (MiB) | returned (MiB) | peak above start (MiB) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows:
        lines.append(
            f"| {name} | {r['samples_drawn']} | {r['samples_returned']} | {r['drawn_mib']:.0f} | "
            f"{r['returned_mib']:.0f} | {r['peak_above_start_mib']:.0f} |"
        )
    command = "python -m benchmarks.legacy_memory " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    lines += ["", f"Command: `{command.strip()}`"]
    table = "\n".join(lines)
    print(table)
    if args.write:
        from benchmarks.results import write_section

        write_section(args.write, "legacy_memory", "Legacy trainer: driver memory of one step's rollout", table)


if __name__ == "__main__":
    main()
