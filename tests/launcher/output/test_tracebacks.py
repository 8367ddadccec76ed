"""The failure tail names the exception, however long the output after it."""

from __future__ import annotations

import pytest

from launcher.output.tracebacks import describe, last_exception, read_log_end, tail_box

TRACE = [
    "INFO:tensorflow:Calling model_fn.",
    "Traceback (most recent call last):",
    '  File "/job/train.py", line 88, in <module>',
    "    main()",
    '  File "/job/train.py", line 42, in input_fn',
    "    raise ValueError(f'bad shape {x}')",
    "    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    "ValueError: bad shape [[0.1 0.2 0.3]",
]
DUMP = [f" [{i}.0 {i}.5 {i}.7]]" for i in range(500)]


def test_the_exception_line_and_where_its_traceback_starts_after_a_long_dump():
    found = last_exception(TRACE + DUMP)
    assert found.exception == "ValueError: bad shape [[0.1 0.2 0.3]"
    assert found.traceback_line == 2
    assert found.frame == "/job/train.py, line 42, in input_fn"


def test_the_last_of_chained_tracebacks_and_dotted_tf_errors():
    chained = TRACE + ["", "During handling of the above exception, another exception "
                       "occurred:", ""] + [
        "Traceback (most recent call last):",
        '  File "/venv/estimator/training.py", line 1045, in evaluate',
        "tensorflow.python.framework.errors_impl.NotFoundError: Failed to find any matching "
        "files for /m/model.ckpt-140",
        "2026-12-01 07:00:01 W tensorflow/core/kernels/x.cc:12] op cancelled"]
    found = last_exception(chained)
    assert found.exception.startswith("tensorflow.python.framework.errors_impl.NotFoundError")
    assert found.traceback_line == 12
    assert found.chain == ("ValueError: bad shape [[0.1 0.2 0.3]", found.exception)
    assert last_exception(TRACE + ["", "unrelated"] + TRACE[1:]).chain == (TRACE[-1],)


def test_no_traceback_no_excerpt():
    assert last_exception(["Killed", "exit 1"]) is None
    assert last_exception(["Traceback (most recent call last):", '  File "a", line 1, in b'],
                          ) is None


def test_line_numbers_count_the_part_of_a_big_log_that_is_not_read(tmp_path):
    log = tmp_path / "worker-1.log"
    log.write_text("\n".join(["noise " * 20] * 3000 + TRACE + DUMP) + "\n")
    lines, first = read_log_end(str(log), max_bytes=20000)
    assert first > 1 and len(lines) < 3000 + len(TRACE) + len(DUMP)
    found = describe(str(log))
    assert found.traceback_line == 3002
    assert last_exception(lines, first).traceback_line == 3002
    assert describe(str(tmp_path / "missing.log")) is None


# As TensorFlow 2.21 printed it for a user's mistake (tf.constant of ragged rows); TF 2.15's
# differs only in line numbers.
TF_FAILURE = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1796195202.232355   16504 port.cc:153] oneDNN custom operations are on. You "
    "may see slightly different numerical results due to floating-point round-off errors from "
    "different computation orders. To turn them off, set the environment variable "
    "`TF_ENABLE_ONEDNN_OPTS=0`.",
    "I0000 00:00:1796195202.347962   16504 cpu_feature_guard.cc:227] This TensorFlow binary is "
    "optimized to use available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild "
    "TensorFlow with the appropriate compiler flags.",
    "building features from 2 rows",
    "Traceback (most recent call last):",
    '  File "/job/main.py", line 31, in <module>',
    "    main()",
    '  File "/job/main.py", line 22, in build_features',
    "    return tf.constant(rows, dtype=tf.float32)",
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    '  File "/venv/lib/python3.11/site-packages/tensorflow/python/ops/weak_tensor_ops.py", '
    "line 142, in wrapper",
    "    return op(*args, **kwargs)",
    '  File "/venv/lib/python3.11/site-packages/tensorflow/python/framework/constant_op.py", '
    "line 108, in convert_to_eager_tensor",
    "    return ops.EagerTensor(value, ctx.device_name, dtype)",
    "ValueError: Can't convert non-rectangular Python sequence to Tensor.",
]


def test_the_frame_shown_is_the_users_innermost_not_tensorflows():
    found = last_exception(TF_FAILURE)
    assert found.frame == "/job/main.py, line 22, in build_features"
    assert found.raised_in == ("/job/main.py, line 22, in build_features (innermost: "
                               "constant_op.py, line 108, in convert_to_eager_tensor)")


@pytest.mark.parametrize("library", [
    "/usr/lib/python3/dist-packages/absl/app.py",
    "/usr/local/lib/python3.11/threading.py",
    "/opt/conda/lib/python3.10/site-packages/keras/src/engine/training.py",
    "<frozen runpy>",
])
def test_site_packages_dist_packages_and_the_standard_library_are_not_the_users(library):
    lines = ["Traceback (most recent call last):",
             '  File "/home/me/train.py", line 7, in fit', "    model.fit()",
             f'  File "{library}", line 3, in run', "KeyError: 'x'"]
    found = last_exception(lines)
    assert found.frame == "/home/me/train.py, line 7, in fit"
    assert found.library_frame.startswith(library.rsplit("/", 1)[-1])


def test_a_user_callback_called_by_a_library_is_the_innermost_user_frame():
    lines = ["Traceback (most recent call last):",
             '  File "/venv/lib/python3.11/site-packages/keras/trainer.py", line 9, in fit',
             '  File "/home/me/callbacks.py", line 12, in on_epoch_end', "KeyError: 'x'"]
    found = last_exception(lines)
    assert (found.frame, found.library_frame) == ("/home/me/callbacks.py, line 12, in "
                                                  "on_epoch_end", None)
    assert found.raised_in == found.frame


def test_a_traceback_only_in_libraries_names_the_innermost_library_frame():
    lines = ["Traceback (most recent call last):",
             '  File "/venv/lib/python3.11/site-packages/tf/estimator.py", line 9, in train',
             "RuntimeError: boom"]
    assert last_exception(lines).raised_in == "estimator.py, line 9, in train"


def test_the_tail_box_holds_no_banner_lines():
    assert tail_box(TF_FAILURE) == TF_FAILURE[4:]
