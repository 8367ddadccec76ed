"""The catalogue of known TensorFlow/Keras failures (launcher/output/known_failures.py): one
test per signature. Against the real failure where it can be provoked here (a real
.venv-tf2 task without tf.estimator; a real process killed by the kernel's OOM killer in a
memory cgroup, named from the kernel's own log; the Keras 3 MWMS failure:
tests/keras/test_keras_routes.py); from the failure's real text where it cannot be
provoked in seconds (TF 2.15's RunGraph loop, gRPC's "failed to connect to all addresses",
which TensorFlow retries for minutes before it raises it)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from support import PY_TF221, run_dir, run_launch

from launcher.output.known_failures import CATALOGUE, diagnose, kernel_oom, match
from launcher.output.tracebacks import fold_data, is_data, last_exception, tail_box

JOBS = Path(__file__).with_name("jobs")
KILLED = -signal.SIGKILL

# Each as TensorFlow printed it (the first from a run here, tests/keras/jobs/keras_mwms_fit.py;
# the others as reported upstream: tensorflow/tensorflow#23414, grpc/grpc#22581).
KERAS3 = """\
Traceback (most recent call last):
  File "train.py", line 53, in <module>
    model.fit(dataset, epochs=2, steps_per_epoch=5)
  File "/v/site-packages/keras/src/utils/traceback_utils.py", line 122, in error_handler
    raise e.with_traceback(filtered_tb) from None
ValueError: Attempt to convert a value (PerReplica:{
  0: <tf.Tensor: shape=(16, 8), dtype=float32, numpy=
array([[0.898945  , 0.2986961 , 0.9020749 , 0.67199486, 0.8903967 ,
        0.1995154 , 0.75824213, 0.9421131 ],
       [0.04859674, 0.36511016, 0.6365128 , 0.10549527, 0.5100634 ,
        0.62910813, 0.7639874 , 0.92715454]], dtype=float32)>
}) with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>) \
to a Tensor."""
KERAS3_PSS = ("ValueError: When using a ParameterServerStrategy, please pass this dataset to "
              "ClusterCoordinator.create_per_worker_dataset (keras/src/trainers/...)")
RUNGRAPH = ("tensorflow.python.framework.errors_impl.AbortedError: The same RunGraph request "
            "was received twice. [Op:__inference_train_function_123]")
GRPC = ("tensorflow.python.framework.errors_impl.UnavailableError: failed to connect to all "
        "addresses\nAdditional GRPC error information from remote target /job:ps/replica:0/"
        "task:0:")
GLOO = ("RuntimeError: Unable to initialize backend 'cpu': [enforce fail at external/gloo/gloo/"
        "transport/tcp/device.cc:99] rv == 0. -3 vs 0 (you may need to uninstall the failing "
        "plugin package, or set JAX_PLATFORMS=cpu to skip this backend.)")
SLURM_OOM = "slurmstepd: error: Detected 1 oom_kill event in StepId=12.0. Some of the step " \
            "tasks have been OOM Killed."


@pytest.mark.parametrize("text, status, name", [
    (KERAS3, 1, "keras3-distributed"),
    (KERAS3_PSS, 1, "keras3-distributed"),
    ("AttributeError: module 'tensorflow' has no attribute 'estimator'", 1,
     "tf-estimator-missing"),
    (RUNGRAPH, 1, "rungraph-twice"),
    (GRPC, 1, "grpc-unreachable"),
    (GLOO, 1, "gloo-hostname"),
    (SLURM_OOM, KILLED, "oom-kill"),
    (SLURM_OOM, 137, "oom-kill"),
])
def test_each_signature_names_its_failure(text, status, name):
    found = match(text, status)
    assert found is not None and found.name == name
    assert found.cause and found.fix and "\n" not in found.cause + found.fix


def test_what_matches_no_signature_is_not_named():
    assert match("ValueError: shapes (3,) and (4,) not aligned", 1) is None
    # an OOM's words without the kill are not an OOM kill (a log line, a message)
    assert match(SLURM_OOM, 1) is None
    assert {k.name for k in CATALOGUE} == {"keras3-distributed", "tf-estimator-missing",
                                           "rungraph-twice", "grpc-unreachable", "gloo-hostname",
                                           "oom-kill"}


def test_the_kernel_s_own_line_names_the_pid_it_killed():
    line = ("Memory cgroup out of memory: Killed process 22396 (python3) total-vm:82116kB, "
            "anon-rss:65152kB")
    assert kernel_oom(22396, [line]) and not kernel_oom(2239, [line])
    assert not kernel_oom(None, [line])


def test_a_tensor_dump_is_folded_and_the_box_shows_the_traceback():
    lines = KERAS3.splitlines()
    assert [is_data(line) for line in lines[6:11]] == [True] * 5
    assert not is_data("}) with an unsupported type (<class 'x'>) to a Tensor.")
    assert not is_data("Epoch 1/2") and not is_data("5/5 - 0s - loss: 0.70")
    folded = fold_data(lines, "in LOG")
    assert "  … 5 lines of data (a tensor's values): in LOG" in folded
    assert len(folded) == len(lines) - 4
    excerpt = last_exception(lines)
    box = tail_box(lines[-6:], excerpt)
    assert box[0] == "Traceback (most recent call last):"
    assert box[1] == "  File train.py, line 53, in <module>"
    assert box[-2].startswith("ValueError: Attempt to convert a value (PerReplica:")
    # a tail that is not data is shown as it is
    assert tail_box(lines[:5], excerpt) == lines[:5]


@pytest.mark.tf
def test_a_real_tf_2_21_task_using_tf_estimator_is_named(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "name": "estimator-gone", "cluster": {"worker": 1},
        "command": [PY_TF221, "-c", "import tensorflow as tf; tf.estimator.RunConfig()"],
        "model_dir": str(tmp_path / "model"), "run_dir": str(tmp_path / "runs")}))
    done = run_launch(str(spec), timeout=120)
    assert done.returncode == 1, done.stderr
    assert "  cause: tf.estimator is gone from TensorFlow 2.16 on" in done.stderr
    assert "  fix: run Estimator scripts with TensorFlow 2.15" in done.stderr
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert summary["known_failure"]["name"] == "tf-estimator-missing"


def _memory_cgroups() -> bool:
    return os.geteuid() == 0 and os.access("/sys/fs/cgroup/memory", os.W_OK) and \
        os.access("/dev/kmsg", os.R_OK)


@pytest.mark.skipif(not _memory_cgroups(), reason="needs root, cgroup v1 memory, /dev/kmsg")
def test_a_task_the_kernel_oom_kills_is_named_from_the_kernel_s_log(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "name": "oom", "cluster": {"worker": 1}, "restart": {"worker": "never"},
        "command": ["sh", str(JOBS / "oom_kill.sh")],
        "model_dir": str(tmp_path / "model"), "run_dir": str(tmp_path / "runs")}))
    try:
        done = run_launch(str(spec), timeout=120)
        assert done.returncode == 1, done.stderr
        assert "worker:0 was killed by SIGKILL" in done.stderr
        assert "  cause: the task ran out of memory and was killed" in done.stderr
        summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
        assert summary["known_failure"]["name"] == "oom-kill"
        assert "not killed" not in done.stdout
    finally:
        for cgroup in Path("/sys/fs/cgroup/memory").glob("tfcluster-oom-*"):
            try:
                cgroup.rmdir()
            except OSError:
                pass


def test_diagnose_reads_a_log_whose_exception_is_far_above_its_end(tmp_path):
    log = tmp_path / "worker-0.log"
    log.write_text('Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n'
                   + RUNGRAPH + "\n" + "\n".join(f"INFO line {i}" for i in range(2000)) + "\n")
    found = diagnose(str(log), 1)
    assert found is not None and found.name == "rungraph-twice"
