"""Runs on a remote host, sent there by the ssh backend: starts every task of that host,
relays signals to each task's process group, and ends them all when the launcher goes away.

Plain standard library, Python 3.6+; no shell ever sees the task's arguments or environment.
The ssh backend runs ``PYTHON -c STUB`` (``STUB`` below), once per host, and writes to its
stdin:

1. this file's source, as one JSON string (the stub reads it and runs it);
2. JSON messages, one a line: ``{"nonce", "check": [...], "gpu_query"}`` checks programs
   and working directories and asks nvidia-smi for the host's GPUs (preflight) and
   ``{"nonce", "probe": {"argv", "env", "cwd", "timeout"}}`` runs a short command (beside
   the other probes and the tasks); each is answered by one JSON line on stdout.
   ``{"nonce", "run": ID, "task", "argv", "env", "cwd", "grace", "silence"}`` starts a task
   (as many as the host runs; no answer awaited: one round trip for all of them);
3. control lines: ``ID SIGNAL`` sends a signal to task ID's process group; ``0`` is a sign
   of life, sent every few seconds, answered by ``NONCE alive``.

Once a task runs, stdout carries frames: ``NONCE out ID LEN`` and LEN bytes of task ID's
output (its stdout and stderr; LEN 0: its output ended), and status lines ``NONCE status
{"task": ID, "started": PID}`` and ``{"task": ID, "exit": STATUS}`` (negative: signal;
with ``"refused"``: the line saying why its command never ran).

End of stdin (the launcher closed it, died, or the connection dropped), or no line at all
for ``silence`` seconds (the host is cut off from the launcher: the launcher has given its
tasks up by then), terminates every task's group, then kills them after ``grace`` seconds.
When a task ends, whatever is left of its group is killed.
"""

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

STUB = "import sys,json;exec(json.loads(sys.stdin.readline()))"


_OUT = threading.Lock()


def emit(data):
    """Bytes for the launcher, on stdout, whole (frames of several tasks never mix)."""
    with _OUT:
        try:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        except (OSError, ValueError):
            pass


def answer(fields):
    """A JSON answer line (check, probe)."""
    emit((json.dumps(fields) + "\n").encode())


def frame(nonce, task_id, data):
    """Output of task ``task_id`` (empty: its output ended)."""
    emit(f"{nonce} out {task_id} {len(data)}\n".encode() + data)


def report(nonce, **fields):
    """A status line for the launcher."""
    emit((nonce + " status " + json.dumps(fields) + "\n").encode())


def say(nonce, task_id, text):
    """A line in a task's output, from the bootstrap itself."""
    frame(nonce, task_id, ("tfcluster-bootstrap: " + text + "\n").encode())


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
        return _unrunnable_problem(program, full)
    found = shutil.which(program, path=path)
    if found:
        return _unrunnable_problem(program, found)
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder or ".", program)
        if os.path.isfile(candidate):
            return ("program " + program + " (" + candidate + ") is not executable (chmod +x "
                    "it, or start it with its interpreter)")
    return "program " + program + " not found on PATH (" + path + ")"


# ELF e_machine values (elf.h) of the machines a task may be built for
ELF_MACHINES = {3: "i386", 8: "mips", 20: "ppc", 21: "ppc64", 22: "s390x", 40: "arm",
                62: "x86_64", 183: "aarch64", 243: "riscv", 258: "loongarch"}


def _head(path, size=64):
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except OSError:
        return b""


def _elf_machine(head):
    """The machine an ELF file is built for, in words (None: not ELF)."""
    if not head.startswith(b"\x7fELF") or len(head) < 20:
        return None
    code = int.from_bytes(head[18:20], "little" if head[5:6] == b"\x01" else "big")
    return ELF_MACHINES.get(code, "machine type " + str(code))


def _interpreter(head):
    """The program a ``#!`` line names, or None."""
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].split()
    return words[0].decode("utf-8", "replace") if words else ""


def _host_machines():
    """The ELF machines this host runs (its own, and the 32-bit one it runs too)."""
    import platform

    host = platform.machine().lower()
    host = {"amd64": "x86_64", "arm64": "aarch64", "ppc64le": "ppc64"}.get(host, host)
    if host.startswith("arm"):
        host = "arm"
    elif len(host) == 4 and host[0] == "i" and host.endswith("86"):
        host = "i386"
    return {host} | {"x86_64": {"i386"}, "aarch64": {"arm"}}.get(host, set())


def unrunnable(head):
    """Why the kernel refuses to start an executable file that begins with ``head``, in
    words, or None when it runs it (a binary for this host, a #! script)."""
    import platform

    machine = _elf_machine(head)
    if machine is not None:
        known = machine in ELF_MACHINES.values() and bool(_host_machines() &
                                                           set(ELF_MACHINES.values()))
        if known and machine not in _host_machines():
            return ("a binary for another architecture (" + machine + "; this host is " +
                    platform.machine() + ")")
        return None
    interpreter = _interpreter(head)
    if interpreter is None:
        return "no #! line and not a binary"
    if interpreter.startswith("/") and not os.path.exists(interpreter):
        return "its #! interpreter " + interpreter + " was not found"
    return None


def _unrunnable_problem(program, full):
    why = unrunnable(_head(full))
    if why is None:
        return None
    fix = " (add a #! line, or start it with its interpreter)" if why.startswith("no #!") \
        else ""
    return "program " + program + ": " + why + ": the kernel refuses to start it" + fix


def kernel_words(error, argv, cwd=None, path=None, look=True):
    """What the kernel said when it refused to start ``argv`` (an OSError from exec), in
    words a user acts on: ``no #! line and not a binary``, ``permission denied``, ``not
    found in the task's PATH``... ``look``: the program's file is on this host (its first
    bytes tell a script from a binary). The launcher words local start failures with it."""
    import errno
    import platform

    program = argv[0] if argv else ""
    if error.errno == errno.ENOENT and cwd and error.filename == cwd:
        return "working directory " + cwd + " does not exist"
    found = None
    if look:
        found = program if "/" in program else shutil.which(program, path=path)
    full = os.path.join(cwd or os.getcwd(), found) if found else None
    head = _head(full) if full else b""
    if full and os.path.isdir(full):
        return "it is a directory"
    if error.errno == errno.ENOENT:
        if full and os.path.isfile(full):
            interpreter = _interpreter(head)
            if interpreter is not None:
                return "its #! interpreter " + interpreter + " was not found"
            return "a binary whose loader (dynamic linker) is not on this host"
        if "/" in program:
            return "not found"
        return "not found in the task's PATH" + (" (" + path + ")" if path else "")
    if error.errno == errno.ENOEXEC:
        if _elf_machine(head) is not None:
            return ("a binary for another architecture (" + str(_elf_machine(head)) +
                    "; this host is " + platform.machine() + ")")
        if _interpreter(head) is not None:
            return "its #! line names a program the kernel cannot run"
        return "no #! line and not a binary (exec format error)"
    if error.errno == errno.EACCES:
        if full and os.path.isfile(full) and not os.access(full, os.X_OK):
            return "permission denied (the file is not executable: chmod +x it)"
        return "permission denied"
    if error.errno == errno.ETXTBSY:
        return ("the file is being written by another process (text file busy): wait for "
                "the copy or build to finish")
    if error.errno == errno.E2BIG:
        return "its arguments and environment are too long for the kernel (argument list too long)"
    if error.errno == errno.EISDIR:
        return "it is a directory"
    return (error.strerror or str(error)).lower()


def start_failure_line(task, argv, error, cwd=None, path=None, host=None, look=True):
    """The one line for a task whose command the kernel refused: the task, the command
    (shortened), where, and the kernel's answer in words."""
    command = " ".join(shlex.quote(a) for a in argv)
    if len(command) > 160:
        command = command[:157] + "..."
    where = " on " + host if host else ""
    return shown(task + ": cannot start " + command + where + ": " +
                 kernel_words(error, argv, cwd, path, look))


def refusal_in_words(task, argv, reason, cwd=None, path=None, host=None, look=True):
    """start_failure_line for a refusal a wrapper reported in words (``reason``: the C
    library's text for the error, as setpriv or docker's init print it)."""
    import errno

    reason = reason.strip()
    code = next((n for n in sorted(errno.errorcode) if os.strerror(n) == reason), None)
    error = OSError(code, reason) if code is not None else OSError(reason)
    return start_failure_line(task, argv, error, cwd, path, host, look)


def refused_status(error):
    """The exit status a shell gives a command it could not run: 127 not found, else 126."""
    import errno

    return 127 if error.errno == errno.ENOENT else 126


def port_taken(port: int) -> bool:
    """True when binding *:PORT fails here (what TensorFlow's server would do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return True
    return False


def query_gpus(query, path):
    """This host's answer to the launcher's nvidia-smi query (launcher/gpus.py), or None
    where nvidia-smi is not on ``path``."""
    program = shutil.which(query[0], path=path)
    if program is None:
        return None
    try:
        done = subprocess.run([program] + query[1:], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"status": 124, "output": str(e)}
    return {"status": done.returncode, "output": done.stdout.decode("utf-8", "replace")[-65536:]}


def check(nonce, items, gpu_query=None):
    """Preflight: every task's working directory, program and port given in the spec, as
    one JSON line; with ``gpu_query``, also nvidia-smi's answer to it (on the first task's
    PATH)."""
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
    found = {"nonce": nonce, "host": socket.gethostname(), "problems": problems}
    if gpu_query:
        path = (items[0].get("path") if items else None) or os.environ.get("PATH", os.defpath)
        found["gpus"] = query_gpus(gpu_query, path)
    answer(found)


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
        status, output = refused_status(e), str(e)
    else:
        try:
            output = child.communicate(timeout=timeout)[0].decode("utf-8", "replace")
            status = child.returncode
        except subprocess.TimeoutExpired:
            killpg(child.pid, signal.SIGKILL)
            child.communicate()
            status, output = 124, f"timed out after {timeout:.0f}s"
        killpg(child.pid, signal.SIGKILL)
    answer({"nonce": nonce, "probe": {"status": status, "output": output[-65536:]}})


def spawn(argv, env, cwd):
    """Start a task: this process's environment plus ``env``, in ``cwd``, in a session of
    its own, its stdout and stderr into one pipe, SIGTERM when this process dies. OSError
    when it cannot start (a missing ``cwd`` too)."""
    full = dict(os.environ)
    full.update(env)
    if cwd and not os.path.isdir(cwd):
        raise FileNotFoundError(2, "No such file or directory", cwd)
    return subprocess.Popen(argv, env=full, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=die_with_bootstrap())


class Tasks:
    """The tasks this bootstrap runs on its host: id -> process group, while it runs."""

    def __init__(self):
        self.groups = {}
        self.followers = []
        self.lock = threading.Lock()
        self.grace = 5.0
        self.silence = None
        self.nonce = ""
        self.ending = False

    def start(self, desc):
        """Start one task (on the main thread, which lives as long as the bootstrap: the
        task's parent-death signal follows the thread that started it)."""
        nonce, task_id = desc["nonce"], str(desc["run"])
        self.nonce = nonce
        self.grace, self.silence = desc.get("grace", self.grace), desc.get("silence")
        argv, env, cwd = desc["argv"], desc.get("env") or {}, desc.get("cwd") or None
        try:
            if self.ending:
                raise OSError("the launcher is gone")
            child = spawn(argv, env, cwd)
        except OSError as e:
            line = start_failure_line(desc.get("task", "the task"), argv, e, cwd,
                                      env.get("PATH", os.environ.get("PATH")),
                                      socket.gethostname())
            say(nonce, task_id, line)
            frame(nonce, task_id, b"")
            report(nonce, task=task_id, exit=refused_status(e), refused=line)
            return
        with self.lock:
            self.groups[task_id] = child.pid
        report(nonce, task=task_id, started=child.pid)
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
        frame(nonce, task_id, b"")
        with self.lock:
            self.groups.pop(task_id, None)
        report(nonce, task=task_id, exit=status)

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
        frame(nonce, task_id, data)
    pipe.close()


def watch_silence(tasks, last):
    """End every task once no line came from the launcher for ``tasks.silence`` s."""
    while not tasks.ending:
        time.sleep(0.5)
        if tasks.silence and time.monotonic() - last[0] > tasks.silence:
            tasks.end_all(f"no word from the launcher for {tasks.silence:g} s: ending "
                          f"the task")
            finish(0)      # stdin may stay open for ever: the main thread waits there


def main():
    tasks = Tasks()
    last = [time.monotonic()]
    watchdog = None
    while True:
        line = sys.stdin.readline()
        if not line:
            break           # end of stdin: the launcher closed it, died, or is cut off
        last[0] = time.monotonic()
        line = line.strip()
        if line.startswith("{"):
            desc = json.loads(line)
            if "check" in desc:
                check(desc["nonce"], desc["check"], desc.get("gpu_query"))
            elif "probe" in desc:      # beside the others: signals wait for none
                prober = threading.Thread(target=probe, args=(desc["nonce"], desc["probe"]))
                prober.daemon = True
                prober.start()
            elif "run" in desc:
                tasks.start(desc)
                if watchdog is None:
                    watchdog = threading.Thread(target=watch_silence, args=(tasks, last))
                    watchdog.daemon = True
                    watchdog.start()
        elif line == "0":
            if tasks.nonce:
                emit((tasks.nonce + " alive\n").encode())
        elif line:
            task_id, _, sig = line.partition(" ")
            try:
                tasks.signal(task_id, int(sig))
            except ValueError:
                continue
    tasks.end_all()
    return 0


def finish(code):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)  # not sys.exit: a relay thread may still hold a lock


if __name__ == "__main__":
    finish(main())
