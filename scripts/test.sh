#!/usr/bin/env bash
# The test suite: sets up .venv (scripts/setup_env.sh), runs ruff, then pytest. Extra arguments go to
# pytest, e.g. `bash scripts/test.sh -m "not slow"` for the quick tests only.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup_env.sh"
venv=${REINFORCE_ADA_VENV:-$root/.venv}
cd "$root"
"$venv/bin/ruff" check .  # lint first: pyflakes, pycodestyle, bugbear, import order, pyupgrade (pyproject.toml)
exec "$venv/bin/python" -m pytest "$@"
