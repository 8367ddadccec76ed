"""model_dir's lease with the ssh backend on real hosts: a second run on the same model_dir
is refused while the first goes on, before anything starts on any host; a third runs once
the first ended (launcher/records/lease.py)."""

from __future__ import annotations

import json

from support import cancelled_on_exit, detach, local_ssh_processes, run_launch
from test_ssh_detach import fake_spec, wait_tasks

from launcher.records.lease import LEASE_FILE


def test_a_second_ssh_run_on_a_held_model_dir_is_refused(hosts, tmp_path, runs):
    lease = tmp_path / "model" / LEASE_FILE
    first_spec = fake_spec(tmp_path, hosts, {"chief": ["h1"], "ps": ["h2"]},
                           {"chief": "forever", "ps": "forever"})
    with cancelled_on_exit(tmp_path, runs):
        first = detach(first_spec, runs)
        expected = {"h1": {"chief:0"}, "h2": {"ps:0"}}
        assert wait_tasks(hosts, expected) == expected
        holder = json.loads(lease.read_text())
        second_dir = tmp_path / "second"
        second_dir.mkdir()
        second_spec = fake_spec(second_dir, hosts, {"chief": ["h3"], "ps": ["h3"]},
                                {"chief": "exit 0 after 0.2", "ps": "forever"})
        doc = json.loads(second_spec.read_text())
        doc["model_dir"] = str(tmp_path / "model")
        second_spec.write_text(json.dumps(doc))
        second = run_launch(str(second_spec), env=runs, timeout=60)
        assert second.returncode == 2, second.stdout + second.stderr
        assert second.stderr.strip().splitlines() == [
            f"launch: error: model_dir {tmp_path / 'model'} is in use by run {first} (host "
            f"{holder['host']}, launcher pid {holder['pid']}, heartbeat "
            + second.stderr.split(", heartbeat ")[1].strip()]
        assert wait_tasks(hosts, expected, timeout=1) == expected     # nothing on h3
        assert run_launch("cancel", first, env=runs, timeout=180).returncode == 0
        assert not lease.exists()
        third = run_launch(str(second_spec), env=runs, timeout=120)
        assert third.returncode == 0, third.stderr
        assert not lease.exists()
    assert hosts.leftovers(timeout=5) == {}
    assert local_ssh_processes() == []
