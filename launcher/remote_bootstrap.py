"""Runs on a remote host, sent there by the ssh backend: starts one task, relays signals to
its process group, and ends that group when the launcher goes away.

Plain standard library, Python 3.6+; no shell ever sees the task's arguments or environment.
The ssh backend runs ``PYTHON -c STUB`` (``STUB`` below) and writes to its stdin:

1. this file's source, as one JSON string (the stub reads it and runs it);
2. JSON messages, one a line: ``{"nonce", "check": [...]}`` checks programs and working
   directories (preflight) and ``{"nonce", "probe": {"argv", "env", "cwd", "timeout"}}``
   runs a short command; each is answered by one JSON line on stdout. Then
   ``{"nonce", "argv", "env", "cwd", "grace"}`` runs the task, the last message;
3. then control lines, each a signal number for the task's process group (``0``: only a
   sign of life, sent every few seconds).

End of stdin (the launcher closed it, died, or the connection dropped), or no line at all
for ``silence`` seconds (the host is cut off from the launcher: the launcher has given the
task up by then), terminates the group, then kills it after ``grace`` seconds. When the
task ends, whatever is left of its group is killed. stdout carries the task's stdout and
stderr; stderr carries status lines for the launcher, ``NONCE {"started": PID}`` and
``NONCE {"exit": STATUS}`` (negative: signal).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

STUB = "import sys,json;exec(json.loads(sys.stdin.readline()))"


def report(nonce, **fields):
    """A status line for the launcher, on stderr."""
    try:
        sys.stderr.write(nonce + " " + json.dumps(fields) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def say(text):
    """A line in the task's output, from the bootstrap itself."""
    try:
        sys.stdout.write("tfcluster-bootstrap: " + text + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


def die_with_bootstrap():
    """A preexec function (Linux; else None): the task gets SIGTERM when the bootstrap
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


def watch_control(pgid, grace, silence=None):
    """Relay control lines as signals; at end of stdin, or after ``silence`` seconds without
    a line, terminate then kill the group."""
    last = [time.monotonic()]
    ended = threading.Event()

    def relay():
        for line in sys.stdin:
            last[0] = time.monotonic()
            try:
                sig = int(line.strip())
            except ValueError:
                continue
            if sig:
                killpg(pgid, sig)
        ended.set()

    reader = threading.Thread(target=relay)
    reader.daemon = True
    reader.start()
    while not ended.wait(0.5):
        if silence and time.monotonic() - last[0] > silence:
            say(f"no word from the launcher for {silence:g} s: ending the task")
            break
    killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    killpg(pgid, signal.SIGKILL)


def shown(text):
    """``text`` as one printable line: control characters escaped (``\\n``, ``\\x1b``)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def program_problem(program, cwd, path):
    """Why ``program`` cannot be started in ``cwd`` with ``path`` as PATH, or None. (The
    launcher checks local tasks with this function too.)"""
    problem = _program_problem(program, cwd, path)
    return None if problem is None else shown(problem)


def _program_problem(program, cwd, path):
    if "/" in program:
        full = os.path.join(cwd or os.getcwd(), os.path.expanduser(program))
        where = "" if os.path.isabs(os.path.expanduser(program)) else \
            " (relative to " + (cwd or os.getcwd()) + ")"
        if os.path.isdir(full):
            return "program " + program + " is a directory" + where
        if not os.path.isfile(full):
            return "program " + program + " not found" + where
        if not os.access(full, os.X_OK):
            return ("program " + program + " is not executable" + where + " (chmod +x it, "
                    "or start it with its interpreter)")
        return None
    if shutil.which(program, path=path):
        return None
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder or ".", program)
        if os.path.isfile(candidate):
            return ("program " + program + " (" + candidate + ") is not executable (chmod +x "
                    "it, or start it with its interpreter)")
    return "program " + program + " not found on PATH (" + path + ")"


def port_taken(port):
    """True when binding *:PORT fails here (what TensorFlow's server would do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return True
    return False


def check(nonce, items):
    """Preflight: every task's working directory, program and port given in the spec, as
    one JSON line."""
    problems = []
    for item in items:
        if item.get("port") and port_taken(item["port"]):
            problems.append(f"{item['task']}: port {item['port']} is already in use on "
                            f"this host (pick another port in the spec, or leave the port "
                            f"out to get a free one)")
        cwd, program = item.get("cwd"), item["program"]
        if cwd and not os.path.isdir(cwd):
            problems.append(f"{item['task']}: working directory {shown(cwd)} does not exist")
            continue
        path = item.get("path") or os.environ.get("PATH", os.defpath)
        problem = program_problem(program, cwd, path)
        if problem:
            problems.append(f"{item['task']}: {problem}")
    print(json.dumps({"nonce": nonce, "host": socket.gethostname(), "problems": problems}))
    sys.stdout.flush()


def probe(nonce, desc):
    """Run a short command to its end (or its timeout); answer with its status and output."""
    env = dict(os.environ)
    env.update(desc.get("env") or {})
    timeout = desc.get("timeout", 60)
    try:
        child = subprocess.Popen(desc["argv"], env=env, cwd=desc.get("cwd") or None,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        status, output = (127 if isinstance(e, FileNotFoundError) else 126), str(e)
    else:
        try:
            output = child.communicate(timeout=timeout)[0].decode("utf-8", "replace")
            status = child.returncode
        except subprocess.TimeoutExpired:
            killpg(child.pid, signal.SIGKILL)
            child.communicate()
            status, output = 124, f"timed out after {timeout:.0f}s"
        killpg(child.pid, signal.SIGKILL)
    answer = {"nonce": nonce, "probe": {"status": status, "output": output[-65536:]}}
    print(json.dumps(answer))
    sys.stdout.flush()


def run(desc):
    nonce = desc["nonce"]
    env = dict(os.environ)
    env.update(desc.get("env") or {})
    cwd = desc.get("cwd") or None
    argv = desc["argv"]
    if cwd and not os.path.isdir(cwd):
        say(f"working directory {cwd} does not exist on {socket.gethostname()}")
        report(nonce, exit=127)
        return 127
    try:
        child = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                 stderr=subprocess.STDOUT, start_new_session=True,
                                 preexec_fn=die_with_bootstrap())
    except OSError as e:
        say(f"cannot start {argv[0]} on {socket.gethostname()}: {e.strerror}")
        status = 127 if isinstance(e, FileNotFoundError) else 126
        report(nonce, exit=status)
        return status
    report(nonce, started=child.pid)
    watcher = threading.Thread(target=watch_control,
                               args=(child.pid, desc.get("grace", 5.0), desc.get("silence")))
    watcher.daemon = True
    watcher.start()
    status = child.wait()
    killpg(child.pid, signal.SIGKILL)
    report(nonce, exit=status)
    return status if status >= 0 else 128 - status


def main():
    while True:
        line = sys.stdin.readline()
        if not line.strip():
            return 0      # the launcher ran no task here
        desc = json.loads(line)
        if "check" in desc:
            check(desc["nonce"], desc["check"])
        elif "probe" in desc:
            probe(desc["nonce"], desc["probe"])
        else:
            return run(desc)


if __name__ == "__main__":
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)  # not sys.exit: the watcher thread may hold stdin's lock
