"""The second protocol's start: the checkpoint after the answer format is learned, which every run starts from
(made once per work folder), the fingerprint that tells one such checkpoint from another, and the learning-rate
sweep's folders and the rule that picks its rate."""

from __future__ import annotations

import functools
import hashlib
import shlex
from dataclasses import replace
from pathlib import Path

from reinforce_ada.core.messages import say
from reinforce_ada.demo import run as demo
from studies.learning.protocol import FORMAT_LR, FORMAT_SEED, FORMAT_STEPS, Protocol, Size, method_overrides
from studies.learning.training import start_trainer, stop_trainer, with_overrides

_say = functools.partial(say, speaker="learning")


def format_checkpoint(work: Path, model: Path, data: dict, size: Size, steps: int = FORMAT_STEPS,
                      seed: int = FORMAT_SEED) -> Path:
    """The common start after the answer format is learned: GRPO-n4 for ``steps`` steps at lr 3e-5 (data and
    sampling seed ``seed``, by default ``FORMAT_SEED``; the third protocol's start s has ``FORMAT_SEED + s``; no
    warm-up) on the training prompts through verl's trainer, merged to a
    Hugging Face folder; made once per ``work`` folder and kept there.

    Training on a CPU is not bit-reproducible across machines and sessions, so a checkpoint made in another
    work folder differs a little: :func:`fingerprint` tells them apart, every run's record names its start, and
    the report says which of a seed's runs shared one.
    """
    from reinforce_ada.tasks.evaluate import hf_folder

    run_dir = work / ("format_run" if seed == FORMAT_SEED else f"format_run_seed{seed}")
    checkpoint = run_dir / "checkpoints" / f"global_step_{steps}"
    if (checkpoint / "actor" / "merged_hf" / "config.json").exists():
        prune_start(checkpoint)
        return checkpoint / "actor" / "merged_hf"
    files = data["files"]
    run = replace(size.run, steps=steps, lr=FORMAT_LR)
    prompt_tokens = demo.longest_prompt(model, [Path(files["train"]), Path(files["heldout_filtered"])])
    command = with_overrides(
        demo.trainer_command("GRPO-n4", model, {"train": Path(files["train"]), "test": Path(files["heldout_filtered"])},
                             run, run_dir, prompt_tokens, overrides=method_overrides("grpo_n4", size, 4)[2]),
        ["data.shuffle=true", f"data.seed={seed}", f"reinforce_ada.sampling_seed={seed}",
         "trainer.test_freq=-1", f"trainer.save_freq={steps}", "trainer.resume_mode=auto",
         f"trainer.default_local_dir={run_dir / 'checkpoints'}"])
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "command.txt").write_text(shlex.join(command) + "\n")
    _say(f"start: {steps} steps of GRPO-n4 through verl's trainer to learn the answer format "
         f"(log {run_dir / 'trainer.log'})")
    env = demo.trainer_env({"VERL_FILE_LOGGER_PATH": str(run_dir / "metrics.jsonl")})
    with open(run_dir / "trainer.log", "w") as log:
        process = start_trainer(command, log, env)
        try:
            code = process.wait()
        except BaseException:
            stop_trainer(process)
            raise
    if code != 0:
        demo.fail(f"the format run exited with status {code}", run_dir / "trainer.log", "learning")
    merged = hf_folder(checkpoint)
    prune_start(checkpoint)
    return merged


def prune_start(checkpoint: Path) -> None:
    """Removes the model, optimiser and data-loader states (1.6 GB for SmolLM2) of a start's FSDP checkpoint once
    its merged folder is whole: the runs train from, and the start is hashed and evaluated on, ``actor/merged_hf``
    alone. A merged folder whose weights do not open (a merge killed half-way by an older harness, which merged in
    place) keeps them, so that it can be made again."""
    from safetensors import safe_open

    merged = checkpoint / "actor" / "merged_hf"
    weights = sorted(merged.glob("*.safetensors"))
    if not (merged / "config.json").exists() or not weights:
        return
    for path in weights:
        try:
            with safe_open(str(path), "pt") as f:
                f.keys()
        except Exception:  # a file cut short: safetensors refuses its header
            return
    # verl's tracker goes too: were the merged folder lost, the format run would be made again, not resumed from
    # states that are gone
    for state in [*(checkpoint / "actor").glob("*_world_size_*_rank_*.pt"), checkpoint / "data.pt",
                  checkpoint.parent / "latest_checkpointed_iteration.txt"]:
        state.unlink(missing_ok=True)


def fingerprint(model: Path) -> str:
    """A short hash of a Hugging Face folder's weights: which start a run had.

    Raises:
        FileNotFoundError: If the folder holds no ``*.safetensors`` (every such folder would hash the same).
    """
    weights = sorted(model.glob("*.safetensors"))
    if not weights:
        raise FileNotFoundError(f"{model}: no *.safetensors weights to fingerprint the start by")
    digest = hashlib.sha256()
    for path in weights:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def choose_lr(protocol: Protocol, curves: dict[float, dict[int, float]]) -> float:
    """The protocol's rule: the first swept rate whose filtered held-out curve never drops by more than
    ``max_drop`` between consecutive evaluations; the last one if every curve does."""
    limit = round(100 * protocol.max_drop, 6)
    for lr in protocol.sweep:
        steps = sorted(curves[lr])
        # in points, rounded: a drop of exactly the limit is not "more than" it
        if all(round(100 * (curves[lr][a] - curves[lr][b]), 6) <= limit for a, b in zip(steps, steps[1:])):
            return lr
    return protocol.sweep[-1]


def sweep_folder(root: Path, lr: float) -> Path:
    """The folder under ``root`` (a work or results folder) of the sweep's run at learning rate ``lr``."""
    return root / "sweep" / f"lr{lr:g}"
