"""A tiny model and task for running the whole pipeline on a CPU, offline, in seconds.

    python -m reinforce_ada.tools.tiny OUT_DIR [--train 64] [--test 16] [--seed 0]

writes ``OUT_DIR/model`` (a byte-level BPE tokenizer trained on the task's text, with a chat
template, and a random-init 2-layer Qwen2 of about 0.4M parameters) and ``OUT_DIR/data/{train,test}.parquet``
in verl's format. The task is "What is a plus b?"; :func:`compute_score` gives 1.0 when the
answer appears in the response. A random model writes digits by chance, so pass rates differ
by prompt (one-digit answers are found far more often than two-digit ones): enough reward
variance for the sampler's decisions and for non-zero gradients.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

DATA_SOURCE = "tiny_arithmetic"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """verl custom reward: 1.0 if the expected number appears in the response, else 0.0."""
    return 1.0 if str(ground_truth) in solution_str else 0.0


def questions(count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(count)]
    return [(f"What is {a} plus {b}?", str(a + b)) for a, b in pairs]


def build_tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        additional_special_tokens=["<|endoftext|>", "<|im_start|>"],
        model_max_length=1024,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def build_model(tokenizer, seed: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,  # head_dim 32: vLLM-CPU has no attention kernel for head_dim 16
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    return Qwen2ForCausalLM(config)


def write_parquet(rows: list[tuple[str, str]], path: Path, split: str) -> None:
    import pandas as pd

    records = [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": question}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"index": i, "split": split},
        }
        for i, (question, answer) in enumerate(rows)
    ]
    pd.DataFrame(records).to_parquet(path)


def build(out_dir: str | Path, train: int = 64, test: int = 16, seed: int = 0) -> Path:
    """Writes the tiny model and data under ``out_dir``; returns ``out_dir``."""
    from transformers import GenerationConfig

    out = Path(out_dir)
    (out / "model").mkdir(parents=True, exist_ok=True)
    (out / "data").mkdir(parents=True, exist_ok=True)
    train_rows, test_rows = questions(train, seed), questions(test, seed + 1)
    corpus = [q for q, _ in train_rows + test_rows] * 4 + [" ".join(str(i) for i in range(19)), "user assistant"]
    tokenizer = build_tokenizer(corpus)
    tokenizer.save_pretrained(out / "model")
    model = build_model(tokenizer, seed)
    model.save_pretrained(out / "model", safe_serialization=True)
    GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id).save_pretrained(
        out / "model"
    )
    write_parquet(train_rows, out / "data" / "train.parquet", "train")
    write_parquet(test_rows, out / "data" / "test.parquet", "test")
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m reinforce_ada.tools.tiny", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--train", type=int, default=64, help="training prompts (default 64)")
    parser.add_argument("--test", type=int, default=16, help="held-out prompts (default 16)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = build(args.out_dir, args.train, args.test, args.seed)
    print(f"tiny model and data written to {out}")


if __name__ == "__main__":
    main()
