#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs every test, lint and type check included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/mypy          # launcher/ and orchestrator/ (pyproject.toml's [tool.mypy])
# Python's default, bytecode written and reused, even where the environment turns it off
# (PYTHONDONTWRITEBYTECODE, as on some CI runners): the suite starts hundreds of `launch`,
# watchdog and task processes, and each would compile all it imports again. The checkout's
# bytecode is made once, up front.
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -m compileall -q -j 0 launcher orchestrator examples tests bench docker >/dev/null
# Several workers (pytest-xdist): most tests wait on processes rather than compute, so 4
# workers suit 2 cores; each machine-wide bed's tests stay in one worker
# (tests/conftest.py's scheduler). TEST_WORKERS=0 runs them in this process.
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n "${TEST_WORKERS:-4}" "$@"
