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

import hashlib
import json
import os
import re
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
    by_errno = {errno.ENOENT: lambda: _missing_words(program, full, head, path),
                errno.ENOEXEC: lambda: _format_words(head),
                errno.EACCES: lambda: _access_words(full)}
    if error.errno in by_errno:
        return by_errno[error.errno]()
    return _plain_words(error.errno) or (error.strerror or str(error)).lower()


def _plain_words(code):
    """The errors whose words need nothing but the error: None for the others."""
    import errno

    return {errno.ETXTBSY: "the file is being written by another process (text file busy): "
                           "wait for the copy or build to finish",
            errno.E2BIG: "its arguments and environment are too long for the kernel "
                         "(argument list too long)",
            errno.EISDIR: "it is a directory"}.get(code)


def _missing_words(program, full, head, path):
    """ENOENT: the program, its #! interpreter or its loader is not there."""
    if full and os.path.isfile(full):
        interpreter = _interpreter(head)
        if interpreter is not None:
            return "its #! interpreter " + interpreter + " was not found"
        return "a binary whose loader (dynamic linker) is not on this host"
    if "/" in program:
        return "not found"
    return "not found in the task's PATH" + (" (" + path + ")" if path else "")


def _format_words(head):
    """ENOEXEC: a binary for another machine, a #! line the kernel cannot run, or neither."""
    import platform

    if _elf_machine(head) is not None:
        return ("a binary for another architecture (" + str(_elf_machine(head)) +
                "; this host is " + platform.machine() + ")")
    if _interpreter(head) is not None:
        return "its #! line names a program the kernel cannot run"
    return "no #! line and not a binary (exec format error)"


def _access_words(full):
    """EACCES: a file without its executable bit says so."""
    if full and os.path.isfile(full) and not os.access(full, os.X_OK):
        return "permission denied (the file is not executable: chmod +x it)"
    return "permission denied"


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


def check(nonce, items, gpu_query=None, synced=None, sync=None):
    """Preflight: every task's working directory, program and port given in the spec, and
    its environment (``environment_problems``), as one JSON line; with ``gpu_query``, also
    nvidia-smi's answer to it (on the first task's PATH). ``synced``: the root of the
    workdir's copy on this host; an item's ``in_tree`` is its working directory there."""
    problems, tensorflow = [], {}
    for item in items:
        if item.get("port") and port_taken(item["port"]):
            problems.append(f"{item['task']}: port {item['port']} is already in use on "
                            f"this host (pick another port in the spec, or leave the port "
                            f"out to get a free one)")
        cwd, program = item.get("cwd"), item["program"]
        if synced is not None and item.get("in_tree") is not None:
            cwd = os.path.join(synced, item["in_tree"])
        if cwd and not os.path.isdir(cwd):
            problems.append(f"{item['task']}: working directory {shown(cwd)} does not exist")
            continue
        path = item.get("path") or os.environ.get("PATH", os.defpath)
        problem = program_problem(program, cwd, path)
        if problem:
            problems.append(f"{item['task']}: {problem}")
            continue
        found, version = environment_problems(item, cwd or os.getcwd(), path)
        problems += [f"{item['task']}: {p}" for p in found]
        if version is not None:
            tensorflow[item["task"]] = version
    found = {"nonce": nonce, "host": socket.gethostname(), "problems": problems,
             "tensorflow": tensorflow, "sync": sync}
    if gpu_query:
        path = (items[0].get("path") if items else None) or os.environ.get("PATH", os.defpath)
        found["gpus"] = query_gpus(gpu_query, path)
    answer(found)


def checked(desc):
    """A check message: first the workdir's copy when it carries ``sync`` (is the tree here:
    ``sync_state``) or ``install`` (``sync_install``), then ``check`` in that copy. A
    copy not complete yet is answered without a check: what is missing, or the problem."""
    synced = found = None
    if "sync" in desc or "install" in desc:
        try:
            found = sync_install(desc["install"]) if "install" in desc else \
                sync_state(desc["sync"])
        except OSError as e:
            found = {"problem": _os_problem(e)}
        if not found.get("root"):
            answer({"nonce": desc["nonce"], "host": socket.gethostname(), "problems": [],
                    "sync": found})
            return
        synced = found["root"]
    check(desc["nonce"], desc["check"], desc.get("gpu_query"), synced, found)


# ------------------------------------------------------------- the workdir's copy (ssh.sync)
# AREA/objects/SHA256   each file's content once (0600), named by its hash
# AREA/trees/TREE       a complete copy, named by the hash of its manifest; never changed
# AREA/locks/TREE       held shared by every bootstrap whose tasks run in TREE
# AREA/manifests/TREE   the objects TREE uses (for collecting the unused ones)
# AREA/incoming/PID-X   the launcher's tar of missing objects, before they are checked
# AREA/tmp/TREE.PID-X   a copy being built; renamed into trees/ once complete
KEEP_TREES = 4          # copies kept beside the ones in use
OBJECT_GRACE = 600      # seconds an unused object is kept (another launch may be using it)
SYNC: dict = {"locks": [], "scratch": []}


def _os_problem(error):
    return (error.strerror or str(error)) + (" (" + error.filename + ")"
                                             if getattr(error, "filename", None) else "")


def sync_area(area):
    """The copy area, absolute, made private to its owner."""
    root = os.path.abspath(os.path.expanduser(area))
    for sub in ("", "objects", "trees", "manifests", "locks", "incoming", "tmp"):
        os.makedirs(os.path.join(root, sub), mode=0o700, exist_ok=True)
    os.chmod(root, 0o700)
    return root


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _sweep_scratch(root):
    """Scratch folders of bootstraps that are gone (a killed launcher, a lost host)."""
    for sub in ("incoming", "tmp"):
        for name in os.listdir(os.path.join(root, sub)):
            pid = name.rsplit(".", 1)[-1].split("-")[0]
            if pid.isdigit() and not _pid_alive(int(pid)):
                shutil.rmtree(os.path.join(root, sub, name), ignore_errors=True)


def _scratch(folder):
    os.mkdir(folder, 0o700)
    SYNC["scratch"].append(folder)
    return folder


def drop_scratch():
    for folder in SYNC["scratch"]:
        shutil.rmtree(folder, ignore_errors=True)
    SYNC["scratch"] = []


def _hold(root, tree):
    """A shared lock on ``tree`` for as long as this bootstrap lives: the tree is in use
    and no collection removes it."""
    import fcntl

    fd = os.open(os.path.join(root, "locks", tree), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    SYNC["locks"].append(fd)


def sync_state(desc):
    """``{"area", "tree", "objects"}``: the tree's root when it is here, else the objects
    missing and the folder their tar goes into. The tree is held from now on (its lock
    taken before it is looked for: a collection cannot remove it in between)."""
    root = sync_area(desc["area"])
    _sweep_scratch(root)
    tree = desc["tree"]
    _hold(root, tree)
    if os.path.isdir(os.path.join(root, "trees", tree)):
        os.utime(os.path.join(root, "manifests", tree))
        return {"root": os.path.join(root, "trees", tree)}
    objects = os.path.join(root, "objects")
    missing = [h for h in desc["objects"] if not os.path.isfile(os.path.join(objects, h))]
    incoming = _scratch(os.path.join(root, "incoming", str(os.getpid()) + "-" +
                                     os.urandom(4).hex()))
    disk = os.statvfs(root)
    return {"root": None, "missing": missing, "incoming": incoming,
            "free": disk.f_bavail * disk.f_frsize}


def _digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _inside(path):
    norm = os.path.normpath(path)
    if os.path.isabs(norm) or norm == ".." or norm.startswith("../"):
        raise ValueError("path out of the folder: " + path)
    return norm


def sync_install(desc):
    """``{"area", "tree", "entries", "incoming"}``: the objects that came (each checked
    against its name) join the store; the tree is built in tmp/ and renamed into trees/
    once complete. Its root, or the problem (nothing half-built is left)."""
    root = sync_area(desc["area"])
    tree, incoming = desc["tree"], desc["incoming"]
    objects = os.path.join(root, "objects")
    if os.path.dirname(incoming) != os.path.join(root, "incoming"):
        raise ValueError("not a folder of the copy area: " + incoming)
    for name in os.listdir(incoming):
        path = os.path.join(incoming, name)
        if _digest(path) != name:
            return {"problem": "a copied file does not match its hash (" + name + ")"}
        os.chmod(path, 0o600)
        os.replace(path, os.path.join(objects, name))
    building = _scratch(os.path.join(root, "tmp", tree + "." + str(os.getpid()) + "-" +
                                     os.urandom(4).hex()))
    try:
        for path, kind, mode, value in desc["entries"]:
            target = os.path.join(building, _inside(path))
            if kind == "d":
                os.mkdir(target, 0o700)
            elif kind == "l":
                os.symlink(value, target)
            else:
                shutil.copyfile(os.path.join(objects, value), target)
                os.chmod(target, mode & 0o700)
        with open(os.path.join(root, "manifests", tree), "w") as f:
            json.dump(sorted({e[3] for e in desc["entries"] if e[1] == "f"}), f)
        try:
            os.rename(building, os.path.join(root, "trees", tree))
        except OSError:
            if not os.path.isdir(os.path.join(root, "trees", tree)):
                raise           # else another launch built the same tree first
    except OSError as e:
        return {"problem": "cannot build the copy in " + root + ": " + _os_problem(e)}
    finally:
        drop_scratch()
    collect(root)
    return {"root": os.path.join(root, "trees", tree)}


def collect(root, keep=KEEP_TREES):
    """Remove the trees beyond the ``keep`` newest that no bootstrap holds, then the objects
    no kept tree uses."""
    import fcntl

    manifests = os.path.join(root, "manifests")
    names = sorted(os.listdir(manifests), reverse=True,
                   key=lambda n: os.stat(os.path.join(manifests, n)).st_mtime)
    for name in names[keep:]:
        fd = os.open(os.path.join(root, "locks", name), os.O_RDWR | os.O_CREAT,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue        # in use
        shutil.rmtree(os.path.join(root, "trees", name), ignore_errors=True)
        os.remove(os.path.join(manifests, name))
        os.close(fd)
    used = set()
    for name in os.listdir(manifests):
        with open(os.path.join(manifests, name)) as f:
            used.update(json.load(f))
    now = time.time()
    objects = os.path.join(root, "objects")
    for name in os.listdir(objects):
        path = os.path.join(objects, name)
        if name not in used and now - os.stat(path).st_ctime > OBJECT_GRACE:
            os.remove(path)


# ---------------------------------------------------------------- the task's environment
PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)?)?$")
IMPORTS_TF = re.compile(r"^\s*(import|from)\s+tensorflow(\.|\s|$)", re.M)
IMPORTS_TFIO = re.compile(r"^\s*(import|from)\s+tensorflow_io(\.|\s|$)", re.M)
OPTIONS_WITH_VALUE = ("-W", "-X", "-Q")
# Run by the task's interpreter, in its directory with its environment: argv[1] is a JSON
# object {"model_dir", "tfio", "tensorboard"}; prints one JSON line. TensorFlow is imported
# only to open a model_dir that is not a local path through TensorFlow's own filesystem.
ENVIRONMENT_PROBE = r"""
import importlib.util, json, shutil, sys
ask = json.loads(sys.argv[1])
out = {"tf": None, "tensorboard": None, "model_dir": None}
spec = importlib.util.find_spec("tensorflow")
if spec is not None:
    out["tf"] = "unknown"
    try:
        from importlib import metadata
        for name in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly",
                     "tensorflow-macos", "intel-tensorflow", "tensorflow-intel"):
            try:
                out["tf"] = metadata.version(name)
                break
            except metadata.PackageNotFoundError:
                pass
    except ImportError:
        pass
if ask.get("keras"):
    from importlib import metadata
    for module, name in (("tf_keras", "tf-keras"), ("jax", "jax"), ("keras", "keras")):
        out[module] = None
        if importlib.util.find_spec(module) is not None:
            try:
                out[module] = metadata.version(name)
            except metadata.PackageNotFoundError:
                out[module] = "unknown"
if ask.get("tensorboard"):
    out["tensorboard"] = bool(importlib.util.find_spec("tensorboard") or
                              shutil.which("tensorboard"))
if ask.get("model_dir") and spec is not None:
    try:
        import tensorflow as tf
        if ask.get("tfio"):
            import tensorflow_io
        url = ask["model_dir"].rstrip("/")
        tf.io.gfile.exists(url) or tf.io.gfile.exists(url.rsplit("/", 1)[0] + "/")
    except Exception as e:
        out["model_dir"] = type(e).__name__ + ": " + " ".join(str(e).split())[:300]
print(json.dumps(out))
"""


def entry_script(argv):
    """The script a Python command line runs (``python -u train.py``: train.py), or None
    (``-m``, ``-c``, no argument, or not a Python interpreter)."""
    if not argv or not PYTHON_NAME.match(os.path.basename(argv[0])):
        return None
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg in ("-m", "-c", "-") or arg.startswith(("-m", "-c")):
            return None
        if arg in OPTIONS_WITH_VALUE:
            i += 2
            continue
        if not arg.startswith("-"):
            return arg
        i += 1
    return None


def environment_problems(item, cwd, path):
    """What of the task's environment keeps it from running here, and the TensorFlow its
    interpreter has (None when the task's script does not import it): its entry script
    exists; when that script imports TensorFlow, the interpreter finds it; a model_dir that
    is not a local path opens through TensorFlow's own filesystem; tensorboard is there
    where the spec asks for it."""
    argv = item.get("argv") or [item["program"]]
    script = entry_script(argv)
    source, problem = _entry_source(item, cwd, script)
    if problem is not None:
        return [problem], None
    imports_tf = bool(IMPORTS_TF.search(source))
    # the spec's Keras route is checked in the task's own interpreter only (a wrapper's
    # python3 on PATH may not be the one the wrapper runs)
    keras = item.get("keras") if PYTHON_NAME.match(os.path.basename(argv[0])) else None
    if not (imports_tf or item.get("tensorboard") or keras):
        return [], None
    model_dir = item.get("model_dir") if imports_tf else None
    ask = {"model_dir": model_dir, "tfio": bool(IMPORTS_TFIO.search(source)),
           "tensorboard": bool(item.get("tensorboard")), "keras": keras}
    python = _checking_python(argv, cwd, path)
    found = _ask_interpreter(python, ask, item.get("env") or {}, cwd)
    if "error" in found:
        return [shown(argv[0]) + " cannot answer the environment check: " +
                found["error"]], None
    problems = _answer_problems(found, python, script, imports_tf, model_dir,
                                bool(item.get("tensorboard"))) + keras_problems(found, python,
                                                                                keras)
    return problems, found.get("tf") if imports_tf else None


def _entry_source(item, cwd, script):
    """(the entry script's first MiB, or "" without one; the problem that it is missing
    or unreadable, or None)."""
    if script is None:
        return "", None
    full = os.path.join(cwd, os.path.expanduser(script))
    if not os.path.isfile(full):
        where = "" if os.path.isabs(script) else " in " + cwd + " (the task's workdir)"
        return "", "script " + shown(script) + " not found" + where + (item.get("hint") or "")
    try:
        with open(full, "rb") as f:
            return f.read(1 << 20).decode("utf-8", "replace"), None
    except OSError as e:
        return "", "script " + shown(script) + " cannot be read: " + str(e.strerror)


def _checking_python(argv, cwd, path):
    """The Python that answers the check: the task's own interpreter, or python3 where
    the task's program is not one."""
    if not PYTHON_NAME.match(os.path.basename(argv[0])):
        return shutil.which("python3", path=path) or "python3"
    return shutil.which(argv[0], path=path) if "/" not in argv[0] else \
        os.path.join(cwd, argv[0])


def _answer_problems(found, python, script, imports_tf, model_dir, tensorboard):
    """The problems in the interpreter's answer: no TensorFlow for a script that imports
    it, a model_dir TensorFlow cannot open, no tensorboard where the spec asks for it."""
    problems = []
    if imports_tf and found.get("tf") is None:
        problems.append(shown(python) + " cannot import tensorflow (the entry script " +
                        shown(script or "") + " imports it): install TensorFlow for that " +
                        "interpreter, or give the task one that has it")
    if model_dir and found.get("model_dir"):
        problems.append("model_dir " + shown(model_dir) + ": TensorFlow " +
                        str(found.get("tf")) + " of " + shown(python) + " cannot open it (" +
                        found["model_dir"] + ")" + _filesystem_hint(model_dir))
    if tensorboard and not found.get("tensorboard"):
        problems.append("no tensorboard for " + shown(python) + " (the spec asks for "
                        "TensorBoard): pip install tensorboard into that environment")
    return problems


def keras_problems(found, python, keras):
    """What keeps the spec's ``keras`` route from running with ``python``: tf-keras needs
    TensorFlow and a tf-keras of the same major.minor version (pip installs tf-keras with
    --no-deps: its own dependencies would pull another TensorFlow); jax needs jax and
    Keras 3."""
    route = ' (the spec\'s "keras": "' + str(keras) + '")'
    if keras == "tf-keras":
        tf, tf_keras = found.get("tf"), found.get("tf_keras")
        if tf is None:
            return [shown(python) + " cannot import tensorflow" + route + ": install "
                    "TensorFlow and tf-keras of the same version for that interpreter"]
        want = ".".join(tf.split(".")[:2])
        fix = ": pip install --no-deps 'tf-keras==" + want + ".*'"
        if tf_keras is None:
            return [shown(python) + " has TensorFlow " + tf + " but no tf-keras" + route + fix]
        if tf != "unknown" and ".".join(tf_keras.split(".")[:2]) != want:
            return ["tf-keras " + tf_keras + " of " + shown(python) + " does not match its "
                    "TensorFlow " + tf + route + fix]
    if keras == "jax":
        if found.get("jax") is None:
            return [shown(python) + " cannot import jax" + route + ": pip install jax keras "
                    "into that environment"]
        version = found.get("keras") or ""
        if not version.split(".")[0].isdigit() or int(version.split(".")[0]) < 3:
            return [shown(python) + " has " + ("Keras " + version if version else "no Keras")
                    + route + ": Keras 3 is needed: pip install 'keras>=3'"]
    return []


def _filesystem_hint(url):
    scheme = url.split("://", 1)[0]
    if scheme == "gs":
        return "; TensorFlow 2.20 and later need tensorflow-io-gcs-filesystem for gs://"
    if scheme in ("s3", "hdfs"):
        return "; pip install tensorflow-io and import tensorflow_io in the script"
    return ""


_ASKED: dict = {}


def _ask_interpreter(python, ask, env, cwd):
    """ENVIRONMENT_PROBE's answer from ``python`` (once per interpreter, environment and
    question on this host)."""
    key = json.dumps([python, ask, env, cwd], sort_keys=True)
    if key not in _ASKED:
        full = dict(os.environ)
        full.update(env)
        full.pop("TF_CONFIG", None)
        try:
            done = subprocess.run([python, "-c", ENVIRONMENT_PROBE, json.dumps(ask)], env=full,
                                  cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=120)
            lines = done.stdout.decode("utf-8", "replace").strip().splitlines()
            _ASKED[key] = json.loads(lines[-1]) if lines and lines[-1].startswith("{") \
                else {"error": "exit status " + str(done.returncode) + ": " +
                      (lines[-1] if lines else "no output")}
        except (OSError, subprocess.TimeoutExpired, ValueError) as e:
            _ASKED[key] = {"error": str(e)}
    return _ASKED[key]


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
                checked(desc)
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
    drop_scratch()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)  # not sys.exit: a relay thread may still hold a lock


if __name__ == "__main__":
    finish(main())
