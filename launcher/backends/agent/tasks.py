"""The agent's task table: spawn a task, relay its output in frames, signal and kill its
process group, end them all when the launcher goes away or goes silent.

Plain standard library, Python 3.6+ (part of the agent's joined source).
"""

import os
import signal
import socket
import subprocess
import threading
import time

from launcher.backends.agent.wire import say, send_frame, send_json
from launcher.backends.agent.words import refused_status, start_failure_line


def die_with_agent_fn():
    """A preexec function (Linux; else None): the task gets SIGTERM when the agent
    itself is killed. libc is loaded here, before the fork."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def killpg(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except OSError:
        return False
    return True


def start_message(task, cwd, env=None):
    """What ``spawn`` needs to start ``task`` (a TaskPlan, in the launcher): its name,
    argv, environment (``env``: another than the plan's) and working directory. The local
    backend, the ssh session and the Slurm node step all start a task from it, so a value
    passed to a task's process is added here and in ``spawn``, once."""
    return {"task": task.name, "argv": list(task.command),
            "env": dict(task.env if env is None else env), "cwd": cwd}


def spawn(desc, dies_with_agent=True):
    """Start a task's process, or a probe's (``desc``: ``argv``, ``env``, ``cwd``, as
    ``start_message`` makes it): the one place that does it, on every host and for the
    local backend. This process's environment plus ``env``, in ``cwd``, in a session of its
    own, its stdout and stderr into one pipe; ``dies_with_agent``: SIGTERM when this process
    dies (a preexec function: the local backend goes without, its watchdog covers its
    tasks and a start stays a vfork). A variable whose value is None is left out. OSError
    when it cannot start (a missing ``cwd`` too)."""
    argv, cwd = desc["argv"], desc.get("cwd") or None
    full = dict(os.environ)
    full.update(desc.get("env") or {})
    for name in [n for n, v in full.items() if v is None]:
        del full[name]
    if cwd and not os.path.isdir(cwd):
        raise FileNotFoundError(2, "No such file or directory", cwd)
    return subprocess.Popen(argv, env=full, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True,
                            preexec_fn=die_with_agent_fn() if dies_with_agent else None)


class Tasks:
    """The task table: the tasks this agent runs on its host: id -> process group, while it runs."""

    def __init__(self):
        self.groups = {}
        self.followers = []
        self.lock = threading.Lock()
        self.grace = 5.0
        self.silence = None
        self.nonce = ""
        self.ending = False

    def start(self, desc):
        """Start one task (on the main thread, which lives as long as the agent: the
        task's parent-death signal follows the thread that started it)."""
        nonce, task_id = desc["nonce"], str(desc["run"])
        self.nonce = nonce
        self.grace, self.silence = desc.get("grace", self.grace), desc.get("silence")
        argv, env, cwd = desc["argv"], desc.get("env") or {}, desc.get("cwd") or None
        try:
            if self.ending:
                raise OSError("the launcher is gone")
            child = spawn(desc)
        except OSError as e:
            line = start_failure_line(desc.get("task", "the task"), argv, e, cwd,
                                      env.get("PATH", os.environ.get("PATH")),
                                      desc.get("host") or socket.gethostname())
            say(nonce, task_id, line)
            send_frame(nonce, "out", task_id)
            send_json(nonce, "status", task_id, {"exit": refused_status(e), "refused": line})
            return
        with self.lock:
            self.groups[task_id] = child.pid
        send_json(nonce, "status", task_id, {"started": child.pid})
        follower = threading.Thread(target=self.follow, args=(nonce, task_id, child))
        follower.daemon = True
        follower.start()
        self.followers.append(follower)

    def follow(self, nonce, task_id, child):
        """Relay the task's output; at its end, kill what is left of its group and report
        its exit after its last output."""
        relay = threading.Thread(target=relay_output, args=(nonce, task_id, child.stdout))
        relay.daemon = True
        relay.start()
        status = child.wait()
        killpg(child.pid, signal.SIGKILL)
        relay.join(5)       # a process that left the group may hold the pipe
        send_frame(nonce, "out", task_id)
        with self.lock:
            self.groups.pop(task_id, None)
        send_json(nonce, "status", task_id, {"exit": status})

    def signal(self, task_id, sig):
        with self.lock:
            pgid = self.groups.get(task_id)
        if pgid is not None:
            killpg(pgid, sig)

    def end_all(self, why=None):
        """Terminate every task's group, kill them after ``grace`` s; wait for the reports."""
        with self.lock:
            if self.ending:
                return
            self.ending = True
            groups = dict(self.groups)
        for task_id, pgid in groups.items():
            if why:
                say(self.nonce, task_id, why)
            killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        while any(group_alive(g) for g in groups.values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pgid in groups.values():
            killpg(pgid, signal.SIGKILL)
        for follower in list(self.followers):
            follower.join(10)


def relay_output(nonce, task_id, pipe):
    fd = pipe.fileno()
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        send_frame(nonce, "out", task_id, data)
    pipe.close()


def watch_silence(tasks, last, then):
    """End every task once no line came from the launcher for ``tasks.silence`` s, then
    call ``then``."""
    while not tasks.ending:
        time.sleep(0.5)
        if tasks.silence and time.monotonic() - last[0] > tasks.silence:
            tasks.end_all(f"no word from the launcher for {tasks.silence:g} s: ending "
                          f"the task")
            then()      # stdin may stay open for ever: the main thread waits there

