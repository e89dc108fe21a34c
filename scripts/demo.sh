#!/usr/bin/env bash
# The main job. Until the CPU training run lands, it shows what the sampler does on 512
# simulated prompts whose pass rates follow an early-training Beta(0.5, 2) distribution:
# GRPO-n4 (one round of 4) against Reinforce-Ada-pos and -balance (n=4, M=8, R=4).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup_env.sh"
py=${REINFORCE_ADA_VENV:-$root/.venv}/bin/python
cd "$root"
printf '%-22s %16s %14s %20s\n' method samples/prompt resolved groups_with_signal
for args in "grpo-n4|--variant pos --round-size 4 --max-rounds 1" "reinforce-ada-pos|--variant pos" \
  "reinforce-ada-balance|--variant balance"; do
  name=${args%%|*}
  "$py" -m reinforce_ada.simulate --beta 0.5 2 --num-prompts 512 --seed 0 --summary-only ${args#*|} |
    "$py" -c "import json,sys; s=json.load(sys.stdin); print(f\"{'$name':<22} {s['samples_per_prompt_mean']:>16.2f} {s['prompts_resolved']/s['prompts']:>14.3f} {s['kept_groups_with_signal_frac']:>20.3f}\")"
done
