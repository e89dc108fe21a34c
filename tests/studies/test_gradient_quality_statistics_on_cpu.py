"""The gradient-quality study's statistics and equal-samples design: its batches come in rounds of partitions of
whole groups of prompts, its intervals cover a known truth in a simulation of the design, the SNR's noise is that
of fresh draws, every interval is recomputed from the results JSON alone, and the equal-samples candidates are
matched, checked and decided on as the design says."""

import json

import numpy as np
import pytest
from test_gradient_quality_on_cpu import synthetic_pools

from studies.gradient_quality import coverage, design, intervals, replay
from studies.gradient_quality import report as gq_report

SIZE = design.Size(train_prompts=12, train_k=64, heldout_prompts=6, heldout_k=16, dims=24, batch=4, batches=6,
                   replays_per_batch=3, group=2)


@pytest.fixture(scope="module")
def first_design():
    """The first design replayed on synthetic pools, as its results JSON holds it."""
    result = replay.analyse(synthetic_pools(12, 64, 24, 10), synthetic_pools(6, 16, 24, 11), SIZE, [0.3] * 12)
    return json.loads(json.dumps({**result, "size": vars(SIZE), "date": "2026-12-06", "machine": "test",
                                  "wall_hours": 0.1, "command": "python -m studies.gradient_quality"}))


@pytest.fixture(scope="module")
def equal_samples():
    """The equal-samples design replayed on synthetic pools, as its results JSON holds it."""
    result = replay.analyse(synthetic_pools(12, 64, 24, 10), synthetic_pools(6, 16, 24, 11), SIZE, [0.3] * 12,
                            design.EQUAL_SAMPLES)
    return json.loads(json.dumps({**result, "size": vars(SIZE), "date": "2026-12-06", "machine": "test",
                                  "wall_hours": 0.1, "checkpoint": "protocol_start", "start_weights": "abc",
                                  "command": "python -m studies.gradient_quality --checkpoints protocol_start "
                                             "--design equal_samples"}))


def test_batches_come_in_rounds_of_partitions_of_whole_groups():
    rng = np.random.default_rng(0)
    batches, groups = intervals.partition_rounds(48, 8, 60, rng, group=4)
    assert len(batches) == 60 and len(groups) == 12 and all(len(g) == 4 for g in groups)
    for start in range(0, 60, 6):  # each round: every prompt once
        assert sorted(np.concatenate(batches[start:start + 6]).tolist()) == list(range(48))
    as_sets = [frozenset(g.tolist()) for g in groups]
    for batch in batches:  # a batch is two whole groups
        assert sum(group <= set(batch.tolist()) for group in as_sets) == 2
    for prompts, batch, count, group in ((48, 8, 59, 4), (48, 8, 60, 3), (8, 8, 2, 1), (48, 8, 6, 4)):
        with pytest.raises(ValueError):
            intervals.partition_rounds(prompts, batch, count, rng, group)


def test_the_intervals_cover_a_known_truth_in_a_simulation_of_the_design():
    """The study's sizes (48 prompts, 60 batches of 8): the chosen interval covers a mean, a saturating mean and a
    ratio 90-99% of the time whether prompts or replays dominate; the old jackknife is over 25% wider than a
    calibrated interval and covers more than 96% of the time."""
    shares = (0.9, 0.1)
    chosen = coverage.coverage(studies=600, seed=1, shares=shares, schemes=(coverage.CHOSEN,))
    old = coverage.coverage(studies=150, seed=2, shares=shares, schemes=("old",))
    for share in shares:
        for measure in coverage.MEASURES:
            new, before = chosen[share, measure, coverage.CHOSEN], old[share, measure, "old"]
            assert 0.90 <= new["coverage"] <= 0.99, (share, measure, new)
            assert 0.9 < new["width"] < 1.6, (share, measure, new)
            assert before["coverage"] > 0.96 and before["width"] > 1.25, (share, measure, before)


def test_a_ratio_is_linearized_and_a_constant_has_no_variance():
    per_batch = {"signal": [2.0, 4.0, 6.0, 8.0], "noise": [1.0, 1.0, 2.0, 2.0], "samples_per_prompt": [4.0] * 4}
    value, units = intervals.units(per_batch, "snr")
    assert value == pytest.approx(20 / 6) and units.sum() == pytest.approx(0)
    value, units = intervals.units(per_batch, "snr_per_sample")
    assert value == pytest.approx(20 / 6 / 4)
    batches, groups = intervals.partition_rounds(8, 4, 4, np.random.default_rng(0), group=2)
    assert intervals.interval(1.5, np.ones(4), batches, groups) == [1.5, 1.5, 1.5]


def prompt_model(count: int, dims: int, seed: int) -> list[dict]:
    """Prompts whose responses are drawn afresh: pass rate p, score direction g, per-response noise of SD 2."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(size=dims)
    return [{"p": rng.uniform(0.15, 0.6), "g": shared + rng.normal(size=dims)} for _ in range(count)]


def fresh_pool(prompt: dict, k: int, rng: np.random.Generator) -> dict:
    rewards = (rng.random(k) < prompt["p"]).astype(float)
    grads = np.where(rewards[:, None] > 0, prompt["g"], -prompt["g"] * prompt["p"] / (1 - prompt["p"]))
    return {"rewards": rewards, "grads": grads + rng.normal(scale=2.0, size=(k, len(prompt["g"]))),
            "tokens": rng.integers(5, 30, size=k).astype(float)}


def test_the_snr_noise_is_that_of_fresh_draws_whatever_share_of_the_pool_is_drawn():
    """GRPO-n4 to n28 on pools of 32: against the truth (each replay a pool drawn afresh), the SNR per response
    from draws with replacement stays within 25%, while replays of one fixed pool (the old estimate) find less noise
    the more of the pool a method draws, and an SNR per response that rises with the draw."""
    model, half, replays = prompt_model(6, 32, 0), 32, 16
    rng = np.random.default_rng(1)
    ratios = {"new": [], "old": []}
    for k in (4, 16, 28):
        config = design.grpo(k)
        true_signal = new_signal = old_signal = true_noise = new_noise = old_noise = 0.0
        for _ in range(12):
            fresh = [[fresh_pool(p, half, rng) for p in model] for _ in range(replays)]
            updates = np.stack([replay.replay(config, pools, [np.arange(half)] * len(model))[0] for pools in fresh])
            true_noise += ((updates - updates.mean(0)) ** 2).sum() / (replays - 1)
            true_signal += updates.mean(0) @ updates.mean(0) - ((updates - updates.mean(0)) ** 2).sum() / (
                replays - 1) / replays
            pools = [fresh_pool(p, half, rng) for p in model]
            orders = [[rng.permutation(half) for _ in model] for _ in range(replays)]
            draws = [[rng.integers(0, half, size=half) for _ in model] for _ in range(replays)]
            new = replay.batch_measures(config, pools, orders, draws, np.zeros(32), np.ones(32))
            old = replay.batch_measures(config, pools, orders, orders, np.zeros(32), np.ones(32))
            new_signal, new_noise = new_signal + new["signal"], new_noise + new["noise"]
            old_signal, old_noise = old_signal + old["signal"], old_noise + old["noise"]
        truth = true_signal / true_noise
        ratios["new"].append(new_signal / new_noise / truth)
        ratios["old"].append(old_signal / old_noise / truth)
        assert 0.75 < new_noise / true_noise < 1.25, k  # the noise of fresh draws, at every draw
    assert all(0.75 < r < 1.33 for r in ratios["new"]), ratios
    assert ratios["old"][0] < 1.5 and ratios["old"][-1] > 3 * ratios["old"][0], ratios  # rises with the draw


def assert_each_method_recomputes(ckpt: dict) -> None:
    """Every method's per-batch values are in the JSON, and each of its intervals recomputes from them."""
    assert ckpt["interval"] == intervals.METHOD and len(ckpt["batches"]) == SIZE.batches
    for name, m in ckpt["methods"].items():
        assert set(m["per_batch"]) == {"cos_train", "cos_heldout", "gain", "signal", "noise", "samples_per_prompt",
                                       "critical_path_tokens"}
        assert m["critical_path_tokens"] == pytest.approx(np.mean(m["per_batch"]["critical_path_tokens"]))
        assert all(len(v) == SIZE.batches for v in m["per_batch"].values())
        for key in intervals.MEASURES:
            assert intervals.from_json(ckpt, key, name) == pytest.approx(m[key]), (name, key)


def test_every_interval_is_recomputed_from_the_json_alone(first_design):
    ckpt = first_design
    assert_each_method_recomputes(ckpt)
    for reference, rows in ckpt["paired"].items():
        for name, pair in rows.items():
            for key in replay.PAIRED:
                assert intervals.from_json(ckpt, key, name, reference) == pytest.approx(pair[key]), (name, key)
    for name, pair in ckpt["paired_matched"].items():
        assert intervals.from_json(ckpt, "cos_heldout", name, pair["reference"]) == pytest.approx(pair["cos_heldout"])
    # what the report printed is what the JSON recomputes
    text = gq_report.report({"checkpoints": {"base": ckpt}})
    value, low, high = intervals.from_json(ckpt, "cos_heldout", "balance")
    assert f"| {value:.3f} [{low:.3f}, {high:.3f}] |" in text
    value, low, high = intervals.from_json(ckpt, "cos_heldout", "pos", "balance")
    assert f"| pos | {value:.4f} [{low:.4f}, {high:.4f}] |" in text


def test_every_equal_samples_interval_is_recomputed_from_the_json_alone(equal_samples):
    ckpt = equal_samples
    assert_each_method_recomputes(ckpt)
    for name, pair in ckpt["paired_matched"].items():
        for key in replay.PAIRED:
            assert intervals.from_json(ckpt, key, name, pair["reference"]) == pytest.approx(pair[key]), (name, key)
    # what the report printed is what the JSON recomputes
    text = gq_report.report({"checkpoints": {"protocol_start_equal_samples": ckpt}})
    name = "est"
    value, low, high = intervals.from_json(ckpt, "cos_heldout", name, ckpt["matched"][name])
    assert f"| {name} | 4.00 | grpo_n4 | {value:.4f} [{low:.4f}, {high:.4f}] |" in text


def test_equal_samples_candidates_meet_their_budgets_and_their_matched_grpo(equal_samples):
    ckpt, methods = equal_samples, equal_samples["methods"]
    assert set(ckpt["matched"]) == set(design.EQUAL_SAMPLES.candidates)
    for name, grpo_name in ckpt["matched"].items():
        drew = methods[name]["samples_per_prompt"]
        assert grpo_name == f"grpo_n{design.matched_n(drew, SIZE.train_k // 2)}" and grpo_name in methods
        budget = design.EQUAL_SAMPLES.candidates[name].sample_budget
        if budget is not None:
            assert drew <= budget * 4 + 1e-9, name
    assert methods["est"]["samples_per_prompt"] == 4 and ckpt["matched"]["est"] == "grpo_n4"
    # the checks draw and keep what GRPO-n4 does: their paired difference is exactly 0 in every measure
    for name in design.EQUAL_SAMPLES.checks:
        assert ckpt["matched"][name] == "grpo_n4"
        assert all(ckpt["paired_matched"][name][key] == [0.0, 0.0, 0.0] for key in replay.PAIRED), name
    assert ckpt["decision"] == design.decide(ckpt["paired_matched"])
    # the same responses in one round: the same critical path; balance's later rounds only add to it
    for name in design.EQUAL_SAMPLES.checks:
        assert methods[name]["critical_path_tokens"] == methods["grpo_n4"]["critical_path_tokens"]
    assert methods["balance"]["critical_path_tokens"] > methods["grpo_n4"]["critical_path_tokens"]


def test_a_replays_critical_path_sums_each_rounds_longest_response():
    tokens = np.arange(64, dtype=float)  # response i has i tokens
    prompts = [{"rewards": np.zeros(64), "grads": np.zeros((64, 3)), "tokens": tokens},  # never resolves
               {"rewards": np.zeros(64), "grads": np.zeros((64, 3)), "tokens": tokens[::-1].copy()}]
    order = [np.arange(32), np.arange(32)]
    # GRPO-n4: one round of responses 0-3 of each prompt, the longest prompt 1's first (63 tokens)
    assert replay.replay(design.grpo(4), prompts, order)[1:] == (8, 63.0)
    # balance (M 8, R 4): four rounds of 8 a prompt; each round's longest is prompt 1's first of the round
    assert replay.replay(design.EQUAL_SAMPLES.candidates["balance"], prompts, order)[1:] == (64, 63 + 55 + 47 + 39)


def test_the_decision_rule_takes_those_above_zero_else_the_best():
    def pair(value, low):
        return {design.PRIMARY: [value, low, value + (value - low)]}

    pairs = {"a": pair(0.02, -0.01), "b": pair(0.05, 0.01), "c": pair(0.03, 0.001), "d": pair(0.09, 0.02),
             "balance_budget1": pair(0.5, 0.4)}
    assert design.decide(pairs) == {"above_zero": ["d", "b", "c"], "chosen": ["d", "b"], "resolved": True}
    none_above = {"a": pair(0.02, -0.01), "b": pair(-0.01, -0.03), "pos_budget1": pair(0.0, 0.0)}
    assert design.decide(none_above) == {"above_zero": [], "chosen": ["a"], "resolved": False}


def test_the_report_shows_the_equal_samples_table_and_the_decision(equal_samples):
    text = gq_report.report({"checkpoints": {"protocol_start_equal_samples": equal_samples}})
    assert "### Checkpoint: protocol_start, equal samples design" in text and "Start: weights abc." in text
    assert "At equal samples: each candidate minus the GRPO" in text and "Decision (the design's rule):" in text
    assert "| balance_budget1 | 4.00 | grpo_n4 |" in text and "| check |" in text
    methods = equal_samples["methods"]
    path, grpo_path = (methods[m]["critical_path_tokens"] for m in ("balance", equal_samples["matched"]["balance"]))
    assert "critical path, tokens |" in text and f"| {path:.0f} ({grpo_path:.0f}) |" in text
    assert "Satterthwaite" in text and "fresh draws" in text and "Paired difference to" not in text
    # a record measured with the old intervals says so
    old = {**equal_samples, "design": "first", "matched_n": 5, "balance_samples_per_prompt": 5.0}
    del old["interval"]
    assert "too wide" in gq_report.report({"checkpoints": {"base": old}})
