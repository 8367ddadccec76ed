"""ssh.sync and the environment check over 4 and 16 hosts: the ssh preflight's time (connect,
check, and the workdir's copy) for a 50 MB workdir, first launch (every host lacks it) and
second (nothing changed: nothing sent), beside the same preflight without sync; and the
environment check for 16 hosts (a script that imports TensorFlow: the task's interpreter
asked for its TensorFlow on every host) beside a script that does not.

Each host is a network namespace with its own sshd on this machine (tests/infra/
netns_hosts.py) and its own tmpfs over the copy area, so every host keeps its own copies;
clients, sshd, tar and the hosts' Python share this machine's cores.

    sudo .venv/bin/python bench/workdir_sync.py [--hosts 4 16] [--repeat 3] [--megabytes 50]

Needs root (network namespaces), openssh-server and iproute2.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))          # this checkout's launcher (tests/launcher is no package)

from infra.netns_hosts import missing_prerequisites, start_hosts  # noqa: E402

from launcher.api import validate  # noqa: E402
from launcher.backends.ssh import SSHBackend  # noqa: E402
from launcher.plan import build_plan  # noqa: E402

PYTHON = str(REPO / ".venv" / "bin" / "python")


def make_workdir(root: Path, megabytes: int) -> None:
    """``megabytes`` of incompressible files (200 of them) and a script that imports TF."""
    (root / "data").mkdir(parents=True)
    size = megabytes * 2**20 // 200
    for i in range(200):
        (root / "data" / f"part-{i:03d}.bin").write_bytes(os.urandom(size))
    (root / "train.py").write_text("import tensorflow as tf\n")
    (root / "plain.py").write_text("print('no tensorflow here')\n")


def preflight(bed, n: int, workdir: Path, script: str, sync_dir: str | None) -> float:
    """Seconds of the ssh backend's preflight for one task on each of ``n`` hosts."""
    ssh = bed.ssh_section(**({"sync": True, "sync_dir": sync_dir} if sync_dir else {}))
    raw = {"name": "sync-bench", "backend": "ssh", "model_dir": str(bed.workdir / "model"),
           "cluster": {"worker": [h.address for h in bed.hosts[:n]]},
           "command": [PYTHON, script], "workdir": str(workdir), "ssh": ssh}
    backend = SSHBackend(SSHBackend.validate_options(raw["ssh"], "ssh"))
    plan = build_plan(validate(raw), port_for=backend.allocate_port)
    try:
        t0 = time.perf_counter()
        backend.preflight(plan)
        return time.perf_counter() - t0
    finally:
        backend.close()


def clear(bed, n: int, sync_dir: str) -> None:
    """Remove a run's copies from the hosts (their tmpfs is memory)."""
    section = bed.ssh_section()
    for host in bed.hosts[:n]:
        subprocess.run(["ssh", "-F", "/dev/null", "-i", section["identity_file"],
                        "-o", f"UserKnownHostsFile={section['known_hosts_file']}",
                        "-o", "BatchMode=yes", "-l", "root", host.address,
                        shlex.join(["rm", "-rf", sync_dir])], check=True, capture_output=True)


def bare_ssh(bed, n: int, command: list[str]) -> float:
    """Seconds for ``command`` over a new ssh connection to each of ``n`` hosts at once: what
    the check costs at least (a connection, sshd's session, the remote program)."""
    section = bed.ssh_section()
    t0 = time.perf_counter()
    procs = [subprocess.Popen(["ssh", "-F", "/dev/null", "-i", section["identity_file"],
                               "-o", f"UserKnownHostsFile={section['known_hosts_file']}",
                               "-o", "BatchMode=yes", "-l", "root", host.address,
                               shlex.join(command)], stdout=subprocess.DEVNULL)
             for host in bed.hosts[:n]]
    if any(p.wait() != 0 for p in procs):
        raise RuntimeError(f"ssh {command} failed on a host")
    return time.perf_counter() - t0


def median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--megabytes", type=int, default=50)
    parser.add_argument("--checks-only", action="store_true",
                        help="only the environment check rows (no copy)")
    args = parser.parse_args()
    why = missing_prerequisites()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="tfc-sync-bench-"))
    area = base / "area"
    area.mkdir()
    workdir = base / "workdir"
    make_workdir(workdir, args.megabytes)
    most = max(args.hosts)
    bed = start_hosts(base / "bed", count=most, private={i: str(area) for i in
                                                          range(1, most + 1)})
    rows: dict[str, list[float]] = {}
    try:
        for k in range(args.repeat):
            for n in [] if args.checks_only else args.hosts:
                sync_dir = str(area / f"run-{n}-{k}")
                rows.setdefault(f"{n} hosts, no sync", []).append(
                    preflight(bed, n, workdir, "plain.py", None))
                rows.setdefault(f"{n} hosts, sync, first launch", []).append(
                    preflight(bed, n, workdir, "plain.py", sync_dir))
                rows.setdefault(f"{n} hosts, sync, second launch", []).append(
                    preflight(bed, n, workdir, "plain.py", sync_dir))
                clear(bed, n, sync_dir)
            rows.setdefault(f"{most} hosts, environment check, script without TF", []).append(
                preflight(bed, most, workdir, "plain.py", None))
            rows.setdefault(f"{most} hosts, environment check, script imports TF", []).append(
                preflight(bed, most, workdir, "train.py", None))
            rows.setdefault(f"{most} hosts, bare `ssh HOST true` at once (the floor)", []
                            ).append(bare_ssh(bed, most, ["true"]))
            rows.setdefault(f"{most} hosts, bare `ssh HOST {Path(PYTHON).name} -c pass` at "
                            "once", []).append(bare_ssh(bed, most, [PYTHON, "-c", "pass"]))
    finally:
        bed.stop()
        subprocess.run(["rm", "-rf", str(base)], check=False)
    print(f"workdir {args.megabytes} MB in 200 files + 2 scripts; ssh preflight seconds, "
          f"median (best) of {args.repeat}; load average {os.getloadavg()[0]:.1f}")
    print("| run | seconds |\n|---|---|")
    for name, values in rows.items():
        print(f"| {name} | {median(values)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
