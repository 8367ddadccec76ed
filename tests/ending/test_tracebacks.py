"""The failure tail names the exception, however long the output after it."""

from __future__ import annotations

from launcher.tracebacks import describe, last_exception, read_log_end

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
