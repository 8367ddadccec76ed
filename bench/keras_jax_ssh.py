"""Keras 3 on JAX (``"keras": "jax"``), the same 2-process ``fit`` job (tests/keras/jobs/
keras_jax_fit.py, 8 steps) run locally and over ssh side by side, alternating, and the job
on a host whose name resolves nowhere (the failure named with its fix).

The ssh hosts are network namespaces with their own sshd on this machine (tests/infra/
netns_hosts.py): h1 and h2 see an /etc/hosts of their own naming every host (as a usual
server resolves its own name), h3 does not. Every process shares this machine's 2 cores,
so "ssh / local" is the cost of the ssh route here (connections, the remote environment
check, JAX's coordinator and Gloo over the bridge), not a figure for real hosts.

    sudo PYTHONPATH=$PWD .venv/bin/python bench/keras_jax_ssh.py [--rounds 2]

Needs root, openssh-server, iproute2 and .venv-jax (scripts/setup.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from infra.netns_hosts import missing_prerequisites, netns_hosts  # noqa: E402

PY_JAX = str(REPO / ".venv-jax" / "bin" / "python")
JAX_FIT = str(REPO / "tests" / "keras" / "jobs" / "keras_jax_fit.py")


def run(spec: dict, where: Path) -> tuple[int, float, int, str]:
    """(exit status, wall s, console lines, the stderr) of ``launch SPEC``."""
    where.mkdir(parents=True)
    spec = {**spec, "model_dir": str(where / "model"), "run_dir": str(where / "runs")}
    (where / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "launcher.cli", str(where / "spec.json")],
                          capture_output=True, text=True, env=env, cwd=where, timeout=600)
    wall = time.monotonic() - started
    lines = len(done.stdout.splitlines()) + len(done.stderr.splitlines())
    return done.returncode, wall, lines, done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    why = missing_prerequisites()
    if why or not Path(PY_JAX).exists():
        print(f"cannot run: {why or 'no .venv-jax'}", file=sys.stderr)
        return 2
    base = {"name": "jax-bench", "keras": "jax", "command": [PY_JAX, JAX_FIT],
            "max_steps": 8, "workdir": str(REPO)}
    with tempfile.TemporaryDirectory() as tmp, \
            netns_hosts(Path(tmp) / "bed", count=3, named={1, 2}) as bed:
        def over_ssh(*hosts: int) -> dict:
            return {**base, "backend": "ssh", "ssh": bed.ssh_section(),
                    "cluster": {"worker": [bed.hosts[i - 1].address for i in hosts]}}
        local = {**base, "cluster": {"worker": 2}}
        walls: dict[str, list[float]] = {"local": [], "ssh": []}
        for r in range(args.rounds):
            for name, spec in (("local", local), ("ssh", over_ssh(1, 2))):
                status, wall, lines, err = run(spec, Path(tmp) / f"{name}-{r}")
                print(f"round {r + 1} {name}: exit {status}, {wall:.1f} s, {lines} console "
                      f"lines", flush=True)
                if status != 0:
                    print(err[-2000:], file=sys.stderr)
                    return 1
                walls[name].append(wall)
        for hosts in ((3, 3), (1, 3)):
            status, wall, lines, err = run(over_ssh(*hosts), Path(tmp) / f"unresolved{hosts}")
            named = [line for line in err.splitlines() if "cause:" in line or "fix:" in line]
            print(f"h{hosts[0]} + h{hosts[1]} (h3's name resolves nowhere): exit {status}, "
                  f"{wall:.1f} s, {lines} console lines; {len(named)} lines name the cause "
                  f"and the fix", flush=True)
    local_s, ssh_s = (statistics.median(walls[k]) for k in ("local", "ssh"))
    print(f"median wall: local {local_s:.1f} s, ssh {ssh_s:.1f} s, ssh / local "
          f"{ssh_s / local_s:.2f} ({args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
