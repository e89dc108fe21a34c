"""Data preparation on fixture data: malformed rows are reported and skipped, stage 4 resumes."""

import json

import pandas as pd
import pytest

from reinforce_ada.tasks import data_prep

ROWS = [
    {"uuid": "a", "problem": "What is 1+1?", "answer": "2"},
    {"uuid": "b", "problem": "What is 2+2?", "answer": "4"},
    {"uuid": "c", "problem": "  What is 1+1?  ", "answer": "2"},  # duplicate problem
    {"uuid": "a", "problem": "What is 3+3?", "answer": "6"},  # duplicate id
    {"uuid": "d", "problem": 42, "answer": "1"},  # non-string problem
    {"uuid": "e", "problem": "What is 5+5?", "answer": None},  # missing answer
    {"uuid": "f", "problem": "", "answer": "3"},  # empty problem
    {"uuid": "g", "problem": "What is 7+7?", "answer": "14"},
    {"uuid": "h", "problem": "Long " * 400, "answer": "1"},  # over the token limit
]
# pass rates the fake model has per problem
RATES = {"What is 1+1?": 0.0, "What is 2+2?": 0.25, "What is 7+7?": 1.0}


class WordTokenizer:
    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        return " ".join(m["content"] for m in messages).split()


class FakeModel:
    """k responses per prompt, correct for the first round(rate * k) of them."""

    def __init__(self, fail_after=None):
        self.calls, self.fail_after = [], fail_after

    def __call__(self, prompts, k):
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise KeyboardInterrupt("interrupted")
        self.calls.append([p[-1]["content"] for p in prompts])
        answers = {"What is 1+1?": "2", "What is 2+2?": "4", "What is 7+7?": "14"}
        out = []
        for p in prompts:
            problem = p[-1]["content"]
            correct = round(RATES[problem] * k)
            out.append([f"\\boxed{{{answers[problem]}}}"] * correct + ["\\boxed{-1}"] * (k - correct))
        return out


def args(tmp_path, **kw):
    path = tmp_path / "input.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS))
    base = ["--input", str(path), "--output", str(tmp_path / "out"), "--model", "unused", "--id-key", "uuid",
            "--k", "4", "--chunk", "1", "--max-prompt-tokens", "100"]
    for key, value in kw.items():
        base += [f"--{key.replace('_', '-')}", str(value)]
    return data_prep.parse_args(base)


def test_malformed_rows_are_reported_and_skipped(tmp_path):
    report = data_prep.prepare(args(tmp_path, max_pass_rate=1.0), sample=FakeModel(), tokenizer=WordTokenizer())
    c = report.counts
    assert c["read"] == 9
    assert (c["skipped_duplicate_problem"], c["skipped_duplicate_id"], c["skipped_bad_problem"],
            c["skipped_missing_answer"], c["skipped_prompt_too_long"]) == (1, 1, 2, 1, 1)
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {s["reason"] for s in saved["skipped"]} >= {"duplicate_id", "bad_problem", "missing_answer"}
    # pass rate 0 is dropped (the paper keeps > 0), the others kept with max 1.0
    train = pd.read_parquet(tmp_path / "out" / "train.parquet")
    assert sorted(r["ground_truth"] for r in train["reward_model"]) == ["14", "4"]
    assert {r["pass_rate"] for r in train["extra_info"]} == {0.25, 1.0}
    assert train["prompt"][0][0]["content"] == data_prep.SYSTEM_PROMPT


def test_difficulty_presets(tmp_path):
    data_prep.prepare(args(tmp_path, difficulty="hard"), sample=FakeModel(), tokenizer=WordTokenizer())
    assert len(pd.read_parquet(tmp_path / "out" / "train.parquet")) == 0  # 0.25 > 0.125
    data_prep.prepare(args(tmp_path, difficulty="easy"), sample=FakeModel(), tokenizer=WordTokenizer())
    train = pd.read_parquet(tmp_path / "out" / "train.parquet")
    assert [r["ground_truth"] for r in train["reward_model"]] == ["4"]


def test_interrupted_run_resumes_without_redoing_or_losing_prompts(tmp_path):
    first = FakeModel(fail_after=1)
    with pytest.raises(KeyboardInterrupt):
        data_prep.prepare(args(tmp_path, max_pass_rate=1.0), sample=first, tokenizer=WordTokenizer())
    progress = (tmp_path / "out" / "pass_rates.jsonl").read_text().splitlines()
    assert len(progress) == 1  # the finished chunk survived
    second = FakeModel()
    data_prep.prepare(args(tmp_path, max_pass_rate=1.0), sample=second, tokenizer=WordTokenizer())
    resampled = [p for call in second.calls for p in call]
    assert first.calls[0][0] not in resampled and len(resampled) == 2
    assert len((tmp_path / "out" / "pass_rates.jsonl").read_text().splitlines()) == 3
    assert len(pd.read_parquet(tmp_path / "out" / "train.parquet")) == 2


def test_rows_may_bring_their_own_chat_prompt(tmp_path):
    own = [{"role": "system", "content": "Box it."}, {"role": "user", "content": "2 + 2 = 4, boxed."},
           {"role": "assistant", "content": "\\boxed{4}"}]
    rows = [
        {"uuid": "a", "problem": "What is 2+2?", "answer": "4",
         "chat": own + [{"role": "user", "content": "What is 2+2?"}]},
        {"uuid": "b", "problem": "What is 7+7?", "answer": "14", "chat": "not a chat"},
        {"uuid": "c", "problem": "What is 1+1?", "answer": "2", "chat": [{"role": "user"}]},  # no content
    ]
    path = tmp_path / "own.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    report = data_prep.prepare(
        data_prep.parse_args(["--input", str(path), "--output", str(tmp_path / "out"), "--model", "unused",
                              "--id-key", "uuid", "--prompt-key", "chat", "--k", "4", "--max-pass-rate", "1"]),
        sample=FakeModel(), tokenizer=WordTokenizer(),
    )
    assert report.counts["skipped_bad_prompt"] == 2 and report.counts["kept"] == 1
    train = pd.read_parquet(tmp_path / "out" / "train.parquet")
    assert [dict(m) for m in train["prompt"][0]] == own + [{"role": "user", "content": "What is 2+2?"}]
    assert train["extra_info"][0]["pass_rate"] == 0.25  # sampled with its own prompt
