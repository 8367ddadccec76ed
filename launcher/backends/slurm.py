"""Slurm backend: one allocation, each task a job step that the launcher runs and watches.

``prepare`` asks for the allocation (``salloc --no-shell``) before the plan is built, so
every task's TF_CONFIG names the address of the node it will run on. Each task is then an
``srun --jobid=J --nodelist=NODE --overlap`` child of the launcher: its output streams
back, its exit status is the task's, and a signal reaches the step through ``scancel
--signal``. ``close`` cancels the allocation and waits until Slurm shows it ended.
docs/slurm.md explains the choice.
"""

from __future__ import annotations

import atexit
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from launcher.backends.base import Backend, ProbeResult, TaskHandle
from launcher.errors import PreflightError, SpecError
from launcher.plan import JobPlan, TaskPlan
from launcher.processes import ProcessHandle, die_with_parent, free_port, task_environ
from launcher.spec import (
    ROLES,
    Spec,
    check_keys,
    expect_argv,
    expect_dict,
    expect_number,
    expect_str,
    resources_for,
)
from orchestrator.roles import in_start_order

OPTION_KEYS = ("partition", "account", "qos", "time", "nodelist", "constraint",
               "allocation_timeout", "salloc_args", "srun_args")
LIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING",
               "REQUEUED", "SIGNALING", "STAGE_OUT")
GRANTED = re.compile(r"job allocation (\d+)")
# srun exits with 128+N when its task was killed by signal N (like a shell)
SIGNAL_EXITS = {128 + s: -s for s in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT,
                                      signal.SIGABRT, signal.SIGKILL, signal.SIGSEGV,
                                      signal.SIGTERM)}
_UNITS_MB = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


@dataclass
class SlurmOptions:
    """The spec's ``slurm`` section."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    nodelist: str | None = None
    constraint: str | None = None
    allocation_timeout: float | None = None   # seconds to wait for the allocation
    salloc_args: list[str] = field(default_factory=list)
    srun_args: list[str] = field(default_factory=list)


def memory_mb(text: str) -> int:
    """'4G', '512M', '2Gi', '1000' (MB, Slurm's default unit) in MB."""
    m = re.match(r"^(\d+(?:\.\d+)?)([KMGT]?)i?$", text)
    if not m:
        raise ValueError(f"bad memory size {text!r}")
    return max(1, int(float(m.group(1)) * _UNITS_MB[m.group(2)]))


def _roles(spec: Spec) -> list[tuple[str, int, str]]:
    """(type, index, spec host) of every task, in the plan's start order."""
    return [(job, i, a.host) for job, i, a in in_start_order(spec.cluster, spec.evaluator)]


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


class SlurmBackend(Backend):
    """One allocation (``salloc --no-shell``); each task an ``srun`` job step on its node."""

    name = "slurm"
    options: SlurmOptions

    def __init__(self, spec: Spec, options: SlurmOptions | None = None):
        super().__init__(spec, options or SlurmOptions())
        self._ports: set[int] = set()
        self.job_id: str | None = None
        order = {"chief": 0, "master": 0, "worker": 1, "ps": 2, "evaluator": 3}
        by_role = sorted(_roles(spec), key=lambda r: order[r[0]])
        self.labels = list(dict.fromkeys(host for _, _, host in by_role))
        self.label_of = {(t, i): host for t, i, host in _roles(spec)}
        self.node_of_label: dict[str, str] = {}
        self.addr_of_node: dict[str, str] = {}
        self.handles: list[SlurmHandle] = []
        self._check_allocation_level()

    # ------------------------------------------------------------------ spec
    @classmethod
    def validate_options(cls, raw: dict[str, Any] | None, field: str) -> SlurmOptions:
        raw = expect_dict(raw or {}, field)
        check_keys(raw, OPTION_KEYS, field)
        opts = SlurmOptions()
        for key in ("partition", "account", "qos", "time", "nodelist", "constraint"):
            if key in raw:
                value = expect_str(raw[key], f"{field}.{key}")
                if value.startswith("-") or any(c.isspace() for c in value):
                    raise SpecError(f"{field}.{key}", f"{value!r} must be one word that does "
                                                      "not start with '-'")
                setattr(opts, key, value)
        if "allocation_timeout" in raw:
            opts.allocation_timeout = expect_number(raw["allocation_timeout"],
                                                    f"{field}.allocation_timeout", minimum=1)
        for key in ("salloc_args", "srun_args"):
            if key in raw:
                args = expect_argv(raw[key], f"{field}.{key}")
                for i, arg in enumerate(args):
                    if not arg.startswith("-"):
                        raise SpecError(f"{field}.{key}[{i}]", f"{arg!r} is not an option: "
                                        "write each as --name=value")
                setattr(opts, key, args)
        return opts

    def _check_allocation_level(self) -> None:
        """One allocation has one partition and one time limit: a role may not differ."""
        for key in ("partition", "time"):
            wanted = getattr(self.options, key) or self.spec.resources.get("default", {}).get(key)
            for role in ROLES:
                value = self.spec.resources.get(role, {}).get(key)
                if value is not None and value != wanted:
                    raise SpecError(f"resources.{role}.{key}",
                                    f"the Slurm backend runs every task in one allocation with "
                                    f"one {key}: set it in slurm.{key} or resources.default."
                                    f"{key}, not per role")
        for role in ("default",) + ROLES:
            mem = self.spec.resources.get(role, {}).get("memory")
            if mem is not None:
                memory_mb(mem)

    # ------------------------------------------------------------------ rendering
    def salloc_argv(self) -> list[str]:
        """The allocation: one node per distinct host label, sized for its busiest node."""
        per_label: dict[str, dict[str, int]] = {h: {"cpus": 0, "mem": 0, "gpus": 0}
                                                for h in self.labels}
        for (role, _), label in self.label_of.items():
            res = resources_for(self.spec, role)
            per_label[label]["cpus"] += res.get("cpus", 1)
            per_label[label]["gpus"] += res.get("gpus", 0)
            if "memory" in res:
                per_label[label]["mem"] += memory_mb(res["memory"])
        o = self.options
        default = self.spec.resources.get("default", {})
        argv = ["salloc", "--no-shell", f"--job-name=tfc-{self.spec.name}",
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
        if o.allocation_timeout:
            argv.append(f"--immediate={int(o.allocation_timeout)}")
        return argv + list(o.salloc_args)

    def srun_argv(self, task: TaskPlan, job_id: str, node: str) -> list[str]:
        res = resources_for(self.spec, task.type)
        argv = ["srun", f"--jobid={job_id}", f"--nodelist={node}", "--nodes=1", "--ntasks=1",
                "--overlap", f"--job-name={task.type}-{task.index}",
                f"--cpus-per-task={res.get('cpus', 1) or 1}", "--export=ALL",
                "--kill-on-bad-exit=1"]
        if "memory" in res:
            argv.append(f"--mem={memory_mb(res['memory'])}M")
        if res.get("gpus"):
            argv.append(f"--gpus={res['gpus']}")
        if task.cwd:
            argv.append(f"--chdir={task.cwd}")
        return argv + list(self.options.srun_args) + ["--", *task.command]

    def describe(self, plan: JobPlan) -> str:
        lines = ["# Slurm: tfcluster asks for one allocation, then runs each task as a job "
                 "step and watches it.",
                 "# Host labels in the spec name nodes of the allocation: "
                 + ", ".join(f"{label} -> node {n + 1}" for n, label in enumerate(self.labels)),
                 "# TF_CONFIG gets each node's address (NodeAddr) once the allocation is "
                 "granted.",
                 shlex.join(self.salloc_argv()) + "   # prints: Granted job allocation J"]
        for task in plan.tasks:
            label = self.label_of[(task.type, task.index)]
            node = self.node_of_label.get(label, f"NODE_{self.labels.index(label) + 1}")
            srun = shlex.join(self.srun_argv(task, "JOBID", node))
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in task.env.items()
                           if k in ("TF_CONFIG", "TFCLUSTER_TASK"))
            lines.append(f"{env} {srun.replace('--jobid=JOBID', '--jobid=$J')} &   "
                         f"# {task.name}")
        lines.append("# when training ends: scancel --signal=TERM J.STEP for each ps and "
                     "evaluator step, then")
        lines.append("scancel $J")
        return "\n".join(lines)

    # ------------------------------------------------------------------ allocation
    def prepare(self) -> None:
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
            for line in proc.stderr:
                lines.append(line.rstrip())
                m = GRANTED.search(line)
                if m and self.job_id is None:
                    self.job_id = m.group(1)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            status = proc.wait()
            reader.join(timeout=5)
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
    def host_for(self, host: str) -> str:
        """The address of the node the label was given (the label itself before then)."""
        node = self.node_of_label.get(host)
        return self.addr_of_node.get(node, node) if node else host

    def allocate_port(self, host: str) -> int:
        # Nodes are other machines in general: a port free here is a good guess there, and a
        # clash ("address in use") makes the job loop re-plan with new ports.
        return free_port(self._ports)

    def _node_for(self, task: TaskPlan) -> str:
        if self.job_id is None:
            raise RuntimeError("Slurm backend: start() before prepare()")
        return self.node_of_label[self.label_of[(task.type, task.index)]]

    def start(self, task: TaskPlan) -> TaskHandle:
        argv = self.srun_argv(task, self.job_id or "", self._node_for(task))
        proc = subprocess.Popen(argv, env=_step_env(task), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=die_with_parent)
        handle = SlurmHandle(task, proc, self.job_id or "", f"{task.type}-{task.index}")
        self.handles.append(handle)
        return handle

    def probe(self, task: TaskPlan, argv: list[str], timeout: float) -> ProbeResult:
        probe = TaskPlan(task.type, task.index, task.host, task.port, argv, task.env, task.cwd)
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
        job_id, self.job_id = self.job_id, None
        if job_id is not None:
            run_slurm(["scancel", job_id])
            deadline = time.monotonic() + wait
            while job_state(job_id) in LIVE_STATES and time.monotonic() < deadline:
                time.sleep(0.2)
        for handle in self.handles:
            try:
                handle.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.handles.clear()


def _step_env(task: TaskPlan) -> dict[str, str]:
    env = task_environ(task)
    for key in [k for k in env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
        del env[key]
    return env


def _info(message: str) -> None:
    sys.stderr.write(f"tfcluster: {message}\n")
    sys.stderr.flush()


BACKEND = SlurmBackend
