#!/usr/bin/env bash
# Reinforce-Ada through verl's trainer on a CPU: a tiny random Qwen2 (built here, offline),
# vLLM-CPU rollout, FSDP2 actor. The same code path as on GPUs; only the platform differs.
#
#   bash scripts/run_cpu_tiny.sh [hydra overrides...]
#
# Environment: STEPS (training steps, default 2), OUT (run folder, default outputs/cpu_tiny),
# VARIANT (balance | pos | est, default balance), TRAINER (v1 | legacy, default v1), ENTRY (ours |
# verl, default ours: verl's own `python -m verl.trainer.main_ppo` with this package's config).
# Metrics go to the console and to
# OUT/metrics/<start time>.jsonl (verl's file logger).
# Rerunning with the same OUT resumes from its last checkpoint. One worker of each kind and one
# TransferQueue storage unit keep the process count down on two cores (measured: 8 storage
# units, verl's default, work but made a 2-step V1 run 25% slower).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup_env.sh"
py=${REINFORCE_ADA_VENV:-$root/.venv}/bin/python
out=$(realpath -m "${OUT:-$root/outputs/cpu_tiny}")
[[ -f "$out/tiny/model/model.safetensors" ]] || "$py" -m reinforce_ada.tools.tiny "$out/tiny"
reward_file=$root/reinforce_ada/tools/tiny.py
case "${TRAINER:-v1}" in v1) use_v1=true ;; legacy) use_v1=false ;; *) echo "TRAINER must be v1 or legacy" >&2; exit 2 ;; esac

export TOKENIZERS_PARALLELISM=false RAY_DEDUP_LOGS=0 RAY_USAGE_STATS_ENABLED=0 VLLM_NO_USAGE_STATS=1
export WANDB_MODE=disabled HYDRA_FULL_ERROR=1 OMP_NUM_THREADS=1
# verl's file logger: one JSON line of metrics per step, a new file per run (a resumed run keeps the old one).
export VERL_FILE_LOGGER_PATH=${VERL_FILE_LOGGER_PATH:-$out/metrics/$(date +%Y%m%d-%H%M%S).jsonl}
mkdir -p "$(dirname "$VERL_FILE_LOGGER_PATH")"

case "${ENTRY:-ours}" in
  ours) entry=(-m reinforce_ada.main_ppo) ;;
  # verl's own entry point with this package's config (Hydra's flags before the overrides); the package's
  # verl plug-in makes it prepare the run before Ray starts, as reinforce_ada.main_ppo does
  verl) entry=(-m verl.trainer.main_ppo --config-path=pkg://reinforce_ada.configs --config-name=reinforce_ada) ;;
  *) echo "ENTRY must be ours or verl" >&2; exit 2 ;;
esac

cd "$root"
exec "$py" "${entry[@]}" \
  trainer.device=cpu trainer.use_v1=$use_v1 trainer.n_gpus_per_node=1 trainer.nnodes=1 \
  reinforce_ada.variant="${VARIANT:-balance}" \
  data.train_files="$out/tiny/data/train.parquet" data.val_files="$out/tiny/data/test.parquet" \
  data.train_batch_size=4 data.max_prompt_length=64 data.max_response_length=32 \
  data.dataloader_num_workers=0 data.shuffle=false \
  actor_rollout_ref.model.path="$out/tiny/model" \
  actor_rollout_ref.model.enable_gradient_checkpointing=false \
  actor_rollout_ref.actor.optim.lr=1e-3 \
  actor_rollout_ref.actor.ppo_mini_batch_size=4 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
  actor_rollout_ref.actor.use_kl_loss=false actor_rollout_ref.actor.use_torch_compile=false \
  actor_rollout_ref.actor.fsdp_config.use_torch_compile=false \
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=4 \
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 actor_rollout_ref.rollout.enforce_eager=true \
  actor_rollout_ref.rollout.free_cache_engine=false actor_rollout_ref.rollout.max_model_len=512 \
  actor_rollout_ref.rollout.max_num_batched_tokens=512 actor_rollout_ref.rollout.max_num_seqs=64 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 actor_rollout_ref.rollout.agent.num_workers=1 \
  reward.num_workers=1 reward.custom_reward_function.path="$reward_file" \
  transfer_queue.backend.SimpleStorage.num_data_storage_units=1 \
  reward.custom_reward_function.name=compute_score \
  trainer.logger='[console,file]' trainer.project_name=reinforce_ada trainer.experiment_name=cpu_tiny \
  trainer.default_local_dir="$out/checkpoints" trainer.total_training_steps="${STEPS:-2}" \
  trainer.total_epochs=100 trainer.save_freq="${SAVE_FREQ:-2}" trainer.test_freq=-1 \
  trainer.val_before_train=false trainer.resume_mode=auto +ray_kwargs.ray_init.include_dashboard=false \
  "$@"
