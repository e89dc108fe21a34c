"""Which update is better? The quality of each method's update, measured on SmolLM2-135M without training runs.

    python -m studies.gradient_quality [--checkpoints base format protocol_start] [--design first|equal_samples]
        [--work outputs/gradient_quality] [--learning-work outputs/learning_second]
        [--json studies/gradient_quality/results/gradient_quality.json]
        [--write studies/gradient_quality/README.md] [--quick]

A learning curve mixes an estimator's quality with where each run's noisy walk happens to be. This harness
measures the update itself, at fixed weights, for every method, on the same responses:

1. checkpoints: the base model, a common one after the answer format is learned (``format``: 5 steps
   of GRPO-n4 through verl's trainer on the learning benchmark's first training prompts, made once and kept), and
   the second learning protocol's own start (``protocol_start``: the checkpoint its runs start from, made by the
   learning study's code in its work folder, ``--learning-work``, or found there; measured on that protocol's
   training prompts and held-out questions);
2. pools, through the project's own sampling path (``reinforce_ada.tasks.vllm_sampling``, the engine data
   preparation uses) and the math reward: ``train_k`` responses for each of ``train_prompts`` training prompts
   and ``heldout_k`` for each of ``heldout_prompts`` held-out questions (the learning benchmark's sets);
3. per-response gradients of log pi(response | prompt) (summed over the response's tokens), count-sketched to
   ``dims`` dimensions with a seeded hash and sign per parameter (inner products are unbiased); 8 responses of
   one prompt at a time, from one forward and backward pass
   (:func:`studies.gradient_quality.sketches.sketch_responses`);
4. replays: each training prompt's pool is split in halves. Every method's sampler replays the first half in
   seeded orders, and in seeded draws with replacement from it (fresh draws, for the SNR), through the package's
   core (its real exit rules, groups, budgets and Est allocation,
   :func:`reinforce_ada.core.step.run_step`), on batches of ``batch`` prompts; its update is built with the
   package's real advantages and weights (:func:`reinforce_ada.core.advantage.outcome_advantages`) and
   aggregated as verl's ``token-mean`` does (sum of advantage x summed token gradients over the batch's
   kept tokens). The second half gives each prompt's reference gradient of its pass rate, with a
   leave-one-out baseline (unbiased); the held-out pools give the held-out gradient.

Per method, averaged over batches of prompts (the prompts split once into random groups of ``group``, each round
of batches a random partition of the groups into batches of ``batch`` prompts; each batch replayed
``replays_per_batch`` times in orders and as many in draws with replacement): the cosine of the update with the
batch's reference gradient and with the held-out gradient; the first-order held-out gain of a unit-norm step (the
held-out gradient's component along the update); the signal-to-noise ratio (squared norm of the expected update
over the expected squared deviation from it, over replays of one batch in fresh draws from its pools) and the same
per sample drawn. The primary measure, fixed before the first full run, is the cosine with the held-out gradient,
compared as each method's paired difference (same batches, same replay orders): in the ``first`` design to GRPO-n4
and to balance, in the ``equal_samples`` design (``--design``) each candidate to the GRPO that draws as many
responses per prompt on the same pools. Batches share prompts, so the 95% intervals take groups of training prompts
as the sampled units (:mod:`studies.gradient_quality.intervals`). The reference gradients' own split-half
reliability (cosine of two disjoint halves) says how high a cosine can be.

Resumable: pools and sketches are saved per prompt as they are made, named by the prompt's key, and a
larger size extends them (more prompts, more responses a pool); the analysis reruns in minutes. Results:
``--json`` and the ``gradient_quality`` section of the study's README.md, each with the date, machine and command
(:mod:`studies.gradient_quality.report`; ``--report-only`` rewrites the section from ``--json`` alone).

The stages' code: :mod:`studies.gradient_quality.design` (sizes, designs, primary measure, the equal-samples rule),
:mod:`studies.gradient_quality.pools` (2), :mod:`studies.gradient_quality.sketches` (3),
:mod:`studies.gradient_quality.replay` (4) and :mod:`studies.gradient_quality.intervals` (batches and intervals);
this module makes the checkpoints and runs the stages on each.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import random
import shlex
import sys
from dataclasses import asdict
from pathlib import Path

from benchmarks.results import machine
from reinforce_ada.core.messages import say
from studies.gradient_quality.design import DEFAULT, DESIGNS, FIRST, QUICK, Design, Size
from studies.gradient_quality.pools import WallTime, make_pools
from studies.gradient_quality.replay import analyse, load_split
from studies.gradient_quality.report import report, write_report
from studies.gradient_quality.sketches import make_sketches

ROOT = Path(__file__).resolve().parents[2]


_say = functools.partial(say, speaker="gradient_quality")


def learning_data(work: Path, model: Path, protocol: str = "first", quick: bool = False) -> dict:
    """A learning protocol's data (:func:`studies.learning.data.prepare_data` with the protocol's sizes, its quick ones
    for ``quick``, and its committed pass rates: nothing is sampled again), prepared in ``work`` as the learning
    study prepares it."""
    from studies.learning import protocol as learning_protocol
    from studies.learning.data import prepare_data

    chosen = learning_protocol.PROTOCOLS[protocol]
    size, results = (chosen.quick, work / "results") if quick else (chosen.size, ROOT / chosen.results)
    return prepare_data(work, results, model, size, learning_protocol.EASY, 0)


def learning_sets(work: Path, size: Size, model: Path, protocol: str = "first", learning_work: Path | None = None,
                  quick: bool = False) -> tuple[list[dict], list[dict]]:
    """A learning protocol's filtered training prompts and held-out questions, and the base model's pass rate of each
    training prompt: the first protocol's prepared in ``work`` (at its full sizes), another's in ``learning_work``,
    the learning study's own work folder for it (at its quick sizes for ``quick``)."""
    import pandas as pd

    data = (learning_data(work / "learning_data", model) if protocol == "first"
            else learning_data(learning_work, model, protocol, quick))

    def rows(path: str, count: int, seed: int) -> list[dict]:
        frame = pd.read_parquet(path)
        picked = sorted(random.Random(seed).sample(range(len(frame)), min(count, len(frame))))
        return [{"prompt": [dict(m) for m in frame.iloc[i]["prompt"]],
                 "answer": str(frame.iloc[i]["reward_model"]["ground_truth"]),
                 "base_pass_rate": float(frame.iloc[i]["extra_info"].get("pass_rate", 0.5))} for i in picked]

    train = rows(data["files"]["train"], size.train_prompts, 0)
    heldout = rows(data["files"]["heldout_filtered"], size.heldout_prompts, 1)
    return train, heldout


def format_checkpoint(work: Path, base: Path) -> Path:
    """The checkpoint after the answer format is learned, by the recipe the learning benchmark's second protocol
    starts from (:func:`studies.learning.start.format_checkpoint`, on the first protocol's training prompts); made
    once."""
    from studies.learning import protocol as learning_protocol
    from studies.learning import start as learning_start

    data = learning_data(work / "learning_data", base)
    return learning_start.format_checkpoint(work, base, data, learning_protocol.DEFAULT)


def protocol_start(learning_work: Path, base: Path, quick: bool = False) -> Path:
    """The second learning protocol's own start: the checkpoint its runs start from, made as its runner makes it
    (:func:`studies.learning.start.format_checkpoint` on its data and sizes, one step for ``quick``) in its work
    folder, or found there."""
    from studies.learning import protocol as learning_protocol
    from studies.learning import start as learning_start

    second = learning_protocol.PROTOCOLS["second"]
    data = learning_data(learning_work, base, "second", quick)
    return learning_start.format_checkpoint(learning_work, base, data, second.quick if quick else second.size,
                                            steps=1 if quick else learning_protocol.FORMAT_STEPS)


def run_checkpoint(name: str, model: Path, work: Path, size: Size, train: list[dict], heldout: list[dict],
                   sampler=None, design: Design = FIRST) -> dict:
    """Measures every method at one checkpoint: its pools, their sketched gradients, then the replays.

    Args:
        name: The checkpoint's name (``base``, ``format`` or ``protocol_start``), its folder under ``work``.
        model: The checkpoint's Hugging Face folder.
        work: The work folder, where pools and sketches are kept and resumed.
        size: The measurement's size.
        train: The training prompts, with their base pass rates.
        heldout: The held-out questions.
        sampler: A stand-in for the vLLM sampling path (tests); None samples with vLLM.
        design: The methods and comparisons replayed.

    Returns:
        The replays' measures with the size, date, machine, wall hours and model they were measured with.
    """
    folder = work / name
    _say(f"{name}: pools ({size.train_prompts} x {size.train_k} training, {size.heldout_prompts} x {size.heldout_k} "
         f"held-out) from {model}")
    make_pools(folder / "pools_train", model, train, size.train_k, size, seed=0, sampler=sampler)
    make_pools(folder / "pools_heldout", model, heldout, size.heldout_k, size, seed=1, sampler=sampler)
    _say(f"{name}: per-response gradients, sketched to {size.dims} dimensions")
    make_sketches(folder / "pools_train", folder / "sketch_train", model, train, size)
    make_sketches(folder / "pools_heldout", folder / "sketch_heldout", model, heldout, size)
    _say(f"{name}: replays")
    result = analyse(load_split(folder / "pools_train", folder / "sketch_train", train, size.train_k),
                     load_split(folder / "pools_heldout", folder / "sketch_heldout", heldout, size.heldout_k), size,
                     [p["base_pass_rate"] for p in train], design)
    return {**result, "checkpoint": name, "size": asdict(size), "date": datetime.date.today().isoformat(),
            "machine": machine(), "wall_hours": WallTime(folder).seconds() / 3600, "model": str(model)}


def results_key(checkpoint: str, design: str) -> str:
    """Where a checkpoint's measurement goes in the results: its name for the first design, else with the design's."""
    return checkpoint if design == "first" else f"{checkpoint}_{design}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m studies.gradient_quality", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", nargs="+", default=["base", "format"],
                        choices=["base", "format", "protocol_start"],
                        help="protocol_start: the second learning protocol's own start, on its prompts")
    parser.add_argument("--design", choices=sorted(DESIGNS), default="first",
                        help="the methods and comparisons (studies/gradient_quality/README.md): first, or "
                        "equal_samples, each candidate against the GRPO that draws as much")
    parser.add_argument("--work", default="outputs/gradient_quality", help="pools, sketches, the format checkpoint")
    parser.add_argument("--learning-work", help="the learning study's work folder for its second protocol, where "
                        "protocol_start's data and checkpoint are found or made (default outputs/learning_second; "
                        "--quick: outputs/learning_second_quick)")
    parser.add_argument("--json", default="studies/gradient_quality/results/gradient_quality.json")
    parser.add_argument("--write", help="the Markdown file to write the gradient_quality section into "
                        "(studies/gradient_quality/README.md)")
    parser.add_argument("--model", help="a Hugging Face model folder (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a check")
    parser.add_argument("--report-only", action="store_true",
                        help="measure nothing: rewrite the --write section from the --json results")
    args = parser.parse_args(argv)
    size = QUICK if args.quick else DEFAULT
    work = Path(args.work).resolve()
    learning_work = Path(args.learning_work or "outputs/learning_second" + ("_quick" if args.quick else "")).resolve()
    json_path = Path(args.json)
    results = json.loads(json_path.read_text()) if json_path.exists() else {"checkpoints": {}}
    if args.report_only:
        if not results["checkpoints"]:
            parser.error(f"--report-only: {json_path} holds no measured checkpoint")
        if args.write:
            write_report(results, args.write)
        else:
            print(report(results))
        return results
    from reinforce_ada.demo.run import model_folder

    base = model_folder(args.model, parser)
    command = "python -m studies.gradient_quality " + shlex.join(argv if argv is not None else sys.argv[1:])
    for name in args.checkpoints:
        extra = {}
        if name == "protocol_start":
            from studies.learning.start import fingerprint

            model = protocol_start(learning_work, base, args.quick)
            train, heldout = learning_sets(work, size, base, "second", learning_work, args.quick)
            extra = {"start_weights": fingerprint(model)}
        else:
            model = base if name == "base" else format_checkpoint(work, base)
            train, heldout = learning_sets(work, size, base)
        measured = run_checkpoint(name, model, work, size, train, heldout, design=DESIGNS[args.design])
        results["checkpoints"][results_key(name, args.design)] = {**measured, **extra, "command": command}
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(results, indent=1))
        if args.write:
            write_report(results, args.write)
    return results
