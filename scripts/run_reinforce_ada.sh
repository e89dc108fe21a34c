#!/usr/bin/env bash
# Reinforce-Ada-Seq with the paper's settings (Qwen2.5-Math-1.5B, 8 GPUs, 512 prompts per step,
# n=4 kept, M=8 per round, R=4 rounds, threshold 0.7, no std division, clip 0.2/0.28, lr 1e-6, verl's
# gradient clipping at 1.0; with model_engine=megatron appended it composes for Megatron too),
# scored by the paper's reward (math-verify on the last \boxed{}: 1 or 0) and validated as the
# paper's code did (greedy, one response per question; Avg@k evaluation is scripts/eval.sh).
#
#   VARIANT=pos bash scripts/run_reinforce_ada.sh [hydra overrides...]
#
# Environment (defaults in brackets):
#   VARIANT      [balance] or pos
#   MODEL        [Qwen/Qwen2.5-Math-1.5B]
#   TRAIN_FILES  [data/openr1/train.parquet]   VAL_FILES [data/openr1/test.parquet]   (made absolute)
#   REWARD_FILE  [pkg://reinforce_ada.reward: the package's math-verify reward] a file of your own
#                (its function: REWARD_FN [compute_score]), or `verl` for verl's default scorer,
#                which picks one by each row's data_source (for "math", -1/+1 rewards)
#   NGPUS [8]  NNODES [1]  PROJECT [Reinforce-Ada]  EXPERIMENT [reinforce_ada_$VARIANT]
#   CKPT_DIR     [$PWD/outputs/$EXPERIMENT], made absolute; on several nodes, shared storage
#   LOGGER       [console, plus wandb when WANDB_API_KEY or WANDB_MODE is set or ~/.netrc holds a
#                wandb key] a verl logger list, e.g. '["console","wandb"]'
# Hydra overrides given as arguments win over everything above.
set -euo pipefail
VARIANT=${VARIANT:-balance}
EXPERIMENT=${EXPERIMENT:-reinforce_ada_${VARIANT}}

REWARD_FILE=${REWARD_FILE:-pkg://reinforce_ada.reward}
reward=()
if [[ "$REWARD_FILE" != verl ]]; then
  reward=(reward.custom_reward_function.path="$REWARD_FILE" reward.custom_reward_function.name="${REWARD_FN:-compute_score}")
fi

# Ray's workers (and a `ray job submit` driver) do not run in this directory: paths are made absolute here.
absolute() { if [[ "$1" == /* || "$1" == *://* ]]; then echo "$1"; else echo "$PWD/$1"; fi; }
CKPT_DIR=$(absolute "${CKPT_DIR:-outputs/$EXPERIMENT}")
TRAIN_FILES=$(absolute "${TRAIN_FILES:-data/openr1/train.parquet}")
VAL_FILES=$(absolute "${VAL_FILES:-data/openr1/test.parquet}")
# `python -m` puts this directory first on the module path: in a clone with a regular (not editable) install,
# the clone's reinforce_ada/ folder, which holds no configs, would hide the installed package (Python >= 3.11).
export PYTHONSAFEPATH=1

if [[ -z "${LOGGER:-}" ]]; then
  if [[ -n "${WANDB_API_KEY:-}" || -n "${WANDB_MODE:-}" ]] || grep -qs "api.wandb.ai" "$HOME/.netrc"; then
    LOGGER='["console","wandb"]'
    echo "[reinforce_ada] logger: console and wandb (a wandb key or WANDB_MODE is set)" >&2
  else
    LOGGER='["console"]'
    echo "[reinforce_ada] logger: console only (set WANDB_API_KEY or WANDB_MODE, or LOGGER, for wandb)" >&2
  fi
fi

exec python -m reinforce_ada.main_ppo \
  reinforce_ada.variant="$VARIANT" reinforce_ada.round_size=8 reinforce_ada.max_rounds=4 reinforce_ada.threshold=0.7 \
  algorithm.adv_estimator=reinforce_ada algorithm.norm_adv_by_std_in_grpo=false \
  algorithm.use_kl_in_reward=false actor_rollout_ref.actor.use_kl_loss=false \
  data.train_files="$TRAIN_FILES" data.val_files="$VAL_FILES" \
  data.prompt_key=prompt data.truncation=left data.max_prompt_length=1024 data.max_response_length=2048 \
  data.train_batch_size=512 \
  actor_rollout_ref.model.path="${MODEL:-Qwen/Qwen2.5-Math-1.5B}" \
  actor_rollout_ref.model.use_remove_padding=true actor_rollout_ref.model.enable_gradient_checkpointing=true \
  actor_rollout_ref.actor.optim.lr=1e-6 actor_rollout_ref.actor.optim.lr_warmup_steps=10 \
  actor_rollout_ref.actor.optim.weight_decay=0 actor_rollout_ref.actor.ppo_mini_batch_size=128 \
  actor_rollout_ref.actor.use_dynamic_bsz=true actor_rollout_ref.actor.ppo_max_token_len_per_gpu=6144 \
  actor_rollout_ref.actor.clip_ratio_low=0.2 actor_rollout_ref.actor.clip_ratio_high=0.28 \
  actor_rollout_ref.actor.clip_ratio_c=10.0 actor_rollout_ref.actor.loss_agg_mode=token-mean \
  actor_rollout_ref.actor.entropy_coeff=0 \
  actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=9216 \
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=4 actor_rollout_ref.rollout.temperature=1.0 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.8 actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
  actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=9216 \
  actor_rollout_ref.rollout.val_kwargs.temperature=0 actor_rollout_ref.rollout.val_kwargs.do_sample=false \
  actor_rollout_ref.rollout.val_kwargs.n=1 \
  ${reward[@]+"${reward[@]}"} \
  trainer.n_gpus_per_node="${NGPUS:-8}" trainer.nnodes="${NNODES:-1}" \
  trainer.logger="$LOGGER" trainer.project_name="${PROJECT:-Reinforce-Ada}" \
  trainer.experiment_name="$EXPERIMENT" trainer.default_local_dir="$CKPT_DIR" \
  trainer.val_before_train=true trainer.test_freq=50 trainer.save_freq=50 \
  trainer.total_epochs=1000 trainer.total_training_steps=400 trainer.resume_mode=auto \
  "$@"
