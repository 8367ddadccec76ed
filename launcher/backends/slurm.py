"""Slurm backend: one allocation, each task a job step that the launcher runs and watches.

``accept`` sizes the allocation from the job's Reservation (one node per host label of the
spec); ``prepare`` asks for it (``salloc --no-shell``) before the plan is built, so every
task's TF_CONFIG names the address of the node it will run on (``place``). Each task is then an
``srun --jobid=J --nodelist=NODE --overlap`` child of the launcher: its output streams
back, its exit status is the task's, and a signal reaches the step through ``scancel
--signal``. ``close`` cancels the allocation and waits until Slurm shows it ended. If the
launcher is killed (even by SIGKILL), its watchdog process cancels the allocation (pending
or granted) at once.

``--detach`` submits a batch script instead (``sbatch``, ``batch_script``): the same
allocation request as ``#SBATCH`` lines, and one command, this launcher with
``--in-allocation``, which adopts the job it runs in (``inside_job``) and runs the tasks as
steps of it exactly as above. The script asks for ``--requeue`` and a warning signal
(``--signal=B:TERM@N``) before the time limit; a requeued job runs it again, in the same
run id and run directory, and the tasks resume from model_dir's newest checkpoint.
docs/slurm.md explains the choices.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.backends.agent.words import refusal_in_words
from launcher.backends.base import Backend, ExecWatch, ProbeResult, TaskHandle
from launcher.backends.engine import Follower, Submits
from launcher.backends.node_step import NODE_STUB as STUB
from launcher.backends.node_step import NodeStep
from launcher.backends.options import option
from launcher.backends.processes import ProcessHandle, dies_with_parent, free_port, task_environ
from launcher.backends.slurm_gpus import StepDevices, reporting_step
from launcher.backends.storage_check import probe_python
from launcher.backends.watchdog import Watchdog
from launcher.checks import Address
from launcher.errors import PreflightError, SpecError
from launcher.plan import JobPlan, Reservation, TaskPlan
from launcher.spec import ROLES, Resources, resources_for

DEFAULT_SIGNAL_LEAD = 120          # seconds before the time limit for the warning signal
CANCEL_WAIT = 120.0                # seconds for the launcher's teardown after `launch cancel`
LIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING",
               "REQUEUED", "SIGNALING", "STAGE_OUT")
GRANTED = re.compile(r"job allocation (\d+)")
# srun exits with 128+N when its task was killed by signal N (like a shell)
# what slurmstepd says (through srun) when the task's exec failed on its node
STEPD_EXEC_FAILED = re.compile(r"slurmstepd(?:-\S+)?: error: execve\(\): (?P<program>.+?): "
                               r"(?P<reason>[^:]+)$")
SIGNAL_EXITS = {128 + s: -s for s in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT,
                                      signal.SIGABRT, signal.SIGKILL, signal.SIGSEGV,
                                      signal.SIGTERM)}
_UNITS_MB = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


@dataclass(frozen=True)
class SlurmOptions:
    """The spec's ``slurm`` section."""

    partition: str | None = option(None, "word", doc="the allocation's partition")
    account: str | None = option(None, "word", doc="account to charge")
    qos: str | None = option(None, "word", doc="quality of service")
    time: str | None = option(None, "word", doc="time limit of the allocation")
    nodelist: str | None = option(None, "word", doc="nodes to run on")
    constraint: str | None = option(None, "word", doc="node features required")
    allocation_timeout: float | None = option(None, "number", minimum=1,
                                              doc="seconds to wait for the allocation")
    salloc_args: list[str] = option([], "args", doc="more salloc options (--name=value)")
    srun_args: list[str] = option([], "args", doc="more srun options (--name=value)")
    signal_lead: int = option(DEFAULT_SIGNAL_LEAD, "int", minimum=1,
                              doc="--detach: the warning signal this many seconds before "
                                  "the time limit")
    steps: str = option("node", "choice", choices=("node", "task"),
                        doc="node: one job step per node runs that node's tasks (a task "
                            "with GPUs keeps its own step); task: one step per task")
    python: str | None = option(None, "str", doc="the node step's interpreter (default: "
                                                 "the task's own Python, else python3)")



def memory_mb(text: str) -> int:
    """'4G', '512M', '2Gi', '1000' (MB, Slurm's default unit) in MB."""
    m = re.match(r"^(\d+(?:\.\d+)?)([KMGT]?)i?$", text)
    if not m:
        raise ValueError(f"bad memory size {text!r}")
    return max(1, int(float(m.group(1)) * _UNITS_MB[m.group(2)]))


def slurm_env() -> dict[str, str]:
    """The launcher's environment without the SLURM_* variables of an enclosing job, which
    would otherwise redirect salloc/srun (SLURM_CONF stays: it names the cluster)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("SLURM_") or k == "SLURM_CONF"}


def run_slurm(argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, env=slurm_env(), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return subprocess.CompletedProcess(argv, 127, "", str(e))


def job_state(job_id: str) -> str:
    """The job's state: squeue while Slurm holds it, then sacct, then ``scontrol show job``
    (no accounting store), else GONE."""
    done = run_slurm(["squeue", "-h", "-j", job_id, "-o", "%T"])
    if done.returncode == 0 and done.stdout.strip():
        return done.stdout.split()[0]
    done = run_slurm(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"])
    if done.returncode == 0 and done.stdout.strip():
        return done.stdout.split()[0].rstrip("+")
    done = run_slurm(["scontrol", "show", "job", "-o", job_id])
    m = re.search(r"\bJobState=(\S+)", done.stdout) if done.returncode == 0 else None
    return m.group(1) if m else "GONE"


class SlurmHandle(ProcessHandle):
    """An ``srun`` child of the launcher (in its own process group) running one task as a
    job step."""

    def __init__(self, task: TaskPlan, proc: subprocess.Popen, job_id: str, step_name: str):
        super().__init__(task, proc)
        self.job_id = job_id
        self.step_name = step_name
        self._step: str | None = None
        if self.output is not None:     # slurmstepd's words when the task's exec failed
            self.output = ExecWatch(self.output, self, STEPD_EXEC_FAILED, self._refusal)

    def _refusal(self, program: str, reason: str) -> str:
        return refusal_in_words(self.task.name, self.task.command, reason,
                                host=self.task.host, look=False)

    def poll(self) -> int | None:
        status = super().poll()
        return None if status is None else SIGNAL_EXITS.get(status, status)

    def step_id(self) -> str | None:
        """``J.S`` of this task's step once Slurm created it (newest of that name)."""
        if self._step is None:
            done = run_slurm(["squeue", "-h", "-s", "-j", self.job_id, "-o", "%i %j"])
            steps = [line.split()[0] for line in done.stdout.splitlines()
                     if line.split()[1:] == [self.step_name]]
            if steps:
                self._step = max(steps, key=lambda s: int(s.split(".")[1]))
        return self._step

    def signal(self, sig: int) -> None:
        if self.proc.poll() is not None:
            return
        step = self.step_id()
        if step is not None:
            run_slurm(["scancel", f"--signal={signal.Signals(sig).name[3:]}", step])
        if step is None or sig == signal.SIGKILL:
            # no step yet: srun cancels the pending step itself; SIGKILL: do not wait
            super().signal(sig)


def cancel_job(job_id: str, queued: bool = False, wait: float = CANCEL_WAIT) -> str:
    """``launch cancel`` of a detached run: SIGTERM to the batch step only (the launcher,
    which stops its steps in order and exits), then ``scancel J`` for whatever is left;
    wait until Slurm shows the job ended. Its final state."""
    if not queued:
        run_slurm(["scancel", "--batch", "--signal=TERM", job_id])
        _wait_ended(job_id, wait)
    run_slurm(["scancel", job_id])
    return _wait_ended(job_id, 60.0)


def _wait_ended(job_id: str, wait: float) -> str:
    deadline = time.monotonic() + wait
    state = job_state(job_id)
    while state in LIVE_STATES and time.monotonic() < deadline:
        time.sleep(0.2)
        state = job_state(job_id)
    return state


class SlurmBackend(Backend, Submits, Follower):
    """One allocation (``salloc --no-shell``); each task an ``srun`` job step on its node."""

    name = "slurm"
    OPTIONS = SlurmOptions
    options: SlurmOptions

    def __init__(self, options: SlurmOptions | None = None, *, remap: bool = False,
                 inside_job: bool = False):
        super().__init__(options or SlurmOptions(), remap=remap, inside_job=inside_job)
        self._ports: set[int] = set()
        self.job_id: str | None = None
        self.labels: list[str] = []                     # the spec's host labels, one per node
        self.label_of: dict[tuple[str, int], str] = {}  # (role, index) -> label
        self.allocation: list[str] = []                 # salloc's and sbatch's options
        self.node_of_label: dict[str, str] = {}
        self.addr_of_node: dict[str, str] = {}
        self.handles: list[SlurmHandle] = []
        self.node_steps: dict[str, NodeStep] = {}       # node -> its step (steps "node")
        self._steps_lock = threading.Lock()
        self.watchdog: Watchdog | None = None
        self._plan_tasks: dict[str, TaskPlan] = {}      # the plan's, from preflight()

    # ------------------------------------------------------------------ reservation
    def accept(self, reservation: Reservation) -> None:
        """The allocation: one node per distinct host label (the chief's first), sized for
        its busiest node."""
        self._check_allocation_level(reservation.resources)
        order = {"chief": 0, "master": 0, "worker": 1, "ps": 2, "evaluator": 3}
        by_role = sorted(reservation.tasks, key=lambda t: order[t[0]])
        self.labels = list(dict.fromkeys(a.host for _, _, a in by_role))
        self.label_of = {(role, i): a.host for role, i, a in reservation.tasks}
        self.allocation = self._allocation_options(reservation)

    def _check_allocation_level(self, resources: Mapping[str, Mapping[str, Any]]) -> None:
        """One allocation has one partition and one time limit: a role may not differ."""
        for key in ("partition", "time"):
            wanted = getattr(self.options, key) or resources.get("default", {}).get(key)
            for role in ROLES:
                value = resources.get(role, {}).get(key)
                if value is not None and value != wanted:
                    raise SpecError(f"resources.{role}.{key}",
                                    f"the Slurm backend runs every task in one allocation with "
                                    f"one {key}: set it in slurm.{key} or resources.default."
                                    f"{key}, not per role")
        for role in ("default",) + ROLES:
            mem = resources.get(role, {}).get("memory")
            if mem is not None:
                memory_mb(mem)

    # ------------------------------------------------------------------ rendering
    def salloc_argv(self) -> list[str]:
        """The allocation: one node per distinct host label, sized for its busiest node."""
        argv = ["salloc", "--no-shell", *self.allocation]
        if self.options.allocation_timeout:
            argv.append(f"--immediate={int(self.options.allocation_timeout)}")
        return argv + list(self.options.salloc_args)

    def _allocation_options(self, reservation: Reservation) -> list[str]:
        """The allocation's size and place, for salloc and for a batch script alike."""
        per_label: dict[str, dict[str, int]] = {h: {"cpus": 0, "mem": 0, "gpus": 0}
                                                for h in self.labels}
        for (role, _), label in self.label_of.items():
            res = resources_for(reservation.resources, role)
            per_label[label]["cpus"] += res.get("cpus", 1)
            per_label[label]["gpus"] += res.get("gpus", 0)
            if "memory" in res:
                per_label[label]["mem"] += memory_mb(res["memory"])
        o = self.options
        default = reservation.resources.get("default", Resources())
        argv = [f"--job-name=tfc-{reservation.name}",
                f"--nodes={len(self.labels)}", "--ntasks-per-node=1",
                f"--cpus-per-task={max(v['cpus'] for v in per_label.values()) or 1}"]
        mem = max(v["mem"] for v in per_label.values())
        gpus = max(v["gpus"] for v in per_label.values())
        if mem:
            argv.append(f"--mem={mem}M")
        if gpus:
            argv.append(f"--gpus-per-node={gpus}")
        partition = o.partition or default.get("partition")
        time_limit = o.time or default.get("time")
        for flag, value in (("partition", partition), ("time", time_limit),
                            ("account", o.account), ("qos", o.qos),
                            ("nodelist", o.nodelist), ("constraint", o.constraint)):
            if value:
                argv.append(f"--{flag}={value}")
        return argv

    def srun_argv(self, task: TaskPlan, job_id: str, node: str) -> list[str]:
        """The step of one task (``steps: task``, or a task with GPUs)."""
        res = task.resources
        argv = self._step_argv(job_id, node, f"{task.type}-{task.index}",
                               res.get("cpus", 1) or 1,
                               memory_mb(res["memory"]) if "memory" in res else None)
        if res.get("gpus"):
            argv.append(f"--gpus={res['gpus']}")
        if task.cwd:
            argv.append(f"--chdir={task.cwd}")
        return argv + list(self.options.srun_args) + ["--", *task.command]

    def node_srun_argv(self, tasks: list[TaskPlan], job_id: str, node: str) -> list[str]:
        """The step of a node's tasks (``steps: node``): the node agent, sized for them all
        (memory only when every task gives it)."""
        cpus = sum(t.resources.get("cpus", 1) for t in tasks) or 1     # as the allocation
        mem = sum(memory_mb(t.resources["memory"]) for t in tasks) \
            if all("memory" in t.resources for t in tasks) else None
        python = self.options.python or probe_python(tasks[0].command)
        chdir = [f"--chdir={tasks[0].cwd}"] if tasks[0].cwd else []   # a relative Python
        return self._step_argv(job_id, node, "tfc-node", cpus, mem) + ["--unbuffered"] + \
            chdir + list(self.options.srun_args) + ["--", python, "-I", "-S", "-c", STUB]

    def _step_argv(self, job_id: str, node: str, name: str, cpus: int,
                   mem: int | None) -> list[str]:
        argv = ["srun", f"--jobid={job_id}", f"--nodelist={node}", "--nodes=1", "--ntasks=1",
                "--overlap", f"--job-name={name}", f"--cpus-per-task={cpus}", "--export=ALL",
                "--kill-on-bad-exit=1"]
        return argv + ([f"--mem={mem}M"] if mem else [])

    def grouped(self, task: TaskPlan) -> bool:
        """Run by its node's step: ``steps: node`` and no GPUs (Slurm binds a task's GPUs
        to a step of its own)."""
        return self.options.steps == "node" and not task.resources.get("gpus")

    def describe(self, plan: JobPlan) -> str:
        lines = ["# Slurm: tfcluster asks for one allocation, then runs the tasks as job steps "
                 "and watches them.",
                 "# Host labels in the spec name nodes of the allocation: "
                 + ", ".join(f"{label} -> node {n + 1}" for n, label in enumerate(self.labels)),
                 "# TF_CONFIG gets each node's address (NodeAddr) once the allocation is "
                 "granted.",
                 shlex.join(self.salloc_argv()) + "   # prints: Granted job allocation J"]
        if any(self.grouped(t) for t in plan.tasks):
            lines.append(f"STUB={shlex.quote(STUB)}   # reads the node agent's source "
                         "from stdin, then runs it")
        by_node: dict[str, list[TaskPlan]] = {}
        for task in plan.tasks:
            if self.grouped(task):
                by_node.setdefault(self._node_name(task), []).append(task)
            else:
                srun = shlex.join(self.srun_argv(task, "JOBID", self._node_name(task)))
                lines.append(f"{_shown_env(task)} {srun.replace('--jobid=JOBID', '--jobid=$J')}"
                             f" &   # {task.name}")
        for node, tasks in by_node.items():
            srun = shlex.join(self.node_srun_argv(tasks, "JOBID", node)[:-1]) + ' "$STUB"'
            lines.append(f"{srun.replace('--jobid=JOBID', '--jobid=$J')} &   # {node}: the "
                         f"node step of {len(tasks)} task(s), "
                         f"{_listed([t.name for t in tasks])}")
            lines.append("#   its agent (launcher/backends/slurm_node.py) starts each of them "
                         "in a process group of its own, with its environment (above), and "
                         "relays output and signals:")
            lines += [f"#   {task.name}: {shlex.join(task.command)}" for task in tasks]
        lines.append("# when training ends: SIGTERM to each ps and evaluator (then SIGKILL), "
                     "then")
        lines.append("scancel $J")
        return "\n".join(lines)

    def _node_name(self, task: TaskPlan) -> str:
        """Its node, or NODE_n before the allocation is granted."""
        label = self.label_of[(task.type, task.index)]
        return self.node_of_label.get(label, f"NODE_{self.labels.index(label) + 1}")

    def batch_script(self, run_dir: str, relaunch: list[str]) -> str:
        """The ``--detach`` batch script: the allocation as ``#SBATCH`` lines, then this
        launcher inside it, which runs each task as a job step (the same ``srun`` lines as
        an attached run, placement and per-role resources included)."""
        lead = self.options.signal_lead
        options = [*self.allocation, *self.options.salloc_args,
                   f"--output={os.path.join(run_dir, 'launcher.log')}", "--open-mode=append",
                   f"--chdir={os.getcwd()}", "--export=ALL", "--requeue",
                   f"--signal=B:TERM@{lead}"]
        return "\n".join([
            "#!/bin/bash",
            *(f"#SBATCH {opt}" for opt in options),
            "# tfcluster: the launcher runs inside this allocation and starts every task as a",
            "# job step (srun --overlap), ends the job at max_steps and stops the ps. The",
            f"# warning signal ({lead}s before the time limit) reaches the launcher alone; it",
            "# stops the tasks in order. A requeued job runs this script again: same run id,",
            "# the tasks resume from model_dir's newest checkpoint.",
            "exec " + shlex.join(relaunch), ""])

    def describe_detached(self, plan: JobPlan, run_dir: str, relaunch: list[str]) -> str:
        lines = self.describe(plan).splitlines()
        first = next(n for n, line in enumerate(lines) if line.startswith("salloc ")) + 1
        steps = lines[first:next(n for n, line in enumerate(lines)
                                 if line.startswith("# when training ends"))]
        return "\n".join(["# Slurm --detach: sbatch of this batch script", "",
                          self.batch_script(run_dir, relaunch),
                          "# inside it, the launcher runs the tasks as job steps:", *steps])

    def submit(self, plan: JobPlan, run_dir: str, relaunch: list[str]) -> dict[str, Any]:
        path = os.path.join(run_dir, "batch.sh")
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.batch_script(run_dir, relaunch))
        os.chmod(path, 0o755)
        done = run_slurm(["sbatch", "--parsable", path])
        if done.returncode != 0 or not done.stdout.strip():
            reason = (done.stderr or done.stdout).strip() or f"exit {done.returncode}"
            raise PreflightError(f"sbatch failed: {reason}")
        return {"slurm_job": done.stdout.strip().split(";")[0], "batch_script": path,
                "batch": True}

    @classmethod
    def describe_handle(cls, handle: dict[str, Any]) -> str:
        return f"Slurm job {handle['slurm_job']}" if handle.get("slurm_job") else ""

    @classmethod
    def engine_state(cls, handle: dict[str, Any], recorded: str) -> tuple[str, str] | None:
        """squeue's (then sacct's) word on the run's job: queued while it waits, lost when
        it ended without the run recording its end."""
        job = handle.get("slurm_job")
        if not job or not isinstance(job, str):
            return None
        engine = job_state(job)
        if engine in ("PENDING", "REQUEUED", "CONFIGURING"):
            return "queued", f"Slurm job {job} is {engine}"
        if engine not in LIVE_STATES:
            return "lost", (f"the launcher died: Slurm job {job} is {engine} but the run "
                            "never recorded its end")
        return recorded, f"Slurm job {job} is {engine}"

    @classmethod
    def holds(cls, handle: dict[str, Any]) -> bool:
        """Slurm still has the job (pending, requeued, running); False when it cannot tell."""
        seen = cls.engine_state(handle, "running")
        return seen is not None and seen[0] != "lost"

    @classmethod
    def launcher_inside(cls, handle: dict[str, Any]) -> bool:
        return bool(handle.get("batch"))

    @classmethod
    def cancel_run(cls, handle: dict[str, Any], queued: bool) -> None:
        if handle.get("slurm_job"):     # the launcher inside the batch job, or what is left
            cancel_job(handle["slurm_job"], queued=queued)

    def run_handle(self) -> dict[str, Any]:
        """The job; ``batch``: the launcher runs inside it (``launch cancel`` signals the
        batch step), else it holds the allocation from outside (it is signalled itself)."""
        if not self.job_id:
            return {}
        return {"slurm_job": self.job_id, **({"batch": True} if self.inside_job else {})}

    def requeued(self) -> bool:
        """Slurm requeued the batch job this launcher runs in (preemption, ``scontrol
        requeue``): its restart count went up."""
        job = os.environ.get("SLURM_JOB_ID") if self.inside_job else None
        done = run_slurm(["scontrol", "show", "job", "-o", job]) if job else None
        m = re.search(r"\bRestarts=(\d+)", done.stdout) if done and done.returncode == 0 else None
        return m is not None and int(m.group(1)) > self.attempt()

    def requeue(self) -> bool:
        """The warning signal before the time limit was a preemption notice (the chief
        saved): the batch job this launcher runs in goes back to the queue (``scontrol
        requeue``; the script asked for ``--requeue``) and its next attempt resumes from the
        checkpoint. A job Slurm already requeued (a preemption) is left as it is."""
        job = os.environ.get("SLURM_JOB_ID") if self.inside_job else None
        if not job:
            return False
        if self.requeued():
            return True
        return run_slurm(["scontrol", "requeue", job]).returncode == 0

    def attempt(self) -> int:
        """A requeued batch job runs again with SLURM_RESTART_COUNT = 1, 2..."""
        if not self.inside_job:
            return 0
        count = os.environ.get("SLURM_RESTART_COUNT", "0")
        return int(count) if count.isdigit() else 0

    # ------------------------------------------------------------------ allocation
    def prepare(self) -> None:
        if self.inside_job:
            self.job_id = os.environ.get("SLURM_JOB_ID")
            if not self.job_id:
                raise PreflightError("--in-allocation outside a Slurm job (no SLURM_JOB_ID)")
        else:
            # if this launcher dies, even by SIGKILL, its watchdog cancels the allocation
            self.watchdog = Watchdog()
            self.job_id = self._allocate(self.salloc_argv())
            atexit.register(self.close)
        state = job_state(self.job_id)
        if state != "RUNNING":
            raise PreflightError(f"Slurm job {self.job_id} is {state}, not RUNNING, after "
                                 "salloc returned")
        nodes = self._nodes(self.job_id)
        if len(nodes) < len(self.labels):
            raise PreflightError(f"Slurm job {self.job_id} got {len(nodes)} nodes, needs "
                                 f"{len(self.labels)}")
        self.node_of_label = dict(zip(self.labels, nodes))
        for node in nodes:
            self.addr_of_node[node] = self._node_addr(node)
        _info(f"Slurm job {self.job_id} granted on {', '.join(nodes)} ("
              + ", ".join(f"{label}={n}" for label, n in self.node_of_label.items()) + ")")

    def _allocate(self, argv: list[str]) -> str:
        """Run salloc; return the job id. On any interruption the pending job is cancelled."""
        try:
            proc = subprocess.Popen(argv, env=slurm_env(), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True, start_new_session=True)
        except FileNotFoundError:
            raise PreflightError("salloc not found: the Slurm client commands must be on "
                                 "PATH") from None
        lines: list[str] = []

        def read() -> None:
            for line in proc.stderr or ():
                lines.append(line.rstrip())
                m = GRANTED.search(line)
                if m and self.job_id is None:
                    self.job_id = m.group(1)
                    if self.watchdog is not None:
                        self.watchdog.at_exit(["scancel", self.job_id])

        if self.watchdog is not None:
            self.watchdog.watch(proc.pid)      # a pending salloc ends with the launcher
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            status = proc.wait()
            reader.join(timeout=5)
            if self.watchdog is not None:
                self.watchdog.forget(proc.pid)
        except BaseException:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
            self.close()
            raise
        if status != 0 or self.job_id is None:
            self.close()
            raise PreflightError("salloc failed: " + (" | ".join(lines) or f"exit {status}"))
        return self.job_id

    @staticmethod
    def _nodes(job_id: str) -> list[str]:
        done = run_slurm(["squeue", "-h", "-j", job_id, "-o", "%N"])
        nodelist = done.stdout.strip()
        if not nodelist:
            return []
        names = run_slurm(["scontrol", "show", "hostnames", nodelist])
        return names.stdout.split()

    @staticmethod
    def _node_addr(node: str) -> str:
        done = run_slurm(["scontrol", "show", "node", "-o", node])
        m = re.search(r"\bNodeAddr=(\S+)", done.stdout)
        return m.group(1) if m else node

    # ------------------------------------------------------------------ the interface
    def place(self, role: str, index: int, address: Address) -> Address:
        """At the address of the node the label was given (the label itself before then)."""
        node = self.node_of_label.get(address.host)
        if node is None:
            return address
        return dataclasses.replace(address, host=self.addr_of_node.get(node, node))

    def allocate_port(self, host: str) -> int:
        # Nodes are other machines in general: a port free here is a good guess there, and a
        # clash ("address in use") makes the job loop re-plan with new ports.
        return free_port(self._ports)

    def preflight(self, plan: JobPlan) -> None:
        """Each task's working directory and program, checked on its node (one probe step
        per node) before any task starts."""
        from launcher.backends.environment import check_programs_by_probe

        self._plan_tasks = {t.name: t for t in plan.tasks}
        check_programs_by_probe(plan, self, group=self._node_for, place="node")

    def _node_for(self, task: TaskPlan) -> str:
        if self.job_id is None:
            raise RuntimeError("Slurm backend: start() before prepare()")
        return self.node_of_label[self.label_of[(task.type, task.index)]]

    def start(self, task: TaskPlan) -> TaskHandle:
        if self.grouped(task):
            return self._node_step(task).start(task, task.env)
        argv = self.srun_argv(reporting_step(task), self.job_id or "",
                              self._node_for(task))
        env = _step_env(task)
        proc = subprocess.Popen(dies_with_parent(argv, env), env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        handle = SlurmHandle(task, proc, self.job_id or "", f"{task.type}-{task.index}")
        if task.resources.get("gpus") and proc.stdout is not None:
            # what Slurm bound, into the plan's task
            handle.output = StepDevices(proc.stdout, self._plan_tasks.get(task.name, task))
        self.handles.append(handle)
        return handle

    def _node_step(self, task: TaskPlan) -> NodeStep:
        """The step that runs the tasks of ``task``'s node: started with the first of them,
        again if it ended."""
        node = self._node_for(task)
        with self._steps_lock:
            step = self.node_steps.get(node)
            if step is None or not step.alive():
                tasks = [t for t in self._plan_tasks.values()
                         if self.grouped(t) and self._node_for(t) == node] or [task]
                step = NodeStep(self.node_srun_argv(tasks, self.job_id or "", node),
                                slurm_env(), node)
                self.node_steps[node] = step
            return step

    def probe(self, task: TaskPlan, argv: list[str], timeout: float) -> ProbeResult:
        probe = dataclasses.replace(task, command=argv)
        srun = self.srun_argv(probe, self.job_id or "", self._node_for(task))
        srun[srun.index(f"--job-name={task.type}-{task.index}")] = "--job-name=tfc-probe"
        try:
            done = subprocess.run(srun, env=_step_env(task), stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=timeout, start_new_session=True)
        except subprocess.TimeoutExpired:
            return ProbeResult(124, f"timed out after {timeout:.0f}s")
        return ProbeResult(done.returncode, done.stdout.decode(errors="replace"))

    def close(self, wait: float = 60.0) -> None:
        """Cancel the allocation (every step with it) and wait until Slurm lets it go."""
        for handle in self.handles:
            if handle.proc.poll() is None:
                handle.kill()
        steps, self.node_steps = list(self.node_steps.values()), {}
        for step in steps:
            for task in list(step.tasks.values()):
                task.kill()
            step.close()
        job_id, self.job_id = self.job_id, None
        if job_id is not None and not self.inside_job:   # a batch job ends with its script
            run_slurm(["scancel", job_id])
            _wait_ended(job_id, wait)
        for proc in [h.proc for h in self.handles] + [s.proc for s in steps]:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.handles.clear()
        if self.watchdog is not None:
            self.watchdog.clear_at_exit()
            self.watchdog.close()
            self.watchdog = None


def _step_env(task: TaskPlan) -> dict[str, str]:
    env = task_environ(task)
    for key in [k for k in env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
        del env[key]
    return env


def _shown_env(task: TaskPlan) -> str:
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in task.env.items()
                    if k in ("TF_CONFIG", "TFCLUSTER_TASK"))


def _listed(names: list[str], most: int = 6) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _info(message: str) -> None:
    sys.stderr.write(f"tfcluster: {message}\n")
    sys.stderr.flush()


BACKEND = SlurmBackend
