"""Training data as the paper prepared it: clean, format, then keep prompts by the model's pass rate.

    python -m reinforce_ada.tasks.data_prep --input openr1.parquet --model Qwen/Qwen2.5-Math-1.5B \\
        --output data/openr1 [--difficulty easy|hard] [--k 16] [--max-prompt-tokens 700]

Stages (each reported with counts in ``<output>/report.json``):

1. read parquet or JSONL; rows whose problem is not a non-empty string, or whose answer is
   missing, are reported and skipped; duplicate ids and duplicate problems (after whitespace
   normalisation) keep their first occurrence;
2. drop problems whose reference answer math-verify cannot parse;
3. format the prompt as the paper does (system prompt asking for ``\\boxed{}``, the problem as the
   user turn), or take each row's own chat prompt with ``--prompt-key`` (for a model that needs
   its task's own instructions or a worked example), and drop prompts longer than
   ``--max-prompt-tokens`` in the model's tokenizer;
4. sample k responses per prompt with vLLM (temperature 1.0), score them with
   :mod:`reinforce_ada.tasks.reward`, and keep prompts with ``min < pass rate <= max`` (the paper's
   "easy": (0, 0.313], "hard": (0, 0.125]).

Stage 4 is resumable: each finished chunk of prompts is appended to
``<output>/pass_rates.jsonl`` and flushed, and a restarted run samples only the prompts not in
it, so an interrupted run loses at most the chunk in flight. The result is verl parquet
(``train.parquet``, and ``test.parquet`` with ``--test-size``): ``data_source``, ``prompt``,
``ability``, ``reward_model.ground_truth`` and ``extra_info`` with the pass rate.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reinforce_ada.tasks.vllm_sampling import ChatSampler as Sampler
from reinforce_ada.tasks.vllm_sampling import chat_sampler

SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
DIFFICULTY = {"easy": (0.0, 0.313), "hard": (0.0, 0.125)}


@dataclass
class Record:
    id: str
    problem: str
    answer: str
    prompt: list[dict] = field(default_factory=list)  # empty: the paper's format (stage 3)
    pass_rate: float | None = None


@dataclass
class Report:
    counts: dict[str, int] = field(default_factory=dict)
    skipped: list[dict] = field(default_factory=list)

    def add(self, stage: str, count: int = 1) -> None:
        self.counts[stage] = self.counts.get(stage, 0) + count

    def skip(self, row: int, reason: str, detail: str = "") -> None:
        self.add(f"skipped_{reason}")
        if len(self.skipped) < 1000:
            self.skipped.append({"row": row, "reason": reason, "detail": detail[:200]})


def read_rows(path: str | Path) -> list[dict]:
    path = Path(path)
    if path.suffix == ".parquet":
        import pandas as pd

        return pd.read_parquet(path).to_dict("records")
    with open(path) as f:
        if path.suffix == ".json":
            data = json.load(f)
            return data if isinstance(data, list) else [data]
        return [json.loads(line) for line in f if line.strip()]


def clean(
    rows: Iterable[dict], problem_key: str, answer_key: str, id_key: str | None, report: Report,
    prompt_key: str | None = None,
) -> list[Record]:
    """Stage 1: well-formed rows, first occurrence of each id and each problem.

    With ``prompt_key``, each row's chat prompt (a list of ``{"role", "content"}`` messages) is
    taken from that field; a row without a well-formed one is reported and skipped.
    """
    records, seen_ids, seen_problems = [], set(), set()
    for i, row in enumerate(rows):
        report.add("read")
        problem, answer = row.get(problem_key), row.get(answer_key)
        if not isinstance(problem, str) or not problem.strip():
            report.skip(i, "bad_problem", f"{problem_key}={problem!r}")
            continue
        if answer is None or (isinstance(answer, float) and answer != answer) or str(answer).strip() == "":
            report.skip(i, "missing_answer", f"{answer_key}={answer!r}")
            continue
        rid = (
            str(row[id_key])
            if id_key and row.get(id_key) is not None
            else hashlib.sha1(problem.encode()).hexdigest()[:16]
        )
        normalized = re.sub(r"\s+", " ", problem).strip()
        if rid in seen_ids:
            report.skip(i, "duplicate_id", rid)
            continue
        if normalized in seen_problems:
            report.skip(i, "duplicate_problem", normalized[:80])
            continue
        prompt = []
        if prompt_key:
            prompt = _chat_messages(row.get(prompt_key))
            if not prompt:
                report.skip(i, "bad_prompt", f"{prompt_key}={row.get(prompt_key)!r}")
                continue
        seen_ids.add(rid)
        seen_problems.add(normalized)
        records.append(Record(id=rid, problem=problem.strip(), answer=str(answer).strip(), prompt=prompt))
    report.add("clean", len(records))
    return records


def _chat_messages(value: Any) -> list[dict]:
    """``value`` as a list of chat messages, or [] if it is not one (parquet gives numpy arrays of dicts)."""
    if value is None or isinstance(value, (str, bytes, dict)):
        return []
    try:
        messages = [dict(m) for m in value]
    except (TypeError, ValueError):
        return []
    ok = messages and all(isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages)
    return [{"role": m["role"], "content": m["content"]} for m in messages] if ok else []


def parsable_answers(records: list[Record], report: Report) -> list[Record]:
    """Stage 2: reference answers that math-verify can parse."""
    from math_verify import parse

    kept = []
    for r in records:
        if parse(f"\\boxed{{{r.answer}}}", parsing_timeout=None):
            kept.append(r)
        else:
            report.skip(-1, "unparsable_answer", f"{r.id}: {r.answer}")
    report.add("parsable_answer", len(kept))
    return kept


def formatted(records: list[Record], tokenizer, max_prompt_tokens: int, report: Report) -> list[Record]:
    """Stage 3: the paper's prompt format (unless the row brought its own), within the token limit."""
    kept = []
    for r in records:
        if not r.prompt:
            r.prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": r.problem}]
        length = len(tokenizer.apply_chat_template(r.prompt, add_generation_prompt=True, tokenize=True))
        if length > max_prompt_tokens:
            report.skip(-1, "prompt_too_long", f"{r.id}: {length} tokens")
            continue
        kept.append(r)
    report.add("within_token_limit", len(kept))
    return kept


def estimate_pass_rates(
    records: list[Record], sample: Sampler, k: int, progress_file: Path, chunk: int = 64, judge=None
) -> None:
    """Stage 4: fills ``pass_rate`` for every record, resuming from ``progress_file``."""
    if judge is None:
        from reinforce_ada.tasks.reward import judge
    done = {}
    if progress_file.exists():
        with open(progress_file) as f:
            for line in f:
                line = line.strip()
                if line:
                    entry = json.loads(line)
                    done[entry["id"]] = entry["pass_rate"]
    todo = [r for r in records if r.id not in done]
    print(
        f"[data_prep] pass rates: {len(done)} done before, {len(todo)} to sample (k={k})",
        file=sys.stderr,
        flush=True,
    )
    with open(progress_file, "a") as out:
        for start in range(0, len(todo), chunk):
            batch = todo[start : start + chunk]
            responses = sample([r.prompt for r in batch], k)
            for r, texts in zip(batch, responses):
                rate = sum(judge(t, r.answer) == "correct" for t in texts) / k
                done[r.id] = rate
                out.write(json.dumps({"id": r.id, "pass_rate": rate, "k": k}) + "\n")
            out.flush()
            os.fsync(out.fileno())
            print(f"[data_prep] sampled {min(start + chunk, len(todo))}/{len(todo)}", file=sys.stderr, flush=True)
    for r in records:
        r.pass_rate = done[r.id]


def _engine_on_first_use(args: argparse.Namespace) -> Sampler:
    """A sampler that starts vLLM when first called: a run whose pass rates are all saved starts none."""
    started: Sampler | None = None  # holds its engine alive

    def sample(prompts, k):
        nonlocal started
        if started is None:
            _engine, started = chat_sampler(args.model, args.temperature, args.max_tokens, args.seed)
        return started(prompts, k)

    return sample


def to_verl_rows(records: list[Record], data_source: str) -> list[dict[str, Any]]:
    return [
        {
            "data_source": data_source,
            "prompt": r.prompt,
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": r.answer},
            "extra_info": {"index": i, "id": r.id, "pass_rate": r.pass_rate, "problem": r.problem},
        }
        for i, r in enumerate(records)
    ]


def prepare(args: argparse.Namespace, sample: Sampler | None = None, tokenizer=None) -> Report:
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    report = Report()
    records = clean(
        read_rows(args.input), args.problem_key, args.answer_key, args.id_key, report, args.prompt_key
    )
    records = parsable_answers(records, report)
    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.model)
    records = formatted(records, tokenizer, args.max_prompt_tokens, report)
    low, high = DIFFICULTY[args.difficulty] if args.difficulty else (args.min_pass_rate, args.max_pass_rate)
    if args.k > 0:
        if sample is None:
            sample = _engine_on_first_use(args)
        estimate_pass_rates(records, sample, args.k, out / "pass_rates.jsonl", args.chunk)
        kept = [r for r in records if low < r.pass_rate <= high]
        report.add("pass_rate_too_low", sum(r.pass_rate <= low for r in records))
        report.add("pass_rate_too_high", sum(r.pass_rate > high for r in records))
    else:
        kept = records
    report.add("kept", len(kept))
    rng = random.Random(args.seed)
    rng.shuffle(kept)
    test, train = kept[: args.test_size], kept[args.test_size :]
    import pandas as pd

    pd.DataFrame(to_verl_rows(train, args.data_source)).to_parquet(out / "train.parquet")
    if test:
        pd.DataFrame(to_verl_rows(test, args.data_source)).to_parquet(out / "test.parquet")
    report.add("train", len(train))
    report.add("test", len(test))
    summary = {"counts": report.counts, "pass_rate_range": [low, high], "k": args.k, "skipped": report.skipped}
    (out / "report.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(report.counts), flush=True)
    return report


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m reinforce_ada.tasks.data_prep", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--input", required=True, help="parquet, JSONL or JSON list of problems")
    parser.add_argument("--output", required=True, help="folder for train/test parquet, report.json, pass_rates.jsonl")
    parser.add_argument("--model", required=True, help="the model to be trained (tokenizer and pass rates)")
    parser.add_argument("--problem-key", default="problem", help="field of the problem text (OpenR1: problem)")
    parser.add_argument("--answer-key", default="answer", help="field of the reference answer (OpenR1: answer)")
    parser.add_argument("--id-key", default=None, help="field of a unique id (default: a hash of the problem)")
    parser.add_argument(
        "--prompt-key", default=None,
        help="field holding each row's own chat prompt (list of role/content messages) instead of the paper's format",
    )
    parser.add_argument("--data-source", default="math", help="data_source written for verl's reward routing")
    parser.add_argument("--max-prompt-tokens", type=int, default=700)
    parser.add_argument("--k", type=int, default=16, help="samples per prompt for the pass rate (0: skip stage 4)")
    parser.add_argument(
        "--difficulty", choices=sorted(DIFFICULTY), default=None, help="the paper's pass-rate range (overrides min/max)"
    )
    parser.add_argument("--min-pass-rate", type=float, default=0.0, help="keep pass rate > this")
    parser.add_argument("--max-pass-rate", type=float, default=0.313, help="keep pass rate <= this")
    parser.add_argument("--max-tokens", type=int, default=4096, help="response tokens when sampling")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--chunk", type=int, default=256, help="prompts per saved chunk of stage 4")
    parser.add_argument("--test-size", type=int, default=0, help="prompts held out into test.parquet")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    prepare(parse_args(argv))


if __name__ == "__main__":
    main()
