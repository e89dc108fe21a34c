"""End to end: skipping prompts without signal through verl's V1 trainer, with GRPO and with Reinforce-Ada-balance,
across a checkpoint and a resume (two verl start-ups in one job).

8 training prompts, 4 a step, no shuffling; the reward (hostile_reward.py) gives every response of prompts 4-7 a 0
and fails on a fifth of its calls. A GRPO run with ``+reinforce_ada=grpo_skip`` (n responses in one round, all kept,
GRPO's advantage) samples prompts 0-3 at step 1 and 4-7 at step 2, whose pools are then all wrong, and checkpoints
at step 2 with their streaks. The same folder is resumed as Reinforce-Ada-balance with the skip: the streaks come
back from the checkpoint, and when the data reaches prompts 4-7 again (step 3 or 4: refills move it on), the rule
(growth 1, cap 0.95) skips them and verl's refill brings the next prompts in their place.
"""

import pytest

import trainer_runs
from e2e_jobs import job
from trainer_runs import HOSTILE_REWARD

pytestmark = pytest.mark.slow

SKIP = ["reinforce_ada.skip_growth=1.0", "reinforce_ada.skip_cap=0.95", "reinforce_ada.sampling_seed=11",
        f"reward.custom_reward_function.path={HOSTILE_REWARD}"]


@job()
def skip_runs(out):
    from reinforce_ada.tools.tiny import build

    build(out / "tiny", train=8, test=4)  # scripts/run_cpu_tiny.sh finds it in OUT/tiny
    grpo = trainer_runs.tiny_run(out, "grpo", {"STEPS": "2", "SAVE_FREQ": "2"}, "reinforce_ada=grpo_skip", *SKIP)
    grpo_rows, grpo_log = trainer_runs.finish(grpo, out, "grpo")
    balance = trainer_runs.tiny_run(out, "balance", {"STEPS": "4", "SAVE_FREQ": "4"}, "reinforce_ada.skip=true", *SKIP)
    balance_rows, balance_log = trainer_runs.finish(balance, out, "balance")
    return {"grpo": {r["step"]: r["data"] for r in grpo_rows}, "grpo_log": grpo_log,
            "balance": {r["step"]: r["data"] for r in balance_rows}, "balance_log": balance_log, "out": out}


@pytest.fixture(scope="module")
def runs(e2e):
    return e2e.result("skip_runs")


def test_grpo_with_the_skip_draws_n_per_prompt_keeps_them_all_and_logs_the_rule_every_step(runs):
    grpo = runs["grpo"]
    assert sorted(grpo) == [1, 2]
    for data in grpo.values():
        # n per prompt, all kept (a prompt whose redraw failed too is dropped); a redraw of failed ones at most
        assert data["reinforce_ada/kept_samples"] == 4 * (4 - data["reinforce_ada/prompts_dropped"])
        assert data["reinforce_ada/prompts"] == 4 and data["reinforce_ada/samples_per_prompt_max"] <= 8
        assert data["reinforce_ada/skip/skipped"] == 0  # nothing seen twice yet: nothing to skip
        assert data["reinforce_ada/skip/fetched"] == 4
    assert grpo[2]["reinforce_ada/kept_groups_with_signal_frac"] == 0  # prompts 4-7: every response wrong
    assert (runs["out"] / "checkpoints" / "global_step_2" / "reinforce_ada_tracker.json").exists()


def test_the_resumed_run_restores_the_streaks_and_skips_the_prompts_without_signal(runs):
    balance, log = runs["balance"], runs["balance_log"]
    assert sorted(balance) == [3, 4]  # resumed after the GRPO run's step 2
    assert "skip streaks of" in log and "restored from" in log
    for data in balance.values():
        assert data["reinforce_ada/skip/fetched"] == 4 + data["reinforce_ada/skip/skipped"]
        assert data["reinforce_ada/prompts"] == 4  # each skipped prompt was replaced from the data
        trainer_runs.assert_sane_sampler_metrics(data)
        # each round (redraws of failed samples are rounds too) lasts at most one 32-token response
        assert 0 < data["reinforce_ada/critical_path_tokens"] <= data["reinforce_ada/rounds"] * 32
    # prompts 4-7 come up again at step 3 or 4 (refills move the data on), their streaks from step 2 restored
    assert sum(data["reinforce_ada/skip/skipped"] for data in balance.values()) >= 1
