"""The launcher's own failures and refused commands, on the scripted backend:
- the job loop catches its own failure (a monitor or a backend that raises): every task is
  stopped in order, the result says in one line that it is the launcher's fault, and the
  traceback is in run_dir/launcher-error.txt;
- a command refused at the job's first start is one line, exit status 2, every task
  stopped; refused at a restart, the restart policy decides, as for a task that died."""

from __future__ import annotations

import re
import tempfile

import pytest
from scripted_backend import Script, ScriptedBackend, run_job

from launcher import cli
from launcher.backends.base import NotStarted
from launcher.loop.recovery import StartFailed

pytestmark = pytest.mark.usefixtures("scripted_backend")

SPEC = {"cluster": {"chief": 1, "worker": 1, "ps": 1},
        "timeouts": {"finish": 10, "kill": 3, "poll": 1}}
REFUSED = "worker:0: cannot start train: no #! line and not a binary (exec format error)"


class Raises:
    """A monitor that raises at ``at`` seconds of the job."""

    def __init__(self, clock, at: float):
        self.clock, self.at = clock, at

    def tick(self, tasks):
        if self.clock() >= self.at:
            raise RuntimeError("a bug in a monitor")

    def close(self):
        pass


def test_a_monitor_that_raises_stops_every_task_and_says_it_is_the_launchers_fault(
        tmp_path):
    backend = ScriptedBackend({})
    result, out = run_job(SPEC, backend, tmp_path, monitors=[Raises(backend.clock, 4)])
    saved = tmp_path / "run" / "launcher-error.txt"
    assert result.status == 1
    assert re.fullmatch(r"launcher error \(a bug in tfcluster, not in the job\): RuntimeError: "
                        r"a bug in a monitor at test_launcher_failures.py:\d+; full traceback "
                        f"in {re.escape(str(saved))}; please report it", result.reason)
    assert "Traceback (most recent call last)" in saved.read_text()
    assert "RuntimeError: a bug in a monitor" in saved.read_text()
    assert out.lines.count(f"tfcluster: {result.reason}") == 1
    assert all(h.poll() is not None for hs in backend.handles.values() for h in hs)
    # in order: the trainers first, the ps once they are gone
    ps = backend.handles["ps:0"][0]
    assert ps.signals and all(h.signalled_at < ps.signalled_at for name, hs in
                              backend.handles.items() for h in hs if name != "ps:0")


class BrokenRestart(ScriptedBackend):
    """A backend that raises when it is asked to start a task again."""

    def start(self, task):
        if task.name in self.handles:
            raise OSError("the engine went away")
        return super().start(task)


def test_a_backend_that_raises_still_leaves_nothing_running(tmp_path):
    backend = BrokenRestart({"worker:0": [Script(exit_at=2, status=-9)]})
    result, out = run_job(SPEC, backend, tmp_path)
    assert result.status == 1
    assert result.reason.startswith("launcher error (a bug in tfcluster, not in the job): "
                                    "OSError: the engine went away at ")
    assert all(h.ended is not None for hs in backend.handles.values() for h in hs)
    assert "Traceback" not in out.getvalue()


class Refusing(ScriptedBackend):
    """Refuses ``task``'s command at the starts numbered in ``refused`` (0: the first)."""

    def __init__(self, scripts, task: str, refused: set[int]):
        super().__init__(scripts)
        self.task, self.refused = task, refused

    def start(self, task):
        handle = super().start(task)
        if task.name == self.task and len(self.handles[task.name]) - 1 in self.refused:
            return NotStarted(task, REFUSED, 126)
        return handle


def test_a_command_refused_at_the_first_start_is_one_line_and_exit_status_2(tmp_path):
    backend = Refusing({}, "worker:0", {0})
    with pytest.raises(StartFailed) as refused:
        run_job(SPEC, backend, tmp_path)
    assert str(refused.value) == REFUSED and refused.value.exit_status == 2
    assert [n for _, n in backend.starts] == ["ps:0", "chief:0", "worker:0"]
    assert all(h.poll() is not None for hs in backend.handles.values() for h in hs
               if hs is not backend.handles["worker:0"])
    assert (tmp_path / "run" / "logs" / "worker-0.log").read_text() == REFUSED + "\n"


@pytest.mark.parametrize("policy, status", [("on-failure", 1), ("always", 0)])
def test_a_command_refused_at_a_restart_goes_through_the_restart_policy(tmp_path, policy,
                                                                        status):
    scripts = {"chief:0": [Script(exit_at=9)],
               "worker:0": [Script(exit_at=2, status=-9), Script(), Script(exit_at=1)]}
    backend = Refusing(scripts, "worker:0", {1})
    spec = dict(SPEC, restart={"worker": {"policy": policy, "max_restarts": 3, "backoff": 1}})
    result, _ = run_job(spec, backend, tmp_path)
    assert result.status == status, result.reason
    if status:
        assert result.reason == (f"{REFUSED}; not retried: the same command would be "
                                 "refused again (restart policy 'always' retries it)")
    else:
        assert [n for _, n in backend.starts].count("worker:0") == 3


def test_the_cli_turns_any_launcher_bug_into_one_line(tmp_path, capsys, monkeypatch):
    from launcher import api

    def broken(*args, **kwargs):
        raise KeyError("a bug before the job")
    monkeypatch.setattr(api, "prepare", broken)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert cli.main([str(tmp_path / "spec.json")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    saved = next(tmp_path.glob("tfcluster-launcher-error-*.txt"))
    assert len(err) == 1
    assert re.fullmatch(r"launch: launcher error \(a bug in tfcluster, not in the job\): "
                        r"KeyError: 'a bug before the job' at test_launcher_failures.py:\d+; "
                        f"full traceback in {re.escape(str(saved))}; please report it", err[0])
    assert "KeyError: 'a bug before the job'" in saved.read_text()


def test_a_launcher_thread_that_fails_is_one_line(tmp_path, capsys, monkeypatch):
    """An exception in one of the launcher's own threads (an output pump, a probe) is one
    line with its traceback saved, as launch's own failures are."""
    import threading

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)

    def run():
        def broken():
            raise ValueError("a bug in a thread")
        thread = threading.Thread(target=broken, name="pump-worker:0")
        thread.start()
        thread.join()
        return 0
    assert cli._guard(run) == 0
    err = capsys.readouterr().err.strip().splitlines()
    saved = next(tmp_path.glob("tfcluster-launcher-error-*.txt"))
    assert len(err) == 1 and err[0].startswith(
        "launch: pump-worker:0: launcher error (a bug in tfcluster, not in the job): "
        "ValueError: a bug in a thread at test_launcher_failures.py:")
    assert "Traceback" in saved.read_text() and "Traceback" not in err[0]
