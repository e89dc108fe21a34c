"""The demo's task: arithmetic with a spread of difficulty, answered in ``\\boxed{}``.

    python -m reinforce_ada.demo.task OUT_DIR [--train 256] [--test 64] [--seed 0]

Questions come in levels that SmolLM2-135M-Instruct solves at very different rates when it
samples at temperature 1.0 (5 questions x 8 samples per level; docs/demo.md has the held-out set's):

=====  ====================  ==========  ==================================
level  question              example     base pass rate
=====  ====================  ==========  ==================================
1      one-digit a + b       7 + 6       0.25 - 0.88 (mean 0.58)
2      one-digit a * b       4 * 2       0.38 - 0.75 (mean 0.55)
3      two-digit + one-digit 29 + 2      0 - 0.5 (mean 0.15)
4      two-digit a + b       41 + 12     0 - 0.25 (mean 0.08)
=====  ====================  ==========  ==================================

so most prompts sit near 0 and a few near 1: the regime Reinforce-Ada is for. The prompt is
a one-line system instruction and one worked example (without it the model never writes
``\\boxed{}``), which keeps prompts short (about 60 tokens) for a CPU. Answers are checked by
:mod:`reinforce_ada.tasks.reward` (math-verify on the last ``\\boxed{}``).

Train and test questions are drawn from one seeded generator and never overlap.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from pathlib import Path

DATA_SOURCE = "arithmetic"
SYSTEM_PROMPT = "Give only the final answer, in \\boxed{}."
WORKED_EXAMPLE = [
    {"role": "user", "content": "What is 2 + 2?"},
    {"role": "assistant", "content": "2 + 2 = 4, so the answer is \\boxed{4}."},
]

Question = tuple[int, str, str]
"""``(level, expression, answer)``."""


def _one_digit_sum(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return f"{a} + {b}", a + b


def _one_digit_product(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return f"{a} * {b}", a * b


def _two_plus_one_digit(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(10, 99), rng.randint(1, 9)
    return f"{a} + {b}", a + b


def _two_digit_sum(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return f"{a} + {b}", a + b


LEVELS: dict[int, Callable[[random.Random], tuple[str, int]]] = {
    1: _one_digit_sum,
    2: _one_digit_product,
    3: _two_plus_one_digit,
    4: _two_digit_sum,
}


def messages(expression: str) -> list[dict]:
    """The chat prompt for one question."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        *WORKED_EXAMPLE,
        {"role": "user", "content": f"What is {expression}?"},
    ]


def questions(train: int, test: int, seed: int) -> tuple[list[Question], list[Question]]:
    """Distinct questions, levels taken in turn (a level that runs out is skipped), split into train and test.

    Raises:
        ValueError: If the levels cannot supply that many distinct questions.
    """
    rng = random.Random(seed)
    wanted = train + test
    capacity = 81 + 64 + 810 + 8100  # distinct questions of levels 1-4
    if wanted > capacity:
        raise ValueError(f"--train + --test: at most {capacity} distinct questions, asked for {wanted}")
    seen: set[str] = set()
    drawn: list[Question] = []
    level_cycle = sorted(LEVELS)
    while len(drawn) < wanted:
        level = level_cycle[len(drawn) % len(level_cycle)]
        for _ in range(1000):
            expression, answer = LEVELS[level](rng)
            if expression not in seen:
                break
        else:  # this level is exhausted; take the next one
            level_cycle.remove(level)
            continue
        seen.add(expression)
        drawn.append((level, expression, str(answer)))
    rng.shuffle(drawn)
    return drawn[:train], drawn[train:]


def write_parquet(rows: list[Question], path: Path, split: str, data_source: str = DATA_SOURCE) -> None:
    """verl's RL parquet: prompt (chat), data_source, reward_model.ground_truth, extra_info.

    verl's validation reports each data_source on its own, so two held-out sets get two names."""
    import pandas as pd

    records = [
        {
            "data_source": data_source,
            "prompt": messages(expression),
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"index": i, "split": split, "level": level, "question": expression},
        }
        for i, (level, expression, answer) in enumerate(rows)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(records).to_parquet(path)


def build(out_dir: str | Path, train: int = 256, test: int = 64, seed: int = 0) -> tuple[Path, Path]:
    """Writes ``out_dir/train.parquet`` and ``out_dir/test.parquet``; returns their paths."""
    out = Path(out_dir)
    train_rows, test_rows = questions(train, test, seed)
    write_parquet(train_rows, out / "train.parquet", "train")
    write_parquet(test_rows, out / "test.parquet", "test")
    return out / "train.parquet", out / "test.parquet"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m reinforce_ada.demo.task", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--train", type=int, default=256)
    parser.add_argument("--test", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for path in build(args.out_dir, args.train, args.test, args.seed):
        print(path)


if __name__ == "__main__":
    main()
