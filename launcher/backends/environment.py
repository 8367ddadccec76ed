"""Mistakes made outside the spec, found before anything starts: a program that is not
there, a working directory that is missing, a model_dir whose fsspec driver is not
installed, a run directory that cannot be created. Each raises PreflightError with one
line naming the problem (exit status 2)."""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile

from launcher.backends.agent.probes import environment_problems
from launcher.backends.agent.words import program_problem, shown
from launcher.errors import PreflightError
from orchestrator.roles import primary_task

# protocol: (a module its driver needs, what to install when that module is missing)
_S3 = ("s3fs", "pip install 'tfcluster[s3]' (s3fs)")
_ADL = ("adlfs", "pip install adlfs")
_HTTP = ("aiohttp", "pip install aiohttp requests")
DRIVERS = {
    "s3": _S3, "s3a": _S3, "gs": ("gcsfs", "pip install gcsfs"),
    "gcs": ("gcsfs", "pip install gcsfs"),
    "sftp": ("paramiko", "pip install 'tfcluster[sftp]' (paramiko)"),
    "ssh": ("paramiko", "pip install 'tfcluster[sftp]' (paramiko)"),
    "az": _ADL, "abfs": _ADL, "abfss": _ADL, "adl": _ADL,
    "hdfs": ("pyarrow", "pip install pyarrow (and Hadoop's Java libraries)"),
    "webhdfs": ("requests", "pip install requests"), "http": _HTTP, "https": _HTTP,
    "hf": ("huggingface_hub", "pip install huggingface_hub"), "oci": ("ocifs", "pip install ocifs"),
}


def check_fsspec_driver(model_dir: str) -> None:
    """Every protocol of ``model_dir`` (``s3://``, ``simplecache::gs://``) is known to fsspec
    and its driver imports here: the launcher watches model_dir through it. A plain path
    needs no fsspec (it is not imported then)."""
    if "://" not in model_dir and "::" not in model_dir:
        return
    import fsspec
    from fsspec.core import split_protocol

    for part in model_dir.split("::"):
        protocol, _ = split_protocol(part)
        if protocol is None or protocol == "file":
            continue
        module, fix = DRIVERS.get(protocol, (None, None))
        try:
            fsspec.get_filesystem_class(protocol)
            if module is not None and importlib.util.find_spec(module) is None:
                raise ImportError(module)
        except ValueError:
            raise PreflightError(f"model_dir {model_dir}: unknown protocol {protocol}:// "
                                 "(fsspec has no driver of that name)") from None
        except ImportError as e:
            raise PreflightError(f"model_dir {model_dir}: the fsspec driver for {protocol}:// "
                                 "is not installed for the launcher: "
                                 f"{fix or f'install what fsspec asks for ({e})'}") from None


def check_run_dir(path: str) -> None:
    """``path`` exists as a writable directory or can be created (nothing is created)."""
    parent = os.path.abspath(path)
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if parent == os.path.abspath(path) and not os.path.isdir(parent):
        raise PreflightError(f"run_dir {path}: cannot create it (a file of that name exists)")
    if not os.path.isdir(parent):
        raise PreflightError(f"run_dir {path}: cannot create it ({parent} is not a directory)")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".tfcluster-", dir=parent))
    except OSError as e:
        raise PreflightError(f"run_dir {path}: cannot create it in {parent} "
                             f"({e.strerror or e})") from None


NOT_FOR_THE_CHECK = ("TF_CONFIG", "TFCLUSTER_")    # what differs from task to task


def check_item(task, plan, hint: str = "") -> dict:
    """What the environment check asks of ``task`` where it runs (agent/probes.py, check):
    its directory, program, a port the spec gives, and its environment: the entry script,
    TensorFlow when that script imports it, a model_dir that is not a local path opened
    through TensorFlow, tensorboard for the chief where the spec asks for it. ``hint``
    follows a missing script's line."""
    model_dir = plan.model_dir if "://" in plan.model_dir and \
        not plan.model_dir.startswith("file://") else None
    board = plan.tensorboard is not None and task is primary_task(plan.tasks)
    return {"task": task.name, "program": task.command[0], "cwd": task.cwd,
            "path": task.env.get("PATH"), "port": None if task.auto_port else task.port,
            "argv": task.command, "model_dir": model_dir, "tensorboard": board, "hint": hint,
            "keras": plan.keras if task.type in ("chief", "worker") else None,
            "env": {k: v for k, v in task.env.items() if not k.startswith(NOT_FOR_THE_CHECK)}}


def check_local_programs(tasks, plan=None) -> None:
    """Each task's working directory exists and its program can be started here, with the
    task's PATH; with ``plan``, its environment too (``check_item``). Tasks with the same
    problem are named together."""
    problems: dict[str, list[str]] = {}
    answers: dict[str, str | None] = {}     # tasks alike (a role's workers) checked once
    for task in tasks:
        path = task.env.get("PATH") or os.environ.get("PATH", os.defpath)
        item = check_item(task, plan) if plan is not None else None
        key = json.dumps([task.command, task.cwd, path, item and {**item, "task": None}],
                         sort_keys=True)
        if key not in answers:
            answers[key] = _local_problem(task, path, item)
        problem = answers[key]
        if problem:
            problems.setdefault(problem, []).append(task.name)
    if problems:
        problem, names = next(iter(problems.items()))
        raise PreflightError(f"{', '.join(names)}: {problem}")


def _local_problem(task, path: str, item: dict | None) -> str | None:
    """What keeps ``task`` from starting here, in words; None when nothing does."""
    if task.cwd and not os.path.isdir(task.cwd):
        return f"working directory {shown(task.cwd)} does not exist"
    problem = program_problem(task.command[0], task.cwd, path)
    if problem is None and item is not None:
        found, _ = environment_problems(item, task.cwd or os.getcwd(), path)
        problem = "; ".join(found) or None
    return problem


def check_programs_by_probe(plan, backend, group=lambda task: task.host,
                            place: str = "host") -> None:
    """As check_local_programs, where the tasks run: one probe per host (``backend.probe``,
    with the first task's Python, environment and directory) runs the agent's
    check of every task's working directory, program and environment there. ``group``:
    what tasks one probe checks together, named ``place`` in the lines (Slurm: each node;
    Docker: every task, one image)."""
    import dataclasses
    from concurrent.futures import ThreadPoolExecutor

    from launcher.backends import agent
    from launcher.backends.storage_check import probe_python

    hosts: dict[str, list] = {}
    for task in plan.tasks:
        hosts.setdefault(group(task), []).append(task)
    code = ("import json, sys\nns = {'__name__': 'tfcluster_check'}\n"
            f"exec({agent.source()!r}, ns)\n"
            "print(json.dumps(ns['check'](json.loads(sys.argv[1]))))\n")
    timeout = plan.timeouts.start

    def run(tasks) -> list[tuple[str | None, str]]:
        items = [dict(check_item(t, plan), port=None) for t in tasks]
        python = probe_python(tasks[0].command)
        where = dataclasses.replace(tasks[0], cwd=None)     # the check looks at each cwd
        result = backend.probe(where, [python, "-c", code, json.dumps(items)], timeout)
        at = f"{place} {group(tasks[0])}"
        for line in reversed(result.output.strip().splitlines()):
            if line.startswith("{"):
                try:
                    return [(at, p) for p in json.loads(line)["problems"]]
                except (ValueError, KeyError):
                    break
        detail = result.output.strip().splitlines()[-1:] or ["no output"]
        return [(None, f"{', '.join(t.name for t in tasks)}: {python} cannot run on host "
                       f"{tasks[0].host} (exit status {result.returncode}): "
                       f"{shown(detail[0])}; Python 3 is needed there to check and start "
                       "the tasks")]

    try:
        with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
            found = _named_together([p for problems in pool.map(run, hosts.values())
                                     for p in problems])
    except NotImplementedError:
        return
    if len(found) == 1:
        raise PreflightError(found[0])
    if found:
        raise PreflightError(f"{len(found)} tasks cannot start; nothing was started:\n"
                             + "\n".join(f"  {p}" for p in found))


def _named_together(problems: list[tuple[str | None, str]]) -> list[str]:
    """``(PLACE, "TASK: PROBLEM")``: one line for the tasks of one place with the same
    problem, ``TASK, TASK on PLACE: PROBLEM``."""
    tasks_of: dict[tuple[str | None, str], list[str]] = {}
    for at, line in problems:
        task, _, problem = line.partition(": ")
        tasks_of.setdefault((at, problem), []).append(task)
    return [f"{', '.join(tasks)}{f' on {at}' if at else ''}: {problem}"
            for (at, problem), tasks in tasks_of.items()]
