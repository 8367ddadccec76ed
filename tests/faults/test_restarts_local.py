"""Restarts, the launcher's own death and port conflicts on real processes (stand-in tasks,
no TensorFlow): what a user sees in the console, the summary and the event log."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
from support import (
    events,
    launch_cmd,
    marked_processes,
    run_dir,
    run_launch,
    tfcluster_tasks,
    wait_gone,
)

FLAKY = str(Path(__file__).with_name("jobs") / "flaky_task.py")


def write_spec(tmp_path: Path, plan: dict, **overrides) -> Path:
    (tmp_path / "starts").mkdir(exist_ok=True)
    doc = {"name": "flaky", "cluster": {"chief": 1, "worker": 2, "ps": 1},
           "evaluator": "localhost", "command": [sys.executable, FLAKY],
           "model_dir": str(tmp_path / "model"), "max_steps": 10,
           "run_dir": str(tmp_path / "runs"), "timeouts": {"kill": 2, "finish": 3},
           "restart": {r: {"policy": "on-failure", "max_restarts": 2, "backoff": 0.2}
                       for r in ("chief", "worker", "ps", "evaluator")},
           "env": {"FLAKY_PLAN": json.dumps(plan), "FLAKY_DIR": str(tmp_path / "starts")}}
    doc.update(overrides)
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(doc))
    return path


def starts(tmp_path: Path) -> dict[str, int]:
    return {p.name.removesuffix(".starts").replace("-", ":"): len(p.read_text().split())
            for p in (tmp_path / "starts").iterdir()}


def summary(tmp_path: Path) -> dict:
    return json.loads((run_dir(tmp_path) / "summary.json").read_text())


def test_killed_worker_is_restarted_alone_and_the_job_succeeds(tmp_path):
    plan = {"chief": ["exit 0 once worker:1 started 3"], "ps": ["forever"],
            "worker:1": ["kill KILL after 0.5", "kill KILL after 0.5", "forever"]}
    done = run_launch(str(write_spec(tmp_path, plan)))
    assert done.returncode == 0, done.stderr
    assert starts(tmp_path) == {"ps:0": 1, "chief:0": 1, "worker:0": 1, "worker:1": 3,
                                "evaluator:0": 1}
    assert ("worker:1 was killed by SIGKILL; restarting worker:1 in 0.2s (restart 1 of 2)"
            in done.stderr)
    assert "restarting worker:1 in 0.4s (restart 2 of 2)" in done.stderr
    rows = {r["task"]: r for r in summary(tmp_path)["tasks"]}
    assert rows["worker:1"]["restarts"] == 2 and rows["worker:0"]["restarts"] == 0
    table_row = next(line for line in done.stderr.splitlines() if line.startswith("worker:1 "))
    assert table_row.split()[-2] == "2"    # the restarts column of the summary table
    scheduled = [e for e in events(tmp_path) if e["event"] == "restart_scheduled"]
    assert [(e["task"], e["scope"], e["attempt"]) for e in scheduled] == [
        ("worker:1", "task", 1), ("worker:1", "task", 2)]
    log = (run_dir(tmp_path) / "logs" / "worker-1.log").read_text()
    assert "start 0" in log and "start 2" in log     # the log keeps every start


def test_killed_ps_restarts_the_whole_cluster_but_not_the_evaluator(tmp_path):
    # the chief ends the job once both workers are back (a fixed delay raced a loaded machine)
    plan = {"chief": ["forever", "exit 0 once worker:0,worker:1 started 2"],
            "worker": ["forever"], "ps": ["kill KILL after 1", "forever"],
            "evaluator": ["forever"]}
    spec = write_spec(tmp_path, plan, timeouts={"kill": 2, "finish": 3, "evaluator": 1})
    done = run_launch(str(spec))
    assert done.returncode == 0, done.stderr
    assert starts(tmp_path) == {"ps:0": 2, "chief:0": 2, "worker:0": 2, "worker:1": 2,
                                "evaluator:0": 1}
    assert ("ps:0 was killed by SIGKILL; restarting the whole cluster from the newest "
            "checkpoint in 0.2s (restart 1 of 2)") in done.stderr
    rows = {r["task"]: r["restarts"] for r in summary(tmp_path)["tasks"]}
    assert rows == {"ps:0": 1, "chief:0": 1, "worker:0": 1, "worker:1": 1, "evaluator:0": 0}
    kinds = [e["event"] for e in events(tmp_path)]
    first_restart = kinds.index("restart_scheduled")
    assert kinds[first_restart + 1] == "stopping"     # the others stop before any start


def test_code_error_is_not_retried(tmp_path):
    plan = {"chief": ["forever"], "ps": ["forever"], "worker:0": ["error after 0.3"]}
    done = run_launch(str(write_spec(tmp_path, plan)))
    assert done.returncode == 1
    assert ("worker:0 failed with exit status 1; not retried: an error in the task's own code "
            "would repeat (restart policy 'always' retries it)") in done.stderr
    assert "ValueError: worker:0: a bug in the training script" in done.stderr
    assert starts(tmp_path)["worker:0"] == 1
    assert not wait_gone(timeout=5)


def test_always_retries_a_code_error_until_the_budget_is_spent(tmp_path):
    plan = {"chief": ["forever"], "ps": ["forever"], "worker:0": ["error after 0.2"]}
    spec = write_spec(tmp_path, plan, restart={"worker": {"policy": "always",
                                                          "max_restarts": 2, "backoff": 0}})
    done = run_launch(str(spec))
    assert done.returncode == 1
    assert starts(tmp_path)["worker:0"] == 3
    assert ("worker:0 failed with exit status 1; restart budget spent (2 of 2 restarts of "
            "worker:0 used)") in done.stderr


def test_transient_tf_error_and_wrapper_kill_status_are_restarted(tmp_path):
    plan = {"chief": ["transient after 0.3", "exit 0 once worker:0 started 2"], "ps": ["forever"],
            "worker:0": ["exit 137 after 0.3", "forever"], "worker:1": ["forever"]}
    done = run_launch(str(write_spec(tmp_path, plan)))
    assert done.returncode == 0, done.stderr
    assert "chief:0 failed with exit status 1 (UnavailableError: a peer went away)" in done.stderr
    assert "worker:0 was killed by SIGKILL (exit status 137)" in done.stderr
    assert starts(tmp_path)["chief:0"] == 2 and starts(tmp_path)["worker:0"] == 2


def test_policy_never_fails_at_the_first_kill(tmp_path):
    plan = {"chief": ["forever"], "ps": ["forever"], "worker:1": ["kill KILL after 0.3"]}
    spec = write_spec(tmp_path, plan, restart={"worker": "never"})
    done = run_launch(str(spec))
    assert done.returncode == 1
    assert "worker:1 was killed by SIGKILL; restart policy of worker is never" in done.stderr


def wait_for_tasks(count: int, timeout: float = 30) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while len(tfcluster_tasks()) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return tfcluster_tasks()


def test_launcher_sigkill_ends_tasks_and_their_children(tmp_path):
    plan = {"chief": ["spawn then forever"], "worker": ["spawn then forever"],
            "ps": ["spawn then forever"], "evaluator": ["spawn then forever"]}
    proc = subprocess.Popen(launch_cmd(str(write_spec(tmp_path, plan))),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tasks = wait_for_tasks(10)       # 5 tasks and a child each
    assert len(tasks) == 10
    watchdogs = [p for p in marked_processes()
                 if "launcher/backends/watchdog.py" in " ".join(p.cmdline())]
    assert len(watchdogs) == 1
    proc.kill()
    proc.wait()

    assert not wait_gone(timeout=10)
    assert watchdog_gone(watchdogs[0])


def test_launcher_sigkill_ends_what_a_task_started_in_a_session_of_its_own(tmp_path):
    """A daemonized child leaves its task's process group; it carries the run's
    TFCLUSTER_RUN_ID, and the watchdog ends it with the tasks."""
    plan = {"chief": ["forever"], "worker": ["daemon then forever"], "ps": ["forever"]}
    proc = subprocess.Popen(launch_cmd(str(write_spec(tmp_path, plan, evaluator=None))),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        files = [tmp_path / "starts" / f"worker-{i}.daemon" for i in (0, 1)]
        deadline = time.monotonic() + 60
        while not all(f.exists() and f.read_text().strip() for f in files) and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        daemons = [psutil.Process(int(f.read_text())) for f in files]
        assert all(d.status() != psutil.STATUS_ZOMBIE for d in daemons)
    finally:
        proc.kill()
        proc.wait()
    assert not wait_gone(timeout=10)
    gone, alive = psutil.wait_procs(daemons, timeout=5)
    assert not alive


def test_the_watchdog_ends_the_unregistered_processes_of_its_run_only():
    """Given the run's marker, the watchdog also ends what carries it but was never
    registered (a task started as the launcher died); another run's processes stay, and so
    does a process that started before the watchdog (its launcher's tasks come after)."""
    import os

    from launcher.backends.watchdog import Watchdog

    def sleeper(run_id: str) -> subprocess.Popen:
        return subprocess.Popen(["sleep", "600"], start_new_session=True,
                                env={**os.environ, "TFCLUSTER_RUN_ID": run_id})

    older = sleeper("run-a")           # started before the watchdog: not this run's task
    time.sleep(0.05)
    dog = Watchdog(grace=1.0, marker="TFCLUSTER_RUN_ID=run-a")
    ours, theirs = sleeper("run-a"), sleeper("run-b")
    try:
        dog.close(ended=False)
        assert ours.wait(timeout=10) == -15
        assert theirs.poll() is None and older.poll() is None
    finally:
        for p in (ours, theirs, older):
            p.kill()
            p.wait()


def watchdog_gone(proc: psutil.Process, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def test_task_children_end_with_the_task(tmp_path):
    plan = {"chief": ["exit 0 after 1"], "ps": ["forever"], "worker": ["spawn then forever"],
            "worker:1": ["daemon then forever"], "evaluator": ["spawn then forever"]}
    spec = write_spec(tmp_path, plan, timeouts={"kill": 1, "finish": 0.5, "evaluator": 0.5})
    assert run_launch(str(spec)).returncode == 0
    assert not wait_gone(timeout=3)
    assert not [p for p in marked_processes()
                if "launcher/backends/watchdog.py" in " ".join(p.cmdline())]


def test_explicit_port_in_use_is_an_error_before_anything_starts(tmp_path):
    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        port = holder.getsockname()[1]
        spec = write_spec(tmp_path, {}, cluster={"chief": 1, "ps": [f"localhost:{port}"]})
        done = run_launch(str(spec))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"launch: error: ps:0: port {port} is already in use on this machine (pick another "
        "port in the spec, or leave the port out to get a free one)"]
    assert not list((tmp_path / "starts").iterdir())
    assert not (tmp_path / "model").exists()


def test_automatic_port_taken_after_planning_is_picked_again_without_a_restart(tmp_path):
    # The ps grabs worker:0's port between planning and the worker's start: a real race.
    plan = {"ps": ["bind-taken", "forever"], "chief": ["exit 0 after 2.5"],
            "worker:0": ["bind after-steal", "bind"], "worker:1": ["forever"],
            "evaluator": ["forever"]}
    spec = write_spec(tmp_path, plan, evaluator=None, cluster={"chief": 1, "worker": 2,
                                                               "ps": 1})
    done = run_launch(str(spec), env={"FLAKY_STEAL": "worker:0"})
    assert done.returncode == 0, done.stderr
    assert "worker:0 could not bind port" in done.stderr
    assert "picking new ports and starting again" in done.stderr
    assert [e["event"] for e in events(tmp_path)].count("port_conflict") == 1
    assert all(r["restarts"] == 0 for r in summary(tmp_path)["tasks"])
    assert starts(tmp_path)["worker:0"] == 2
    plan_doc = json.loads((run_dir(tmp_path) / "plan.json").read_text())
    assert plan_doc["run_id"] == run_dir(tmp_path).name


class LosesPsOnce:
    """A monitor that reports ps:0 lost (as the coordinator does for a dead or hung ps)."""

    def __init__(self):
        self.reported = False

    def tick(self, tasks):
        import time

        from orchestrator.decisions import LOST, Decision

        (ps,) = [t for t in tasks if t.name == "ps:0"]
        if not self.reported and ps.running and time.monotonic() - ps.started_at > 0.5:
            self.reported = True
            return Decision(LOST, "ps:0 does not answer", ("ps:0",))
        return None

    def close(self):
        pass


def test_a_monitor_naming_a_lost_task_goes_through_the_restart_policy(tmp_path):
    from launcher.api import load_spec
    from launcher.backends.local import LocalBackend
    from launcher.job import Job
    from launcher.monitors import Watch
    from launcher.output.console import Console
    from launcher.plan import build_plan

    plan = {"chief": ["forever", "exit 0 after 1"], "worker": ["forever"], "ps": ["forever"]}
    spec = load_spec(str(write_spec(tmp_path, plan, evaluator=None)))
    backend = LocalBackend()
    job_plan = build_plan(spec, port_for=backend.allocate_port, place=backend.place)
    out = tmp_path / "console.txt"
    with out.open("w") as console_file:
        job = Job(job_plan, backend, str(tmp_path / "run"), Console(console_file, console_file),
                  Watch([LosesPsOnce()]))
        try:
            result = job.run()
        finally:
            backend.close()
    assert result.status == 0, out.read_text()
    assert starts(tmp_path) == {"ps:0": 2, "chief:0": 2, "worker:0": 2, "worker:1": 2}
    assert ("ps:0 does not answer; restarting the whole cluster from the newest checkpoint in "
            "0.2s (restart 1 of 2)") in out.read_text()


def test_watchdog_ends_registered_groups_when_its_pipe_closes():
    from launcher.backends.watchdog import Watchdog

    dog = Watchdog(grace=1.0)
    ignores_term = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
         "signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"],
        start_new_session=True, stdout=subprocess.PIPE, text=True)
    forgotten = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        assert ignores_term.stdout.readline().strip() == "ready"
        dog.watch(ignores_term.pid)
        dog.watch(forgotten.pid)
        dog.forget(forgotten.pid)
        dog.close(ended=False)      # as when the launcher dies: its pipe closes
        assert ignores_term.wait(timeout=10) == -9     # SIGTERM ignored: SIGKILL after grace
        assert forgotten.poll() is None                # a forgotten group is left alone
    finally:
        for proc in (ignores_term, forgotten):
            proc.kill()
            proc.wait()


def test_watchdog_runs_the_commands_left_with_it_unless_forgotten(tmp_path):
    """What releases a Slurm allocation when its launcher is killed: a command left with
    ``at_exit`` runs once the pipe closes; not once the launcher forgot it (it did the work
    itself)."""
    from launcher.backends.watchdog import Watchdog

    for case in ("died", "forgotten"):
        dog = Watchdog(grace=0.5)
        dog.at_exit(["touch", str(tmp_path / case)])
        if case == "forgotten":
            dog.clear_at_exit()
        dog.close(ended=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["died"]


def test_a_task_gets_sigterm_when_the_thread_that_started_it_is_killed():
    """The parent-death signal alone (no watchdog): a process started through
    dies_with_parent ends when its parent is killed with SIGKILL."""
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess; from launcher.backends.processes import "
         "dies_with_parent; p = subprocess.Popen(dies_with_parent(['sleep', '600'])); "
         "print(p.pid, flush=True); p.wait()"], stdout=subprocess.PIPE, text=True)
    child = psutil.Process(int(parent.stdout.readline()))
    try:
        # setpriv sets the signal, then execs the program: kill the parent only after that
        # (a launcher killed in that instant is the watchdog's to cover)
        deadline = time.monotonic() + 10
        while child.name() != "sleep" and time.monotonic() < deadline:
            time.sleep(0.01)
        parent.kill()
        parent.wait()
        child.wait(timeout=5)       # psutil.TimeoutExpired if it outlived its parent
    finally:
        if child.is_running():
            child.kill()
        parent.stdout.close()
