"""The gradient-quality study's pools: each prompt's responses (text, token ids, math reward) through the
project's own sampling path, one file per prompt named by its key, made once and extended when a larger size asks
for more; and the wall time their making and sketching took, kept beside them."""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path

from reinforce_ada.core.messages import say
from reinforce_ada.core.tracker import prompt_identity
from studies.gradient_quality.design import Size

_say = functools.partial(say, speaker="gradient_quality")


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
    pools = [read_pool(folder, p) for p in prompts]
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


def read_pool(folder: Path, prompt: dict) -> list[dict]:
    """The responses pooled so far for ``prompt`` in ``folder`` (none if its pool was never made)."""
    path = folder / f"pool_{pool_key(prompt)}.json"
    return json.loads(path.read_text()) if path.exists() else []
