#!/usr/bin/env bash
# Avg@k and pass@k of checkpoints on math benchmarks (reinforce_ada/tasks/evaluate.py), the paper's
# defaults: k 32, temperature 1.0, 4096 new tokens.
#
#   BENCHMARKS="math500=data/math500.parquet minerva=data/minerva.parquet" \
#     bash scripts/eval.sh outputs/run/global_step_400 [more checkpoints...]
#
# Environment: BENCHMARKS (space-separated NAME=PARQUET), K [32], TEMPERATURE [1.0],
# MAX_TOKENS [4096], OUTPUT [eval], REWARD_MODULE [reinforce_ada.tasks.reward], EXTRA (more options).
set -euo pipefail
: "${BENCHMARKS:?set BENCHMARKS to NAME=PARQUET pairs}"
[[ $# -ge 1 ]] || { echo "usage: bash scripts/eval.sh CHECKPOINT [CHECKPOINT...]" >&2; exit 2; }
bench=()
for b in $BENCHMARKS; do bench+=(--benchmark "$b"); done
py=${PYTHON:-python}
exec "$py" -m reinforce_ada.tasks.evaluate --checkpoint "$@" "${bench[@]}" --k "${K:-32}" \
  --pass-at "${PASS_AT:-1,8,32}" --temperature "${TEMPERATURE:-1.0}" --max-tokens "${MAX_TOKENS:-4096}" \
  --output "${OUTPUT:-eval}" --reward-module "${REWARD_MODULE:-reinforce_ada.tasks.reward}" ${EXTRA:-}
