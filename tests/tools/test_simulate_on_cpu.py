"""`python -m reinforce_ada.tools.simulate`: the reference's decisions on hand-made cases, and bad input."""

import json
import subprocess
import sys

import pytest

from reinforce_ada.tools.simulate import main

Z = [0.0]


def run_replay(tmp_path, spec, capsys):
    path = tmp_path / "case.json"
    path.write_text(json.dumps(spec))
    code = main(["--replay", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


def spec(variant, prompts, **extra):
    return {"variant": variant, "n": 4, "round_size": 8, "max_rounds": 4, "threshold": 0.7,
            "unresolved": "keep", "selection": "first", "prompts": prompts, **extra}


def at(*positions, total=32):
    return [1.0 if i in positions else 0.0 for i in range(total)]


# Worked examples of the reference implementation (n=4, M=8, R=4, threshold 0.7; indices
# count draws from 0 across rounds). Expected: (rounds, drawn, pos, neg, resolved, kept, baseline).
CASES = {
    "mixed_first_round": (
        [1, 0, 0, 1, 0, 1, 1, 0] + Z * 24,
        {"balance": (1, 8, 4, 4, True, [0, 1, 2, 3], 0.5), "pos": (1, 8, 4, 4, True, [0, 1, 2, 3], 0.5)},
    ),
    "two_late_positives": (
        at(17, 20),
        {"balance": (3, 24, 2, 22, True, [0, 1, 17, 20], 2 / 24), "pos": (3, 24, 2, 22, True, [0, 1, 17, 20], 2 / 24)},
    ),
    "one_positive_at_17": (
        at(17),
        {"balance": (4, 32, 1, 31, False, [0, 1, 2, 17], 1 / 32), "pos": (3, 24, 1, 23, True, [0, 1, 2, 17], 1 / 24)},
    ),
    "all_correct": (
        [1.0] * 32,
        {"balance": (4, 32, 32, 0, False, [0, 1, 2, 3], 1.0), "pos": (1, 8, 8, 0, True, [0, 1, 2, 3], 1.0)},
    ),
    "all_wrong": (
        [0.0] * 32,
        {"balance": (4, 32, 0, 32, False, [0, 1, 2, 3], 0.0), "pos": (4, 32, 0, 32, False, [0, 1, 2, 3], 0.0)},
    ),
    "threshold_is_strict": (
        [0.7] * 8 + [0.71] * 8 + Z * 16,
        {"balance": (2, 16, 8, 8, True, [0, 1, 8, 9], 0.705), "pos": (2, 16, 8, 8, True, [0, 1, 8, 9], 0.705)},
    ),
}


@pytest.mark.parametrize("variant", ["balance", "pos"])
def test_replay_reproduces_the_reference_decisions(tmp_path, capsys, variant):
    prompts = [{"id": name, "rewards": rewards} for name, (rewards, _) in CASES.items()]
    code, out, _ = run_replay(tmp_path, spec(variant, prompts), capsys)
    assert code == 0
    result = json.loads(out)
    for record in result["prompts"]:
        rounds, drawn, pos, neg, resolved, kept, baseline = CASES[record["id"]][1][variant]
        assert (record["rounds"], record["samples_drawn"], record["pos"], record["neg"]) == (rounds, drawn, pos, neg)
        assert (record["resolved"], record["kept"]) == (resolved, kept), record["id"]
        assert record["baseline"] == pytest.approx(baseline)
        rewards = CASES[record["id"]][0]
        assert record["advantages"] == pytest.approx([rewards[i] - baseline for i in kept])
    summary = result["summary"]
    assert summary["samples_total"] == sum(r["samples_drawn"] for r in result["prompts"])
    assert summary["rounds"] == 4


def test_drop_policy_removes_unresolved_prompts(tmp_path, capsys):
    prompts = [{"id": "solved", "rewards": CASES["mixed_first_round"][0]}, {"id": "hopeless", "rewards": Z * 32}]
    code, out, _ = run_replay(tmp_path, spec("balance", prompts, unresolved="drop"), capsys)
    records = {r["id"]: r for r in json.loads(out)["prompts"]}
    assert code == 0 and records["hopeless"]["dropped"] and records["hopeless"]["kept"] == []
    assert records["solved"]["kept"] == [0, 1, 2, 3] and not records["solved"]["dropped"]


def test_std_division_uses_the_pool_std(tmp_path, capsys):
    rewards = at(17, 20)
    code, out, _ = run_replay(
        tmp_path, spec("balance", [{"id": "p", "rewards": rewards}], norm_adv_by_std_in_grpo=True), capsys
    )
    record = json.loads(out)["prompts"][0]
    pool = rewards[:24]
    mean = sum(pool) / 24
    std = (sum((r - mean) ** 2 for r in pool) / 23) ** 0.5
    assert record["advantages"] == pytest.approx([(rewards[i] - mean) / (std + 1e-6) for i in record["kept"]])


@pytest.mark.parametrize(
    "change, field",
    [
        ({"prompts": None}, "prompts:"),
        ({"n": 40}, "n:"),
        ({"round_size": 0}, "round_size:"),
        ({"variant": "balanced"}, "variant:"),
        ({"unresolved": "skip"}, "unresolved:"),
        ({"prompts": [{"id": "p0", "rewards": [1.0] * 10}]}, "prompts[0].rewards:"),
        ({"prompts": [{"id": "p0", "rewards": [1.0] * 31 + ["x"]}]}, "prompts[0].rewards[31]:"),
        ({"prompts": [{"id": "a", "rewards": Z * 32}, {"id": "a", "rewards": Z * 32}]}, "prompts[1].id:"),
        ({"rounds": 3}, "rounds:"),
    ],
)
def test_bad_input_exits_nonzero_with_one_line_naming_the_field(tmp_path, capsys, change, field):
    s = spec("balance", [{"id": "p0", "rewards": Z * 32}])
    s.update(change)
    if change.get("prompts", 1) is None:
        del s["prompts"]
    code, out, err = run_replay(tmp_path, s, capsys)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}"), err


def test_unreadable_and_invalid_json_files(tmp_path, capsys):
    assert main(["--replay", str(tmp_path / "missing.json")]) == 2
    assert "--replay: cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["--replay", str(bad)]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_pass_rates_mode_is_seeded_and_summarised(capsys):
    assert main(["--beta", "0.5", "2", "--num-prompts", "256", "--seed", "3", "--summary-only"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["--beta", "0.5", "2", "--num-prompts", "256", "--seed", "3", "--summary-only"]) == 0
    assert json.loads(capsys.readouterr().out) == first
    assert first["prompts"] == 256 and 4 <= first["samples_per_prompt_mean"] <= 32
    assert 0 < first["kept_groups_with_signal_frac"] < 1
    assert first["prompts_resolved"] + first["prompts_unresolved"] == 256


def test_pass_rates_extremes(capsys):
    assert main(["--pass-rates", "0,1", "--variant", "pos"]) == 0
    records = json.loads(capsys.readouterr().out)["prompts"]
    assert [r["samples_drawn"] for r in records] == [32, 8]
    assert main(["--pass-rates", "0.5,1.5"]) == 2
    assert capsys.readouterr().err.startswith("error: --pass-rates:")


def test_runs_as_a_module():
    out = subprocess.run(
        [sys.executable, "-m", "reinforce_ada.tools.simulate", "--pass-rates", "0.5", "--summary-only"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert json.loads(out)["prompts"] == 1
