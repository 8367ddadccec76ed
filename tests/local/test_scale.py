"""Hundreds of real local tasks from one launcher: 200 sleeping workers, a chief
and 2 ps that wait. Every task starts and ends well, the console shows one line per role
and summary.json keeps every row. The workers print at once as they start: one thread
reads every task's output (launcher/output/reader.py), and each log still holds its own
task's output, complete, its last unfinished line included. The figures (start time, CPU,
RSS against a shell) are measured by bench/scale.py, not here."""

from __future__ import annotations

import json
from pathlib import Path

from support import run_dir, run_launch, wait_gone

WORKERS = 200
LINES = 30
PRINT = (f'i=0; while [ $i -lt {LINES} ]; do echo "$TFCLUSTER_TASK_TYPE:$TFCLUSTER_TASK_INDEX $i"; '
         'i=$((i+1)); done; sleep 1; printf "last of $TFCLUSTER_TASK_INDEX"')


def test_two_hundred_sleeping_workers_start_end_and_are_shown_by_role(tmp_path: Path):
    spec = {"name": "many", "cluster": {"chief": 1, "worker": WORKERS, "ps": 2},
            "command": ["sh", "-c", PRINT],
            "roles": {"chief": {"command": ["sleep", "3"]}, "ps": {"command": ["sleep", "600"]}},
            "model_dir": str(tmp_path / "model"), "run_dir": str(tmp_path / "runs"),
            "max_steps": 10, "timeouts": {"kill": 3}}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    done = run_launch(str(path), "--quiet", timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stderr + done.stdout
    assert f"started {WORKERS + 3} tasks (ps 2, chief 1, worker {WORKERS}) in " in out
    roles = [line.split()[:2] for line in out.splitlines()
             if line.split()[:1] in (["ps"], ["chief"], ["worker"])]
    assert roles == [["ps", "2"], ["chief", "1"], ["worker", str(WORKERS)]]
    named = [line for line in out.splitlines() if line.startswith("worker:")]
    assert len(named) <= 3 and all("slowest" in line for line in named)   # the outliers
    rows = json.loads((run_dir(tmp_path) / "summary.json").read_text())["tasks"]
    assert len(rows) == WORKERS + 3
    assert {r["task"]: r["exit"] for r in rows}["chief:0"] == 0
    assert all(r["exit"] == 0 or r["stopped"] for r in rows)
    logs = run_dir(tmp_path) / "logs"
    ended = {r["task"] for r in rows if r["exit"] == 0 and not r["stopped"]}
    assert ended
    for i in range(WORKERS):
        output = "".join(f"worker:{i} {n}\n" for n in range(LINES)) + f"last of {i}"
        log = (logs / f"worker-{i}.log").read_text()
        # complete when it ended by itself; a prefix when the end rules stopped it
        assert log == output if f"worker:{i}" in ended else output.startswith(log)
    assert not wait_gone(timeout=10)
