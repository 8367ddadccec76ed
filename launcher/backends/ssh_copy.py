"""``"ssh": {"sync": true}``, the launcher's steps: the workdir's manifest
(launcher/backends/workdir_sync.py), the files a host lacks sent as a tar stream through its
master connection into the folder its agent named, each task's working directory in the
host's copy, and the line that says what was sent. The host's side is the agent's
(launcher/backends/agent/sync_store.py).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import tempfile
import threading
from collections.abc import Callable
from typing import IO, Any, cast

from launcher.backends import workdir_sync
from launcher.backends.processes import dies_with_parent
from launcher.errors import PreflightError
from launcher.plan import JobPlan, TaskPlan


class WorkdirCopy:
    """The workdir's copy on every host: its manifest, each host's root, what went where."""

    def __init__(self, plan: JobPlan, area: str, force: bool):
        """The manifest (PreflightError: missing, unreadable, a symlink out of it, too
        large); each task's directory must lie inside the workdir."""
        root = os.path.abspath(plan.workdir or os.getcwd())
        leave_out = tuple(p for p in (plan.run_dir, _local_path(plan.storage.url)) if p)
        self.manifest = workdir_sync.manifest(root, leave_out)
        self.note = workdir_sync.size_check(self.manifest, force=force)
        for task in plan.tasks:
            if task.cwd and not workdir_sync.inside(root, os.path.abspath(task.cwd)):
                raise PreflightError(f"{task.name}: workdir {task.cwd} lies outside the "
                                     f"workdir {root} that ssh.sync copies")
        self.area = area
        self.roots: dict[str, str] = {}         # host -> its copy's root
        self.sent: dict[str, int] = {}          # host -> bytes of files sent
        self._lock = threading.Lock()

    def ask_state(self) -> dict[str, Any]:
        """The check's question: is the tree on the host, else what does it lack."""
        return {"area": self.area, "tree": self.manifest.tree,
                "objects": list(self.manifest.sizes)}

    def ask_install(self, incoming: str) -> dict[str, Any]:
        """The check's question once the files are there: build the tree."""
        return {"area": self.area, "tree": self.manifest.tree, "entries": self.manifest.entries,
                "incoming": incoming}

    def found(self, host: str, answer: dict[str, Any]) -> None:
        """The host's copy, as its check answered."""
        with self._lock:
            self.roots[host] = answer["sync"]["root"]
            self.sent.setdefault(host, 0)

    def in_tree(self, task: TaskPlan) -> str:
        """``task``'s working directory relative to the synced workdir."""
        local = os.path.abspath(task.cwd or self.manifest.root)
        return os.path.relpath(local, self.manifest.root)

    def remote_cwd(self, task: TaskPlan) -> str | None:
        """Where ``task`` runs on its host: in the host's copy (its cwd before the check)."""
        root = self.roots.get(task.host)
        if root is None:
            return task.cwd
        return os.path.normpath(os.path.join(root, self.in_tree(task)))

    def send(self, state: dict, host: str, ssh: Callable[[str], list[str]]) -> str | None:
        """The files ``host`` lacks, as a tar stream (``ssh(COMMAND)``: the command line
        that runs COMMAND there) into the scratch folder its agent named; why that failed,
        or None."""
        if "problem" in state:
            return f"ssh.sync: {state['problem']}; nothing of the copy is used"
        incoming = str(state["incoming"])
        missing = list(state.get("missing") or [])
        need = sum(self.manifest.sizes[d] for d in missing)
        if need > int(state.get("free", need)):
            return (f"ssh.sync: no room for the copy in {self.area} on this host "
                    f"({workdir_sync.human(int(state['free']))} free, the files it lacks "
                    f"are {workdir_sync.human(need)}); nothing was copied")
        argv = ssh(f"exec tar -x -f - -C {shlex.quote(incoming)}")
        with tempfile.TemporaryFile() as errors:
            proc = subprocess.Popen(dies_with_parent(argv), stdin=subprocess.PIPE,
                                    stdout=subprocess.DEVNULL, stderr=errors,
                                    start_new_session=True)
            sent = 0
            try:
                sent = workdir_sync.write_tar(self.manifest, missing,
                                              cast(IO[bytes], proc.stdin))
            except OSError:
                pass        # tar ended early: its status and message say why
            finally:
                with contextlib.suppress(OSError):
                    cast(IO[bytes], proc.stdin).close()
            status = proc.wait()
            errors.seek(0)
            said = [ln.strip() for ln in errors.read().decode(errors="replace").splitlines()
                    if ln.strip()]
        with self._lock:
            self.sent[host] = sent
        if status == 0:
            return None
        return self._tar_failed(status, said, incoming)

    def _tar_failed(self, status: int, said: list[str], incoming: str) -> str:
        if status == 127 or any("tar: not found" in ln or "tar: command not found" in ln
                                for ln in said):
            return (f"ssh.sync: no tar on this host (needed to copy the workdir into "
                    f"{self.area}); nothing was copied")
        detail = next((ln for ln in said if "Exiting with failure" not in ln),
                      f"exit status {status}")
        return (f"ssh.sync: copying the workdir into {incoming} failed: {detail}; nothing "
                f"of the copy is used")

    def line(self) -> str:
        """What ssh.sync did: the workdir's size, and what went to which hosts."""
        copy, sent = self.manifest, self.sent
        moved = {h: n for h, n in sent.items() if n}
        what = (f"sent {workdir_sync.human(sum(moved.values()))} to {len(moved)} of "
                f"{len(sent)} hosts" if moved else f"every host ({len(sent)}) had it already")
        return (f"ssh.sync: workdir {copy.root} ({len(copy.entries)} entries, "
                f"{workdir_sync.human(copy.total)}, tree {copy.tree[:12]}): {what}")


def _local_path(url: str) -> str | None:
    return url.removeprefix("file://") if "://" not in url.removeprefix("file://") else None
