#!/usr/bin/env bash
# One command from a fresh checkout to a real local TensorFlow cluster job:
# sets everything up (scripts/setup.sh), then runs the Estimator example
# (chief + 2 workers + 1 ps + evaluator, TensorFlow 2.15) through `launch`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
exec launch cluster_specs/estimator.json "$@"
