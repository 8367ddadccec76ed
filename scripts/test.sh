#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs every test, lint and type check included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/mypy          # launcher/ and orchestrator/ (pyproject.toml's [tool.mypy])
# Several workers (pytest-xdist): most tests wait on processes rather than compute, so 4
# workers suit 2 cores; each machine-wide bed's tests stay in one worker
# (tests/conftest.py's scheduler). TEST_WORKERS=0 runs them in this process.
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n "${TEST_WORKERS:-4}" "$@"
