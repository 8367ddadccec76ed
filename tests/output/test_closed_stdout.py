"""A closed stdout is not an error: `launch … | head` ends quietly, exit 0, no traceback,
and a running job's console goes on when its stdout's reader is gone."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from support import REPO, launch_cmd

from launcher import cli
from launcher.output.console import Console
from launcher.output.pipes import write


def piped_to_head(*args: str, lines: int = 1) -> tuple[int, str, str]:
    """`launch ARGS | head -LINES`: (launch's exit status, head's output, launch's stderr)."""
    launch = subprocess.Popen(launch_cmd(*args), cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    head = subprocess.run(["head", f"-{lines}"], stdin=launch.stdout, capture_output=True,
                          text=True, timeout=60)
    launch.stdout.close()
    err = launch.stderr.read().decode()
    return launch.wait(timeout=60), head.stdout, err


def test_dry_run_into_head_exits_0_without_a_traceback():
    # it failed about one try in two: a few tries with the example spec...
    for _ in range(4):
        status, out, err = piped_to_head("cluster_specs/estimator.json", "--dry-run")
        assert (status, err) == (0, "")
        assert out.startswith("# job ")


def test_an_output_larger_than_the_pipe_meets_a_closed_reader(tmp_path):
    # ...and one whose output (300 tasks, ~250 kB) cannot fit in the pipe: the writer
    # surely meets head gone
    spec = json.loads((REPO / "cluster_specs/estimator.json").read_text())
    spec["cluster"]["worker"] = 300
    (tmp_path / "big.json").write_text(json.dumps(spec))
    for args in ([], ["--json"]):
        status, out, err = piped_to_head(str(tmp_path / "big.json"), "--dry-run", *args)
        assert (status, err) == (0, "")
        assert out.strip() in ("{", f"# job {spec['name']}") or out.startswith("# job ")


@pytest.mark.parametrize("argv", [["list"], ["--help"]])
def test_other_commands_into_head_exit_quietly(argv, runs):
    status, out, err = piped_to_head(*argv)
    assert (status, err) == (0, "")
    assert out


@contextlib.contextmanager
def closed_stdout() -> Iterator[io.TextIOWrapper]:
    """sys.stdout is a pipe whose reader is gone (set inside the test: pytest's capture sets
    sys.stdout anew for each phase)."""
    read, write_end = os.pipe()
    os.close(read)
    stream = io.TextIOWrapper(os.fdopen(write_end, "wb"), encoding="utf-8")
    saved, sys.stdout = sys.stdout, stream
    try:
        yield stream
    finally:
        sys.stdout = saved
        stream.close()


def test_guard_turns_a_broken_pipe_into_exit_0():
    def command() -> int:
        print("line\n" * 20_000)
        return 1

    with closed_stdout() as stream:
        assert cli._guard(command) == 0
        stream.write("later writes go to /dev/null\n")
        stream.flush()       # the interpreter's final flush cannot fail either


def test_the_console_goes_on_when_its_stdout_is_closed():
    err = io.StringIO()
    with closed_stdout() as stream:
        _console_on(stream, err)


def _console_on(closed: io.TextIOWrapper, err: io.StringIO) -> None:
    console = Console(out=closed, err=err)
    for i in range(3):
        console.task_line("chief:0", f"my line {i}")
    console.info("step 10/100")
    assert err.getvalue() == "tfcluster: step 10/100\n"
    assert write(closed, "again\n") is True     # now /dev/null
