"""End to end: scripts/run_reinforce_ada.sh tried on this CPU as a new user would, with only the documented variables
(no REWARD_FILE, no wandb key), on questions whose data_source is "math", as data preparation writes them. verl's
default scorer for "math" gives -1 to a wrong answer; the script's default is the paper's reward, 0 or 1."""

import json
import os
import sys

import pandas as pd
import pytest

import trainer_runs
from e2e_jobs import job
from trainer_runs import ROOT

pytestmark = pytest.mark.slow


@job()
def launch_script_run(out):
    from reinforce_ada.tools.tiny import build

    tiny = build(out / "tiny", train=4, test=4)
    for split in ("train", "test"):  # the tiny task's questions, labelled as data preparation labels its data
        path = tiny / "data" / f"{split}.parquet"
        pd.read_parquet(path).assign(data_source="math").to_parquet(path)
    # only the documented variables: an empty value is an unset one for the script
    env = {"PATH": f"{os.path.dirname(sys.executable)}:{trainer_runs.ENV['PATH']}",  # the script calls `python`
           "MODEL": str(tiny / "model"), "TRAIN_FILES": str(tiny / "data" / "train.parquet"),
           "VAL_FILES": str(tiny / "data" / "test.parquet"), "CKPT_DIR": str(out / "checkpoints"), "NGPUS": "1",
           "REWARD_FILE": "", "LOGGER": "", "WANDB_API_KEY": "", "WANDB_MODE": "", "HOME": str(out)}
    command = ["bash", str(ROOT / "scripts" / "run_reinforce_ada.sh"),
               "trainer.device=cpu", "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
               "data.max_prompt_length=64", "data.max_response_length=32", "data.dataloader_num_workers=0",
               "trainer.total_training_steps=1", "trainer.save_freq=-1",
               "trainer.logger=[console,file]",  # appended after the script's choice: the metrics file for the test
               f"trainer.rollout_data_dir={out / 'rollouts'}"]
    code, log = trainer_runs.run(out, "script", command, env)
    return code, log, out


def test_the_launch_script_tried_on_a_cpu_trains_a_step_on_the_papers_reward(e2e):
    code, log, out = e2e.result("launch_script_run")
    assert code == 0, log[-6000:]
    assert "logger: console only" in log  # no wandb key: no wandb, said once
    assert "default_compute_score" not in log  # the paper's reward, so nothing to warn about
    (record,) = [r for r in trainer_runs.metrics(out, "script") if r["step"] == 1]
    data = record["data"]
    trainer_runs.assert_sane_sampler_metrics(data)
    # every sample was scored by the package's reward: 0 or 1, with its outcomes (verl's math_dapo gives -1 and
    # reports none), and the pass rates that the exit rule and the metrics read stay in [0, 1]
    samples = [json.loads(line) for line in (out / "rollouts" / "1.jsonl").read_text().splitlines()]
    assert len(samples) == 16
    assert {s["score"] for s in samples} <= {0.0, 1.0}
    assert 0 <= data["reinforce_ada/reward/no_answer"] <= 1  # an outcome only the package's reward reports
    assert 0 <= data["critic/score/min"] <= data["critic/score/max"] <= 1
    assert 0 <= data["reinforce_ada/pass_rate_mean"] <= 1
    # validation as the paper ran it: greedy, one response per held-out question, before the first step
    validation = [r for r in trainer_runs.metrics(out, "script") if r["step"] == 0]
    keys = {k for r in validation for k in r["data"] if k.startswith("val-core/")}
    assert keys and all(k.endswith("@1") for k in keys), keys
