"""Commands the kernel refuses to start, for real: each is one line naming the task, the
command and what the kernel said in words, never a traceback, and no file handle is left
open. The words come from the real kernel's answer to exec; the local backend
reports a refusal on its handle (Popen's error: it execs the task's command itself); the
ssh agent words it with the same function on the remote host.
What the preflight can tell from the file (no #! line, another architecture) is refused
before anything starts."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

import pytest

from launcher.backends.agent.words import program_problem, start_failure_line
from launcher.backends.local import LocalBackend
from launcher.plan import TaskPlan


def elf_for(machine: int) -> bytes:
    """An ELF executable header for another machine (e_machine), as the kernel reads it."""
    head = bytearray(64)
    head[0:7] = b"\x7fELF\x02\x01\x01"
    head[16:18] = (2).to_bytes(2, "little")         # ET_EXEC
    head[18:20] = machine.to_bytes(2, "little")
    head[20:24] = (1).to_bytes(4, "little")
    return bytes(head)


def executable(path: Path, data: bytes, mode: int = 0o755) -> str:
    path.write_bytes(data)
    path.chmod(mode)
    return str(path)


def task(command: list[str], cwd: str | None = None, path: str | None = None) -> TaskPlan:
    env = {"PATH": path} if path is not None else {}
    return TaskPlan("worker", 1, "localhost", 1, command, env, cwd=cwd)


def kernel_says(argv: list[str], cwd: str | None = None, path: str | None = None) -> str:
    """What the kernel answers to exec of ``argv`` (no shell, no wrapper), in words."""
    env = {"PATH": path} if path is not None else None
    with pytest.raises(OSError) as refused:
        subprocess.Popen(argv, cwd=cwd, env=env)
    return start_failure_line("worker:1", argv, refused.value, cwd, path)


def started(t: TaskPlan) -> tuple[int | None, str | None]:
    """The local backend's handle of ``t``, read to its end: (exit status, start_failure)."""
    backend = LocalBackend()
    try:
        handle = backend.start(t)
        while handle.output is not None and handle.output.readline():
            pass
        while handle.poll() is None:
            time.sleep(0.01)
        if handle.output is not None:
            handle.output.close()
        return handle.poll(), handle.start_failure
    finally:
        backend.close()


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_text_file_without_a_shebang_line(tmp_path):
    program = executable(tmp_path / "train", b"echo training\n")
    assert kernel_says([program, "--steps", "3"]) == \
        f"worker:1: cannot start {program} --steps 3: no #! line and not a binary (exec " \
        "format error)"
    assert program_problem(program, None, "") == \
        f"program {program}: no #! line and not a binary: the kernel refuses to start it " \
        "(add a #! line, or start it with its interpreter)"


def test_a_binary_for_another_architecture(tmp_path):
    other = 183 if platform.machine() != "aarch64" else 62       # aarch64, else x86_64
    program = executable(tmp_path / "trainer", elf_for(other))
    name = "aarch64" if other == 183 else "x86_64"
    why = f"a binary for another architecture ({name}; this host is {platform.machine()})"
    assert kernel_says([program]) == f"worker:1: cannot start {program}: {why}"
    assert program_problem(program, None, "") == \
        f"program {program}: {why}: the kernel refuses to start it"


def test_a_file_that_is_not_executable(tmp_path):
    program = executable(tmp_path / "train.sh", b"#!/bin/sh\n", mode=0o644)
    line = f"worker:1: cannot start {program}: permission denied (the file is not " \
           "executable: chmod +x it)"
    assert kernel_says([program]) == line
    before = open_fds()
    assert started(task([program])) == (126, line)      # through the local backend
    assert open_fds() <= before


def test_a_missing_shebang_interpreter(tmp_path):
    program = executable(tmp_path / "train.py", b"#!/opt/nosuch/python3\nprint(1)\n")
    line = f"worker:1: cannot start {program}: its #! interpreter /opt/nosuch/python3 was " \
           "not found"
    assert kernel_says([program]) == line
    assert started(task([program])) == (127, line)


def test_a_program_not_in_the_tasks_path(tmp_path):
    line = f"worker:1: cannot start no-such-trainer: not found in the task's PATH ({tmp_path})"
    assert kernel_says(["no-such-trainer"], path=str(tmp_path)) == line
    before = open_fds()
    assert started(task(["no-such-trainer"], path=str(tmp_path))) == (127, line)
    assert open_fds() <= before


def test_a_program_being_written(tmp_path):
    path = tmp_path / "train"
    line = f"worker:1: cannot start {path}: the file is being written by another process " \
           "(text file busy): wait for the copy or build to finish"
    with open(path, "wb") as writer:         # still being copied: ETXTBSY
        writer.write(b"#!/bin/sh\nexit 0\n")
        writer.flush()
        path.chmod(0o755)
        assert kernel_says([str(path)]) == line
        assert started(task([str(path)])) == (126, line)


def test_a_working_directory_that_vanished(tmp_path):
    gone = str(tmp_path / "gone")
    assert started(task(["/bin/true"], cwd=gone)) == \
        (127, f"worker:1: cannot start /bin/true: working directory {gone} does not exist")


def test_a_long_command_is_shortened_to_one_line(tmp_path):
    # a PATH of a fixed length: tmp_path's length varies (pytest-xdist adds a folder)
    line = kernel_says(["no-such-trainer", "--flag\n" * 50], path="/nonexistent/bin")
    assert "\n" not in line and len(line) < 300
    assert line.startswith("worker:1: cannot start no-such-trainer '--flag") and \
        line.endswith("...: not found in the task's PATH (/nonexistent/bin)")


class Pieces:
    """A stream that gives its data in the pieces a writer wrote them (docker's init writes
    '[FATAL tini (N)] ', its message and the newline apart)."""

    def __init__(self, pieces: list[bytes]):
        self.pieces = list(pieces)

    def read1(self, size: int = -1) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""


def test_a_wrappers_words_in_pieces_are_read_as_one_line():
    from launcher.backends.agent.words import refusal_in_words
    from launcher.backends.base import ExecWatch, NotStarted
    from launcher.backends.docker import INIT_FAILED

    t = task(["no-such-trainer"])
    handle = NotStarted(t, "", 127)
    handle.start_failure = None
    watch = ExecWatch(Pieces([b"[FATAL tini (6)] ", b"exec no-such-trainer failed: No such "
                              b"file or directory", b"\n"]), handle, INIT_FAILED,
                      lambda program, reason: refusal_in_words(
                          t.name, t.command, reason, host="image tfc", look=False))
    assert b"".join(iter(lambda: watch.read1(65536), b"")).endswith(b"directory\n")
    assert handle.start_failure == "worker:1: cannot start no-such-trainer on image tfc: not " \
                                   "found in the task's PATH"
