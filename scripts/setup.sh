#!/usr/bin/env bash
# Sets up everything tfcluster and its tests need, on a fresh Debian/Ubuntu machine.
#   .venv      TensorFlow 2.15 (Estimator) + tfcluster + test tools; the launcher runs here
#   .venv-tf2  TensorFlow 2.21 (ParameterServerStrategy, MultiWorkerMirroredStrategy)
#   .venv-jax  jax + Keras 3 ("keras": "jax": Keras 3 on JAX across processes, docs/keras.md)
#   .venv-mlflow  MLflow's tracking server and client, for the tests of tracking (tests/tracking)
# Idempotent: a second run only checks. SETUP_APT=0 skips the system packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1 TF_CPP_MIN_LOG_LEVEL=2   # no TensorFlow banners from the checks

if [[ ${SETUP_APT:-1} == 1 && $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  need=()
  # docker.io, docker-compose, debootstrap: the Docker test bed (tests/infra/docker_engine.py)
  # chromium: headless page checks of `launch report` and TensorBoard (tests/output/)
  for pkg in openssh-server openssh-client slurm-wlm munge iproute2 procps psmisc \
             docker.io docker-compose debootstrap chromium; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if ((${#need[@]})); then
    echo "setup: installing system packages: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
fi

pipq() { "$@" 2>&1 | grep -v -E "is ignored: it is neither|BuildBackendWarning" || true; }

# The two environments install TensorFlow side by side (pip is single-threaded).
tf2_env() {
  if [[ ! -x .venv-tf2/bin/python ]] || ! .venv-tf2/bin/python -c "import tf_keras" 2>/dev/null; then
    echo "setup: .venv-tf2 (TensorFlow 2.21)"
    "$PY" -m venv .venv-tf2
    pipq .venv-tf2/bin/pip install -q "tensorflow-cpu==2.21.0" fsspec psutil
    pipq .venv-tf2/bin/pip install -q --no-deps "tf-keras==2.21.0"
  fi
  .venv-tf2/bin/python -c "import rich" 2>/dev/null || pipq .venv-tf2/bin/pip install -q rich
}
jax_env() {
  if [[ ! -x .venv-jax/bin/python ]] || ! KERAS_BACKEND=jax .venv-jax/bin/python -c "import jax, keras, h5py, psutil" 2>/dev/null; then
    echo "setup: .venv-jax (jax, Keras 3)"
    "$PY" -m venv .venv-jax
    pipq .venv-jax/bin/pip install -q "jax==0.10.2" "keras==3.15.1" fsspec psutil
  fi
}
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT    # a failed step leaves nothing installing
tf2_env &
tf2_pid=$!
jax_env &
jax_pid=$!

# The MLflow tracking server the tests of tracking start (tests/infra/mlflow_server.py); the
# launcher itself talks to MLflow over its REST API and needs none of it (docs/tracking.md).
MLFLOW_VERSION=3.17.2
mlflow_env() {
  if [[ ! -x .venv-mlflow/bin/mlflow ]] || \
     [[ $(.venv-mlflow/bin/python -c "import importlib.metadata as m; print(m.version('mlflow'))" 2>/dev/null) != "$MLFLOW_VERSION" ]]; then
    echo "setup: .venv-mlflow (MLflow $MLFLOW_VERSION)"
    "$PY" -m venv .venv-mlflow
    pipq .venv-mlflow/bin/pip install -q "mlflow==$MLFLOW_VERSION"
  fi
}
mlflow_env &
mlflow_pid=$!

if [[ ! -x .venv/bin/python ]] || ! .venv/bin/python -c "import tensorflow_estimator, pytest, s3fs" 2>/dev/null; then
  echo "setup: .venv (TensorFlow 2.15, tfcluster, test tools)"
  "$PY" -m venv .venv
  pipq .venv/bin/pip install -q "tensorflow-cpu==2.15.1"
fi
# compat: the checkout on sys.path through a plain .pth; the default editable finder imported
# pathlib, urllib and ipaddress into every Python of the environment (~25 ms a start)
pipq .venv/bin/pip install -q -e ".[dev]" --config-settings editable_mode=compat
.venv/bin/python -c "import tensorflow_estimator, pytest, s3fs, launcher" || { echo "setup: .venv is broken" >&2; exit 1; }

# The Docker test bed's base image (a debootstrap root, tests/infra/docker_engine.py), made
# once per machine while the TensorFlow 2.21 environment installs. SETUP_DOCKER_BASE=0 skips it.
base_pid=
if [[ ${SETUP_DOCKER_BASE:-1} == 1 && $(id -u) == 0 ]] && command -v debootstrap >/dev/null \
   && [[ -x /usr/sbin/dockerd ]]; then
  .venv/bin/python tests/infra/docker_engine.py base-tarball >/dev/null &
  base_pid=$!
fi

wait "$tf2_pid" || { echo "setup: .venv-tf2 failed" >&2; exit 1; }
wait "$jax_pid" || { echo "setup: .venv-jax failed" >&2; exit 1; }
# tfcluster too, as in .venv-tf2: a Keras JAX script imports orchestrator.sharding for its shard
pipq .venv-jax/bin/pip install -q --no-deps -e . --config-settings editable_mode=compat
KERAS_BACKEND=jax .venv-jax/bin/python -c "import jax, keras, orchestrator" || { echo "setup: .venv-jax is broken" >&2; exit 1; }
wait "$mlflow_pid" || { echo "setup: .venv-mlflow failed" >&2; exit 1; }
pipq .venv-tf2/bin/pip install -q --no-deps -e . --config-settings editable_mode=compat   # after .venv's
.venv-tf2/bin/python -c "import tf_keras, orchestrator" || { echo "setup: .venv-tf2 is broken" >&2; exit 1; }
if [[ -n $base_pid ]] && ! wait "$base_pid"; then
  echo "setup: the Docker bed's base image (debootstrap) failed; the Docker tests will retry it" >&2
fi
echo "setup: done (activate with: . .venv/bin/activate)"
