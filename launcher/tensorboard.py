"""TensorBoard with the run (``launch tensorboard RUN`` for any run:
launcher/commands/tensorboard.py).

``"tensorboard": true`` (or ``{"port": N}``) in the spec starts TensorBoard on model_dir
once every task runs, on a host that reads model_dir as the tasks do: the chief's host
(through the backend, where it reaches the tasks' hosts: local, ssh), else this machine.
It is a process the launcher owns, in a process group of its own, outside the job: it
never decides the job's verdict, a crash of it is a note, and it is stopped with the tasks
(a detached run keeps it while it runs). Its output goes to ``RUN_DIR/logs/tensorboard.log``.

Which TensorBoard: the one of the chief's Python (its venv), else ``tensorboard`` on PATH,
else the launcher's own environment's; none: one line saying how to get one.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import sys
import threading
import time
from typing import Any, Callable

from launcher.plan import JobPlan, TaskPlan
from orchestrator.roles import primary_task

NOT_INSTALLED = 127
LOCAL_HOSTS = ("localhost", "127.0.0.1")
READY = re.compile(r"^TensorBoard \S+ at (http\S+)")
ROLE = "tensorboard"
HOW_TO_GET = ("pip install tensorboard into the tasks' Python environment (TensorFlow <= "
              "2.15 brings it; 2.16 and later do not)")
# Run with the chief's Python: argv[1] is the launcher's interpreter (the last resort), the
# rest TensorBoard's arguments.
CHOOSER = """\
import importlib.util, os, shutil, subprocess, sys
fallback, args = sys.argv[1], sys.argv[2:]
def serve(argv):
    print("tfcluster: TensorBoard from " + argv[0], flush=True)
    os.execv(argv[0], argv + args)
if importlib.util.find_spec("tensorboard") is not None:
    serve([sys.executable, "-m", "tensorboard.main"])
found = shutil.which("tensorboard")
if found:
    serve([found])
if fallback and os.access(fallback, os.X_OK) and subprocess.run(
        [fallback, "-c", "import tensorboard"], capture_output=True).returncode == 0:
    serve([fallback, "-m", "tensorboard.main"])
print("tfcluster: no tensorboard", file=sys.stderr, flush=True)
sys.exit(NOT_INSTALLED)
""".replace("NOT_INSTALLED", str(NOT_INSTALLED))


def python_of(command: list[str]) -> str:
    from launcher.backends.storage_check import probe_python

    return probe_python(command)


def board_task(python: str, env: dict[str, str], cwd: str | None, host: str, logdir: str,
               port: int) -> TaskPlan:
    """TensorBoard as a task on ``host``: started with ``python`` (the chief's), which
    picks the TensorBoard to run (``CHOOSER``); bound to every interface on another host,
    to localhost here."""
    env = {k: v for k, v in env.items() if k != "TF_CONFIG"}
    env.update(CUDA_VISIBLE_DEVICES="", TFCLUSTER_TASK=f"{ROLE}:0", TFCLUSTER_TASK_TYPE=ROLE)
    bind = ["--host", "localhost"] if host in LOCAL_HOSTS else ["--bind_all"]
    command = [python, "-c", CHOOSER, sys.executable, "--logdir", logdir, "--port", str(port),
               *bind]
    return TaskPlan(ROLE, 0, host, port, command, env, cwd)


def here_python(python: str) -> str:
    """The chief's Python on this machine, else the launcher's."""
    import shutil

    return shutil.which(python) or sys.executable


def logdir_of(task: TaskPlan) -> str:
    return task.command[task.command.index("--logdir") + 1]


def local_logdir(url: str) -> str:
    return url[len("file://"):] if url.startswith("file://") else url


@dataclasses.dataclass
class Served:
    """What ``launch status`` shows of a run's TensorBoard (``state.json``)."""

    url: str | None = None
    host: str = "localhost"
    port: int = 0
    state: str = "starting"      # starting, running, ended, failed, not installed
    note: str | None = None
    tunnel: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class TensorBoard:
    """One TensorBoard process, started through ``backend`` and stopped with ``stop``."""

    def __init__(self, task: TaskPlan, backend: Any, log_path: str,
                 say: Callable[[str], None], record: Callable[[dict], None] = lambda d: None,
                 kill_after: float = 5.0, own_backend: bool = False):
        self.task = task
        self.backend = backend
        self.log_path = log_path
        self.say = say
        self.record = record
        self.kill_after = kill_after
        self.own_backend = own_backend
        self.served = Served(host=task.host, port=task.port)
        self.handle: Any = None
        self.ready = threading.Event()
        self.ended = threading.Event()
        self._stopping = threading.Event()
        self._gone = threading.Event()      # the process ended: its starting thread may end
        self._life: threading.Thread | None = None
        self._threads: list[threading.Thread] = []
        self._last: list[str] = []

    # ------------------------------------------------------------------ life
    def start(self) -> None:
        """Start it without holding up the caller. It is started by a thread of its own that
        lives until it is gone: a process started by the backend gets SIGTERM when the
        thread that started it ends (the parent-death signal)."""
        if self._stopping.is_set() or self._life is not None:
            return
        self._life = threading.Thread(target=self._live, name="tensorboard", daemon=True)
        self._life.start()

    def _live(self) -> None:
        try:
            os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
            self.handle = self.backend.start(self.task)
        except Exception as e:      # noqa: BLE001 - TensorBoard never ends the job
            self._end("failed", f"TensorBoard did not start: {e}")
            return
        self._spawn(self._pump, "tensorboard-pump")
        self._gone.wait()

    def stop(self) -> None:
        """Stop it (its whole process group) and wait until it is gone."""
        self._stopping.set()
        deadline = time.monotonic() + 60
        while self._life is not None and self._life.is_alive() and self.handle is None and \
                time.monotonic() < deadline:
            time.sleep(0.05)            # still being started
        if self.handle is not None and self.handle.poll() is None:
            self.handle.terminate()
            deadline = time.monotonic() + self.kill_after
            while self.handle.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.handle.poll() is None:
                self.handle.kill()
                while self.handle.poll() is None and time.monotonic() < deadline + 5:
                    time.sleep(0.05)
        self._gone.set()
        for t in [*self._threads, *([self._life] if self._life else [])]:
            t.join(timeout=5)
        if self.own_backend:
            self.backend.close()
        if self.served.state in ("starting", "running"):
            self.served.state = "ended"
            self.record(self.served.to_dict())

    def wait(self) -> None:
        """Until it ends by itself (``launch tensorboard``: until Ctrl-C)."""
        while not self.ended.wait(0.5):
            pass

    # ------------------------------------------------------------------ inside
    def _spawn(self, target: Callable[[], None], name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(t)
        t.start()

    def _pump(self) -> None:
        log = _open_log(self.log_path)
        stream = self.handle.output
        try:
            for raw in iter(stream.readline, b"") if stream is not None else ():
                log = _write(log, raw)
                line = raw.decode(errors="replace").rstrip("\r\n")
                self._last = (self._last + [line])[-5:] if line.strip() else self._last
                if not self.ready.is_set() and READY.match(line):
                    self._serving()
        except (OSError, ValueError):
            pass                        # its output closed under us: it is ending
        finally:
            if log is not None:
                log.close()
        status = None
        for _ in range(100):
            status = self.handle.poll()
            if status is not None:
                break
            time.sleep(0.05)
        self._gone.set()
        if self._stopping.is_set():
            self.ended.set()
            return
        if status == NOT_INSTALLED:
            self._end("not installed", f"TensorBoard: no tensorboard where it would run "
                                       f"({self.task.host}): {HOW_TO_GET}")
        else:
            last = next((x for x in reversed(self._last) if x.strip()), "no output")
            self._end("failed", f"note: TensorBoard ended (exit status {status}): {last}; "
                                f"the job goes on (log: {self.log_path})")

    def _serving(self) -> None:
        host, port = self.task.host, self.task.port
        url = f"http://{host}:{port}/"
        tunnel = None
        if host not in LOCAL_HOSTS and not _reachable(host, port):
            tunnel = self.backend.tunnel_command(host, port)
        self.served = dataclasses.replace(self.served, url=url, state="running", tunnel=tunnel)
        self.record(self.served.to_dict())
        self.ready.set()
        if tunnel:
            self.say(f"TensorBoard on {host}:{port} is not reachable from here: run "
                     f"`{tunnel}` and open http://localhost:{port}/")
        else:
            self.say(f"TensorBoard: {url}  (logdir {logdir_of(self.task)})")

    def _end(self, state: str, message: str) -> None:
        self.served = dataclasses.replace(self.served, state=state, note=message)
        self.record(self.served.to_dict())
        self.say(message)
        self.ended.set()


def _open_log(path: str):
    """TensorBoard's log, or None where it cannot be written (a full disk): its output is
    then read and dropped, never an error."""
    try:
        return open(path, "ab")   # noqa: SIM115 - closed by the pump
    except OSError:
        return None


def _write(log, data: bytes):
    """``log`` after writing ``data`` to it; None once writing failed."""
    if log is None:
        return None
    try:
        log.write(data)
        log.flush()
        return log
    except OSError:
        log.close()
        return None


def _reachable(host: str, port: int, timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def with_run(plan: JobPlan, backend: Any, run_dir: str, console: Any,
             record: Callable[[dict], None]) -> TensorBoard | None:
    """The run's TensorBoard when the spec asks for one (not started yet), else None.
    Where the backend starts processes beside the tasks (``serves_beside_tasks``: local,
    ssh) it runs on the chief's host as the chief does (its Python, environment, working
    directory, model_dir as given); else on this machine, reading model_dir as the
    launcher does."""
    if plan.tensorboard is None:
        return None
    primary = primary_task(plan.tasks)
    assert primary is not None      # a plan has a trainer
    python = python_of(primary.command)
    if backend.serves_beside_tasks:
        runner, own, host = backend, False, primary.host
        env, cwd, logdir = primary.env, primary.cwd, plan.model_dir
    else:
        from launcher.backends import backend_class

        runner, own, host = backend_class("local")(), True, "localhost"
        env, cwd, logdir = primary.env, None, local_logdir(plan.storage.url)
        python = here_python(python)
    port = plan.tensorboard.port or runner.allocate_port(host)
    return TensorBoard(board_task(python, env, cwd, host, logdir, port), runner,
                       os.path.join(run_dir, "logs", "tensorboard.log"), console.info, record,
                       kill_after=plan.timeouts.kill, own_backend=own)
