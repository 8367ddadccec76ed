"""What a docker run leaves on the engine, removed however the launcher ends: the reaper
(``python -m launcher.backends.docker_reaper --reap DOCKER RUN_ID``) holds a pipe from the
launcher; when it closes (the normal end, Ctrl-C, or the launcher killed by SIGKILL) it
removes every container labelled with the run, then the network the run made."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

LABEL = "tfcluster.run"
CALL_TIMEOUT = 60.0           # one docker CLI call
REAP_TIMEOUT = 60.0


class Reaper:
    """The run's reaper process, started beside the launcher; ``close`` has it reap now."""

    def __init__(self, docker: str, run_id: str):
        read_end, self._pipe = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "launcher.backends.docker_reaper", "--reap", docker,
                 run_id],
                stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True)
        finally:
            os.close(read_end)

    def close(self) -> None:
        """Close the pipe and wait until the reaper removed what the run left."""
        os.close(self._pipe)
        try:
            self.proc.wait(timeout=REAP_TIMEOUT + 10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def reap(docker: str, run_id: str, timeout: float = REAP_TIMEOUT) -> None:
    """Remove every container labelled with the run, then the networks labelled with it;
    look again until nothing is left twice in a row (a ``docker run`` still creating one)."""
    label = f"label={LABEL}={run_id}"

    def names(*args: str) -> list[str]:
        try:
            done = subprocess.run([docker, *args, "--filter", label], capture_output=True,
                                  text=True, timeout=CALL_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired):
            return []
        return done.stdout.split() if done.returncode == 0 else []

    deadline = time.monotonic() + timeout
    clean = 0
    while clean < 2 and time.monotonic() < deadline:
        left = names("ps", "-aq")
        if left:
            subprocess.run([docker, "rm", "-f", *left], capture_output=True,
                           timeout=CALL_TIMEOUT)
            clean = 0
        else:
            clean += 1
        time.sleep(0.2)
    nets = names("network", "ls", "-q")
    if nets:
        subprocess.run([docker, "network", "rm", *nets], capture_output=True,
                       timeout=CALL_TIMEOUT)


def _reaper_main(argv: list[str]) -> int:
    """``--reap DOCKER RUN_ID``: wait for stdin to close (the launcher ended, however), then
    remove what the run left on the engine."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    docker, run_id = argv
    while sys.stdin.buffer.read(4096):
        pass
    reap(docker, run_id)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reap"] and len(sys.argv) == 4:
        sys.exit(_reaper_main(sys.argv[2:]))
    sys.exit("usage: python -m launcher.backends.docker_reaper --reap DOCKER RUN_ID")
