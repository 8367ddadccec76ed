"""A real Docker engine for tests and benchmarks: a private ``dockerd`` (its own socket, data
root and exec root, no iptables, no default bridge), stopped by pid with every container it
ran, and the images tfcluster's tests run, built locally.

    with docker_engine(workdir) as engine:
        engine.docker("ps", "-a")              # the CLI against this engine only
        base = engine.base_image()             # debootstrap + docker import, cached
        engine.build("tfcluster:tf2.15", base=base)

No registry is needed: the base image is a Debian ``debootstrap`` (minbase, python3,
python3-venv, ca-certificates) imported with ``docker import``; its tarball is cached in
``$TFCLUSTER_CACHE`` (default ``~/.cache/tfcluster``) between runs on the same machine. pip
inside a build reaches the package index through this machine's CA bundle (pip's ``cert``
setting), given to the build as the secret ``ca_bundle`` (docker/Dockerfile).

Needs root, dockerd (Debian's docker.io) and debootstrap. The overlay2 storage driver is
used where the kernel and the data root allow it, vfs otherwise (every container then
copies its whole image: slow).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
DOCKERD = "/usr/sbin/dockerd"
SUITE = "bookworm"
BASE_IMAGE = f"tfcluster-base:{SUITE}"
BASE_PACKAGES = "python3,python3-venv,ca-certificates"
DRIVERS = ("overlay2", "vfs")
PREFIX = "tfcd"             # engine folders: /tmp/tfcd-<creator pid>-<token>


def docker_cli() -> str | None:
    """The client that speaks BuildKit to this engine: Debian's docker.io client (20.10 has
    BuildKit built in; a newer client needs the buildx plugin for it), else any on PATH."""
    for path in ("/usr/bin/docker", shutil.which("docker")):
        if path and os.path.exists(path):
            return path
    return None


def missing_prerequisites() -> str | None:
    """Why an engine cannot be started here, or None."""
    if os.geteuid() != 0:
        return "dockerd needs root"
    if not os.path.exists(DOCKERD) or docker_cli() is None:
        return "needs Debian's docker.io (scripts/setup.sh)"
    return None


def cache_dir() -> Path:
    path = Path(os.environ.get("TFCLUSTER_CACHE") or Path.home() / ".cache" / "tfcluster")
    path.mkdir(parents=True, exist_ok=True)
    return path


def pip_ca_bundle() -> str | None:
    """The CA bundle pip is told to trust here (PIP_CERT, else pip's ``cert`` setting)."""
    path = os.environ.get("PIP_CERT")
    if not path:
        done = subprocess.run(["python3", "-m", "pip", "config", "get", "global.cert"],
                              capture_output=True, text=True)
        path = done.stdout.strip() if done.returncode == 0 else ""
    return path if path and os.path.isfile(path) else None


@dataclass
class DockerEngine:
    """One running dockerd, private to the test session."""

    root: Path
    socket: str
    pid: int
    driver: str
    cli: str
    log: Path
    children: list[int] = field(default_factory=list)   # containerd and its shims

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def env(self) -> dict[str, str]:
        """The environment that points a docker client (and ``launch``) at this engine."""
        return {"DOCKER_HOST": self.host, "DOCKER_BUILDKIT": "1"}

    def docker(self, *args: str, check: bool = True, timeout: float = 120,
               input: bytes | None = None) -> subprocess.CompletedProcess:
        env = dict(os.environ, **self.env())
        done = subprocess.run([self.cli, *args], env=env, input=input, capture_output=True,
                              timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)} failed ({done.returncode}): "
                               f"{done.stderr.decode(errors='replace').strip()}")
        return done

    def lines(self, *args: str) -> list[str]:
        return self.docker(*args).stdout.decode().split()

    def containers(self, label: str | None = None) -> list[str]:
        """Names of every container (running or not), or of those with ``label``."""
        args = ["ps", "-a", "--format", "{{.Names}}"]
        if label:
            args += ["--filter", f"label={label}"]
        return self.lines(*args)

    def networks(self, label: str) -> list[str]:
        return self.lines("network", "ls", "--format", "{{.Name}}", "--filter",
                          f"label={label}")

    def has_image(self, name: str) -> bool:
        return self.docker("image", "inspect", name, check=False).returncode == 0

    def base_image(self, name: str = BASE_IMAGE) -> str:
        """A Debian base with python3 and venv, imported from a cached debootstrap tarball."""
        if not self.has_image(name):
            tarball = base_tarball()
            with open(tarball, "rb") as f:
                self.docker("import", "-", name, input=f.read(), timeout=600)
        return name

    def build(self, tag: str, base: str | None = None, target: str = "runtime",
              build_args: dict[str, str] | None = None, timeout: float = 1800) -> float:
        """``docker build`` of docker/Dockerfile from the repository root; its seconds."""
        args = ["build", "--network", "host", "--progress", "plain", "-f",
                str(REPO / "docker" / "Dockerfile"), "--target", target, "-t", tag]
        if base:
            args += ["--build-arg", f"BASE_IMAGE={base}"]
        for key, value in (build_args or {}).items():
            args += ["--build-arg", f"{key}={value}"]
        ca = pip_ca_bundle()
        if ca:
            args += ["--secret", f"id=ca_bundle,src={ca}"]
        started = time.monotonic()
        self.docker(*args, str(REPO), timeout=timeout)
        return time.monotonic() - started

    def remove_all(self) -> None:
        """Every container of this engine, and every network it did not make itself."""
        names = self.containers()
        if names:
            self.docker("rm", "-f", *names, check=False, timeout=120)
        nets = [n for n in self.lines("network", "ls", "--format", "{{.Name}}")
                if n not in ("host", "none", "bridge")]
        if nets:
            self.docker("network", "rm", *nets, check=False)

    def stop(self) -> None:
        """Containers removed, then dockerd (and the containerd it started) ended by pid; the
        mounts it left unmounted; its folders deleted."""
        with contextlib.suppress(Exception):
            self.remove_all()
        _end(self.pid, grace=20)
        for pid in self.children:
            _end(pid, grace=5)
        _unmount_under(self.root)
        shutil.rmtree(self.root, ignore_errors=True)


def _end(pid: int, grace: float) -> None:
    try:
        proc = psutil.Process(pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(grace)
    except psutil.NoSuchProcess:
        return
    except psutil.TimeoutExpired:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
            proc.wait(5)


def _unmount_under(root: Path) -> None:
    prefix = str(root.resolve()) + "/"
    with open("/proc/self/mounts", encoding="utf-8") as f:
        points = [line.split()[1] for line in f if line.split()[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def base_tarball() -> Path:
    """The debootstrap root of the base image as a tarball, made once per machine
    (scripts/setup.sh makes it ahead, alongside the virtual environments). A lock file
    beside it makes a second maker wait for the first."""
    tarball = cache_dir() / f"docker-base-{SUITE}.tar.gz"
    with open(cache_dir() / f"docker-base-{SUITE}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not tarball.exists():
            _debootstrap_into(tarball)
    return tarball


def _debootstrap_into(tarball: Path) -> None:
    work = cache_dir() / f"debootstrap-{secrets.token_hex(4)}"
    try:
        subprocess.run(["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}",
                        SUITE, str(work)], check=True, capture_output=True, timeout=900)
        partial = tarball.with_suffix(".partial")
        with open(partial, "wb") as out:
            tar = subprocess.Popen(["tar", "-C", str(work), "-c", "."], stdout=subprocess.PIPE)
            subprocess.run(["gzip", "-1"], stdin=tar.stdout, stdout=out, check=True)
            if tar.wait() != 0:
                raise RuntimeError("tar of the debootstrap root failed")
        partial.rename(tarball)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _start(root: Path, driver: str, cli: str, timeout: float = 60) -> DockerEngine:
    data, execroot = root / "data", root / "x"
    data.mkdir(parents=True, exist_ok=True)
    execroot.mkdir(exist_ok=True)
    sock, pidfile, log = root / "docker.sock", root / "docker.pid", root / f"dockerd-{driver}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [DOCKERD, f"--storage-driver={driver}", "--iptables=false", "--bridge=none",
             "--data-root", str(data), "--exec-root", str(execroot), "-H", f"unix://{sock}",
             "--pidfile", str(pidfile)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    engine = DockerEngine(root, str(sock), proc.pid, driver, cli, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dockerd --storage-driver={driver} exited "
                               f"({proc.returncode}): {log.read_text()[-500:]}")
        if sock.exists() and engine.docker("info", check=False, timeout=10).returncode == 0:
            engine.children = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
            return engine
        time.sleep(0.2)
    engine.stop()
    raise RuntimeError(f"dockerd did not answer within {timeout:.0f}s: {log.read_text()[-500:]}")


def sweep_stale(base: Path) -> None:
    """Engines left by a test session that was killed: ``tfcd-<creator pid>-<token>`` whose
    creator is gone. Their dockerd (and its containerd) is ended by pid, their folder
    removed."""
    for root in base.glob(f"{PREFIX}-*-*"):
        creator = root.name.split("-")[1]
        if not creator.isdigit() or psutil.pid_exists(int(creator)):
            continue
        try:
            pid = int((root / "docker.pid").read_text())
            children = [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except (OSError, ValueError, psutil.NoSuchProcess):
            pid, children = 0, []
        for one in ([pid] if pid else []) + children:
            _end(one, grace=20)
        _unmount_under(root)
        shutil.rmtree(root, ignore_errors=True)


def start_engine(workdir: str | os.PathLike | None = None) -> DockerEngine:
    """A private dockerd: overlay2 if it works here, else vfs. The exec root (and its
    sockets) lives in a short path under /tmp."""
    cli = docker_cli()
    if cli is None:
        raise RuntimeError("no docker client")
    base = Path(workdir or "/tmp")
    sweep_stale(base)
    root = base / f"{PREFIX}-{os.getpid()}-{secrets.token_hex(3)}"
    errors = []
    for driver in DRIVERS:
        try:
            return _start(root, driver, cli)
        except RuntimeError as e:
            errors.append(str(e))
            _unmount_under(root)
            shutil.rmtree(root / "data", ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    raise RuntimeError("dockerd could not start: " + " | ".join(errors))


@contextlib.contextmanager
def docker_engine(workdir: str | os.PathLike | None = None) -> Iterator[DockerEngine]:
    engine = start_engine(workdir)
    try:
        yield engine
    finally:
        engine.stop()


if __name__ == "__main__":      # scripts/setup.sh: the base image's tarball, made ahead
    import sys

    if sys.argv[1:] != ["base-tarball"]:
        sys.exit("usage: docker_engine.py base-tarball")
    print(base_tarball())
