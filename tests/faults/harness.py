"""Run a real job under `launch`, kill one of its processes at a chosen moment, and judge
the outcome the way a user would. Used by tests/faults/test_kills.py (a few kills, CI) and
bench/fault_campaign.py (the repeated, seeded campaign).

Lines of the launcher's output are timestamped as they arrive; the job scripts under
tests/faults/jobs print ``tfjob-progress step=N`` (trainers) and ``tfjob-eval step=N``
(evaluator), which is how "training resumed" and "progress lost" are measured.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
JOBS = Path(__file__).resolve().parent / "jobs"
PY_TF215 = str(REPO / ".venv" / "bin" / "python")
PY_TF221 = str(REPO / ".venv-tf2" / "bin" / "python")
LAUNCH = str(Path(sys.executable).parent / "launch")
MARK = "TFCLUSTER_FAULT_RUN"
_LINE_RE = re.compile(r"^\[(?P<task>[a-z]+:\d+)\] (?P<text>.*)$")
UNANSWERED = "has not answered TensorFlow's gRPC"
_STEP_RE = re.compile(r"tfjob-(?P<kind>progress|eval) step=(?P<step>\d+)")


@dataclass
class Line:
    t: float
    task: str           # "chief:0", or "launcher" for the launcher's own lines
    text: str


@dataclass
class Kill:
    target: str         # a task name, or "launcher"
    t: float
    step_before: int    # highest global step reported before the kill
    how: str = "SIGKILL"   # or SIGSTOP (frozen), "partition" (its host cut off)
    wall: float = field(default_factory=time.time)   # for the run's events.jsonl times
    pid: int | None = None   # SIGSTOP: the frozen group's leader (to SIGCONT it afterwards)


def job_spec(kind: str, tmp: Path, max_steps: int = 600, save_steps: int = 100,
             evaluator: bool = False, workers: int = 1, sleep: float = 0.02,
             **overrides) -> dict:
    """A spec for the Estimator (``estimator``) or ParameterServerStrategy (``pss``) job;
    ``workers=0``: a chief and a ps alone (an Estimator job)."""
    script = "estimator_job.py" if kind == "estimator" else "pss_job.py"
    python = PY_TF215 if kind == "estimator" else PY_TF221
    cluster = {"chief": 1, "worker": workers, "ps": 1} if workers else {"chief": 1, "ps": 1}
    doc = {"name": f"fault-{kind}", "cluster": cluster,
           "command": [python, str(JOBS / script)], "model_dir": str(tmp / "model"),
           "max_steps": max_steps, "run_dir": str(tmp / "runs"),
           "env": {"FAULT_SAVE_STEPS": str(save_steps), "FAULT_STEP_SLEEP": str(sleep),
                   "FAULT_PRINT_EVERY": "10"},
           "timeouts": {"finish": 30 if kind == "estimator" else 3, "evaluator": 90,
                        "kill": 3, "stall": 240},
           "restart": {r: {"policy": "on-failure", "max_restarts": 3, "backoff": 0.5}
                       for r in ("chief", "worker", "ps", "evaluator")}}
    if evaluator:
        doc["evaluator"] = "localhost"
    doc.update(overrides)
    return doc


class LaunchRun:
    """One `launch SPEC` process, its timestamped output, and kills."""

    def __init__(self, spec_path: Path, *args: str):
        self.token = uuid.uuid4().hex
        env = dict(os.environ, **{MARK: self.token})
        self.started = time.monotonic()
        self.proc = subprocess.Popen([LAUNCH, str(spec_path), *args], cwd=REPO, env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, errors="replace")
        self.lines: list[Line] = []
        self.kills: list[Kill] = []
        self._lock = threading.Lock()
        self._readers = [threading.Thread(target=self._read, args=(s, err), daemon=True)
                         for s, err in ((self.proc.stdout, False), (self.proc.stderr, True))]
        for r in self._readers:
            r.start()

    def _read(self, stream, is_err: bool) -> None:
        for raw in stream:
            text = raw.rstrip("\n")
            m = None if is_err else _LINE_RE.match(text)
            line = Line(time.monotonic(), m["task"] if m else "launcher",
                        m["text"] if m else text)
            with self._lock:
                self.lines.append(line)

    # ---------------------------------------------------------------- reading
    def steps(self, kind: str = "progress", task: str | None = None,
              after: float = 0.0) -> list[tuple[float, str, int]]:
        with self._lock:
            lines = list(self.lines)
        out = []
        for line in lines:
            m = _STEP_RE.search(line.text)
            if m and m["kind"] == kind and line.t >= after and (task is None or line.task == task):
                out.append((line.t, line.task, int(m["step"])))
        return out

    def top_step(self) -> int:
        return max((s for _, _, s in self.steps()), default=-1)

    def stderr_text(self) -> str:
        with self._lock:
            return "\n".join(line.text for line in self.lines if line.task == "launcher")

    def wait_for_step(self, step: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if self.top_step() >= step:
                return True
            time.sleep(0.05)
        return self.top_step() >= step

    # ---------------------------------------------------------------- processes
    def processes(self) -> list[psutil.Process]:
        """Live processes of this run (the launcher's tasks, their children, the watchdog)."""
        found = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if proc.pid == self.proc.pid or proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                if proc.environ().get(MARK) == self.token:
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    def task_pid(self, name: str, parent: str | None = None) -> int | None:
        """The process group leader running the task ``name``; ``parent``: the one whose
        parent process has that name (a Slurm task under ``slurmstepd``, not its ``srun``,
        which carries the task's environment too)."""
        for proc in self.processes():
            try:
                env = proc.environ()
                if env.get("TFCLUSTER_TASK") == name and proc.pid == os.getpgid(proc.pid) \
                        and (parent is None or proc.parent().name() == parent):
                    return proc.pid
            except (psutil.NoSuchProcess, ProcessLookupError, AttributeError):
                continue
        return None

    def kill(self, target: str) -> Kill:
        """kill -9 the task named ``target`` (its process) or the launcher itself."""
        pid = self.proc.pid if target == "launcher" else self.task_pid(target)
        if pid is None:
            raise LookupError(f"no live process for {target}")
        kill = Kill(target, time.monotonic(), self.top_step())
        os.kill(pid, signal.SIGKILL)
        self.kills.append(kill)
        return kill

    def freeze(self, target: str, parent: str | None = None) -> Kill:
        """SIGSTOP the whole process group of the task named ``target`` (``parent``: as for
        ``task_pid``): alive, silent. ``Kill.pid`` is that group's leader."""
        pid = self.task_pid(target, parent)
        if pid is None:
            raise LookupError(f"no live process for {target}")
        kill = Kill(target, time.monotonic(), self.top_step(), "SIGSTOP", pid=pid)
        os.killpg(pid, signal.SIGSTOP)
        self.kills.append(kill)
        return kill

    def detected(self, kill: Kill) -> float | None:
        """Seconds from ``kill`` until the launcher said its target stopped answering (the
        console line comes once the task is killed; ``detected_in`` reads the event)."""
        with self._lock:
            lines = list(self.lines)
        for line in lines:
            if line.t >= kill.t and line.task == "launcher" and \
                    f"{kill.target} (" in line.text and UNANSWERED in line.text:
                return line.t - kill.t
        return None

    def wait(self, timeout: float) -> int | None:
        """The launcher's exit status; None when it hung (then it is stopped)."""
        try:
            status = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            status = None
        for r in self._readers:
            r.join(timeout=5)
        return status

    def leftovers(self, timeout: float = 10.0) -> list[psutil.Process]:
        deadline = time.monotonic() + timeout
        left = self.processes()
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = self.processes()
        for proc in left:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        return left


def detected_in(run_dir: Path, kill: Kill) -> float | None:
    """Seconds from ``kill`` to the run's ``task_unresponsive`` event naming its target."""
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "task_unresponsive" and event["task"] == kill.target and \
                event["time"] >= kill.wall - 0.01:
            return event["time"] - kill.wall
    return None


def check_ps_recovered(run: LaunchRun, frozen: Kill, run_dir: Path, model_dir: Path,
                       host: str, unresponsive: int, max_steps: int,
                       probe_period: float = 2.0) -> None:
    """What a user checks after a frozen ps under the default policy: the console named it
    (``host``: a regex of its address' host), within ``unresponsive`` + one probe period
    of the freeze (its last answer came before it; launcher.monitors.liveness.PROBE_PERIOD),
    it alone was lost and was stopped first, with SIGKILL, the restarted cluster trained on, and
    the newest checkpoint is readable and at max_steps."""
    stderr = run.stderr_text()
    assert re.search(rf"ps:0 \({host}:\d+\) has not answered TensorFlow's gRPC for "
                     rf"{unresponsive} s; restarting the whole cluster from the newest "
                     rf"checkpoint", stderr), stderr[-3000:]
    reacted = detected_in(run_dir, frozen)
    assert reacted is not None and reacted <= unresponsive + probe_period + 0.5, reacted
    assert resumed_after([run], frozen) is not None
    name, step, error = newest_checkpoint(model_dir, PY_TF215)
    assert error is None and step >= max_steps, (name, step, error)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["task"] for e in events if e["event"] == "task_unresponsive"] == ["ps:0"]
    stopping = [e for e in events if e["event"] == "stopping"]
    assert stopping[0]["tasks"] == ["ps:0"] and stopping[0]["signal"] == "SIGKILL"


def _after_restart(run: LaunchRun, kill: Kill, tasks: tuple[str, ...] | None) -> list[Line]:
    """Lines a task printed after a ``tfjob-start`` banner that came after the kill, in
    order (a banner is printed first thing, so it can only come from a new process)."""
    with run._lock:
        lines = list(run.lines)
    fresh: set[str] = set()
    out = []
    for line in lines:
        if line.t < kill.t or (tasks is not None and line.task not in tasks):
            continue
        if line.text.startswith("tfjob-start"):
            fresh.add(line.task)
        elif line.task in fresh:
            out.append(line)
    return out


def _watched(kill: Kill) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    role = kill.target.split(":")[0]
    if role == "evaluator":
        return (kill.target,), ("tfjob-eval",)
    if role in ("chief", "worker"):
        return (kill.target,), ("tfjob-progress", "tfjob-serving")
    return None, ("tfjob-progress",)   # a ps or the launcher: any trainer training again


def resumed_after(runs: list[LaunchRun], kill: Kill) -> float | None:
    """Seconds from the kill until the lost part is back at work: the restarted trainer
    trains (prints a step) or serves (a PSS worker), the restarted evaluator evaluated a
    checkpoint; for a ps or the launcher: a trainer of the restarted cluster trains."""
    tasks, prefix = _watched(kill)
    for run in runs:
        for line in _after_restart(run, kill, tasks):
            if line.text.startswith(prefix):
                return line.t - kill.t
    return None


def lost_steps(runs: list[LaunchRun], kill: Kill) -> int:
    """Progress the kill cost: the global step reached at the kill minus the step the
    restarted trainers went on from (0 when training just went on). Steps other trainers
    made between the kill and the restore are rolled back too; they are not counted."""
    for run in runs:
        first = next((line for line in _after_restart(run, kill, None)
                      if line.text.startswith("tfjob-progress")), None)
        if first is not None:
            return max(0, kill.step_before - int(_STEP_RE.search(first.text)["step"]))
    return 0


@dataclass
class Outcome:
    status: int | None              # the (last) launcher's exit status; None: it hung
    final_step: int | None          # step stored in the newest complete checkpoint
    checkpoint: str | None
    checkpoint_error: str | None    # TensorFlow could not read the newest checkpoint
    leftovers: list[str] = field(default_factory=list)
    reason: str = ""


def newest_checkpoint(model_dir: Path, python: str) -> tuple[str | None, int | None, str | None]:
    """(name, stored step, error): the newest complete checkpoint, read fully by TensorFlow."""
    from orchestrator.checkpoints import newest_complete

    ckpt = newest_complete(str(model_dir))
    if ckpt is None:
        return None, None, None
    code = ("import sys, tensorflow as tf\n"
            "r = tf.train.load_checkpoint(sys.argv[1])\n"
            "m = r.get_variable_to_shape_map()\n"
            "[r.get_tensor(k) for k in m]\n"
            "k = [k for k in m if k == 'global_step' or k.startswith('step/')]\n"
            "print('STEP', int(r.get_tensor(k[0])))\n")
    done = subprocess.run([python, "-c", code, ckpt.path], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    m = re.search(r"^STEP (\d+)$", done.stdout, re.M)
    if done.returncode != 0 or not m:
        return ckpt.name, None, (done.stderr.strip().splitlines() or ["?"])[-1]
    return ckpt.name, int(m.group(1)), None


def summary_reason(run: LaunchRun) -> str:
    for line in reversed(run.stderr_text().splitlines()):
        if line.startswith("tfcluster: job "):
            return line[len("tfcluster: "):]
    return ""


def write_spec(tmp: Path, doc: dict) -> Path:
    path = tmp / "cluster.json"
    path.write_text(json.dumps(doc, indent=1))
    return path
