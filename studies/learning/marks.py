"""The third protocol's marks: while a run trains, the checkpoint of each step that reaches a mark of responses drawn
is kept (hard links, so the trainer's own clean-up of older checkpoints does not remove it) and the run is stopped at
the budget; after it, each kept checkpoint (and the start, mark 0) is evaluated on the held-out sets with the
package's evaluation (:func:`reinforce_ada.tasks.evaluate.evaluate_model`), every question with its own seed, and its
per-question results are written as JSON beside the run's record.

verl saves a step's checkpoint before it logs that step's metrics (``RayPPOTrainer.fit``), and the next step's
checkpoint replaces it only after that step's rollout and update, so a checkpoint is on disk when its step's metrics
are read; a kept checkpoint that is missing stops the run rather than leave a mark unevaluated.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from reinforce_ada.demo import run as demo
from studies.learning.budget import crossings
from studies.learning.protocol import FILTERED, UNFILTERED, Size

EVAL_SEED = 0  # every arm, mark and start: the same draws per question
IN_PROCESS = False  # tests: evaluate in this process (with vLLM replaced)


def mark_folder(run_dir: Path, mark: int) -> Path:
    """Where a run keeps the checkpoint it had at ``mark`` responses (a verl ``global_step_N`` folder's files)."""
    return run_dir / "marks" / f"mark{mark}"


def keep_checkpoint(run_dir: Path, step: int, mark: int) -> Path:
    """Hard-links the checkpoint of ``step`` (``run_dir/checkpoints/global_step_<step>``) into the mark's folder.

    Raises:
        FileNotFoundError: If the step's checkpoint is not on disk (the trainer must save every step).
    """
    source, target = run_dir / "checkpoints" / f"global_step_{step}", mark_folder(run_dir, mark)
    if not source.is_dir():
        raise FileNotFoundError(f"{source}: the checkpoint of step {step}, which reached {mark} responses, is missing")
    shutil.rmtree(target, ignore_errors=True)  # a partial link from a killed attempt
    shutil.copytree(source, target, copy_function=os.link)
    (target / "step.txt").write_text(f"{step}\n")
    return target


class BudgetWatch:
    """Follows a run's logged steps: keeps the checkpoint of each step that reaches a mark, and says when the run
    has drawn its budget.

    Args:
        run_dir: The run's folder (its ``checkpoints`` and ``marks``).
        size: The protocol's sizes (``budget``, ``marks``).
        logged: Step -> logged values of the run's earlier attempts (a resumed run counts their responses).
    """

    def __init__(self, run_dir: Path, size: Size, logged: dict[int, dict] | None = None):
        self.run_dir, self.size = run_dir, size
        self.drawn = {s: v["reinforce_ada/samples_total"] for s, v in (logged or {}).items() if s > 0}

    def on_step(self, step: int, values: dict) -> bool:
        """Records a logged step; returns whether the run has now drawn its budget (stop it)."""
        before = crossings(self.drawn, self.size.marks)
        self.drawn[step] = values["reinforce_ada/samples_total"]
        for mark, (at, _) in crossings(self.drawn, self.size.marks).items():
            if at == step and (mark not in before or not mark_folder(self.run_dir, mark).exists()):
                keep_checkpoint(self.run_dir, step, mark)
        self._remove_old_checkpoints(step)
        return self.done()

    def _remove_old_checkpoints(self, step: int) -> None:
        """Deletes the checkpoints of steps before ``step`` except the newest saved one: the marks' are linked
        already, and a resumed run needs only the newest."""
        saved = {int(f.name.rsplit("_", 1)[1]): f for f in (self.run_dir / "checkpoints").glob("global_step_*")
                 if f.name.rsplit("_", 1)[1].isdigit()}
        newest = max(saved, default=None)
        for at, folder in saved.items():
            if at < step and at != newest:
                shutil.rmtree(folder, ignore_errors=True)

    def done(self) -> bool:
        """Whether the logged steps have drawn the budget."""
        return sum(self.drawn.values()) >= self.size.budget


def seeded_sampler(llm, temperature: float, max_tokens: int, seed: int = EVAL_SEED) -> Callable:
    """A sampler for :func:`~reinforce_ada.tasks.evaluate.evaluate_model` in which question i's k responses come
    from their own generators (vLLM's per-request seed ``seed + i k``, which vLLM gives its j-th response as
    ``seed + i k + j``: no two responses share one): every model evaluated sees each question with the same random
    draws, whatever the batch it runs in."""
    from vllm import SamplingParams

    def sample(prompts: Sequence[list[dict]], k: int) -> list[list[str]]:
        params = [SamplingParams(n=k, temperature=temperature, max_tokens=max_tokens, seed=seed + i * k)
                  for i in range(len(prompts))]
        outputs = llm.chat(list(prompts), params, use_tqdm=False)
        return [[c.text for c in o.outputs] for o in outputs]

    return sample


def evaluation_path(results: Path, name: str, seed: int, mark: int) -> Path:
    """The per-question results of a run's evaluation at ``mark``, beside its record."""
    return results / "runs" / f"{name}_seed{seed}" / f"mark{mark}.json"


def evaluate_checkpoint(model: Path, files: dict, size: Size, out: Path, about: dict,
                        sampler_factory: Callable | None = None) -> dict:
    """Evaluates one model on both held-out sets (Avg@``eval_k``, seeded per question) and writes ``out``: the
    settings, ``about`` (step, responses) and each question's correct count and Avg; returns what it wrote.

    vLLM runs in a child process (``python -m studies.learning.marks``): an engine in this one would keep its memory
    and leave ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` in the environment that every later trainer inherits.
    ``sampler_factory`` (model -> sampler) replaces vLLM in tests, in this process, as ``IN_PROCESS`` does.
    """
    if sampler_factory is None and not IN_PROCESS:
        job = {"model": str(model), "files": {k: files[k] for k in ("heldout_filtered", "heldout_all")},
               "k": size.run.eval_k, "max_tokens": size.run.max_response_tokens, "out": str(out), "about": about}
        code = subprocess.run([sys.executable, "-m", "studies.learning.marks", json.dumps(job)],
                              env=demo.trainer_env()).returncode
        if code != 0:
            raise SystemExit(f"[learning] the evaluation of {model} exited with status {code} (rerun to resume)")
        return json.loads(out.read_text())
    return _evaluate(model, files, size.run.eval_k, size.run.max_response_tokens, out, about, sampler_factory)


def _evaluate(model: Path, files: dict, k: int, max_tokens: int, out: Path, about: dict,
              sampler_factory: Callable | None = None) -> dict:
    """:func:`evaluate_checkpoint` in this process."""
    from reinforce_ada.tasks.evaluate import evaluate_model, hf_folder
    from reinforce_ada.tasks.reward import compute_score
    from reinforce_ada.tasks.vllm_sampling import chat_sampler, close_engine

    # a mark's weights as trained (float32): verl's merger rounds them to bfloat16, where an update of 2e-5 leaves
    # most weights unchanged; a start is a Hugging Face folder already (the weights its runs train from)
    folder, llm = hf_folder(model, dtype="float32"), None
    if sampler_factory is None:
        # per-request seeds: on a CPU every prefill whole (a seeded request split over steps fails there)
        llm, _ = chat_sampler(folder, 1.0, max_tokens, EVAL_SEED, seeded_requests=True)
        sample = seeded_sampler(llm, 1.0, max_tokens)
    else:
        sample = sampler_factory(folder)
    try:
        results = evaluate_model(sample, {FILTERED: files["heldout_filtered"], UNFILTERED: files["heldout_all"]},
                                 k, [], compute_score)
    finally:
        close_engine(llm)
    written = {"settings": {"k": k, "temperature": 1.0, "max_tokens": max_tokens,
                            "seed": EVAL_SEED, "per_response_seed": "seed + question index x k + response index"},
               **about,
               "accuracy": {name: bench["avg"] for name, bench in results["benchmarks"].items()},
               "per_question": {name: bench["per_problem"] for name, bench in results["benchmarks"].items()}}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(written, indent=1) + "\n")
    return written


def evaluate_marks(run_dir: Path, results: Path, name: str, seed: int, files: dict, size: Size,
                   logged: dict[int, dict], sampler_factory: Callable | None = None) -> dict[int, dict]:
    """Evaluates each mark's kept checkpoint of a finished run that has no evaluation yet, then removes the
    checkpoint; returns mark -> its evaluation (earlier ones read back). Mark 0 is the start's, made by
    :func:`evaluate_checkpoint` once per start (see the runner)."""
    drawn = {s: v["reinforce_ada/samples_total"] for s, v in logged.items() if s > 0}
    reached = crossings(drawn, size.marks)
    missing = [m for m in size.marks if m not in reached]
    if missing:
        raise SystemExit(f"[learning] {name} seed {seed}: the run never reached mark(s) {missing}")
    done = {}
    for mark, (step, total) in sorted(reached.items()):
        out = evaluation_path(results, name, seed, mark)
        if not out.exists():
            folder = mark_folder(run_dir, mark)
            if not folder.exists():
                raise SystemExit(f"[learning] {name} seed {seed}: its checkpoint at mark {mark} was lost with its work "
                                 "folder before it was evaluated: move its record away to run it again")
            evaluate_checkpoint(folder, files, size, out, {"mark": mark, "step": step, "responses": total},
                                sampler_factory)
            shutil.rmtree(folder, ignore_errors=True)
        done[mark] = json.loads(out.read_text())
    return done


if __name__ == "__main__":  # the child process of evaluate_checkpoint: one evaluation, given as JSON
    _job = json.loads(sys.argv[1])
    _evaluate(Path(_job["model"]), _job["files"], _job["k"], _job["max_tokens"], Path(_job["out"]), _job["about"])
