"""The run registry (launcher/records/registry.py): atomic state, version guard, finding runs,
and the state `launch status` shows for a run whose launcher is gone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest

from launcher.commands.runs import current_state
from launcher.records.registry import (
    RunError,
    RunState,
    find_run,
    link_run,
    list_runs,
    open_state,
    read_state,
)


def new_state(run_dir, run_id="job-1234") -> RunState:
    run_dir.mkdir(parents=True, exist_ok=True)
    state = RunState(str(run_dir), run_id, "job", "local", max_steps=10)
    state.update()
    return state


def test_a_reader_never_sees_half_a_state(tmp_path):
    state = new_state(tmp_path / "r")
    stop = threading.Event()

    def write():
        n = 0
        while not stop.is_set():
            n += 1
            state.update(step=n, tasks=[{"task": f"worker:{i}", "address": "h:1",
                                         "state": "running", "log": "logs/w.log",
                                         "pad": "x" * 200} for i in range(n % 50)])

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(2000):
            assert read_state(str(tmp_path / "r"))["run_id"] == "job-1234"
    finally:
        stop.set()
        writer.join()
    assert not list((tmp_path / "r").glob("*.tmp-*")), "no temp file is left"


def test_a_state_of_another_version_is_refused(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "state.json").write_text(json.dumps({"version": 99}))
    with pytest.raises(RunError, match=r"written by another version of tfcluster \(state "
                                       r"version 99, this launch reads version 1\)"):
        read_state(str(tmp_path / "old"))


def test_runs_are_found_by_id_prefix_or_path(tmp_path):
    new_state(tmp_path / "job-1234", "job-1234")
    new_state(tmp_path / "job-5678", "job-5678")
    assert find_run("job-1234", str(tmp_path)) == str(tmp_path / "job-1234")
    assert find_run("job-5", str(tmp_path)) == str(tmp_path / "job-5678")
    assert find_run(str(tmp_path / "job-1234"), "elsewhere") == str(tmp_path / "job-1234")
    with pytest.raises(RunError, match="ambiguous"):
        find_run("job-", str(tmp_path))


def test_a_run_kept_outside_the_root_is_listed_and_found_by_its_id(tmp_path):
    root = tmp_path / "root"
    new_state(root / "job-1111", "job-1111")
    own = tmp_path / "x" / "run"
    new_state(own, "job-2222")
    assert find_run("job-2222", str(tmp_path / "x")) == str(own)   # by the id in its state
    assert link_run(str(own), "job-2222", str(root)) == str(root / "job-2222")
    assert link_run(str(own), "job-2222", str(root)) == str(root / "job-2222")  # again: same
    assert link_run(str(root / "job-1111"), "job-1111", str(root)) is None   # in the root
    assert sorted(s["run_id"] for _, s in list_runs(str(root))) == ["job-1111", "job-2222"]
    assert os.path.samefile(find_run("job-2222", str(root)), own)
    assert os.path.samefile(find_run("job-2", str(root)), own)
    shutil.rmtree(own)          # a removed run directory: its link lists nothing
    assert [s["run_id"] for _, s in list_runs(str(root))] == ["job-1111"]
    with pytest.raises(RunError, match="no run 'job-2222' under"):
        find_run("job-2222", str(root))


def test_a_run_started_in_a_specs_run_dir_is_listed_in_the_run_root(tmp_path, monkeypatch):
    """What `launch` does for a run whose directory is not in the run root (a spec's
    run_dir, --run-dir): its state is opened there and the root lists it."""
    monkeypatch.setenv("TFCLUSTER_RUNS", str(tmp_path / "root"))
    plan = SimpleNamespace(run_id="job-3333", name="job", max_steps=10)
    run_dir = tmp_path / "spec-runs" / "job-3333"
    run_dir.mkdir(parents=True)
    open_state(str(run_dir), plan, backend="local", handle={}, detached=True)
    assert [s["run_id"] for _, s in list_runs()] == ["job-3333"]
    assert os.path.samefile(find_run("job-3333"), run_dir)
    # --root ROOT with --run-dir elsewhere: that root lists it
    own, other = tmp_path / "x" / "run", tmp_path / "other-root"
    own.mkdir(parents=True)
    open_state(str(own), SimpleNamespace(run_id="job-4444", name="job", max_steps=10),
               backend="local", handle={}, root=str(other))
    assert os.path.samefile(find_run("job-4444", str(other)), own)


def test_a_link_never_replaces_a_run_directory_of_the_same_name(tmp_path):
    root = tmp_path / "root"
    new_state(root / "job-1", "job-1")
    new_state(tmp_path / "other", "job-1")
    assert link_run(str(tmp_path / "other"), "job-1", str(root)) is None
    assert find_run("job-1", str(root)) == str(root / "job-1")


def test_a_live_run_whose_launcher_is_gone_is_lost(tmp_path):
    state = new_state(tmp_path / "r")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    state.update(state="running", launcher=dict(state.doc["launcher"],
                                                 pid=int(gone.stdout)))
    now, note = current_state(read_state(str(tmp_path / "r")))
    assert now == "lost" and "died before the run ended" in note
    state.update(launcher=RunState._me())          # this process: alive
    assert current_state(read_state(str(tmp_path / "r"))) == ("running", None)
