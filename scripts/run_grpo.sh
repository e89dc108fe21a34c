#!/usr/bin/env bash
# The paper's GRPO-n4 baseline: the settings of scripts/run_reinforce_ada.sh (model, data, reward,
# optimiser, loss, validation) with the adaptive rollout off, n samples per prompt and GRPO's
# advantage, (r - group mean) / group std, as verl computes it by default.
#
#   bash scripts/run_grpo.sh [hydra overrides...]     (the same environment variables; N [4] sets n)
#
# Append algorithm.norm_adv_by_std_in_grpo=false for the variant without the std division (the
# advantage Reinforce-Ada's script uses, with the group's own mean as the baseline).
# The paper's own GRPO script left weight decay (0.01), learning-rate warm-up (none) and the dual-clip
# bound (3) at verl's defaults; here both methods share one optimiser and loss, so that a comparison
# varies only the sampling and the advantage.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
EXPERIMENT=${EXPERIMENT:-grpo_n${N:-4}} exec bash "$here/run_reinforce_ada.sh" \
  reinforce_ada.enable=false algorithm.adv_estimator=grpo algorithm.norm_adv_by_std_in_grpo=true \
  actor_rollout_ref.rollout.n="${N:-4}" "$@"
