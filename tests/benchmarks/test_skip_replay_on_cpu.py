"""The skip's model-free replay: what it must show on streams whose answer is known."""

import json

import pytest

from benchmarks.skip_replay import main, replay, summary
from reinforce_ada.core.skip import SkipRule


def compare(rates, epochs, drift=0.0, seeds=3, batch=8):
    steps = round(epochs * len(rates) / batch)
    base = [replay(rates, 4, batch, steps, None, drift, s, 1 / 32) for s in range(seeds)]
    runs = [replay(rates, 4, batch, steps, SkipRule(0.5, 0.9, seed=s), drift, s, 1 / 32) for s in range(seeds)]
    return summary(runs, base)


def test_half_the_prompts_never_solved_the_skip_finds_more_signal_per_response_and_loses_little():
    rates = [0.0] * 64 + [0.5] * 64
    row = compare(rates, epochs=6)
    assert row["ratio_min"] > 1.2  # the same responses buy more groups with signal
    assert row["signal_frac_skip"] > row["signal_frac_grpo"]
    assert row["lost_frac"] < 0.2  # what it skips is mostly the never-solved half
    assert 0.2 < row["skipped_frac"] < 0.7


def test_within_the_first_epoch_there_is_nothing_to_skip():
    row = compare([0.0] * 64 + [0.5] * 64, epochs=1)
    assert row["ratio_mean"] == 1.0 and row["skipped_frac"] == 0.0


def test_prompts_that_become_solvable_are_the_groups_the_skip_loses():
    rates = [0.0] * 128  # all start unsolved and rise by a logit an epoch
    row = compare(rates, epochs=3, drift=1.0)
    assert row["lost_frac"] > 0.3  # most skipped visits would have found signal by then
    assert row["ratio_mean"] < 1.1  # and nothing is gained per response


def test_the_command_writes_its_record_and_section(tmp_path):
    rates = tmp_path / "rates.jsonl"
    rates.write_text("".join(json.dumps({"pass_rate": p}) + "\n" for p in [0.0] * 20 + [0.25] * 20 + [1.0] * 8))
    out, results = tmp_path / "skip.json", tmp_path / "RESULTS.md"
    record = main(["--pass-rates", str(rates), "--filter", "0", "0.5", "--epochs", "1", "3", "--drift", "0",
                   "--seeds", "2", "--out", str(out), "--write", str(results)])
    assert record["prompts"] == 20 and len(record["rows"]) == 2
    assert json.loads(out.read_text())["rows"] == record["rows"]
    table = [line for line in results.read_text().splitlines() if line.startswith("| 3 |")]
    assert len(table) == 1
    with pytest.raises(SystemExit, match="no pass rate in"):
        main(["--pass-rates", str(rates), "--filter", "0.5", "0.9", "--out", str(out)])
