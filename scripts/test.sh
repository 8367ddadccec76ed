#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs every test, lint included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
