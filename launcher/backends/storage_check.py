"""Before training: is model_dir the same storage for every task, and is there work left?

Shared storage: the launcher writes a probe file into model_dir, then a tiny Python
program runs where the tasks will run (``backend.probe``, with a task's own interpreter,
environment and working directory) that writes a probe of its own and reads the
launcher's. The launcher then reads every probe. A task that cannot write model_dir, does
not see the launcher's probe, or whose probe the launcher cannot see, is on other storage
(a private disk, another mount, another bucket): the chief and the ps would write halves of
one checkpoint to different places. The launcher refuses to start (exit 2) and names the
task and its host. Probes are removed afterwards.

One probe per environment, not per task: tasks that run in the same place
(``Backend.storage_view``: the host; for Docker the engine with its image and mounts) with
the same interpreter, working directory and environment from the spec (the variables the
launcher sets for each task aside) see the same filesystems, so one probe speaks for them
all. A host whose tasks differ in any of these keeps one probe for each.

Work left: a model_dir whose newest complete checkpoint is already at or past max_steps is
reported and the job is not started: ``launch`` exits 0 (the model the user asked for
exists; TensorFlow would restore it and stop at once). ``--retrain`` starts the job anyway.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from launcher.errors import PreflightError

if TYPE_CHECKING:
    from launcher.backends.base import Backend, ProbeResult
    from launcher.output.console import Console
    from launcher.plan import JobPlan, TaskPlan
    from launcher.records.events import EventLog

PROBE_PREFIX = ".tfcluster-probe-"
NOT_FOR_PROBES = ("TFCLUSTER_RUN_ID", "TF_CONFIG")
# what the launcher sets for each task: no part of the environment a probe stands for
PER_TASK = ("TFCLUSTER_", "TF_CONFIG", "CUDA_VISIBLE_DEVICES")
_PYTHON_RE = re.compile(r"^python(\d+(\.\d+)?)?$")

# Runs on the task's host: argv = MODE URL NAME TOKEN LAUNCHER_NAME; prints one JSON line.
PROBE_SCRIPT = r"""
import json, os, socket, sys
mode, url, name, token, other = sys.argv[1:6]
out = {"host": socket.gethostname(), "cwd": os.getcwd()}
try:
    try:
        import fsspec
    except ImportError:
        if "://" in url:
            raise RuntimeError("fsspec is not installed for " + sys.executable)
        fsspec = None
    if fsspec is None:
        root = os.path.abspath(url)
        where, path, lpath = root, os.path.join(root, name), os.path.join(root, other)
        if mode == "write":
            os.makedirs(root, exist_ok=True)
            with open(path, "w") as f:
                f.write(token)
            out["seen"] = open(lpath).read() if os.path.exists(lpath) else None
        elif os.path.exists(path):
            os.remove(path)
    else:
        fs, root = fsspec.core.url_to_fs(url)
        root = root.rstrip("/")
        where, path, lpath = fs.unstrip_protocol(root), root + "/" + name, root + "/" + other
        if mode == "write":
            fs.makedirs(root, exist_ok=True)
            fs.pipe_file(path, token.encode())
            out["seen"] = fs.cat_file(lpath).decode() if fs.exists(lpath) else None
        elif fs.exists(path):
            fs.rm_file(path)
    out["where"] = where
    out["ok"] = True
except Exception as e:
    out["error"] = type(e).__name__ + ": " + str(e)
print(json.dumps(out))
"""


@dataclass
class ProbeOutcome:
    """What one task's storage probe found: where model_dir resolved, and the problem if any."""

    task: str
    host: str            # the host in the spec
    seen_host: str       # the host name the probe reported
    where: str           # model_dir as the task resolved it
    problem: str | None


def probe_python(command: list[str]) -> str:
    """The task's own interpreter when its command starts with one, else python3."""
    return command[0] if _PYTHON_RE.match(os.path.basename(command[0])) else "python3"


def _token() -> str:
    return os.urandom(16).hex()


def environment_of(task: TaskPlan, backend: Backend) -> Hashable:
    """What one storage probe stands for: where the task runs, its interpreter, working
    directory and the environment the spec gives it."""
    env = tuple(sorted((k, v) for k, v in task.env.items() if not k.startswith(PER_TASK)))
    return backend.storage_view(task), probe_python(task.command), task.cwd, env


def _parse(output: str) -> dict[str, Any] | None:
    for line in reversed(output.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def _write_launcher_probe(fs: Any, root: str, model_dir: str, name: str, token: str) -> bool:
    """The launcher's own probe in model_dir (made when missing); whether model_dir existed.
    PreflightError when the launcher cannot write it."""
    try:
        existed = fs.exists(root)
        fs.makedirs(root, exist_ok=True)
        fs.pipe_file(f"{root}/{name}", token.encode())
    except Exception as e:  # noqa: BLE001 - any storage error: say what and where
        raise PreflightError(f"model_dir {model_dir}: the launcher cannot write it "
                             f"({type(e).__name__}: {e})") from None
    return bool(existed)


def _probe_problem(result: ProbeResult, task: TaskPlan, model_dir: str, fs: Any, root: str,
                   name: str, token: str, launcher_token: str
                   ) -> tuple[dict[str, Any], str | None, bool]:
    """One probe's answer: what it said, the problem in words (None: it shares the
    launcher's storage), and whether the launcher sees the file it wrote."""
    out = _parse(result.output)
    if out is None:     # the probe did not run: the interpreter, not model_dir
        detail = result.output.strip()[-300:] or "no output"
        return {}, (f"the storage check could not run {probe_python(task.command)} "
                    f"there (exit status {result.returncode}): {detail}"), True
    if not out.get("ok"):
        detail = out.get("error") or result.output.strip()[-300:] or \
            f"exit status {result.returncode}"
        return out, f"cannot write model_dir {model_dir}: {detail}", True
    if not _visible(fs, f"{root}/{name}", token):
        return out, (f"writes model_dir to {out.get('where')}, which the launcher "
                     "does not see (the launcher's model_dir is "
                     f"{fs.unstrip_protocol(root)})"), False
    if out.get("seen") != launcher_token:
        return out, (f"does not see the launcher's probe in {out.get('where')}: not the "
                     f"storage the launcher sees ({fs.unstrip_protocol(root)})"), True
    return out, None, True


def _refuse(model_dir: str, outcomes: list[ProbeOutcome], events: EventLog | None, fs: Any,
            root: str, existed: bool) -> None:
    """Record the outcomes and raise PreflightError naming every task that does not share
    the storage (a model_dir the check made is removed)."""
    bad = [o for o in outcomes if o.problem]
    if events is not None:     # a job's event log starts with job_started
        events.write("storage_check", model_dir=model_dir, ok=False,
                     tasks={o.task: {"host": o.seen_host, "where": o.where,
                                     "problem": o.problem} for o in outcomes})
    if not existed:    # a refused job leaves no model_dir behind
        _remove_empty_dir(fs, root)
    lines = "\n".join(f"  {o.task} on host {o.host} ({o.seen_host}): {o.problem}" for o in bad)
    raise PreflightError(f"model_dir is not the same storage for every task; the chief "
                         f"and every ps must write into one place:\n{lines}\n"
                         f"(set \"check_storage\": false in the spec to skip this check)")


def check_shared_storage(plan: JobPlan, backend: Backend, console: Console | None = None,
                         events: EventLog | None = None) -> None:
    """Raise PreflightError naming every task that does not share model_dir's storage.

    Where sharing is certain (every task a process of this machine, and model_dir a local
    path) only the launcher's own write is checked: no probe process per task."""
    if backend.local_processes and plan.storage.is_local_absolute(plan.model_dir):
        _check_local_write(plan)
        if console is not None:
            console.info(f"model_dir {plan.model_dir}: the same storage for all "
                         f"{len(plan.tasks)} tasks")
        return
    from concurrent.futures import ThreadPoolExecutor

    import fsspec

    fs, root = fsspec.core.url_to_fs(plan.storage.url, **plan.storage.options)
    root = root.rstrip("/")
    tag = f"{PROBE_PREFIX}{plan.run_id}-{_token()[:6]}"
    launcher_name, launcher_token = f"{tag}-launcher", _token()
    existed = _write_launcher_probe(fs, root, plan.model_dir, launcher_name, launcher_token)
    groups: dict[Hashable, list[TaskPlan]] = {}     # one probe each, by its first task
    for task in plan.tasks:
        groups.setdefault(environment_of(task, backend), []).append(task)
    probed = [members[0] for members in groups.values()]
    names = {t.name: f"{tag}-{t.type}-{t.index}" for t in probed}
    tokens = {t.name: _token() for t in probed}
    timeout = plan.timeouts.start

    def run_probe(task: TaskPlan, mode: str) -> ProbeResult:
        argv = [probe_python(task.command), "-c", PROBE_SCRIPT, mode, plan.model_dir,
                names[task.name], tokens[task.name], launcher_name]
        # the task's environment, less what marks a process as a task of the job
        env = {k: v for k, v in task.env.items() if k not in NOT_FOR_PROBES}
        return backend.probe(dataclasses.replace(task, env=env), argv, timeout)

    outcomes: list[ProbeOutcome] = []
    unseen: list[TaskPlan] = []
    try:
        try:
            with ThreadPoolExecutor(max_workers=min(16, len(probed))) as pool:
                results = list(pool.map(lambda t: run_probe(t, "write"), probed))
        except NotImplementedError as e:
            if console is not None:
                console.info(f"shared-storage check skipped: {e}")
            return
        for members, result in zip(groups.values(), results):
            task = members[0]
            out, problem, seen = _probe_problem(result, task, plan.model_dir, fs, root,
                                                names[task.name], tokens[task.name],
                                                launcher_token)
            if not seen:
                unseen.append(task)
            outcomes += [ProbeOutcome(t.name, t.host, out.get("host", "?"), out.get("where", "?"),
                                      problem) for t in members]
    finally:
        _remove(fs, [f"{root}/{launcher_name}"] + [f"{root}/{n}" for n in names.values()])
        if unseen:
            with ThreadPoolExecutor(max_workers=min(16, len(unseen))) as pool:
                list(pool.map(lambda t: run_probe(t, "remove"), unseen))
    if any(o.problem for o in outcomes):
        _refuse(plan.model_dir, outcomes, events, fs, root, existed)
    if console is not None:
        console.info(f"model_dir {plan.model_dir}: the same storage for all "
                     f"{len(outcomes)} tasks")


def _check_local_write(plan: JobPlan) -> None:
    """The launcher can create and write model_dir on this machine's filesystem."""
    root = plan.storage.url.removeprefix("file://")
    probe = os.path.join(root, f"{PROBE_PREFIX}{plan.run_id}-{_token()[:6]}-launcher")
    try:
        os.makedirs(root, exist_ok=True)
        with open(probe, "w") as f:
            f.write("probe")
        os.remove(probe)
    except OSError as e:
        raise PreflightError(f"model_dir {plan.model_dir}: the launcher cannot write it "
                             f"({type(e).__name__}: {e})") from None


def _remove_empty_dir(fs: Any, root: str) -> None:
    try:
        if not fs.ls(root):
            fs.rmdir(root)
    except (FileNotFoundError, OSError):
        pass


def _visible(fs: Any, path: str, token: str) -> bool:
    try:
        return fs.cat_file(path).decode() == token
    except (FileNotFoundError, UnicodeDecodeError):
        return False


def _remove(fs: Any, paths: list[str]) -> None:
    for path in paths:
        try:
            fs.rm_file(path)
        except (FileNotFoundError, OSError):
            pass


def already_trained(plan: JobPlan, retrain: bool, console: Console, events: EventLog) -> bool:
    """True when model_dir already holds a complete checkpoint at or past max_steps and the
    user did not ask to train again (the job must not start)."""
    if plan.max_steps is None:
        return False
    try:
        ckpt = plan.storage.reader().newest_complete()
    except Exception:  # noqa: BLE001 - unreadable: the storage check reports it
        return False
    if ckpt is None or ckpt.step is None or ckpt.step < plan.max_steps:
        return False
    events.write("already_trained", checkpoint=ckpt.path, step=ckpt.step,
                 max_steps=plan.max_steps, retrain=retrain)
    if retrain:
        console.info(f"model_dir already holds {ckpt.name} (step {ckpt.step} >= max_steps "
                     f"{plan.max_steps}); --retrain: starting anyway (TensorFlow resumes "
                     f"from it; use a new model_dir to train from scratch)")
        return False
    console.info(f"nothing to train: model_dir {plan.model_dir} already holds the complete "
                 f"checkpoint {ckpt.name} (step {ckpt.step} >= max_steps {plan.max_steps}); "
                 f"give --retrain to start the job anyway")
    return True


def keras_steps_note(plan: JobPlan, console: Console, events: EventLog) -> None:
    """Once per run: a Keras 3 job (``"keras": "jax"``) whose launcher cannot read its
    checkpoints' steps (no h5py here) is told so, and how to fix it."""
    if not plan.storage.keras_steps_unreadable():
        return
    events.write("keras_steps_unreadable", python=sys.executable)
    console.info(f"this launcher's Python ({sys.executable}) has no h5py: it cannot read the "
                 f"step of Keras 3's checkpoints (.weights.h5, .keras), which stays unknown "
                 f"in the progress line, the closing line, summary.json and launch status "
                 f"(the script still ends itself at max_steps); pip install h5py (or "
                 f"'tfcluster[keras]') beside the launcher")


def preflight_model_dir(plan: JobPlan, backend: Backend, retrain: bool, console: Console,
                        events: EventLog) -> bool:
    """The checks, as ``launcher.api.Run`` runs them; True: do not start (exit 0)."""
    keras_steps_note(plan, console, events)
    if already_trained(plan, retrain, console, events):
        return True
    if plan.check_storage:
        check_shared_storage(plan, backend, console, events)
    return False
