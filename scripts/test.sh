#!/usr/bin/env bash
# The test suite: sets up .venv (scripts/setup_env.sh), runs ruff, then pytest, in one process. Extra arguments go
# to pytest, e.g. `bash scripts/test.sh -m "not slow"` for the quick tests only. REINFORCE_ADA_TEST_WORKERS=2 runs two
# pytest-xdist workers, a module to each, end-to-end modules longest first (tests/conftest.py); on 2 cores that was slower.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup_env.sh"
venv=${REINFORCE_ADA_VENV:-$root/.venv}
cd "$root"
"$venv/bin/ruff" check .  # lint first: pyflakes, pycodestyle, bugbear, import order, pyupgrade (pyproject.toml)
exec "$venv/bin/python" -m pytest -n "${REINFORCE_ADA_TEST_WORKERS:-0}" --dist loadscope --no-loadscope-reorder "$@"
