"""How a failed task is shown (launcher/output/failures.py), read from a real log file: a
failure that ends the job names its exception, where its traceback starts and its last
lines; one the launcher handled is folded to two lines; the hint for a model_dir that is
not the spec's."""

from __future__ import annotations

from launcher.output.failures import (
    FOLDED_EXCEPTION,
    failure_lines,
    folded_lines,
    lost_its_port,
    with_exception,
)

TRACE = ["INFO:tensorflow:Calling model_fn.",
         "Traceback (most recent call last):",
         '  File "/job/train.py", line 42, in input_fn',
         "    raise ValueError('bad shape')",
         "ValueError: bad shape"]
AFTER = [f"INFO:tensorflow:shutting down {i}" for i in range(30)]


def log(tmp_path, lines: list[str]) -> str:
    path = tmp_path / "worker-1.log"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_failure_that_ends_the_job_names_its_exception_where_and_its_last_lines(tmp_path):
    path = log(tmp_path, TRACE + AFTER)
    lines = failure_lines("worker:1", path, 1, None, AFTER[-3:])
    assert lines[0] == "worker:1: ValueError: bad shape"
    assert lines[1].startswith(f"  (traceback from line 2 of {path}, raised in ")
    assert f"last lines of worker:1 ({path}):" in lines
    assert lines[-1] == "  | INFO:tensorflow:shutting down 29"


def test_a_handled_failure_is_folded_after_why_and_its_exception_cut(tmp_path):
    long = "ValueError: " + "x" * 400
    path = log(tmp_path, TRACE[:-1] + [long])
    lines = folded_lines("worker:1", path, "worker:1 was killed; restarting worker:1")
    assert lines[0] == "worker:1 was killed; restarting worker:1"
    assert len(lines) == 3 and lines[2].startswith("  (not shown: traceback from line 2 of ")
    assert len(lines[1]) == len("worker:1: ") + FOLDED_EXCEPTION and lines[1].endswith("…")
    bare = log(tmp_path, ["no traceback here"])
    assert folded_lines("worker:1", bare) == [f"worker:1: its traceback is in {bare}"]


def test_a_model_dir_other_than_the_specs_gets_its_hint(tmp_path):
    path = log(tmp_path, TRACE[:-1] + [
        "ValueError: model_dir are set both in constructor and `RunConfig`, but with "
        "different values"])
    lines = failure_lines("chief:0", path, 1, None, [])
    assert any("TFCLUSTER_MODEL_DIR" in line for line in lines)


def test_the_exception_far_above_the_tail_is_what_the_policies_classify(tmp_path):
    path = log(tmp_path, TRACE + AFTER)
    assert with_exception(AFTER[-2:], path) == AFTER[-2:] + ["ValueError: bad shape"]
    assert lost_its_port(["E grpc: bind: address already in use", "Address already in use"])
    assert not lost_its_port(AFTER)
