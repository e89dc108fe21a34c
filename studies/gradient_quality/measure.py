"""Which update is better? The quality of each method's update, measured on SmolLM2-135M without training runs.

    python -m studies.gradient_quality [--checkpoints base format] [--work outputs/gradient_quality]
        [--json studies/gradient_quality/results/gradient_quality.json]
        [--write studies/gradient_quality/README.md] [--quick]

A learning curve mixes an estimator's quality with where each run's noisy walk happens to be. This harness
measures the update itself, at fixed weights, for every method, on the same responses:

1. checkpoints: the base model, and a common one after the answer format is learned (5 steps
   of GRPO-n4 through verl's trainer on the learning benchmark's training prompts, made once and kept);
2. pools, through the project's own sampling path (``reinforce_ada.tasks.vllm_sampling``, the engine data
   preparation uses) and the math reward: ``train_k`` responses for each of ``train_prompts`` training prompts
   and ``heldout_k`` for each of ``heldout_prompts`` held-out questions (the learning benchmark's sets);
3. per-response gradients of log pi(response | prompt) (summed over the response's tokens), count-sketched to
   ``dims`` dimensions with a seeded hash and sign per parameter (inner products are unbiased); 8 responses of
   one prompt at a time, from one forward and backward pass (:func:`sketch_responses`);
4. replays: each training prompt's pool is split in halves. Every method's sampler replays the first half in
   a seeded order through the package's core (its real exit rules, groups, budgets and Est allocation,
   :func:`reinforce_ada.core.step.run_step`), on batches of ``batch`` prompts; its update is built with the
   package's real advantages and weights (:func:`reinforce_ada.core.advantage.outcome_advantages`) and
   aggregated as verl's ``token-mean`` does (sum of advantage x summed token gradients over the batch's
   kept tokens). The second half gives each prompt's reference gradient of its pass rate, with a
   leave-one-out baseline (unbiased); the held-out pools give the held-out gradient.

Per method, averaged over batches of prompts (each batch a random set of ``batch`` training prompts, replayed
``replays_per_batch`` times): the cosine of the update with the batch's reference gradient and with the
held-out gradient; the first-order held-out gain of a unit-norm step (the held-out gradient's component along
the update); the signal-to-noise ratio (squared norm of the expected update over the expected squared
deviation from it, over replays of one batch) and the same per sample drawn. The primary measure, fixed before
the first full run, is the cosine with the held-out gradient, compared as each method's paired difference (same
batches, same replay orders) to GRPO-n4 and to balance. Batches share prompts, so the 95% intervals come from
a jackknife over training prompts (each estimate recomputed without the batches holding one prompt). The
reference gradients' own split-half reliability (cosine of two disjoint halves) says how high a cosine can be.

Resumable: pools and sketches are saved per prompt as they are made, named by the prompt's key, and a
larger size extends them (more prompts, more responses a pool); the analysis reruns in minutes. Results:
``--json`` and the ``gradient_quality`` section of the study's README.md, each with the date, machine and command
(:mod:`studies.gradient_quality.report`; ``--report-only`` rewrites the section from ``--json`` alone).
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from benchmarks.results import machine
from reinforce_ada.core.advantage import outcome_advantages
from reinforce_ada.core.config import SamplerConfig
from reinforce_ada.core.step import run_step
from reinforce_ada.core.tracker import PassRateTracker, plan_first_requests, prompt_identity
from studies.gradient_quality.report import report, write_report
from studies.stats import t_quantile

ROOT = Path(__file__).resolve().parents[2]


PAIRED_REFERENCES = ("grpo_n4", "balance")  # every method's paired difference is taken against these
PRIMARY = "cos_heldout"  # fixed before the first full run: the update's cosine with the held-out gradient


@dataclass(frozen=True)
class Size:
    train_prompts: int = 48
    train_k: int = 64
    heldout_prompts: int = 64
    heldout_k: int = 32
    dims: int = 16384
    batch: int = 8
    batches: int = 60
    replays_per_batch: int = 8
    max_tokens: int = 32


DEFAULT = Size()
SKETCH_BATCH = 8  # responses per forward and backward pass when sketching their gradients
QUICK = Size(train_prompts=4, train_k=64, heldout_prompts=4, heldout_k=8, dims=512, batch=2, batches=6,
             replays_per_batch=4)


def method_configs(matched_n: int) -> dict[str, SamplerConfig]:
    """Every method, as the package's core runs it (n 4; M 8 and R 4 for the adaptive ones, N_max 32)."""
    grpo = {f"grpo_n{k}": SamplerConfig(n=k, round_size=k, max_rounds=1) for k in (4, 8, 16, matched_n)}
    seq = {
        "balance": SamplerConfig(),
        "balance_stratified": SamplerConfig(downsample_correction="stratified"),
        "pos": SamplerConfig(variant="pos"),
        "pos_stratified": SamplerConfig(variant="pos", downsample_correction="stratified"),
        "balance_inverse": SamplerConfig(prompt_weight="inverse"),
        "balance_inverse_stratified": SamplerConfig(prompt_weight="inverse", downsample_correction="stratified"),
        "est": SamplerConfig(variant="est"),
        "balance_budget2": SamplerConfig(sample_budget=2.0),
    }
    return {**grpo, **seq}


def _say(message: str) -> None:
    print(f"[gradient_quality] {message}", flush=True)


# ------------------------------------------------------------------------------------------
# 1-2: checkpoints and pools
# ------------------------------------------------------------------------------------------
def learning_sets(work: Path, size: Size, model: Path) -> tuple[list[dict], list[dict]]:
    """The learning benchmark's filtered training prompts and held-out questions (its committed pass rates:
    nothing is sampled again), and the base model's pass rate of each training prompt."""
    import pandas as pd

    from studies.learning import protocol as learning_protocol
    from studies.learning.data import prepare_data

    data = prepare_data(work / "learning_data", ROOT / learning_protocol.PROTOCOLS["first"].results, model,
                        learning_protocol.DEFAULT, learning_protocol.EASY, 0)

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
    """The checkpoint after the answer format is learned, as the learning benchmark's second protocol starts from
    (:func:`studies.learning.start.format_checkpoint`, on the first protocol's training prompts); made once."""
    from studies.learning import protocol as learning_protocol
    from studies.learning import start as learning_start
    from studies.learning.data import prepare_data

    data = prepare_data(work / "learning_data", ROOT / learning_protocol.PROTOCOLS["first"].results, base,
                        learning_protocol.DEFAULT, learning_protocol.EASY, 0)
    return learning_start.format_checkpoint(work, base, data, learning_protocol.DEFAULT)


class WallTime:
    """The seconds spent making a checkpoint's pools and sketches, in ``folder/wall_seconds.json``, added as each
    prompt's work is saved: a run killed mid-way keeps the time of the work it kept, not of the prompt it lost."""

    def __init__(self, folder: Path):
        self.file = folder / "wall_seconds.json"
        self.since = time.perf_counter()

    def seconds(self) -> float:
        return json.loads(self.file.read_text())["seconds"] if self.file.exists() else 0.0

    def add(self) -> None:
        now = time.perf_counter()
        self.file.parent.mkdir(parents=True, exist_ok=True)
        self.file.write_text(json.dumps({"seconds": self.seconds() + now - self.since}))
        self.since = now


def pool_key(prompt: dict) -> str:
    """The name of a prompt's pool and sketch files: its text's key, so that a larger sample of prompts finds the
    pools of the prompts it shares with a smaller one."""
    return prompt_identity(prompt["prompt"])


def make_pools(folder: Path, model: Path, prompts: list[dict], k: int, size: Size, seed: int, sampler=None) -> None:
    """``folder/pool_<key>.json``: k responses of each prompt (text, token ids, reward), through the project's own
    sampling path and the math reward. Pools already made are kept; a pool of fewer than k responses is extended
    with new draws (the first draws use ``seed``, the draws after h responses ``seed + 1000 h``, so that an
    extension never repeats the engine's earlier samples)."""
    from reinforce_ada.tasks.reward import compute_score

    folder.mkdir(parents=True, exist_ok=True)
    pools = [_read_pool(folder, p) for p in prompts]
    short = [i for i in range(len(prompts)) if len(pools[i]) < k]
    if not short:
        return
    spent, start, done = WallTime(folder.parent), time.perf_counter(), 0
    for have in sorted({len(pools[i]) for i in short}):
        todo = [i for i in short if len(pools[i]) == have]
        engine, draw = None, sampler
        if draw is None:
            from reinforce_ada.tasks.vllm_sampling import chat_sampler

            engine, draw = chat_sampler(str(model), temperature=1.0, max_tokens=size.max_tokens,
                                        seed=seed + 1000 * have)
        for chunk_start in range(0, len(todo), 16):
            chunk = todo[chunk_start:chunk_start + 16]
            responses = draw([prompts[i]["prompt"] for i in chunk], k - have, token_ids=True)
            for i, pairs in zip(chunk, responses):
                pools[i] += [{"text": text, "ids": ids,
                              "reward": compute_score("arithmetic", text, prompts[i]["answer"])["score"]}
                             for text, ids in pairs]
                (folder / f"pool_{pool_key(prompts[i])}.json").write_text(json.dumps(pools[i]))
            spent.add()
            done += len(chunk)
            _say(f"{folder.name}: {done}/{len(short)} prompts sampled ({time.perf_counter() - start:.0f} s)")
        if engine is not None:
            from reinforce_ada.tasks.vllm_sampling import close_engine

            close_engine(engine)


def _read_pool(folder: Path, prompt: dict) -> list[dict]:
    path = folder / f"pool_{pool_key(prompt)}.json"
    return json.loads(path.read_text()) if path.exists() else []


# ------------------------------------------------------------------------------------------
# 3: sketched per-response gradients
# ------------------------------------------------------------------------------------------
class Sketch:
    """A count-sketch of the model's parameter space: each element gets a seeded sign, and element ``j`` of a
    parameter lands in bucket ``(j + offset) % dims`` (a seeded offset per parameter). Random signs alone make
    sketched inner products unbiased; folding contiguous blocks instead of scattering to random buckets costs
    one multiply and one sum per element (a random scatter over 135M elements took 0.43 s per response)."""

    def __init__(self, model, dims: int, seed: int = 0):
        import torch

        self.dims = dims
        self.parts = {}  # id(param) -> (param, offset, sign)
        for index, (_, param) in enumerate(sorted(model.named_parameters())):
            if not param.requires_grad:
                continue
            generator = torch.Generator().manual_seed(seed * 1_000_003 + index)
            offset = int(torch.randint(0, dims, (1,), generator=generator))
            sign = torch.randint(0, 2, (param.numel(),), generator=generator).to(param.dtype) * 2 - 1
            self.parts[id(param)] = (param, offset, sign)

    def fold(self, param, grads):
        """The sketches of a batch of gradients of one parameter: ``(batch, *param.shape)`` -> ``(batch, dims)``."""
        import torch

        _, offset, sign = self.parts[id(param)]
        signed = grads.reshape(len(grads), -1) * sign
        full = signed.shape[1] - signed.shape[1] % self.dims
        folded = (signed[:, :full].view(len(grads), -1, self.dims).sum(1) if full
                  else torch.zeros(len(grads), self.dims, dtype=signed.dtype))
        folded[:, : signed.shape[1] - full] += signed[:, full:]
        return folded.roll(offset, dims=1)

    def of_gradients(self):
        """The sketch of the gradients held in the parameters' ``.grad``."""
        import torch

        out = torch.zeros(self.dims)
        for param, _, _ in self.parts.values():
            if param.grad is not None:
                out += self.fold(param, param.grad[None])[0]
        return out


def sketch_responses(model, sketch: Sketch, prompt_ids: list[int], responses: list[list[int]]):
    """The sketched gradient of each response's summed log-probability given the prompt, for a batch of
    responses in one forward and backward pass: ``(len(responses), dims)``.

    Per-response gradients come from the batch's activations and output gradients (a Linear weight's gradient of
    response b is its output gradient transposed times its input, over b's positions), so autograd computes no
    summed weight gradient; the model's parameters must not require grad. Right-padding is exact: a causal model's
    earlier positions never see the padding, and padded positions carry no loss. Llama- and Qwen2-style models
    (Linear layers, RMSNorm, embeddings tied or not to a head without bias) are covered; any other parameter is an
    error.
    """
    import torch

    inner, head = model.model, model.lm_head
    batch, start, length = len(responses), len(prompt_ids) - 1, max(len(r) for r in responses)
    input_ids = torch.tensor([list(prompt_ids) + r + [r[-1]] * (length - len(r)) for r in responses])
    targets = torch.tensor([r + [0] * (length - len(r)) for r in responses])
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (length - len(r)) for r in responses])
    out = torch.zeros(batch, sketch.dims)
    covered = set()
    hooks = []

    def linear_hook(module, inputs, output):
        x = inputs[0].detach()

        def add(grad) -> None:  # returns nothing: a tensor hook's return value would replace the gradient
            # per response b: its output gradient transposed times its input, (batch, out, in); this costs what
            # the batch's summed weight gradient would
            out.add_(sketch.fold(module.weight, torch.bmm(grad.transpose(1, 2), x)))
            if module.bias is not None:
                out.add_(sketch.fold(module.bias, grad.sum(1)))

        output.register_hook(add)

    def norm_hook(module, inputs, output):
        x = inputs[0].detach().to(torch.float32)
        normed = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + module.variance_epsilon)).to(inputs[0].dtype)

        def add(grad) -> None:
            out.add_(sketch.fold(module.weight, (grad * normed).sum(1)))

        output.register_hook(add)

    for module in inner.modules():
        if isinstance(module, torch.nn.Linear):
            hooks.append(module.register_forward_hook(linear_hook))
            covered |= {id(module.weight), id(module.bias)}
        elif hasattr(module, "variance_epsilon") and isinstance(getattr(module, "weight", None), torch.nn.Parameter):
            hooks.append(module.register_forward_hook(norm_hook))
            covered.add(id(module.weight))
    embedding = inner.get_input_embeddings()
    covered |= {id(embedding.weight), id(head.weight)}
    missing = [name for name, param in model.named_parameters() if id(param) not in covered]
    if missing or head.bias is not None:
        raise ValueError(f"parameters the per-response sketch does not cover: {missing or ['lm_head.bias']}")
    try:
        embedded = embedding(input_ids).detach().requires_grad_()
        # the head only where a response token is predicted: the prompt's logits add nothing to the gradient
        hidden = inner(inputs_embeds=embedded).last_hidden_state[:, start:start + length]
        logits = head(hidden)
        logits_grad = []
        logits.register_hook(logits_grad.append)
        log_probs = torch.log_softmax(logits.float(), dim=-1).gather(2, targets[..., None])[..., 0]
        (log_probs * mask).sum().backward()
    finally:
        for hook in hooks:
            hook.remove()
    with torch.no_grad():
        head_grads = torch.bmm(logits_grad[0].transpose(1, 2), hidden.detach())
        # the embedding's gradient: each position's input gradient added to its token's row (the head's when tied)
        tied = head.weight is embedding.weight
        embedding_grads = head_grads if tied else torch.zeros(batch, *embedding.weight.shape)
        rows = (input_ids + torch.arange(batch)[:, None] * embedding.weight.shape[0]).reshape(-1)
        per_position = embedded.grad.reshape(-1, embedded.shape[-1])
        embedding_grads.view(-1, per_position.shape[-1]).index_add_(0, rows, per_position)
        if not tied:
            out += sketch.fold(embedding.weight, embedding_grads)
        out += sketch.fold(head.weight, head_grads)
    return out


def make_sketches(pool_folder: Path, out: Path, model_path: Path, prompts: list[dict], size: Size) -> None:
    """``out/grad_<key>.npy`` (responses x dims, float32) and ``out/tokens_<key>.npy`` for each pooled prompt, the
    gradient of each response's summed log-probability; responses already sketched are kept (a pool that grew
    has only its new responses sketched)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out.mkdir(parents=True, exist_ok=True)
    sketched = [_sketched(out, p) for p in prompts]
    pools = [_read_pool(pool_folder, p) for p in prompts]
    todo = [i for i in range(len(prompts)) if len(sketched[i]) < len(pools[i])]
    if not todo:
        return
    spent = WallTime(out.parent)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model.train(False)
    sketch = Sketch(model, size.dims)
    model.requires_grad_(False)
    start, done = time.perf_counter(), 0
    for i in todo:
        key = pool_key(prompts[i])
        prompt_ids = tokenizer.apply_chat_template(prompts[i]["prompt"], add_generation_prompt=True, tokenize=True)
        if not isinstance(prompt_ids, list):
            prompt_ids = prompt_ids["input_ids"]
        responses = [response["ids"] or [tokenizer.eos_token_id] for response in pools[i][len(sketched[i]):]]
        grads = [sketch_responses(model, sketch, prompt_ids, responses[b:b + SKETCH_BATCH])
                 for b in range(0, len(responses), SKETCH_BATCH)]
        kept, kept_tokens = sketched[i], _sketched(out, prompts[i], "tokens")
        np.save(out / f"grad_{key}.npy", np.concatenate([kept.reshape(-1, size.dims), torch.cat(grads).numpy()]))
        np.save(out / f"tokens_{key}.npy", np.concatenate([kept_tokens, [len(ids) for ids in responses]]))
        spent.add()
        done += 1
        left = (time.perf_counter() - start) / done * (len(todo) - done)
        _say(f"{out.name}: {done}/{len(todo)} prompts sketched, about {left / 60:.0f} min left")


def _sketched(folder: Path, prompt: dict, what: str = "grad") -> np.ndarray:
    path = folder / f"{what}_{pool_key(prompt)}.npy"
    return np.load(path) if path.exists() else np.zeros((0,), dtype=np.float32 if what == "grad" else np.int64)


# ------------------------------------------------------------------------------------------
# 4: replays and measures
# ------------------------------------------------------------------------------------------
def load_split(pool_folder: Path, sketch_folder: Path, prompts: list[dict], k: int) -> list[dict]:
    """Each prompt's first k responses: rewards, sketched gradients and token counts."""
    rows = []
    for prompt in prompts:
        pool = _read_pool(pool_folder, prompt)[:k]
        rows.append({"rewards": np.array([r["reward"] for r in pool], dtype=float),
                     "grads": _sketched(sketch_folder, prompt)[:k].astype(np.float64),
                     "tokens": _sketched(sketch_folder, prompt, "tokens")[:k].astype(float)})
        if not len(rows[-1]["rewards"]) == len(rows[-1]["grads"]) == k:
            raise ValueError(f"{pool_folder}: pool {pool_key(prompt)} has {len(pool)} responses and "
                             f"{len(rows[-1]['grads'])} sketched, not {k}: rerun to complete it")
    return rows


def pass_rate_gradient(rewards: np.ndarray, grads: np.ndarray) -> np.ndarray:
    """Unbiased estimate of grad p from K responses: the mean of (r_i - mean of the others) g_i."""
    k = len(rewards)
    others = (rewards.sum() - rewards) / (k - 1)
    return ((rewards - others)[:, None] * grads).mean(axis=0)


def replay(config: SamplerConfig, prompts: list[dict], order: list[np.ndarray], first_requests=None):
    """One step of the method on these prompts: each draws its first-half responses in ``order``.

    Returns:
        (the update: sum of advantage x gradient over the kept samples over their token count, as verl's
        token-mean; the samples drawn).
    """
    import torch

    drawn = [0] * len(prompts)

    def generate(requests):
        out = {}
        for p, count in requests.items():
            out[p] = prompts[p]["rewards"][order[p][drawn[p]:drawn[p] + count]].tolist()
            drawn[p] += count
        return out

    result = run_step([str(i) for i in range(len(prompts))], config, generate, first_requests=first_requests)
    update, tokens = 0.0, 0.0
    for p, group in enumerate(result.groups):
        if group.dropped or not group.kept:
            continue
        rows = order[p][group.kept]
        rewards = torch.tensor(prompts[p]["rewards"][rows])
        advantages = outcome_advantages(rewards, [group.stats] * len(rows), torch.ones(len(rows), 1),
                                        norm_by_std=False)[:, 0].numpy()
        update = update + (advantages[:, None] * prompts[p]["grads"][rows]).sum(axis=0)
        tokens += prompts[p]["tokens"][rows].sum()
    return (update / tokens if tokens else np.zeros(prompts[0]["grads"].shape[1])), sum(drawn)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    norm = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / norm) if norm else 0.0


def analyse(train: list[dict], heldout: list[dict], size: Size, base_rates: list[float], seed: int = 0) -> dict:
    """Every method on the same batches and replay orders; per batch, its measures; intervals by a jackknife over
    training prompts."""
    half = size.train_k // 2
    quarter = half // 2  # the reference half's own halves, for its split-half reliability
    for row in train:  # reference half: the second half of each pool, in pool order
        row["reference"] = pass_rate_gradient(row["rewards"][half:], row["grads"][half:])
        row["ref_a"] = pass_rate_gradient(row["rewards"][half:half + quarter], row["grads"][half:half + quarter])
        row["ref_b"] = pass_rate_gradient(row["rewards"][half + quarter:], row["grads"][half + quarter:])
    heldout_grad = sum(pass_rate_gradient(q["rewards"], q["grads"]) for q in heldout)
    held_half = size.heldout_k // 2
    held_a = sum(pass_rate_gradient(q["rewards"][:held_half], q["grads"][:held_half]) for q in heldout)
    held_b = sum(pass_rate_gradient(q["rewards"][held_half:], q["grads"][held_half:]) for q in heldout)
    rng = np.random.default_rng(seed)
    batches = [rng.choice(len(train), size.batch, replace=False) for _ in range(size.batches)]
    orders = [[[rng.permutation(half) for _ in range(size.batch)] for _ in range(size.replays_per_batch)]
              for _ in range(size.batches)]
    # the matched GRPO draws what balance draws on these pools
    balance_drawn = [replay(SamplerConfig(), [train[x] for x in b], o)[1] for b, os_ in zip(batches, orders)
                     for o in os_]
    matched = int(min(half, max(4, round(np.mean(balance_drawn) / size.batch))))
    configs = method_configs(matched)
    per_batch: dict[str, list[dict]] = {name: [] for name in configs}
    for b, (batch, batch_orders) in enumerate(zip(batches, orders)):
        prompts = [train[x] for x in batch]
        reference = sum(p["reference"] for p in prompts)
        tracker = PassRateTracker()  # Est: one earlier visit, the base model's 16 samples of each prompt (data prep)
        for x in batch:
            tracker.update(str(x), 16, round(16 * base_rates[x]))
        for name, config in configs.items():
            firsts = plan_first_requests(tracker, [str(x) for x in batch], config) if config.variant == "est" else None
            updates, drawn = zip(*(replay(config, prompts, o, firsts) for o in batch_orders))
            updates = np.stack(updates)
            mean = updates.mean(axis=0)
            noise = float(((updates - mean) ** 2).sum(axis=1).sum()) / (len(updates) - 1)  # E|u - E u|^2, unbiased
            unit = [u / np.linalg.norm(u) if np.linalg.norm(u) else u for u in updates]
            per_batch[name].append({
                "cos_train": float(np.mean([cosine(u, reference) for u in updates])),
                "cos_heldout": float(np.mean([cosine(u, heldout_grad) for u in updates])),
                "gain": float(np.mean([u @ heldout_grad for u in unit])),
                # |E u|^2: the replays' mean has |mean|^2 = |E u|^2 + noise / replays in expectation
                "signal": float(mean @ mean) - noise / len(updates),
                "noise": noise,
                "samples_per_prompt": float(np.mean(drawn)) / size.batch,
            })
        if (b + 1) % 10 == 0 or b + 1 == len(batches):
            _say(f"analysis: {b + 1}/{len(batches)} batches replayed")

    # batches share prompts (each prompt is in about batch x batches / prompts of them), so batches are not
    # independent units: intervals come from a jackknife over training prompts, each estimate recomputed without
    # the batches that hold one prompt
    holds = [set(int(x) for x in b) for b in batches]
    leave_out = [[i for i, members in enumerate(holds) if prompt not in members] for prompt in range(len(train))]

    def jackknife(estimate) -> list[float]:
        """``estimate(batch indices)`` over every batch, and its 95% interval."""
        value = float(estimate(list(range(len(batches)))))
        partial = np.array([estimate(kept) for kept in leave_out if kept])
        n = len(partial)
        half = float(t_quantile(0.975, n - 1) * np.sqrt((n - 1) / n * ((partial - partial.mean()) ** 2).sum()))
        return [value, value - half, value + half]

    def measure(rows: list[dict], key: str, idx: list[int]) -> float:
        """A method's measure over the batches ``idx``: the mean of the per-batch values, or for ``snr`` the update's
        signal-to-noise ratio, mean |E u|^2 over mean E|u - E u|^2."""
        if key == "snr":
            return float(np.mean([rows[i]["signal"] for i in idx]) / np.mean([rows[i]["noise"] for i in idx]))
        return float(np.mean([rows[i][key] for i in idx]))

    def summary(rows: list[dict]) -> dict:
        samples = float(np.mean([r["samples_per_prompt"] for r in rows]))
        result = {key: jackknife(lambda idx, key=key: measure(rows, key, idx))
                  for key in ("cos_train", "cos_heldout", "gain", "snr")}
        return {"samples_per_prompt": samples, **result, "snr_per_sample": [v / samples for v in result["snr"]]}

    def paired(name: str, reference: str, key: str) -> list[float]:
        """The difference of two methods' measures, each over the same batches in every jackknife replicate."""
        return jackknife(lambda idx: measure(per_batch[name], key, idx) - measure(per_batch[reference], key, idx))

    differences = {reference: {name: {key: paired(name, reference, key) for key in ("cos_heldout", "cos_train", "snr")}
                               for name in configs if name != reference} for reference in PAIRED_REFERENCES}

    reliability = {
        "train_split_half": cosine(sum(r["ref_a"] for r in train), sum(r["ref_b"] for r in train)),
        "heldout_split_half": cosine(held_a, held_b),
        "train_vs_heldout": cosine(sum(r["reference"] for r in train), heldout_grad),
    }
    for key in ("train_split_half", "heldout_split_half"):  # Spearman-Brown: the reliability of the whole reference
        rho = reliability[key]
        reliability[key.replace("split_half", "full")] = 2 * rho / (1 + rho) if rho > -1 else float("nan")
    return {"matched_n": matched, "balance_samples_per_prompt": float(np.mean(balance_drawn)) / size.batch,
            "reliability": reliability, "methods": {name: summary(rows) for name, rows in per_batch.items()},
            "paired": differences,
            "pass_rate_train": float(np.mean([r["rewards"].mean() for r in train])),
            "pass_rate_heldout": float(np.mean([q["rewards"].mean() for q in heldout]))}


def run_checkpoint(name: str, model: Path, work: Path, size: Size, train: list[dict], heldout: list[dict],
                   sampler=None) -> dict:
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
                     [p["base_pass_rate"] for p in train])
    return {**result, "size": asdict(size), "date": datetime.date.today().isoformat(), "machine": machine(),
            "wall_hours": WallTime(folder).seconds() / 3600, "model": str(model)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m studies.gradient_quality", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", nargs="+", default=["base", "format"], choices=["base", "format"])
    parser.add_argument("--work", default="outputs/gradient_quality", help="pools, sketches, the format checkpoint")
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
    train, heldout = learning_sets(work, size, base)
    command = "python -m studies.gradient_quality " + shlex.join(argv if argv is not None else sys.argv[1:])
    for name in args.checkpoints:
        model = base if name == "base" else format_checkpoint(work, base)
        results["checkpoints"][name] = {**run_checkpoint(name, model, work, size, train, heldout), "command": command}
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(results, indent=1))
        if args.write:
            write_report(results, args.write)
    return results
