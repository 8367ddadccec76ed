"""A real Slurm cluster on this machine, for tests: munged, slurmctld and several slurmd.

Every daemon runs as root without systemd, from a config in a temporary directory; the
nodes are slurmd processes on 127.0.0.1 with distinct ports (FIELD_NOTES). The cluster has
its own munged and socket, so it never touches a system munge. ``stop()`` kills every
daemon it started by pid and removes the cgroup folders slurmd leaves behind.

Run it by hand: ``python tests/infra/slurm_cluster.py`` starts a cluster, prints the
SLURM_CONF to export, and stops it on Enter.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "mungekey")
CPUS_PER_NODE = 4          # more than the machine has: config_overrides lets slurmd accept it
MEMORY_PER_NODE_MB = 4000


def missing_programs() -> list[str]:
    return [p for p in ("munged", "mungekey", "slurmctld", "slurmd", "srun", "salloc",
                        "squeue", "scancel", "sinfo") if shutil.which(p) is None]


def _free_port_range(count: int, attempts: int = 200) -> int:
    """The first of ``count`` consecutive ports that are free now."""
    for _ in range(attempts):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count > 65000:
            continue
        ok = True
        for port in range(base, base + count):
            with socket.socket() as s:
                try:
                    s.bind(("", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError(f"no {count} consecutive free ports")


def _wait(predicate, timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@dataclass
class SlurmCluster:
    """munged + slurmctld + ``nodes`` slurmd on 127.0.0.1; ``env`` points clients at it."""

    nodes: int = 2
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tfc-slurm-")))
    pids: list[int] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    @property
    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.nodes + 1)]

    def client_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.env)
        return env

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> str:
        """Run a Slurm client command against this cluster; its stdout."""
        done = subprocess.run(argv, env=self.client_env(), capture_output=True, text=True,
                              timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
        return done.stdout

    # ------------------------------------------------------------------ start
    def start(self) -> SlurmCluster:
        try:
            self._start_munge()
            self._write_config()
            self._start_slurm()
        except BaseException:
            self.stop()
            raise
        return self

    def _daemon(self, argv: list[str], pidfile: Path, user: str | None = None) -> int:
        """Start a daemon that forks itself; return the pid it writes to ``pidfile``."""
        if user:
            argv = ["runuser", "-u", user, "--", *argv]
        subprocess.run(argv, env=self.client_env(), check=True, capture_output=True,
                       timeout=30, stdin=subprocess.DEVNULL)
        _wait(lambda: pidfile.exists() and pidfile.read_text().strip().isdigit(), 15,
              f"{pidfile.name}")
        pid = int(pidfile.read_text().strip())
        self.pids.append(pid)
        return pid

    def _start_munge(self) -> None:
        m = self.root / "munge"
        m.mkdir(parents=True)
        key = m / "munge.key"
        subprocess.run(["mungekey", "-c", "-k", str(key)], check=True, capture_output=True)
        shutil.chown(m, "munge", "munge")
        shutil.chown(key, "munge", "munge")
        key.chmod(0o400)
        self.root.chmod(0o755)
        self._daemon(["/usr/sbin/munged", f"--socket={m / 'munge.sock'}",
                      f"--key-file={key}", f"--pid-file={m / 'munged.pid'}",
                      f"--log-file={m / 'munged.log'}", f"--seed-file={m / 'munged.seed'}"],
                     m / "munged.pid", user="munge")

    def _write_config(self) -> None:
        r = self.root
        for sub in ("state", "log", "spool"):
            (r / sub).mkdir(exist_ok=True)
        ctld_port = _free_port_range(1)
        node_port = _free_port_range(self.nodes)
        host = socket.gethostname().split(".")[0]
        sock = r / "munge" / "munge.sock"
        last = self.nodes
        ports = f"[{node_port}-{node_port + last - 1}]" if last > 1 else str(node_port)
        self.conf.write_text(f"""\
ClusterName=tfctest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
SlurmctldPort={ctld_port}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={r}/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=n[1-{last}] NodeHostname={host} NodeAddr=127.0.0.1 Port={ports} CPUs={CPUS_PER_NODE} \
Sockets=1 CoresPerSocket={CPUS_PER_NODE} ThreadsPerCore=1 RealMemory={MEMORY_PER_NODE_MB} \
State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

    def _start_slurm(self) -> None:
        r = self.root
        self._daemon(["slurmctld", "-i"], r / "slurmctld.pid")
        for name in self.node_names:
            (r / "spool" / name).mkdir(exist_ok=True)
            self._daemon(["slurmd", "-N", name], r / f"slurmd-{name}.pid")
        want = f"{self.nodes} idle"
        _wait(lambda: want in self.run("sinfo", "-h", "-o", "%D %T", check=False), 60,
              f"{self.nodes} idle Slurm nodes")

    # ------------------------------------------------------------------ stop
    def jobs(self) -> list[str]:
        """Ids of jobs squeue still shows."""
        return self.run("squeue", "-h", "-o", "%i", check=False).split()

    def stop(self) -> None:
        """Cancel jobs, kill every daemon by pid, remove cgroup folders and the temp dir."""
        if self.conf.exists() and self.pids:
            try:
                self.run("scancel", "--full", "--user=root", check=False, timeout=10)
            except (subprocess.TimeoutExpired, OSError):
                pass
        # slurmd first (and its slurmstepd), then slurmctld, then munged
        for pid in reversed(self.pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in self.pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in self.pids:
            if _alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.pids.clear()
        self._kill_stepds()
        for cg in Path("/sys/fs/cgroup").glob("*/slurm_*"):   # only empty ones go
            for d in sorted((p for p in cg.rglob("*") if p.is_dir()), reverse=True):
                try:
                    d.rmdir()
                except OSError:
                    pass
            try:
                cg.rmdir()
            except OSError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)

    def _kill_stepds(self) -> None:
        """slurmstepd processes of this cluster (their command line names our config dir)."""
        marker = str(self.root)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                environ = (entry / "environ").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if cmd.startswith("slurmstepd") and marker in environ:
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass


if __name__ == "__main__":
    cluster = SlurmCluster(nodes=2).start()
    print(f"export SLURM_CONF={cluster.conf}")
    try:
        input("cluster up; Enter stops it\n")
    finally:
        cluster.stop()
