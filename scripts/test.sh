#!/usr/bin/env bash
# The test suite: sets up .venv (scripts/setup_env.sh), runs ruff, then pytest. Extra arguments go to pytest, e.g.
# `bash scripts/test.sh -m "not slow"` for the quick tests only. The end-to-end runs are background jobs, two at a
# time, beside the in-process tests (tests/e2e_jobs.py; REINFORCE_ADA_E2E_JOBS=late runs them after,
# REINFORCE_ADA_E2E_LANES=1 one at a time).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup_env.sh"
venv=${REINFORCE_ADA_VENV:-$root/.venv}
cd "$root"
"$venv/bin/ruff" check .  # lint first: pyflakes, pycodestyle, bugbear, import order, pyupgrade (pyproject.toml)
exec "$venv/bin/python" -m pytest "$@"
