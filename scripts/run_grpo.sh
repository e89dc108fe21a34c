#!/usr/bin/env bash
# The GRPO-n4 baseline with the same settings as scripts/run_reinforce_ada.sh: the same
# entry point and config with the adaptive rollout off (4 samples per prompt, group baseline).
#
#   bash scripts/run_grpo.sh [hydra overrides...]     (same environment variables; N [4] sets n)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
EXPERIMENT=${EXPERIMENT:-grpo_n${N:-4}} exec bash "$here/run_reinforce_ada.sh" \
  reinforce_ada.enable=false algorithm.adv_estimator=grpo actor_rollout_ref.rollout.n="${N:-4}" "$@"
