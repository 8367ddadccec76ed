"""Where the test suite's CPU goes: a pytest plugin that writes, for each test, its wall time
and the CPU it and the processes it waited for used (getrusage of the worker and of its
reaped children around the test), and a summary of such a file by test file and by test.

The suite is CPU-bound on 2 cores (both busy for the whole run), so its wall time is its
CPU over 2: this is the figure to cut. Not counted: processes that are not the worker's
children (containers under dockerd, Slurm steps under slurmd, tasks of ssh sessions).
A child reaped late (a zombie left by one test, collected when another starts a process)
counts toward the later test: a test whose CPU is far above twice its wall is one.

    PYTHONPATH=$PWD:bench SUITE_CPU_OUT=/tmp/cpu.jsonl \\
        .venv/bin/python -m pytest -q -p no:cacheprovider -p suite_cpu -n 4 [tests...]
    .venv/bin/python bench/suite_cpu.py /tmp/cpu.jsonl [--top 30]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import time

import pytest

OUT = os.environ.get("SUITE_CPU_OUT", "/tmp/suite_cpu.jsonl")


def _cpu() -> tuple[float, float]:
    """(CPU seconds of reaped children, of this process)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    return kids.ru_utime + kids.ru_stime, own.ru_utime + own.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    kids, own = _cpu()
    started = time.monotonic()
    yield
    kids2, own2 = _cpu()
    row = {"id": item.nodeid, "wall": time.monotonic() - started, "children": kids2 - kids,
           "self": own2 - own, "worker": os.environ.get("PYTEST_XDIST_WORKER")}
    with open(OUT, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def summarize(path: str, top: int) -> None:
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    cpu = {r["id"]: r["children"] + r["self"] for r in rows}
    by_file: collections.Counter[str] = collections.Counter()
    for test, seconds in cpu.items():
        by_file[test.partition("::")[0]] += seconds
    print(f"{len(rows)} tests, {sum(cpu.values()):.0f} CPU-s "
          f"({sum(r['wall'] for r in rows):.0f} s of wall summed over workers)\n")
    print("CPU-s  file")
    for name, seconds in by_file.most_common(top):
        print(f"{seconds:6.1f} {name}")
    print("\nCPU-s  wall-s  test")
    for r in sorted(rows, key=lambda r: -cpu[r["id"]])[:top]:
        print(f"{cpu[r['id']]:6.1f} {r['wall']:6.1f}  {r['id']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    summarize(args.path, args.top)
