"""A preemption notice inside a task: the chief saves a checkpoint at its current step.

The launcher puts ``orchestrator/preempt_site`` on the tasks' ``PYTHONPATH``; its
``sitecustomize`` calls ``arm()`` at every Python start of the task (and then chains to any
other ``sitecustomize``). ``arm`` does nothing unless ``TFCLUSTER_PREEMPT`` names the
signals that carry a notice here (``URG``: the launcher follows the tasks and sends it;
``URG,TERM``: no launcher follows, so the engine's SIGTERM is the notice: Kubernetes), and
only once per task (a child process the script starts is left alone). Until a notice
comes, nothing changes: the only thing armed is a handler of a signal whose default is to
be ignored (SIGURG), and, in TERM mode, SIGTERM's.

On a notice, in the task that saves (chief or master; worker 0 without them):
- every TF1 ``MonitoredSession`` (Estimator ``train`` and ``train_and_evaluate``,
  ``MonitoredTrainingSession``) answers ``should_stop()`` True: the training loop ends after
  its current step, the session closes cleanly and its hooks' ``end()`` run, so
  ``CheckpointSaverHook`` saves at the current step while every ps still serves;
- a custom loop asks ``requested()`` and saves itself (``CheckpointManager.save``);
- the task says on stderr which of the two it does, or that nothing in it saves on a notice
  (``NOTHING_TO_SAVE``: the launcher then stops waiting for a checkpoint).
In TERM mode the chief then ends as SIGTERM would have ended it, once its session closed,
and a ps keeps serving after its SIGTERM while the chief still answers (at most
``TFCLUSTER_PREEMPT_GRACE`` s), so the chief's save can read the variables.

Standard library only at import: it runs in every Python process of the task.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from types import FrameType
from typing import Any

ENV = "TFCLUSTER_PREEMPT"            # the signals of a notice here: "URG" or "URG,TERM"
GRACE_ENV = "TFCLUSTER_PREEMPT_GRACE"   # s a ps serves on after SIGTERM while the chief lives
GRACE = 60.0        # without GRACE_ENV; timeouts.preempt's default (launcher/spec/timeouts.py)
ARMED_ENV = "TFCLUSTER_PREEMPT_ARMED"   # set once armed: the task's children stay untouched
NOTICE = signal.SIGURG               # what the launcher sends: ignored by default
ANSWER = "tfcluster: preemption notice: "   # how each of the task's answers starts
SAVING = ANSWER + "stopping the training session after this step; its checkpoint hooks save"
POLLED = ANSWER + "the training loop asks requested() and saves itself"
NOTHING_TO_SAVE = ANSWER + "nothing in this task saves on it (no training session open)"
SESSION_MODULE = "tensorflow.python.training.monitored_session"
ESTIMATOR_FILE = os.path.join("tensorflow_estimator", "python", "estimator")

MAX_STEPS_ENV = "TFCLUSTER_MAX_STEPS"
HOOKS_MODULE = "tensorflow.python.training.basic_session_run_hooks"
AT_MAX_STEPS = "tfcluster: max_steps {} reached in this task: stopping the training session " \
    "after this step; its checkpoint hooks save"

_state: dict[str, Any] = {"requested": False, "polled": False, "exit": False,
                          "max_steps": None}


def requested(step: int | None = None) -> bool:
    """True once a preemption notice (or the launcher's save request at max_steps) came: a
    custom training loop that asks saves its checkpoint (``CheckpointManager.save``) and
    returns. Asking tells the notice's handler that this loop saves on it. ``step``: the
    loop's step; True also once it reached the spec's max_steps (TFCLUSTER_MAX_STEPS), so
    the loop saves and ends there by itself, with or without a launcher following it."""
    _state["polled"] = True
    if step is not None and _state["max_steps"] is None:
        _state["max_steps"] = _max_steps(os.environ)
    top = _state["max_steps"]
    return bool(_state["requested"]) or (step is not None and top is not None and
                                         int(step) >= top)


def _max_steps(env: dict[str, str] | os._Environ[str]) -> int | None:
    try:
        value = int(env.get(MAX_STEPS_ENV, ""))
    except ValueError:
        return None
    return value if value > 0 else None


def signals_of(value: str) -> list[int]:
    """``"URG,TERM"`` as signal numbers; unknown names are skipped."""
    out = []
    for name in value.split(","):
        sig = getattr(signal, "SIG" + name.strip().upper(), None)
        if isinstance(sig, int):
            out.append(int(sig))
    return out


def saves(env: dict[str, str] | os._Environ[str]) -> bool:
    """This task saves the job's checkpoints: the chief (or master), else worker 0."""
    role = env.get("TFCLUSTER_TASK_TYPE", "")
    if role in ("chief", "master"):
        return True
    if role != "worker" or env.get("TFCLUSTER_TASK_INDEX") != "0":
        return False
    return not any(job in _cluster(env) for job in ("chief", "master"))


def arm(env: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """Install the notice's handlers in this task as ``TFCLUSTER_PREEMPT`` says; False when
    it says nothing, the task neither saves nor serves, or an ancestor was armed."""
    env = os.environ if env is None else env
    wanted = signals_of(env.get(ENV, ""))
    if not wanted or env.get(ARMED_ENV) or \
            threading.current_thread() is not threading.main_thread():
        return False
    os.environ[ARMED_ENV] = str(os.getpid())
    if saves(env):
        for sig in wanted:
            signal.signal(sig, _on_notice)
        top = _max_steps(env)
        if signal.SIGTERM in wanted and top is not None:    # no launcher follows the task
            sys.meta_path.insert(0, _OnImport(HOOKS_MODULE, lambda m: _stop_at(m, top)))
        return True
    if env.get("TFCLUSTER_TASK_TYPE") == "ps" and signal.SIGTERM in wanted:
        return _serve_on(env)
    return False


def _on_notice(signum: int, frame: FrameType | None) -> None:
    if _state["requested"]:
        if signum == signal.SIGTERM:      # a second SIGTERM ends the task as it used to
            _die(signum)
        return
    _state["requested"] = True
    _state["exit"] = signum == signal.SIGTERM
    open_session = _stop_sessions()
    if open_session or _in_estimator(frame):
        _say(SAVING)
    elif _state["polled"]:
        _say(POLLED)
    else:
        _say(NOTHING_TO_SAVE)
        if _state["exit"]:
            _die(signum)


def _stop_sessions() -> bool:
    """Make every MonitoredSession stop after its current step and, in TERM mode, end the
    task once it closed; True when one is open in this thread's frames."""
    module = sys.modules.get(SESSION_MODULE)
    if module is None:
        return False
    cls = module._MonitoredSession
    close = cls._close_internal

    def should_stop(self: Any) -> bool:
        return True

    def close_then_end(self: Any, exception_type: Any = None) -> None:
        try:
            close(self, exception_type)
        finally:
            if _state["exit"]:
                _die(signal.SIGTERM)

    cls.should_stop = should_stop
    cls._close_internal = close_then_end
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        if any(isinstance(v, cls) for v in list(frame.f_locals.values())):
            return True
        frame = frame.f_back
    return False


class _OnImport:
    """A finder that runs ``then(module)`` once the module ``name`` was imported (and
    steps aside at its first import)."""

    def __init__(self, name: str, then: Any):
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run, then = loader.exec_module, self.then

        def exec_module(module: Any) -> None:
            run(module)
            try:
                then(module)
            except Exception as error:  # noqa: BLE001 - training goes on without it
                _say(f"tfcluster: the stop at max_steps is not armed: {error!r}")

        loader.exec_module = exec_module
        return spec


def _stop_at(module: Any, max_steps: int) -> None:
    """Where no launcher follows the task (a pod): the chief's ``CheckpointSaverHook``
    asks its session to stop once the global step reached ``max_steps``; the session's
    hooks' ``end()`` then save there (Estimator, TF1 MonitoredTrainingSession), and the
    script goes on after its training loop as if it had ended by itself."""
    cls = module.CheckpointSaverHook
    after = cls.after_run

    def after_run(self: Any, run_context: Any, run_values: Any) -> Any:
        result = after(self, run_context, run_values)
        stale = run_values.results      # the global step before this run's update
        if stale is not None and int(stale) + 1 >= max_steps and not _state["requested"]:
            _state["requested"] = True
            _say(AT_MAX_STEPS.format(max_steps))
            run_context.request_stop()
        return result

    cls.after_run = after_run


def _in_estimator(frame: FrameType | None) -> bool:
    """An Estimator is training (or about to open its session) in these frames."""
    while frame is not None:
        if ESTIMATOR_FILE in frame.f_code.co_filename and frame.f_code.co_name == "train":
            return True
        frame = frame.f_back
    return False


def _serve_on(env: dict[str, str] | os._Environ[str]) -> bool:
    """A ps in TERM mode: on SIGTERM, serve on while the chief answers, at most the grace
    period, then end as SIGTERM ends it. The main thread sits in TensorFlow's
    ``server.join()``, where no Python handler runs: a thread hears the signal through
    the wakeup fd."""
    chief = next((_cluster(env)[job][0] for job in ("chief", "master")
                  if _cluster(env).get(job)), None)
    if chief is None:
        return False
    try:
        grace = float(env.get(GRACE_ENV, GRACE))
    except ValueError:
        grace = GRACE
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    if signal.set_wakeup_fd(write_end) != -1:     # someone else listens: leave it be
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        return False

    def wait() -> None:
        while os.read(read_end, 1) != bytes([signal.SIGTERM]):
            pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _answers(chief):
            time.sleep(0.5)
        _die(signal.SIGTERM)

    threading.Thread(target=wait, daemon=True, name="tfcluster-preempt").start()
    return True


def _answers(address: str) -> bool:
    # orchestrator.roles.split_address, inlined: this module is loaded by its path, alone
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1):
            return True
    except (OSError, ValueError):
        return False


def _cluster(env: dict[str, str] | os._Environ[str]) -> dict[str, list[str]]:
    try:
        cluster = json.loads(env.get("TF_CONFIG", "{}")).get("cluster", {})
    except (ValueError, AttributeError):
        return {}
    return cluster if isinstance(cluster, dict) else {}


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _die(signum: int) -> None:
    """End the task as ``signum``'s default action does."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    if threading.current_thread() is not threading.main_thread():
        os._exit(128 + signum)      # only the main thread may restore a handler
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
