"""Restarts keep every task's devices (docs/gpus.md): the job loop over the scripted backend
(tests/scripted_backend.py), a plan placed on a machine with 4 GPUs."""

from __future__ import annotations

import json

from scripted_backend import Lines, Script, ScriptedBackend

from launcher.api import parse_spec
from launcher.gpus import Gpu, Machine, place
from launcher.job import Job
from launcher.output.console import Console
from launcher.plan import build_plan
from launcher.tasks import Pace

GPUS = tuple(Gpu(i, f"GPU-{i}") for i in range(4))


def run(tmp_path, scripts: dict[str, list[Script]], restart: dict):
    backend = ScriptedBackend(scripts)
    spec = parse_spec(json.dumps({
        "cluster": {"chief": 1, "worker": 2, "ps": 1}, "command": ["train"], "max_steps": 10,
        "model_dir": str(tmp_path / "model"), "backend": "scripted", "restart": restart,
        "timeouts": {"start": 60, "stall": 300, "finish": 2, "kill": 1, "poll": 0.5,
                     "unresponsive": 0}}))
    plan = build_plan(spec, port_for=backend.allocate_port, backend=backend.name)
    place(plan, [Machine("localhost", GPUS, tuple(t.name for t in plan.tasks))])
    out = Lines()
    job = Job(plan, backend, str(tmp_path / "run"), Console(out, out),
              pace=Pace(backend.clock, backend.wait))
    return job.run(), backend, out


def devices_at_each_start(backend: ScriptedBackend) -> dict[str, list[str]]:
    return {name: [h.task.env["CUDA_VISIBLE_DEVICES"] for h in handles]
            for name, handles in backend.handles.items()}


def test_a_restarted_worker_and_a_restarted_cluster_keep_their_devices(tmp_path, scripted_backend):
    result, backend, out = run(tmp_path, {
        "ps:0": [Script(exit_at=2, status=-9), Script()],
        "worker:1": [Script(exit_at=1, status=-9), Script(), Script()],
        "chief:0": [Script(), Script(exit_at=3)], "worker:0": [Script(), Script()]},
        restart={"ps": {"policy": "on-failure", "max_restarts": 1, "backoff": 1},
                 "worker": {"policy": "on-failure", "max_restarts": 2, "backoff": 0.2}})
    assert result.status == 0, out.getvalue()
    assert devices_at_each_start(backend) == {
        "ps:0": ["", ""], "chief:0": ["0,1", "0,1"], "worker:0": ["2", "2"],
        "worker:1": ["3", "3", "3"]}
