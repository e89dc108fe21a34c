"""The gradient-quality study's sketched per-response gradients: the gradient of each pooled response's summed
log-probability given its prompt, a batch of responses per forward and backward pass, count-sketched to the size's
``dims`` dimensions, one file per prompt, made once and extended as its pool grows."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import numpy as np

from reinforce_ada.core.messages import say
from studies.gradient_quality.design import Size
from studies.gradient_quality.pools import WallTime, pool_key, read_pool

SKETCH_BATCH = 8  # responses per forward and backward pass when sketching their gradients


_say = functools.partial(say, speaker="gradient_quality")


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
    sketched = [read_sketched(out, p) for p in prompts]
    pools = [read_pool(pool_folder, p) for p in prompts]
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
        kept, kept_tokens = sketched[i], read_sketched(out, prompts[i], "tokens")
        np.save(out / f"grad_{key}.npy", np.concatenate([kept.reshape(-1, size.dims), torch.cat(grads).numpy()]))
        np.save(out / f"tokens_{key}.npy", np.concatenate([kept_tokens, [len(ids) for ids in responses]]))
        spent.add()
        done += 1
        left = (time.perf_counter() - start) / done * (len(todo) - done)
        _say(f"{out.name}: {done}/{len(todo)} prompts sketched, about {left / 60:.0f} min left")


def read_sketched(folder: Path, prompt: dict, what: str = "grad") -> np.ndarray:
    """What ``folder`` holds for ``prompt``'s sketched responses so far: ``"grad"``, their sketched gradients
    (responses x dims), or ``"tokens"``, their token counts; empty if none was sketched."""
    path = folder / f"{what}_{pool_key(prompt)}.npy"
    return np.load(path) if path.exists() else np.zeros((0,), dtype=np.float32 if what == "grad" else np.int64)
