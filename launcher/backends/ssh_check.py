"""The ssh backend's host check, before anything starts: each host's agent checks its
tasks' working directories, programs, explicit ports and environments
(launcher/backends/agent/probes.py) and answers with the host's GPUs and TensorFlow; with
ssh.sync, the workdir's copy is found or sent first (launcher/backends/ssh_copy.py). Why a
host failed is one line: the agent's problems, or ssh's own failure in words.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from launcher import gpus
from launcher.backends import workdir_sync
from launcher.backends.environment import check_item
from launcher.backends.ssh_copy import WorkdirCopy
from launcher.backends.ssh_openssh import SSHOptions, explain_ssh_error
from launcher.backends.ssh_session import HostSession
from launcher.plan import JobPlan, TaskPlan


class HostChecks:
    """What the hosts' checks found: their GPUs (nvidia-smi's answers) and TensorFlow."""

    def __init__(self, plan: JobPlan, options: SSHOptions, copy: WorkdirCopy | None,
                 python: Callable[[TaskPlan], str]):
        self.plan = plan
        self.options = options
        self.copy = copy
        self.python = python
        self.gpu_answers: dict[str, Any] = {}                  # host -> nvidia-smi's
        self.tensorflow: dict[str, dict[str, str]] = {}        # host -> task -> version
        self._lock = threading.Lock()

    def check(self, session: HostSession, tasks: list[TaskPlan], deadline: float,
              ssh: Callable[[str], list[str]]) -> str | None:
        """Why the host failed its check, or None. With ssh.sync the check first finds the
        workdir's copy there (one round trip when the host has it); else the files the host
        lacks go through ``ssh`` (tar), and the copy is built there before the check runs
        in it."""
        items = [self.item(t) for t in tasks]
        message: dict[str, Any] = {"check": items, "gpu_query": gpus.QUERY}
        copy = self.copy
        if copy is not None:
            message["sync"] = copy.ask_state()
        answer, other = session.ask(message, max(1.0, deadline - time.monotonic()))
        if answer is not None and copy is not None and not (answer.get("sync") or {}).get("root"):
            why = copy.send(answer["sync"], tasks[0].host, ssh)
            if why:
                return why
            message = {"check": items, "gpu_query": gpus.QUERY,
                       "install": copy.ask_install(answer["sync"]["incoming"])}
            answer, other = session.ask(message, max(30.0, deadline - time.monotonic()))
            if answer is not None and not (answer.get("sync") or {}).get("root"):
                return (f"ssh.sync: {answer['sync'].get('problem')}; nothing of the copy is "
                        "used")
        if answer is not None:
            self._keep(tasks[0].host, answer)
            return "; ".join(answer["problems"]) or None
        return self._why_no_answer(session, tasks[0], other)

    def _keep(self, host: str, answer: dict[str, Any]) -> None:
        with self._lock:
            self.gpu_answers[host] = answer.get("gpus")
            self.tensorflow[host] = answer.get("tensorflow") or {}
        if self.copy is not None:
            self.copy.found(host, answer)

    def _why_no_answer(self, session: HostSession, task: TaskPlan, other: list[str]) -> str:
        """The check gave no answer: out of time, ssh's own failure (exit status 255), no
        Python to run it, or its last line."""
        if session.timed_out:
            return "no answer to the check in time (timeouts.start)"
        session.close_stdin()
        try:
            status = session.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            session.proc.kill()
            status = session.proc.wait()
        session.ended()
        other += session.said
        if status == 255:
            return explain_ssh_error("\n".join(other), self.options)
        if status in (126, 127):
            source = "ssh.python" if self.options.python else "the task's Python"
            return (f"{self.python(task)} ({source}) cannot run on this host (exit "
                    f"status {status}): Python 3 is needed there to start the tasks")
        lines = [ln for ln in other if ln.strip()]
        return (f"the check did not run (exit status {status}): "
                f"{lines[-1] if lines else 'no output'}")

    def item(self, task: TaskPlan) -> dict[str, Any]:
        """What the host checks of ``task`` (launcher/backends/environment.py); with
        ssh.sync, in the host's copy of the workdir."""
        item = check_item(task, self.plan, ' (ssh.sync copies the workdir to every host: '
                                           '"ssh": {"sync": true})')
        if self.copy is not None:
            item.update(cwd=None, in_tree=self.copy.in_tree(task), hint=(
                " (ssh.sync copied the workdir there: is it left out by "
                f"{workdir_sync.IGNORE_FILE}, or outside the workdir?)"))
        return item

    def notes(self) -> list[str]:
        """One line with the TensorFlow each host's tasks import; which hosts differ."""
        hosts_of: dict[str, list[str]] = {}
        for host, versions in self.tensorflow.items():
            for version in sorted(set(versions.values())):
                hosts_of.setdefault(version, []).append(host)
        if not hosts_of:
            return []
        if len(hosts_of) == 1:
            version, hosts = next(iter(hosts_of.items()))
            return [f"TensorFlow {version} on every host ({len(hosts)})"]
        parts = [f"{v} on {', '.join(sorted(h))}" for v, h in sorted(hosts_of.items())]
        return ["TensorFlow differs between hosts: " + "; ".join(parts)]
