"""The agent's probes: the host check before anything starts (each task's working
directory, program, port and environment, the host's GPUs), a short command run to its end,
and the task's environment asked of its own interpreter (``ENVIRONMENT_PROBE``). The
launcher checks local tasks with the same functions.

Plain standard library, Python 3.6+ (part of the agent's joined source).
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess

from launcher.backends.agent.tasks import killpg, spawn
from launcher.backends.agent.words import program_problem, refused_status, shown


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
    status, output = run_probe([program] + query[1:], {}, None, 20)
    return {"status": status, "output": output[-65536:]}


def check(items, gpu_query=None, synced=None, sync=None):
    """Preflight: every task's working directory, program and port given in the spec, and
    its environment (``environment_problems``), as one JSON object; with ``gpu_query``, also
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
    found = {"host": socket.gethostname(), "problems": problems,
             "tensorflow": tensorflow, "sync": sync}
    if gpu_query:
        path = (items[0].get("path") if items else None) or os.environ.get("PATH", os.defpath)
        found["gpus"] = query_gpus(gpu_query, path)
    return found



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
        status, output = run_probe([python, "-c", ENVIRONMENT_PROBE, json.dumps(ask)],
                                   dict(env, TF_CONFIG=None), cwd, 120)
        lines = output.strip().splitlines()
        try:
            _ASKED[key] = json.loads(lines[-1]) if lines and lines[-1].startswith("{") \
                else {"error": "exit status " + str(status) + ": " +
                      (lines[-1] if lines else "no output")}
        except ValueError as e:
            _ASKED[key] = {"error": str(e)}
    return _ASKED[key]


def run_probe(argv, env, cwd, timeout):
    """Run a short command to its end (or its timeout), started as a task is (``spawn``):
    (its status, its output). A command that cannot start: the shell's status (127, 126)."""
    try:
        child = spawn({"argv": argv, "env": env, "cwd": cwd}, dies_with_agent=False)
    except OSError as e:
        return refused_status(e), str(e)
    try:
        output = child.communicate(timeout=timeout)[0].decode("utf-8", "replace")
        status = child.returncode
    except subprocess.TimeoutExpired:
        killpg(child.pid, signal.SIGKILL)
        child.communicate()
        status, output = 124, f"timed out after {timeout:.0f}s"
    killpg(child.pid, signal.SIGKILL)       # what it left in its group
    return status, output
