"""Docker backend: every task is a container on the local engine, from the spec's image.

Each task runs as ``docker run --rm --init`` in the foreground: that client is the task's
local process, its output is the container's, its exit status the container's (128+N, a
signal, is reported as -N). The container is named ``tfc-RUN_ID-TYPE-INDEX`` (restart N of
the task: ``-rN`` added, once the previous container is gone) and labelled
``tfcluster.run=RUN_ID``; ``--init`` puts a small init as PID 1, so SIGTERM reaches the
task (a process that is PID 1 ignores it) and a ps stops as it does anywhere else. Signals
go through ``docker kill --signal``. The task's environment travels as ``-e NAME`` (the
value comes from the client's environment), so no value, secret or not, is on a command
line and ``--dry-run`` prints the exact ``docker run`` lines.

Networking: ``"network": "host"`` (the default) puts every container on this machine's
network, tasks reach each other at localhost on the ports the launcher picks. Any other
name is a user-defined network (made for the run when it does not exist, removed after):
every task is reachable by its host name in the spec (a network alias), on port 2222
unless the spec gives one, so each task needs a host of its own there.

model_dir: a path in the containers under one of ``volumes`` (a bind mount, or a named
volume: the launcher reads it through the folder or the volume's mount point here), or an
fsspec URL (``s3://``). The shared-storage check runs its probes as containers with the
tasks' mounts, so a model_dir private to each container is refused before anything starts.

Nothing is left: a watchdog process (launcher/backends/docker_reaper.py) holds a pipe from
the launcher; when it closes (the normal end, Ctrl-C, or the launcher killed by SIGKILL) it
removes every container labelled with the run, and the network the run made.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass

from launcher.backends.agent.probes import entry_script
from launcher.backends.agent.words import refusal_in_words
from launcher.backends.base import Backend, ExecWatch, PlacesGpus, ProbeResult, TaskHandle
from launcher.backends.docker_gpus import docker_args, docker_runtime_problem
from launcher.backends.docker_reaper import CALL_TIMEOUT, LABEL, Reaper
from launcher.backends.environment import check_programs_by_probe
from launcher.backends.processes import dies_with_parent, free_port, port_taken, task_environ
from launcher.checks import Address
from launcher.errors import PreflightError, SpecError
from launcher.model_dir import ModelDir
from launcher.plan import IMAGE_SITE, JobPlan, NoticeRoute, TaskPlan
from launcher.spec.declared import STRING, STRINGS, key, word, words

DEFAULT_IMAGE = "tfcluster:tf2.15"
HOST_NETWORK = "host"
TASK_PORT = 2222              # on a user-defined network every container has its own ports
TASK_LABEL = "tfcluster.task"
# what the container's init (docker-init, tini) says when the task's exec failed
INIT_FAILED = re.compile(r"\[FATAL tini \(\d+\)\] exec (?P<program>.+?) failed: (?P<reason>[^:]+)$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Mount:
    """One entry of ``volumes``: ``SOURCE:TARGET[:ro]``. An absolute SOURCE is a bind mount
    of that path here; any other SOURCE is a named volume."""

    source: str
    target: str
    read_only: bool = False

    @property
    def bind(self) -> bool:
        return self.source.startswith("/")

    def argv(self) -> list[str]:
        kind = "bind" if self.bind else "volume"
        spec = f"type={kind},src={self.source},dst={self.target}"
        return ["--mount", spec + (",readonly" if self.read_only else "")]


def parse_mount(text: str, where: str) -> Mount:
    """``SOURCE:TARGET[:ro|rw]``: SOURCE an absolute path here or a volume name."""
    parts = text.split(":")
    mode = parts.pop() if len(parts) == 3 else "rw"
    if len(parts) != 2 or mode not in ("ro", "rw"):
        raise SpecError(where, f"{text!r} must be SOURCE:TARGET or SOURCE:TARGET:ro")
    source, target = parts
    if "," in text:
        raise SpecError(where, f"{text!r} must not contain ','")
    if not target.startswith("/"):
        raise SpecError(where, f"target {target!r} must be an absolute path in the container")
    if not source.startswith("/") and not _NAME.match(source):
        raise SpecError(where, f"source {source!r} must be an absolute path (a bind mount) or "
                               "a volume name (letters, digits, '_', '.', '-')")
    return Mount(source, target, mode == "ro")


def _mounts(values: list[str], where: str) -> tuple[Mount, ...]:
    mounts = tuple(parse_mount(v, f"{where}[{i}]") for i, v in enumerate(values))
    targets = [m.target.rstrip("/") for m in mounts]
    for i, target in enumerate(targets):
        if target in targets[:i]:
            raise SpecError(f"{where}[{i}]", f"target {target!r} is mounted twice")
    return mounts


def _network(value: str, where: str) -> str:
    if not _NAME.match(value):
        raise SpecError(where, f"{value!r} is not a network name")
    return value


@dataclass(frozen=True)
class DockerOptions:
    """The spec's ``docker`` section."""

    image: str = key(STRING, "every task's image (docker/Dockerfile)", DEFAULT_IMAGE,
                     parse=word)
    volumes: tuple[Mount, ...] = key(
        STRINGS, "SOURCE:TARGET[:ro] mounted into every task: an absolute SOURCE is a folder "
        "here (a bind mount), any other a named volume", (), parse=words, check=_mounts)
    network: str = key(STRING, "'host', or a user-defined network (made for the run when "
                       "missing): tasks reach each other by their host names", HOST_NETWORK,
                       parse=word, check=_network)
    docker: str = key(STRING, "the docker CLI", "docker", parse=word)


def exit_status(code: int) -> int:
    """The container's exit status as the job loop reads it: 128+N (killed by signal N,
    as --init reports it) becomes -N."""
    return -(code - 128) if 128 < code < 128 + signal.NSIG else code


class DockerHandle(TaskHandle):
    """One task: the foreground ``docker run`` client and the container it runs."""

    def __init__(self, task: TaskPlan, proc: subprocess.Popen, container: str,
                 backend: DockerBackend):
        self.task = task
        self.proc = proc
        self.container = container
        self.backend = backend
        self.output = None if proc.stdout is None else \
            ExecWatch(proc.stdout, self, INIT_FAILED, self._refusal)

    def _refusal(self, program: str, reason: str) -> str:
        """The line for a command the container's init could not exec (in the image)."""
        return refusal_in_words(self.task.name, self.task.command, reason,
                                host=f"image {self.backend.options.image}", look=False)

    def poll(self) -> int | None:
        code = self.proc.poll()
        return None if code is None else exit_status(code)

    def signal(self, sig: int) -> None:
        if self.proc.poll() is not None:
            return
        done = self.backend.call("kill", f"--signal={int(sig)}", self.container)
        if done.returncode != 0 and self.proc.poll() is None:
            # no container yet (still being created) or gone already: end the client; what
            # it may still have created is removed by name or label before a restart or end
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass

    @property
    def pid(self) -> int | None:
        return self.proc.pid


class DockerBackend(PlacesGpus, Backend):
    """Runs each task as a container on the local Docker engine."""

    name = "docker"
    OPTIONS = DockerOptions
    notice = NoticeRoute("URG", IMAGE_SITE)    # the image's tfcluster (docker/Dockerfile)
    start_threads = 4           # `docker run` clients start off the job loop's thread
    options: DockerOptions

    def __init__(self, options: DockerOptions | None = None, *, remap: bool = False,
                 inside_job: bool = False):
        super().__init__(options or DockerOptions(), remap=remap, inside_job=inside_job)
        self._ports: set[int] = set()
        self._host_ports: dict[str, set[int]] = {}
        self._run_id: str | None = None
        self._reaper: Reaper | None = None
        self._attempts: dict[str, int] = {}     # task name -> its latest start
        self._lock = threading.Lock()

    @property
    def host_network(self) -> bool:
        return self.options.network == HOST_NETWORK

    @property
    def reachable(self) -> bool:  # type: ignore[override]
        """The tasks' TF servers answer the launcher's gRPC probe (launcher/monitors/liveness.py) on
        the host network; on a user-defined network their addresses are aliases inside it."""
        return self.host_network

    # ------------------------------------------------------------------ docker command lines
    def call(self, *args: str, timeout: float = CALL_TIMEOUT) -> subprocess.CompletedProcess:
        """One docker CLI call; never raises for a failed or missing command."""
        try:
            return subprocess.run([self.options.docker, *args], stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            return subprocess.CompletedProcess(args, 125, "", str(e))

    def container_name(self, task: TaskPlan, kind: str = "", attempt: int = 0) -> str:
        """``tfc-RUN_ID-TYPE-INDEX``; restart N of the task adds ``-rN``."""
        again = f"-r{attempt}" if attempt else ""
        return f"tfc-{self._run_id_of(task)}-{kind}{task.type}-{task.index}{again}"

    def _run_id_of(self, task: TaskPlan) -> str:
        return task.env.get("TFCLUSTER_RUN_ID") or self._run_id or "run"

    def run_argv(self, task: TaskPlan, argv: list[str] | None = None, kind: str = "",
                 attempt: int = 0) -> list[str]:
        """The exact ``docker run`` line of a task (or of a probe where it would run)."""
        run_id = self._run_id_of(task)
        out = [self.options.docker, "run", "--rm", "--init", "--name",
               self.container_name(task, kind, attempt), "--label", f"{LABEL}={run_id}",
               "--label", f"{TASK_LABEL}={task.name}", "--network", self.options.network]
        if not self.host_network:
            out += ["--hostname", task.host, "--network-alias", task.host]
        for mount in self.options.volumes:
            out += mount.argv()
        if task.cwd:
            out += ["--workdir", task.cwd]
        out += self._resources(task)
        devices, inside = docker_args(task)    # --gpus, their env (docker_gpus.py)
        out += devices
        out += [a for key in task.env if key not in inside for a in ("--env", key)]
        out += [a for key, value in inside.items() for a in ("--env", f"{key}={value}")]
        return out + [self.options.image, *(argv if argv is not None else task.command)]

    @staticmethod
    def _resources(task: TaskPlan) -> list[str]:
        cpus, memory = task.resources.cpus, task.resources.memory   # '4G', '2Gi' -> '4g', '2g'
        return ((["--cpus", str(cpus)] if cpus else [])
                + (["--memory", memory.rstrip("i").lower()] if memory else []))

    # ------------------------------------------------------------------ the interface
    def place(self, role: str, index: int, address: Address) -> Address:
        return dataclasses.replace(address, host="localhost") if self.host_network else address

    def allocate_port(self, host: str) -> int:
        if self.host_network:
            return free_port(self._ports)
        taken = self._host_ports.setdefault(host, set())
        port = TASK_PORT
        while port in taken:
            port += 1
        taken.add(port)
        return port

    def preflight(self, plan: JobPlan) -> None:
        """The engine answers, the image is there, bind mounts exist, and the tasks can
        reach each other on the network the spec names. Nothing is started."""
        self._run_id = plan.run_id
        version = self.call("version", "--format", "{{.Server.Version}}")
        if version.returncode != 0:
            where = os.environ.get("DOCKER_HOST", "the default socket")
            raise PreflightError(f"docker: cannot reach the Docker engine at {where}: "
                                 f"{_last_line(version.stderr)}")
        if any(t.gpus for t in plan.tasks):
            runtimes = self.call("info", "--format", "{{json .Runtimes}}").stdout
            problem = docker_runtime_problem(runtimes, plan.tasks)
            if problem:
                raise PreflightError(problem)
        if self.call("image", "inspect", self.options.image).returncode != 0:
            raise PreflightError(
                f"docker.image: {self.options.image!r} is not on the engine (build it: docker "
                f"build -f docker/Dockerfile -t {self.options.image} .; docs/docker.md)")
        for i, mount in enumerate(self.options.volumes):
            if mount.bind and not os.path.isdir(mount.source):
                raise PreflightError(f"docker.volumes[{i}]: {mount.source} is not a folder on "
                                     "this machine (create it first)")
        view = self.launcher_view(plan.model_dir)
        if view is not None and view != plan.model_dir:
            plan.storage = ModelDir(view, plan.storage.options, plan.storage.keras)
        self._check_network(plan)
        # a Python task's script and TensorFlow, in the image (one container: one image,
        # the same mounts for every task); a missing program is the start's own line
        if any(entry_script(t.command) for t in plan.tasks):
            check_programs_by_probe(plan, self, group=lambda task: self.options.image,
                                    place="image")

    def _check_network(self, plan: JobPlan) -> None:
        """Ports free on the host network; else a host name of its own for each task."""
        if self.host_network:
            for task in plan.tasks:
                if not task.auto_port and port_taken(task.port):
                    raise PreflightError(f"{task.name}: port {task.port} is already in use on "
                                         "this machine (host networking)")
            return
        seen: dict[str, str] = {}
        for task in plan.tasks:
            if task.host in ("localhost", "127.0.0.1", "::1"):
                raise PreflightError(f"{task.name}: host {task.host!r} on network "
                                     f"{self.options.network!r}: each container has a "
                                     "localhost of its own; give every task a host name")
            if task.host in seen:
                raise PreflightError(f"{task.name}: shares host {task.host!r} with "
                                     f"{seen[task.host]}; on a user-defined network every "
                                     "task is a container with a host name of its own")
            seen[task.host] = task.name

    def launcher_view(self, model_dir: str) -> str | None:
        """Where model_dir, a path in the containers, is on this machine, through the mount
        that holds it: the folder of a bind mount, or a named volume's mount point on this
        engine (made first, as ``docker run`` would; readable where the engine keeps its
        volumes on this machine's disk). None when no mount holds it, or its mount point is
        not readable here: then the storage check says the launcher does not see it."""
        if "://" in model_dir or not model_dir.startswith("/"):
            return None
        path = os.path.normpath(model_dir)
        holding = [m for m in self.options.volumes
                   if path == m.target.rstrip("/") or path.startswith(m.target.rstrip("/") + "/")]
        if not holding:
            return None
        mount = max(holding, key=lambda m: len(m.target))
        rest = os.path.relpath(path, mount.target)
        if mount.bind:
            return os.path.normpath(os.path.join(mount.source, rest))
        if self.call("volume", "inspect", mount.source).returncode != 0:
            self.call("volume", "create", mount.source)
        found = self.call("volume", "inspect", "--format", "{{.Mountpoint}}", mount.source)
        where = found.stdout.strip()
        if found.returncode != 0 or not os.path.isdir(where):
            return None
        return os.path.normpath(os.path.join(where, rest))

    def storage_view(self, task: TaskPlan) -> Hashable:
        """Every container of the job runs on one engine from one image with the same
        mounts: its own host name changes nothing it sees."""
        return self.options.docker, tuple(a for m in self.options.volumes for a in m.argv())

    def probe(self, task: TaskPlan, argv: list[str], timeout: float) -> ProbeResult:
        """A short container with the task's image, mounts, network and environment."""
        self._prepare_engine()
        name = self.container_name(task, "probe-")
        command = self.run_argv(task, argv, kind="probe-")
        try:
            env = task_environ(task)
            done = subprocess.run(dies_with_parent(command, env), env=env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=timeout,
                                  start_new_session=True)
        except subprocess.TimeoutExpired:
            self.call("rm", "-f", name)
            return ProbeResult(124, f"timed out after {timeout:.0f}s")
        except OSError as e:
            return ProbeResult(127, str(e))
        return ProbeResult(done.returncode, done.stdout.decode(errors="replace"))

    def start(self, task: TaskPlan) -> DockerHandle:
        """A restart gets a container of its own name (``-rN``), once the previous attempt's
        container is gone: a killed container is still being removed (``--rm``) for a
        moment, holding its name, its network alias and, on the host network, its port."""
        self._prepare_engine()
        with self._lock:
            attempt = self._attempts.get(task.name, -1) + 1
            self._attempts[task.name] = attempt
        if attempt:
            self.remove(self.container_name(task, attempt=attempt - 1))
        name = self.container_name(task, attempt=attempt)
        env = task_environ(task)
        proc = subprocess.Popen(
            dies_with_parent(self.run_argv(task, attempt=attempt), env), env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True)
        return DockerHandle(task, proc, name, self)

    def remove(self, name: str, timeout: float = CALL_TIMEOUT) -> None:
        """Remove container ``name`` and wait until the engine no longer knows it."""
        self.call("rm", "-f", name)
        deadline = time.monotonic() + timeout
        while self.call("container", "inspect", "--format", "{{.Id}}", name).returncode == 0 \
                and time.monotonic() < deadline:
            time.sleep(0.1)
            self.call("rm", "-f", name)

    def describe(self, plan: JobPlan) -> str | None:
        self._run_id = plan.run_id
        lines = ["# docker: each task runs as (every --env NAME takes its value from the "
                 "environment of docker run, as listed above):"]
        if not self.host_network:
            lines.append(f"#   {self.options.docker} network create --label "
                         f"{LABEL}={plan.run_id} {self.options.network}   "
                         "(when it does not exist)")
        lines += [shlex.join(self.run_argv(t)) for t in plan.tasks]
        return "\n".join(lines)

    def close(self) -> None:
        """Remove whatever of the run is left (containers, the network it made)."""
        reaper, self._reaper = self._reaper, None
        if reaper is not None:
            reaper.close()

    # ------------------------------------------------------------------ the run's resources
    def _prepare_engine(self) -> None:
        """Before the first container: the reaper, then the network (once)."""
        with self._lock:
            if self._reaper is not None:
                return
            run_id = self._run_id or "run"
            self._reaper = Reaper(self.options.docker, run_id)
            if self.host_network:
                return
            if self.call("network", "inspect", self.options.network).returncode != 0:
                made = self.call("network", "create", "--label", f"{LABEL}={run_id}",
                                 self.options.network)
                if made.returncode != 0:
                    raise PreflightError(f"docker.network: cannot create "
                                         f"{self.options.network!r}: "
                                         f"{_last_line(made.stderr)}")


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "no message"


BACKEND = DockerBackend
