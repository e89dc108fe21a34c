"""The third protocol's marks: while a run trains, the checkpoint of each step that reaches a mark of responses drawn
is kept (hard links, so the trainer's own clean-up of older checkpoints does not remove it) and the run is stopped at
the budget; after it, each kept checkpoint (and the start, mark 0) is evaluated on the held-out sets with the
package's evaluation (:func:`reinforce_ada.tasks.evaluate.evaluate_model`), every question with its own seed, and its
per-question results are written as JSON beside the run's record, with the run's identity (its start and crossings,
so that a later run of the arm and seed never takes them for its own). A run's record is written only once its marks
are evaluated.

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
from studies.learning.processes import dies_with
from studies.learning.protocol import FILTERED, UNFILTERED, Size

EVAL_SEED = 0  # every arm, mark and start: the same draws per question
IN_PROCESS = False  # tests: evaluate in this process (with vLLM replaced)


def mark_folder(run_dir: Path, mark: int) -> Path:
    """Where a run keeps the checkpoint it had at ``mark`` responses (the evaluation's part of a verl
    ``global_step_N`` folder)."""
    return run_dir / "marks" / f"mark{mark}"


def kept_step(run_dir: Path, mark: int) -> int | None:
    """The step whose checkpoint a mark's folder holds once it is whole (``step.txt``, written last), else None."""
    try:
        return int((mark_folder(run_dir, mark) / "step.txt").read_text())
    except (FileNotFoundError, ValueError):
        return None


def keep_checkpoint(run_dir: Path, step: int, mark: int) -> Path:
    """Hard-links what the evaluation needs of the checkpoint of ``step`` (``run_dir/checkpoints/global_step_<step>``:
    its model shards, ``fsdp_config.json`` and ``huggingface/``, not the optimiser's state) into the mark's folder,
    then writes ``step.txt``: a folder without it (a copy killed half-way) is made again.

    Raises:
        FileNotFoundError: If the step's checkpoint is not on disk (the trainer must save every crossing step).
    """
    source, target = run_dir / "checkpoints" / f"global_step_{step}" / "actor", mark_folder(run_dir, mark)
    shards = sorted(source.glob("model_world_size_*_rank_*.pt"))
    if not shards:
        raise FileNotFoundError(f"{source.parent}: the checkpoint of step {step}, which reached {mark} responses, is "
                                f"missing, so the mark cannot be evaluated: remove the run folder {run_dir} (and its "
                                "record and evaluations, if any) to run it again")
    shutil.rmtree(target, ignore_errors=True)
    (target / "actor").mkdir(parents=True)
    for path in [*shards, source / "fsdp_config.json"]:
        if path.exists():
            os.link(path, target / "actor" / path.name)
    if (source / "huggingface").is_dir():
        shutil.copytree(source / "huggingface", target / "actor" / "huggingface", copy_function=os.link)
    (target / "step.txt").write_text(f"{step}\n")
    return target


class BudgetWatch:
    """Follows a run's logged steps: keeps the checkpoint of each step that reaches a mark, and says when the run
    has drawn its budget.

    Every reached mark whose folder is not whole is kept on construction, at each step and by :meth:`keep_reached`
    (before the record), so a crossing step logged just before the harness was killed is kept when it resumes, and
    no checkpoint of a crossing step is removed before it is kept.

    Args:
        run_dir: The run's folder (its ``checkpoints`` and ``marks``).
        size: The protocol's sizes (``budget``, ``marks``).
        logged: Step -> logged values of the run's earlier attempts (a resumed run counts their responses).
    """

    def __init__(self, run_dir: Path, size: Size, logged: dict[int, dict] | None = None):
        self.run_dir, self.size = run_dir, size
        self.drawn = {s: v["reinforce_ada/samples_total"] for s, v in (logged or {}).items() if s > 0}
        self.keep_reached()

    def unkept(self) -> dict[int, int]:
        """Mark -> its crossing step, for the marks reached whose folder does not hold that step whole."""
        return {mark: at for mark, (at, _) in crossings(self.drawn, self.size.marks).items()
                if kept_step(self.run_dir, mark) != at}

    def keep_reached(self) -> None:
        """Keeps the checkpoint of every reached mark that has no whole folder of its crossing step."""
        for mark, step in self.unkept().items():
            keep_checkpoint(self.run_dir, step, mark)

    def on_step(self, step: int, values: dict) -> bool:
        """Records a logged step; returns whether the run has now drawn its budget (stop it)."""
        self.drawn[step] = values["reinforce_ada/samples_total"]
        self.keep_reached()
        self._remove_old_checkpoints(step)
        return self.done()

    def _remove_old_checkpoints(self, step: int) -> None:
        """Deletes the checkpoints of steps before ``step`` except the newest saved one and any crossing step's not
        kept yet: the marks' are linked already, and a resumed run needs only the newest."""
        saved = {int(f.name.rsplit("_", 1)[1]): f for f in (self.run_dir / "checkpoints").glob("global_step_*")
                 if f.name.rsplit("_", 1)[1].isdigit()}
        newest, pending = max(saved, default=None), set(self.unkept().values())
        for at, folder in saved.items():
            if at < step and at != newest and at not in pending:
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
                              env=demo.trainer_env(), preexec_fn=dies_with(os.getpid())).returncode
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
    partial = out.with_name(out.name + ".partial")  # renamed when whole: a killed write leaves no half a file
    partial.write_text(json.dumps(written, indent=1) + "\n")
    os.replace(partial, out)
    return written


def run_identity(logged: dict[int, dict], size: Size, start_id: str | None) -> dict:
    """What tells one run of an arm and seed from another: its start's hash and, per mark, the step that crossed
    it and the responses drawn then (as JSON holds them)."""
    drawn = {s: v["reinforce_ada/samples_total"] for s, v in logged.items() if s > 0}
    reached = crossings(drawn, size.marks)
    return json.loads(json.dumps({"start": start_id, "crossings": {
        str(mark): {"step": step, "responses": total} for mark, (step, total) in sorted(reached.items())}}))


def evaluate_marks(run_dir: Path, results: Path, name: str, seed: int, files: dict, size: Size,
                   logged: dict[int, dict], start_id: str | None, sampler_factory: Callable | None = None
                   ) -> dict[int, dict]:
    """Evaluates each mark's kept checkpoint of a run that has no evaluation of this run yet (its stored identity,
    :func:`run_identity`, differs: another run of the arm and seed); returns mark -> its evaluation (earlier ones read
    back). The kept checkpoints stay until the run's record is written (:func:`studies.learning.training.train_run`).
    Mark 0 is the start's, made by :func:`evaluate_checkpoint` once per start (see the runner).

    Raises:
        SystemExit: If a mark is not reached, or has no evaluation of this run and no kept checkpoint of its step;
            the message names what to remove to run the arm again.
    """
    from studies.learning.records import record_path

    drawn = {s: v["reinforce_ada/samples_total"] for s, v in logged.items() if s > 0}
    reached = crossings(drawn, size.marks)
    missing = [m for m in size.marks if m not in reached]
    if missing:
        raise SystemExit(f"[learning] {name} seed {seed}: the run never reached mark(s) {missing}")
    identity, done = run_identity(logged, size, start_id), {}
    for mark, (step, total) in sorted(reached.items()):
        out = evaluation_path(results, name, seed, mark)
        stored = json.loads(out.read_text()) if out.exists() else None
        if stored is None or stored.get("run") != identity:
            if kept_step(run_dir, mark) != step:
                held = "no evaluation" if stored is None else "an evaluation of another run (start or crossings differ)"
                raise SystemExit(
                    f"[learning] {name} seed {seed}: mark {mark} (step {step}) has {held} and its checkpoint is not "
                    f"kept: to run the arm again, remove its record ({record_path(results, name, seed)}), its "
                    f"evaluations ({out.parent}/) and its work folder ({run_dir}/)")
            stored = evaluate_checkpoint(mark_folder(run_dir, mark), files, size, out,
                                         {"mark": mark, "step": step, "responses": total, "run": identity},
                                         sampler_factory)
        done[mark] = stored
    return done


if __name__ == "__main__":  # the child process of evaluate_checkpoint: one evaluation, given as JSON
    _job = json.loads(sys.argv[1])
    _evaluate(Path(_job["model"]), _job["files"], _job["k"], _job["max_tokens"], Path(_job["out"]), _job["about"])
