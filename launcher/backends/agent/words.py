"""Why a start failed, in words a user acts on: a program that is not there or cannot run,
and the kernel's refusal of an exec. The agent words a refused task with it on every host;
the launcher imports it for the same words about local tasks, docker and Slurm.

Plain standard library, Python 3.6+ (part of the agent's joined source).
"""

import os
import shlex
import shutil


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

