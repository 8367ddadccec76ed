"""Slurm backend: one allocation, each task a job step that the launcher runs and watches.

``accept`` sizes the allocation from the job's Reservation (one node per host label of the
spec); ``prepare`` asks for it (``salloc --no-shell``) before the plan is built, so every
task's TF_CONFIG names the address of the node it will run on (``place``). Each task is then an
``srun --jobid=J --nodelist=NODE --overlap`` child of the launcher: its output streams
back, its exit status is the task's, and a signal reaches the step through ``scancel
--signal``. ``close`` cancels the allocation and waits until Slurm shows it ended. If the
launcher is killed (even by SIGKILL), its watchdog process cancels the allocation (pending
or granted) at once.

``--detach`` submits a batch script instead (launcher/backends/slurm_submit.py): the same
allocation request as ``#SBATCH`` lines, and one command, this launcher with
``--in-allocation``, which adopts the job it runs in (``inside_job``) and runs the tasks as
steps of it exactly as above. What is asked of Slurm is plain data in
launcher/backends/slurm_allocation.py; a run is followed by its job's id in
launcher/backends/slurm_follow.py. docs/slurm.md explains the choices.
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
from typing import Any

from launcher.backends.agent.words import refusal_in_words
from launcher.backends.base import Backend, ExecWatch, ProbeResult, TaskHandle
from launcher.backends.engine import EngineJob
from launcher.backends.processes import ProcessHandle, dies_with_parent, free_port, task_environ
from launcher.backends.slurm_allocation import (
    Allocation,
    SlurmOptions,
    StepLines,
    allocation_for,
    grouped,
    node_step_size,
    srun_argv,
    step_argv,
)
from launcher.backends.slurm_follow import (
    job_nodes,
    job_state,
    node_addr,
    restarts,
    run_slurm,
    salloc,
    slurm_env,
    wait_ended,
)
from launcher.backends.slurm_gpus import StepDevices, reporting_step
from launcher.backends.slurm_node_step import NODE_STUB as STUB
from launcher.backends.slurm_node_step import NodeStep
from launcher.backends.storage_check import probe_python
from launcher.backends.watchdog import Watchdog
from launcher.checks import Address
from launcher.errors import PreflightError
from launcher.plan import JobPlan, Reservation, TaskPlan

# srun exits with 128+N when its task was killed by signal N (like a shell)
# what slurmstepd says (through srun) when the task's exec failed on its node
STEPD_EXEC_FAILED = re.compile(r"slurmstepd(?:-\S+)?: error: execve\(\): (?P<program>.+?): "
                               r"(?P<reason>[^:]+)$")
SIGNAL_EXITS = {128 + s: -s for s in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT,
                                      signal.SIGABRT, signal.SIGKILL, signal.SIGSEGV,
                                      signal.SIGTERM)}


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


class SlurmBackend(Backend, EngineJob):
    """One allocation (``salloc --no-shell``); each task an ``srun`` job step on its node."""

    name = "slurm"
    OPTIONS = SlurmOptions
    options: SlurmOptions

    def __init__(self, options: SlurmOptions | None = None, *, remap: bool = False,
                 inside_job: bool = False):
        super().__init__(options or SlurmOptions(), remap=remap, inside_job=inside_job)
        self._ports: set[int] = set()
        self.job_id: str | None = None
        self.allocation = Allocation()                  # what accept() asks Slurm for
        self.node_of_label: dict[str, str] = {}
        self.addr_of_node: dict[str, str] = {}
        self.handles: list[SlurmHandle] = []
        self.node_steps: dict[str, NodeStep] = {}       # node -> its step (steps "node")
        self._steps_lock = threading.Lock()
        self.watchdog: Watchdog | None = None
        self._plan_tasks: dict[str, TaskPlan] = {}      # the plan's, from preflight()

    def accept(self, reservation: Reservation) -> None:
        """The allocation asked for (launcher/backends/slurm_allocation.py)."""
        self.allocation = allocation_for(reservation, self.options)

    # ------------------------------------------------------------------ rendering
    def node_srun_argv(self, tasks: list[TaskPlan], job_id: str, node: str) -> list[str]:
        """The step of a node's tasks (``steps: node``): the node agent, sized for them all
        (memory only when every task gives it)."""
        cpus, mem = node_step_size(tasks)
        python = self.options.python or probe_python(tasks[0].command)
        chdir = [f"--chdir={tasks[0].cwd}"] if tasks[0].cwd else []   # a relative Python
        return step_argv(job_id, node, "tfc-node", cpus, mem) + ["--unbuffered"] + \
            chdir + list(self.options.srun_args) + ["--", python, "-I", "-S", "-c", STUB]

    def step_lines(self, plan: JobPlan) -> StepLines:
        """The allocation and every job step, as ``--dry-run`` shows them."""
        labels = self.allocation.labels
        head = ("# Slurm: tfcluster asks for one allocation, then runs the tasks as job "
                "steps and watches them.",
                "# Host labels in the spec name nodes of the allocation: "
                + ", ".join(f"{label} -> node {n + 1}" for n, label in enumerate(labels)),
                "# TF_CONFIG gets each node's address (NodeAddr) once the allocation is "
                "granted.")
        steps: list[str] = []
        if any(grouped(self.options, t) for t in plan.tasks):
            steps.append(f"STUB={shlex.quote(STUB)}   # reads the node agent's source "
                         "from stdin, then runs it")
        by_node: dict[str, list[TaskPlan]] = {}
        for task in plan.tasks:
            if grouped(self.options, task):
                by_node.setdefault(self._node_name(task), []).append(task)
            else:
                srun = shlex.join(srun_argv(self.options, task, "JOBID", self._node_name(task)))
                steps.append(f"{_shown_env(task)} {srun.replace('--jobid=JOBID', '--jobid=$J')}"
                             f" &   # {task.name}")
        for node, tasks in by_node.items():
            srun = shlex.join(self.node_srun_argv(tasks, "JOBID", node)[:-1]) + ' "$STUB"'
            steps.append(f"{srun.replace('--jobid=JOBID', '--jobid=$J')} &   # {node}: the "
                         f"node step of {len(tasks)} task(s), "
                         f"{_listed([t.name for t in tasks])}")
            steps.append("#   its agent (launcher/backends/agent/) starts each of them "
                         "in a process group of its own, with its environment (above), and "
                         "relays output and signals:")
            steps += [f"#   {task.name}: {shlex.join(task.command)}" for task in tasks]
        salloc = shlex.join(self.allocation.salloc_argv(self.options)) + \
            "   # prints: Granted job allocation J"
        return StepLines(head, salloc, tuple(steps))

    def describe(self, plan: JobPlan) -> str:
        return self.step_lines(plan).text()

    def _node_name(self, task: TaskPlan) -> str:
        """Its node, or NODE_n before the allocation is granted."""
        label = self.allocation.label_of[(task.type, task.index)]
        return self.node_of_label.get(label, f"NODE_{self.allocation.labels.index(label) + 1}")

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
        count = restarts(job) if job else None
        return count is not None and count > self.attempt()

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
            self.job_id = self._allocate(self.allocation.salloc_argv(self.options))
            atexit.register(self.close)
        state = job_state(self.job_id)
        if state != "RUNNING":
            raise PreflightError(f"Slurm job {self.job_id} is {state}, not RUNNING, after "
                                 "salloc returned")
        nodes = job_nodes(self.job_id)
        labels = self.allocation.labels
        if len(nodes) < len(labels):
            raise PreflightError(f"Slurm job {self.job_id} got {len(nodes)} nodes, needs "
                                 f"{len(labels)}")
        self.node_of_label = dict(zip(labels, nodes))
        for node in nodes:
            self.addr_of_node[node] = node_addr(node)
        _info(f"Slurm job {self.job_id} granted on {', '.join(nodes)} ("
              + ", ".join(f"{label}={n}" for label, n in self.node_of_label.items()) + ")")

    def _allocate(self, argv: list[str]) -> str:
        """Run salloc; return the job id. On any interruption the pending job is cancelled."""
        def granted(job_id: str) -> None:
            if self.job_id is None:
                self.job_id = job_id
                if self.watchdog is not None:
                    self.watchdog.at_exit(["scancel", job_id])

        try:
            status, lines = salloc(argv, self.watchdog, granted)
        except PreflightError:
            raise
        except BaseException:
            self.close()
            raise
        if status != 0 or self.job_id is None:
            self.close()
            raise PreflightError("salloc failed: " + (" | ".join(lines) or f"exit {status}"))
        return self.job_id

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
        return self.node_of_label[self.allocation.label_of[(task.type, task.index)]]

    def start(self, task: TaskPlan) -> TaskHandle:
        if grouped(self.options, task):
            return self._node_step(task).start(task, task.env)
        argv = srun_argv(self.options, reporting_step(task), self.job_id or "",
                         self._node_for(task))
        env = _step_env(task)
        proc = subprocess.Popen(dies_with_parent(argv, env), env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        handle = SlurmHandle(task, proc, self.job_id or "", f"{task.type}-{task.index}")
        if task.resources.gpus and proc.stdout is not None:
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
                         if grouped(self.options, t) and self._node_for(t) == node] or [task]
                step = NodeStep(self.node_srun_argv(tasks, self.job_id or "", node),
                                slurm_env(), node)
                self.node_steps[node] = step
            return step

    def probe(self, task: TaskPlan, argv: list[str], timeout: float) -> ProbeResult:
        probe = dataclasses.replace(task, command=argv)
        srun = srun_argv(self.options, probe, self.job_id or "", self._node_for(task))
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
            wait_ended(job_id, wait)
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
