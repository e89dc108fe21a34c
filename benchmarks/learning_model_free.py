"""Does Reinforce-Ada learn more than GRPO? A model-free study: hundreds of seeds in minutes.

    python benchmarks/learning_model_free.py [--seeds 200] [--steps 40] [--quick] [--write benchmarks/RESULTS.md]

The policy is small enough to train without a language model, and learning on one prompt moves
the others. Each prompt x has a pass rate p_x = sigmoid(a_x + w . phi_x): its own logit a_x
and a shared vector w over fixed features phi_x = (1, random), so the constant feature is a
"general skill" every update moves. A response is a coin: correct with probability p_x, and its
log-probability gradient with respect to the logit is (y - p_x). Each method trains with its
exact sampler and estimator from the package's core (``reinforce_ada.step.run_step``, the pass
rate tracker for Est): advantages ``(r - pool mean) * prompt weight`` on the kept samples, no
std division (the reference runs), the policy-gradient averaged over the step's kept samples
(verl's token-mean, with one token per response) and applied with Adam.

The data regime is the paper's: base pass rates drawn from Beta(0.5, 2) (early training), then
the "easy" filter, keeping a prompt whose empirical pass rate over 16 samples of the base
policy is in (0, 0.3125]. Held-out prompts come from the same filtered distribution (their own
logits are never trained: they improve only through w) and from the unfiltered one.

Methods, all with n = 4 kept per prompt, on the same prompts, features, steps and optimiser:
GRPO-n4; GRPO with n matched to balance's mean samples per prompt (measured here first);
Reinforce-Ada balance and pos (M 8, R 4); Est at GRPO-n4's budget. Rewards use common random
numbers: the i-th sample a prompt draws at a step is correct iff a uniform drawn from (seed,
prompt, step, i) is below its pass rate, for every method, as ``reinforce_ada.sampling_seed``
does for vLLM. So the paired difference to GRPO-n4 at one seed removes the prompt and sampling
luck the methods share, and ``seeds for the LLM benchmark`` estimates how many seeds a paired
comparison at that effect size needs (two-sided 5%, power 80%).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import write_section  # noqa: E402
from reinforce_ada.config import SamplerConfig  # noqa: E402
from reinforce_ada.step import run_step  # noqa: E402
from reinforce_ada.tracker import make_tracker, plan_first_requests  # noqa: E402

RESULTS_JSON = ROOT / "benchmarks" / "results" / "learning_model_free.json"
EASY_MAX = 0.3125  # the paper's "easy" filter on 16 base samples
FILTER_SAMPLES = 16


@dataclass(frozen=True)
class Setting:
    """The study's fixed settings (one per run of the harness)."""

    steps: int = 40
    batch: int = 32  # prompts per step
    train_prompts: int = 256
    heldout_prompts: int = 256
    features: int = 8  # phi_x: a constant and features - 1 standard normals / sqrt
    lr: float = 0.05
    eval_every: int = 5
    n: int = 4
    optimizer: str = "adam"  # or "sgd": plain gradient ascent, where the gradient's size matters too
    eval_questions: int = 64  # the LLM benchmark's measurement: Avg@eval_k on this many held-out questions
    eval_k: int = 8


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def logit(p: np.ndarray) -> np.ndarray:
    return np.log(p) - np.log1p(-p)


@dataclass
class Task:
    """One seed's prompts: initial logits and features of the training and held-out sets."""

    train_logits: np.ndarray
    train_features: np.ndarray
    heldout_logits: np.ndarray  # filtered like the training set
    heldout_features: np.ndarray
    unfiltered_logits: np.ndarray
    unfiltered_features: np.ndarray
    candidates: int  # base prompts drawn to find the filtered ones


def make_task(seed: int, setting: Setting) -> Task:
    """Draws prompts from Beta(0.5, 2) and keeps those the easy filter keeps (16 base samples)."""
    rng = np.random.default_rng([seed, 1])

    def draw(count: int, filtered: bool) -> tuple[np.ndarray, np.ndarray, int]:
        kept, tried = [], 0
        while len(kept) < count:
            p = np.clip(rng.beta(0.5, 2.0, size=4 * count), 1e-4, 1 - 1e-4)
            tried += len(p)
            if filtered:
                correct = rng.binomial(FILTER_SAMPLES, p)
                p = p[(correct > 0) & (correct <= EASY_MAX * FILTER_SAMPLES)]
            kept.extend(p.tolist())
        phi = rng.standard_normal((count, setting.features)) / math.sqrt(setting.features)
        phi[:, 0] = 1.0
        return logit(np.array(kept[:count])), phi, tried

    train, train_phi, tried = draw(setting.train_prompts, True)
    heldout, heldout_phi, _ = draw(setting.heldout_prompts, True)
    unfiltered, unfiltered_phi, _ = draw(setting.heldout_prompts, False)
    return Task(train, train_phi, heldout, heldout_phi, unfiltered, unfiltered_phi, tried)


def method_configs(n: int, grpo_matched: int | None) -> dict[str, SamplerConfig]:
    """The sampler of each method. GRPO-k: one round of k, the group is the whole round."""
    methods = {
        "grpo_n4": SamplerConfig(n=n, round_size=n, max_rounds=1),
        "balance": SamplerConfig(n=n, round_size=8, max_rounds=4, variant="balance"),
        "pos": SamplerConfig(n=n, round_size=8, max_rounds=4, variant="pos"),
        "est": SamplerConfig(n=n, round_size=8, max_rounds=4, variant="est"),
    }
    if grpo_matched is not None and grpo_matched != n:
        methods[f"grpo_n{grpo_matched}"] = SamplerConfig(n=grpo_matched, round_size=grpo_matched, max_rounds=1)
    return methods


@dataclass
class Adam:
    lr: float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    t: int = 0
    state: dict = field(default_factory=dict)

    sgd: bool = False

    def step(self, name: str, param: np.ndarray, grad: np.ndarray) -> None:
        """Gradient ascent on ``param`` in place."""
        if self.sgd:
            param += self.lr * grad
            return
        m, v = self.state.get(name, (np.zeros_like(param), np.zeros_like(param)))
        m = self.beta1 * m + (1 - self.beta1) * grad
        v = self.beta2 * v + (1 - self.beta2) * grad**2
        self.state[name] = (m, v)
        m_hat, v_hat = m / (1 - self.beta1**self.t), v / (1 - self.beta2**self.t)
        param += self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


def train(task: Task, config: SamplerConfig, seed: int, setting: Setting) -> list[dict]:
    """One method, one seed: the evaluated steps' records (cumulative samples)."""
    a, w = task.train_logits.copy(), np.zeros(setting.features)
    adam, tracker = Adam(setting.lr, sgd=setting.optimizer == "sgd"), make_tracker(config)
    order = np.random.default_rng([seed, 2])  # the prompt order: the same for every method
    epoch: list[int] = []
    records, samples, signal = [], 0, []
    start = time.perf_counter()

    measure = np.random.default_rng([seed, 4, zlib_crc(config)])  # each method's own evaluation noise

    def evaluate(step: int) -> None:
        heldout = sigmoid(task.heldout_logits + task.heldout_features @ w)
        questions = heldout[: setting.eval_questions]
        records.append({
            "step": step,
            "heldout_acc": float(heldout.mean()),
            "measured_acc": float(measure.binomial(setting.eval_k, questions).mean() / setting.eval_k),
            "unfiltered_acc": float(sigmoid(task.unfiltered_logits + task.unfiltered_features @ w).mean()),
            "train_acc": float(sigmoid(a + task.train_features @ w).mean()),
            "samples": samples,
            "signal_frac": float(np.mean(signal)) if signal else 0.0,
            "wall_s": time.perf_counter() - start,
        })

    evaluate(0)
    for step in range(1, setting.steps + 1):
        while len(epoch) < setting.batch:
            epoch.extend(order.permutation(setting.train_prompts).tolist())
        batch, epoch = epoch[: setting.batch], epoch[setting.batch :]
        pass_rates = sigmoid(a[batch] + task.train_features[batch] @ w)
        drawn = [0] * len(batch)

        def generate(requests, batch=batch, pass_rates=pass_rates, drawn=drawn, step=step):
            out = {}
            for i, count in requests.items():
                # common random numbers: sample j of prompt x at this step gets the same uniform in every method
                u = np.random.default_rng([seed, 3, batch[i], step]).random(64)[drawn[i] : drawn[i] + count]
                out[i] = (u < pass_rates[i]).astype(float).tolist()
                drawn[i] += count
            return out

        keys = [str(x) for x in batch]
        first = plan_first_requests(tracker, keys, config)
        result = run_step(keys, config, generate, first_requests=first)
        tracker.update_many((k, s.drawn, s.num_pos) for k, s in zip(keys, result.samplers))
        samples += sum(s.drawn for s in result.samplers)

        grad_z, kept = np.zeros(len(batch)), 0
        with_signal = 0
        for i, (sampler, group) in enumerate(zip(result.samplers, result.groups)):
            if group.dropped:
                continue
            r = np.array([sampler.rewards[j] for j in group.kept])
            advantages = (r - group.stats.mean) * group.stats.weight
            grad_z[i] = float(advantages @ (r - pass_rates[i]))  # d log pi / d logit = y - p
            kept += len(r)
            with_signal += bool(np.any(np.abs(advantages) > 1e-12))
        signal.append(with_signal / len(batch))
        grad_z /= max(kept, 1)
        adam.t += 1
        grad_a = np.zeros_like(a)
        np.add.at(grad_a, batch, grad_z)
        adam.step("a", a, grad_a)
        adam.step("w", w, task.train_features[batch].T @ grad_z)
        if step % setting.eval_every == 0 or step == setting.steps:
            evaluate(step)
    return records


def zlib_crc(config: SamplerConfig) -> int:
    """A stable number per method (its settings), to seed its evaluation noise."""
    import zlib

    return zlib.crc32(repr(config).encode())


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% interval (normal approximation; hundreds of seeds)."""
    x = np.asarray(values, dtype=float)
    return float(x.mean()), float(1.96 * x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0


def seeds_needed(differences: list[float]) -> float:
    """Seeds a paired comparison needs to find this mean difference (two-sided 5%, power 80%)."""
    d = np.asarray(differences, dtype=float)
    if abs(d.mean()) < 1e-12:
        return math.inf
    return float(math.ceil(((1.96 + 0.84) * d.std(ddof=1) / abs(d.mean())) ** 2))


def paired_effect(records: list[dict], baseline: list[dict]) -> tuple[float, float, float, float]:
    """A method's last-step records against the baseline's, seed by seed: the mean difference in exact held-out
    accuracy, its 95% half-width, and the seeds a paired comparison needs to see it with the exact and with the
    measured accuracy."""
    exact = [r["heldout_acc"] - b["heldout_acc"] for r, b in zip(records, baseline)]
    mean, ci = mean_ci(exact)
    measured = [r["measured_acc"] - b["measured_acc"] for r, b in zip(records, baseline)]
    return mean, ci, seeds_needed(exact), seeds_needed(measured)


def run(seeds: int, setting: Setting, progress=print) -> dict:
    """All methods over ``seeds`` seeds: the matched GRPO's n from balance's first pass."""
    tasks = {seed: make_task(seed, setting) for seed in range(seeds)}
    runs: dict[str, dict[int, list[dict]]] = {}
    started = time.perf_counter()
    balance = method_configs(setting.n, None)["balance"]
    runs["balance"] = {seed: train(tasks[seed], balance, seed, setting) for seed in range(seeds)}
    per_prompt = np.mean([r[-1]["samples"] / (setting.steps * setting.batch) for r in runs["balance"].values()])
    matched = int(round(per_prompt))
    for name, config in method_configs(setting.n, matched).items():
        if name == "balance":
            continue
        runs[name] = {seed: train(tasks[seed], config, seed, setting) for seed in range(seeds)}
        progress(f"[learning_model_free] {name}: {seeds} seeds done ({time.perf_counter() - started:.0f} s)")
    return {"matched_n": matched, "balance_samples_per_prompt": float(per_prompt), "runs": runs,
            "filtered_share": setting.train_prompts / np.mean([t.candidates for t in tasks.values()]),
            "seconds": time.perf_counter() - started}


def summarize(study: dict, setting: Setting) -> tuple[list[dict], str]:
    """Rows for the JSON file and the markdown tables."""
    runs = study["runs"]
    rows = [
        {"method": m, "seed": s, **{k: round(v, 5) if isinstance(v, float) else v for k, v in rec.items()}}
        for m, by_seed in runs.items()
        for s, recs in by_seed.items()
        for rec in recs
    ]
    seeds = sorted(runs["grpo_n4"])
    final = {m: [by_seed[s][-1] for s in seeds] for m, by_seed in runs.items()}
    lines = [
        "| method | held-out acc (filtered) | held-out acc (unfiltered) | train acc | samples / prompt / step | "
        "groups with signal | paired diff to GRPO-n4 (filtered) | seeds to see it: exact | seeds to see it: "
        "measured |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    start = mean_ci([runs["grpo_n4"][s][0]["heldout_acc"] for s in seeds])[0]
    for method, records in final.items():
        h, u, t = (mean_ci([r[k] for r in records]) for k in ("heldout_acc", "unfiltered_acc", "train_acc"))
        per_prompt = np.mean([r["samples"] for r in records]) / (setting.steps * setting.batch)
        sig = np.mean([r["signal_frac"] for r in records])
        if method == "grpo_n4":
            diff, need, need_measured = "-", "-", "-"
        else:
            m, ci, exact, measured = paired_effect(records, final["grpo_n4"])
            diff, need, need_measured = f"{100 * m:+.2f} ± {100 * ci:.2f} pts", f"{exact:.0f}", f"{measured:.0f}"
        lines.append(
            f"| {method} | {100 * h[0]:.2f} ± {100 * h[1]:.2f}% | {100 * u[0]:.2f} ± {100 * u[1]:.2f}% | "
            f"{100 * t[0]:.2f} ± {100 * t[1]:.2f}% | {per_prompt:.2f} | {100 * sig:.1f}% | {diff} | {need} | "
            f"{need_measured} |"
        )
    header = (
        f"{len(seeds)} seeds, {setting.steps} steps of {setting.batch} prompts from {setting.train_prompts} "
        f"(easy filter kept {100 * study['filtered_share']:.1f}% of Beta(0.5, 2) prompts), n {setting.n}, "
        f"{'Adam' if setting.optimizer == 'adam' else 'SGD'} lr {setting.lr}; held-out accuracy "
        "(the exact mean pass rate of 256 held-out prompts) at the last step "
        f"(start: {100 * start:.2f}%), mean ± 95% interval over seeds. The matched GRPO draws "
        f"{study['matched_n']} per prompt (balance drew {study['balance_samples_per_prompt']:.2f}). Seeds to see "
        "it: how many seeds a paired comparison needs to find the difference (two-sided 5%, power 80%), with the "
        f"exact accuracy, and with the accuracy measured as the LLM benchmark measures it (Avg@{setting.eval_k} on "
        f"{setting.eval_questions} held-out questions, each method its own sampling noise). Wall time "
        f"{study['seconds']:.0f} s."
    )
    return rows, header + "\n\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--lr", type=float, default=Setting.lr)
    parser.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    parser.add_argument("--quick", action="store_true", help="4 seeds, 10 steps (seconds): the harness works")
    parser.add_argument("--write", default=None, help="RESULTS.md to write the section into (and the JSON)")
    parser.add_argument("--json", default=str(RESULTS_JSON), help="where --write puts every evaluated record")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.steps = 4, 10
    if args.seeds < 2 or args.steps < 1 or not args.lr > 0:
        parser.error("--seeds must be >= 2, --steps >= 1 and --lr > 0")
    setting = Setting(steps=args.steps, lr=args.lr, optimizer=args.optimizer)
    study = run(args.seeds, setting, progress=lambda line: print(line, file=sys.stderr, flush=True))
    rows, table = summarize(study, setting)
    command = "python benchmarks/learning_model_free.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    body = table + f"\n\nCommand: `{command.strip()}`"
    print(body)
    if args.write:
        # each optimiser and learning rate keeps its own section and records
        variant = "" if (args.optimizer, args.lr) == ("adam", Setting.lr) else f"_{args.optimizer}_lr{args.lr:g}"
        records = Path(args.json).with_name(Path(args.json).stem + variant + ".json")
        records.parent.mkdir(parents=True, exist_ok=True)
        records.write_text(json.dumps({"setting": setting.__dict__, "matched_n": study["matched_n"], "runs": rows}))
        title = "Learning without a model: Reinforce-Ada vs GRPO" + (
            f" ({args.optimizer}, lr {args.lr:g})" if variant else ""
        )
        write_section(args.write, "learning_model_free" + variant, title, body)


if __name__ == "__main__":
    main()
