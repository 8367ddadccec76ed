"""Check tfcluster's GPU placement on a machine with NVIDIA GPUs (docs/gpus.md).

Needs only python3 and the launcher's own dependencies: no TensorFlow, no network. Run it
from a checkout:

    PYTHONPATH=. python3 bench/gpu_check.py [--workers 2] [--mib 256] [--share] [--json]

It runs a real local job (chief, workers, one ps, through `launcher.run`); each task, with
the CUDA_VISIBLE_DEVICES the launcher gave it, opens every GPU it can see and takes --mib
MiB there (PyTorch, else CuPy, else the CUDA driver itself through ctypes), then asks
`nvidia-smi --query-compute-apps` which GPUs its process holds memory on. The check: the
trainers' devices are disjoint, each task holds memory only on its own devices, and the ps
sees no GPU and holds none. Exit 0 when every check passed; the table and the verdict on
stdout (--json: one document).

On a machine without GPUs, put the stand-in first on PATH to see it work:
PATH=tests/fake_gpu:$PATH FAKE_GPUS=4 (memory is then not measured).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

APPS_QUERY = ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory",
              "--format=csv,noheader,nounits"]
REPORT_DIR = "GPU_CHECK_REPORTS"
KEPT: list[object] = []       # a task's server and GPU memory, held till it is stopped
MIB = "GPU_CHECK_MIB"


# ---------------------------------------------------------------------------- in a task
def take_memory(mib: int) -> tuple[str, int, object]:
    """Open every visible GPU and take ``mib`` MiB on each: (how, GPUs seen, what holds
    the memory)."""
    try:
        import torch

        n = torch.cuda.device_count()
        held = [torch.empty(mib * 2**20, dtype=torch.uint8, device=f"cuda:{i}")
                for i in range(n)]
        return "torch", n, held
    except ImportError:
        pass
    try:
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
        held = []
        for i in range(n):
            with cupy.cuda.Device(i):
                held.append(cupy.empty(mib * 2**20, dtype=cupy.uint8))
        return "cupy", n, held
    except ImportError:
        pass
    except Exception:          # noqa: BLE001 - cupy raises its own for "no device"
        return "cupy", 0, None
    return driver_take(mib)


def driver_take(mib: int) -> tuple[str, int, object]:
    """The CUDA driver API through ctypes (libcuda.so.1 comes with the driver)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "none (no libcuda)", 0, None
    if cuda.cuInit(0) != 0:        # CUDA_ERROR_NO_DEVICE with CUDA_VISIBLE_DEVICES=""
        return "libcuda", 0, None
    count = ctypes.c_int()
    cuda.cuDeviceGetCount(ctypes.byref(count))
    held = []
    for i in range(count.value):
        device, context, pointer = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p()
        cuda.cuDeviceGet(ctypes.byref(device), i)
        cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device)
        cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(mib * 2**20))
        held.append((context, pointer))
    return "libcuda", count.value, held


def memory_by_gpu(pid: int) -> dict[str, int] | None:
    """MiB this process holds on each GPU (by UUID), as nvidia-smi lists compute apps; None
    where nvidia-smi cannot say."""
    try:
        done = subprocess.run(APPS_QUERY, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    out: dict[str, int] = {}
    for line in done.stdout.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 3 and cells[0] == str(pid):
            out[cells[1]] = out.get(cells[1], 0) + (int(cells[2]) if cells[2].isdigit() else 0)
    return out


def task_main() -> int:
    """One task of the check's job: report, hold the memory, wait to be stopped (the chief
    ends the job once every task reported)."""
    config = json.loads(os.environ["TF_CONFIG"])
    kind, index = config["task"]["type"], config["task"]["index"]
    name = f"{kind}:{index}"
    if kind == "ps":
        KEPT.append(serve_get_status(config))     # the launcher's readiness probe
    how, seen, held = take_memory(int(os.environ.get(MIB, "256")))
    KEPT.append(held)
    time.sleep(2)              # nvidia-smi lists a context once its memory is in use
    report = {"task": name, "role": kind, "pid": os.getpid(),
              "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "how": how, "seen": seen,
              "memory": memory_by_gpu(os.getpid())}
    folder = Path(os.environ[REPORT_DIR])
    (folder / f"{kind}-{index}.json.tmp").write_text(json.dumps(report))
    (folder / f"{kind}-{index}.json.tmp").rename(folder / f"{kind}-{index}.json")
    print(f"{name}: CUDA_VISIBLE_DEVICES={report['visible']!r}, sees {seen} GPU(s) "
          f"({how}), holds {report['memory']}", flush=True)
    expected = int(os.environ["GPU_CHECK_TASKS"])
    while kind == "chief" and len(list(folder.glob("*.json"))) < expected:
        time.sleep(0.2)
    if kind == "chief":
        return 0
    while True:   # the memory is held till the launcher stops the task
        time.sleep(1)


def serve_get_status(config: dict):
    """Answer the launcher's readiness probe as a TensorFlow server does (grpcio)."""
    from concurrent import futures

    import grpc

    task = config["task"]
    port = int(config["cluster"][task["type"]][task["index"]].rsplit(":", 1)[1])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.method_handlers_generic_handler("tensorflow.WorkerService", {
        "GetStatus": grpc.unary_unary_rpc_method_handler(lambda request, context: b"")})
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"[::]:{port}")
    server.start()
    return server


# ---------------------------------------------------------------------------- the check
def check(reports: list[dict], gpus: dict[str, list[str] | None],
          uuids: dict[str, str], share: bool = False) -> list[str]:
    """Problems with the placement: ``reports`` from the tasks, ``gpus`` each task's
    devices in the plan, ``uuids`` index -> UUID of the machine's GPUs; ``share``: the
    trainers share their GPUs on purpose (gpu_share). Empty: all good."""
    problems = []
    by_task = {r["task"]: r for r in reports}
    missing = sorted(set(gpus) - set(by_task))
    if missing:
        problems.append(f"no report from {', '.join(missing)}")
    owner: dict[str, str] = {}
    for task, devices in sorted(gpus.items()):
        if devices is None:
            problems.append(f"{task}: the launcher placed no GPU (no nvidia-smi on PATH?)")
            continue
        for d in devices:
            if d in owner and not share:
                problems.append(f"GPU {d} given to both {owner[d]} and {task}")
            owner[d] = task
    for task, report in sorted(by_task.items()):
        devices = gpus.get(task) or []
        if report["visible"] != ",".join(devices):
            problems.append(f"{task}: CUDA_VISIBLE_DEVICES is {report['visible']!r}, the plan "
                            f"says {','.join(devices)!r}")
        if report["how"] not in ("none (no libcuda)",) and report["seen"] != len(devices):
            problems.append(f"{task}: sees {report['seen']} GPU(s), was given {len(devices)}")
        memory = report.get("memory")
        if memory is None:
            continue
        mine = {uuids.get(d, d) for d in devices}
        foreign = sorted(u for u, mib in memory.items() if mib and u not in mine)
        if foreign:
            problems.append(f"{task}: holds memory on GPUs not its own: {', '.join(foreign)}")
        if report["role"] == "ps" and any(memory.values()):
            problems.append(f"{task}: the ps holds GPU memory ({memory})")
    for task, report in by_task.items():
        if report["role"] == "ps" and report["seen"]:
            problems.append(f"{task}: the ps sees {report['seen']} GPU(s)")
    return problems


def table(reports: list[dict], gpus: dict[str, list[str] | None]) -> str:
    rows = [("task", "gpus (plan)", "CUDA_VISIBLE_DEVICES", "sees", "through", "MiB held")]
    for r in sorted(reports, key=lambda r: r["task"]):
        held = "-" if r["memory"] is None else \
            ", ".join(f"{u[:12]}:{m}" for u, m in r["memory"].items()) or "0"
        rows.append((r["task"], ",".join(gpus.get(r["task"]) or []) or "none",
                     repr(r["visible"]), str(r["seen"]), r["how"], held))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
                     for row in rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--mib", type=int, default=256, help="MiB each task takes per GPU")
    p.add_argument("--share", action="store_true",
                   help="the trainers share the GPUs (resources.default.gpu_share)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--task", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.task:
        return task_main()

    import launcher
    from launcher.gpus import discover_here

    found = discover_here()
    if not found:
        print("gpu_check: no GPU found with nvidia-smi on PATH: nothing to check")
        return 2
    with tempfile.TemporaryDirectory(prefix="tfcluster-gpu-check-") as tmp:
        reports_dir = Path(tmp, "reports")
        reports_dir.mkdir()
        n_tasks = 2 + args.workers
        spec = {"name": "gpu-check", "backend": "local",
                "cluster": {"chief": 1, "worker": args.workers, "ps": 1},
                "command": [sys.executable, os.path.abspath(__file__), "--task"],
                "model_dir": str(Path(tmp, "model")), "run_dir": str(Path(tmp, "runs")),
                "max_steps": 1, "check_storage": False,
                "env": {REPORT_DIR: str(reports_dir), MIB: str(args.mib),
                        "GPU_CHECK_TASKS": str(n_tasks),
                        "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
                "timeouts": {"kill": 5, "finish": 5, "start": 120}}
        if args.share:
            spec["resources"] = {"default": {"gpu_share": True}}
        result = launcher.run(spec, quiet=True)
        plan = json.loads(Path(result.run_dir, "plan.json").read_text())
        gpus = {f"{t['type']}:{t['index']}": t["gpus"] for t in plan["tasks"]}
        reports = [json.loads(p.read_text()) for p in sorted(reports_dir.glob("*.json"))]
    uuids = {str(g.index): g.uuid for g in found}
    problems = check(reports, gpus, uuids, share=args.share)
    if result.status != 0:
        problems.insert(0, f"the job failed (exit status {result.status}): {result.reason}")
    if args.json:
        print(json.dumps({"gpus": [g.__dict__ for g in found], "plan": gpus,
                          "reports": reports, "problems": problems}, indent=2))
    else:
        print(f"{len(found)} GPU(s): " + ", ".join(f"{g.index} {g.uuid} {g.memory_mib} MiB"
                                                  for g in found))
        print(table(reports, gpus))
        print("\n".join(f"PROBLEM: {p}" for p in problems) if problems else
              f"OK: the trainers' GPUs are {'shared on purpose' if args.share else 'disjoint'}"
              ", each task holds memory only on its own, the ps took none")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
