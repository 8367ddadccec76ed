"""The host's half of the workdir's copy (ssh.sync; the launcher's half is
launcher/backends/workdir_sync.py): a store of files by content hash, each copy of a
workdir built whole or not at all, held while tasks run in it, old ones collected.

Plain standard library, Python 3.6+ (part of the agent's joined source).
"""

import hashlib
import json
import os
import shutil
import time

# AREA/objects/SHA256   each file's content once (0600), named by its hash
# AREA/trees/TREE       a complete copy, named by the hash of its manifest; never changed
# AREA/locks/TREE       held shared by every agent whose tasks run in TREE
# AREA/manifests/TREE   the objects TREE uses (for collecting the unused ones)
# AREA/incoming/PID-X   the launcher's tar of missing objects, before they are checked
# AREA/tmp/TREE.PID-X   a copy being built; renamed into trees/ once complete
KEEP_TREES = 4          # copies kept beside the ones in use
OBJECT_GRACE = 600      # seconds an unused object is kept (another launch may be using it)
SYNC: dict = {"locks": [], "scratch": []}


def os_problem(error):
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
    """Scratch folders of agents that are gone (a killed launcher, a lost host)."""
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
    """A shared lock on ``tree`` for as long as this agent lives: the tree is in use
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
        return {"problem": "cannot build the copy in " + root + ": " + os_problem(e)}
    finally:
        drop_scratch()
    collect(root)
    return {"root": os.path.join(root, "trees", tree)}


def collect(root, keep=KEEP_TREES):
    """Remove the trees beyond the ``keep`` newest that no agent holds, then the objects
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
