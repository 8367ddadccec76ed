"""Time until every task runs, over ssh, for 1, 4 and 16 hosts.

Each host is a network namespace with its own sshd on this machine (tests/infra/netns_hosts.py),
one task per host. A run is what ``launch`` does before training: preflight (connect to every
host in parallel, check its Python and working directory), with --storage-check the
shared-storage check (a probe per task, through the host's preflight connection), and the
start of every task; it ends when every task printed its first line. Clients, sshd and
tasks all share this machine's cores, unlike real hosts, where the remote half of the work
runs on each host's own CPUs: "launcher CPU s" is the part that stays on the launcher's.

    sudo .venv/bin/python bench/ssh_fanout.py [--hosts 1 4 16] [--repeat 5] [--plain-shell]
        [--storage-check] [--no-multiplex] [--ssh-option KexAlgorithms=curve25519-sha256]

Needs root (network namespaces), openssh-server and iproute2.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from infra.netns_hosts import missing_prerequisites, netns_hosts  # noqa: E402

from launcher.api import validate  # noqa: E402
from launcher.backends.ssh import SSHBackend  # noqa: E402
from launcher.backends.storage_check import check_shared_storage  # noqa: E402
from launcher.plan import build_plan  # noqa: E402

TASK = "import time; print('ready', flush=True); time.sleep(120)"


def local_cpu() -> float:
    """CPU seconds of this process and its reaped children (the ssh clients)."""
    own, children = (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                      resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def one_run(bed, n: int, multiplex: bool, options: dict[str, str] | None = None,
            storage_check: bool = False, per_host: int = 1) -> tuple[float, float, float]:
    """(preflight s, s until every task printed 'ready', launcher-side CPU s)."""
    addresses = [h.address for h in bed.hosts[:n] for _ in range(per_host)]
    raw = {"name": "fanout", "backend": "ssh", "model_dir": str(bed.workdir / "model"),
           "cluster": {"worker": addresses}, "command": [sys.executable, "-c", TASK],
           "workdir": str(REPO),
           "ssh": bed.ssh_section(multiplex=multiplex, options=options or {})}
    spec = validate(raw)
    backend = SSHBackend(SSHBackend.validate_options(raw["ssh"], "ssh"))
    plan = build_plan(spec, port_for=backend.allocate_port)
    handles = []
    cpu0 = local_cpu()
    try:
        t0 = time.perf_counter()
        backend.preflight(plan)
        t1 = time.perf_counter()
        if storage_check:
            check_shared_storage(plan, backend)
        handles = [backend.start(task) for task in plan.tasks]
        for handle in handles:
            line = handle.output.readline()
            if not line.startswith(b"ready"):
                raise RuntimeError(f"{handle.task.name}: {line!r}")
        t2 = time.perf_counter()
    finally:
        for handle in handles:
            handle.terminate()
        for handle in handles:
            while handle.poll() is None:
                time.sleep(0.01)
            handle.output.close()
        backend.close()
    cpu = local_cpu() - cpu0   # includes stopping the tasks: a little more than the start
    if bed.leftovers(timeout=10):
        raise RuntimeError(f"processes left on hosts: {bed.leftovers(0)}")
    return t1 - t0, t2 - t0, cpu


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--no-multiplex", action="store_true",
                   help="no master connections (ssh.multiplex false)")
    p.add_argument("--ssh-option", action="append", default=[], metavar="NAME=VALUE",
                   help="an OpenSSH option for every connection (ssh.options), e.g. "
                        "KexAlgorithms=curve25519-sha256")
    p.add_argument("--tasks-per-host", type=int, default=1,
                   help="tasks on each host (all of them run in the host's one session, "
                        "the one its preflight check opened)")
    p.add_argument("--storage-check", action="store_true",
                   help="run the shared-storage check between preflight and start, as "
                        "launch does (check_storage: true)")
    p.add_argument("--plain-shell", action="store_true",
                   help="hosts with an empty root ~/.bashrc (this machine's runs pyenv init: "
                        "~0.15 s of CPU per remote command)")
    args = p.parse_args()
    why = missing_prerequisites()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    multiplex = not args.no_multiplex
    options = dict(o.split("=", 1) for o in args.ssh_option)
    rows = []
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp, \
            netns_hosts(tmp, count=max(args.hosts), plain_shell=args.plain_shell) as bed:
        one_run(bed, 1, multiplex, options)   # warm-up: page cache
        runs: dict[int, list] = {n: [] for n in args.hosts}
        for _ in range(args.repeat):     # interleaved: the machine's load drifts
            for n in args.hosts:
                runs[n].append(one_run(bed, n, multiplex, options, args.storage_check,
                                       args.tasks_per_host))
        for n, rs in runs.items():
            rows.append((n, statistics.median(r[0] for r in rs),
                         statistics.median(r[1] for r in rs), min(r[1] for r in rs),
                         statistics.median(r[2] for r in rs)))
    base = rows[0][2]
    print(f"ssh fan-out, multiplex={'on' if multiplex else 'off'}, "
          f"root .bashrc {'empty' if args.plain_shell else 'of this machine'}, median of "
          f"{args.repeat} runs, {args.tasks_per_host} task(s) per host (each host its own "
          f"namespace and sshd); "
          f"options {options or 'none'}; "
          f"storage check {'on' if args.storage_check else 'off'}; "
          f"load average before: {load:.1f}, after: {os.getloadavg()[0]:.1f}")
    print(f"{'hosts':>5}  {'preflight s':>11}  {'all running s':>13}  {'best s':>6}  "
          f"{'vs 1 host':>9}  {'launcher CPU s':>14}")
    for n, pre, total, best, cpu in rows:
        print(f"{n:>5}  {pre:>11.2f}  {total:>13.2f}  {best:>6.2f}  {total / base:>8.2f}x  "
              f"{cpu:>14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
