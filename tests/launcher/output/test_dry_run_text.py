"""--dry-run's text made of plain data alone (launcher/output/dry_run.py): no backend, no
plan object, no storage."""

from __future__ import annotations

import json

from launcher.output.dry_run import DryRun, dry_run_text


def view(workers: int, auto: bool = True) -> DryRun:
    tasks = [{"type": t, "index": i, "host": "localhost", "port": 2000 + n,
              "auto_port": auto, "gpus": None, "cwd": None, "command": ["python", "t.py"],
              "env": {"TF_CONFIG": "{}", "A": "x y"}}
             for n, (t, i) in enumerate([("chief", 0)] + [("worker", w) for w in range(workers)])]
    return DryRun({"name": "j", "run_id": "r1", "model_dir": "/m", "max_steps": None,
                   "tasks": tasks}, "local", "lease: free (/m/.lease)", [], True, None)


def test_a_small_job_shows_every_task_in_full():
    text = dry_run_text(view(2))
    assert text.splitlines()[:4] == [
        "# job j  run r1  backend local  max_steps (not set)", "# model_dir /m",
        "# lease: free (/m/.lease)",
        "# ports marked 'auto' were picked now and are picked again at start: give "
        "host:port in the spec to fix them"]
    assert text.count("  command: python t.py") == 3 and "  A='x y'" in text
    assert "worker:1  localhost:2002  (auto)" in text and "# addresses" not in text


def test_above_16_tasks_the_first_of_each_role_in_full_then_every_address():
    text = dry_run_text(view(20, auto=False))
    assert text.count("  command: ") == 2 and "(auto)" not in text
    addresses = text.split("# addresses\n")[1].splitlines()
    assert len(addresses) == 21 and addresses[-1] == "worker:19  localhost:2020"
    assert dry_run_text(view(20), every=True).count("  command: ") == 21


def test_json_carries_the_backend_the_lease_and_its_own_text():
    v = view(1)
    v.extra = "#!/bin/bash\nsrun ..."
    doc = json.loads(dry_run_text(v, as_json=True))
    assert (doc["backend"], doc["lease"], doc["rendered"]) == (
        "local", "lease: free (/m/.lease)", "#!/bin/bash\nsrun ...")
    assert [t["type"] for t in doc["tasks"]] == ["chief", "worker"]
