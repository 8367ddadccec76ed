"""The workdir as ``"ssh": {"sync": true}`` copies it to every host: its manifest (each
folder, file and symlink with its mode and content hash), the tree's hash (the cache key:
the hash of the manifest), what is left out, and the tar of the files a host lacks.

Left out: ``.git``, ``__pycache__``, virtual environments (a folder with ``pyvenv.cfg`` or
``conda-meta``), model_dir and run_dir when they lie inside, and what ``.tfclusterignore``
names (gitignore patterns). A symlink that points out of the folder, an unreadable file, or
a folder above SIZE_LIMIT (unless forced) is refused with one line (PreflightError). The
host's side (the object store, the atomic rename of a complete tree, the locks that keep a
tree in use) is the agent's (launcher/backends/agent/sync_store.py); ssh's step that
sends a host what it lacks is launcher/backends/ssh_copy.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tarfile
import time
from dataclasses import dataclass, field
from typing import IO

from launcher.errors import PreflightError

SIZE_NOTE = 100 * 2**20      # a folder above this gets one line naming its largest entries
SIZE_LIMIT = 2 * 2**30       # above this it is refused unless "sync": "force"
ALWAYS_LEFT_OUT = {".git", "__pycache__", ".hg", ".svn", ".mypy_cache", ".pytest_cache",
                   ".ruff_cache", ".tox", ".nox"}
IGNORE_FILE = ".tfclusterignore"
HINT = ' (list it in .tfclusterignore, or remove it; "ssh": {"sync": true} copies the workdir)'


@dataclass
class Manifest:
    """A folder as it is copied: ``entries`` are ``[path, kind, mode, value]`` (kind ``d``
    folder, ``f`` file with its sha256, ``l`` symlink with its target), parents first."""

    root: str
    entries: list[list] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)     # file sha256 -> bytes
    by_top: dict[str, int] = field(default_factory=dict)    # top-level entry -> bytes
    paths: dict[str, str] = field(default_factory=dict)     # file sha256 -> one local path

    @property
    def tree(self) -> str:
        """The cache key: the same files, modes and links give the same tree."""
        text = json.dumps(self.entries, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    @property
    def total(self) -> int:
        return sum(self.sizes.values())

    def largest(self, count: int = 3) -> str:
        top = sorted(self.by_top.items(), key=lambda kv: -kv[1])[:count]
        return ", ".join(f"{name} {human(size)}" for name, size in top)


def human(size: int) -> str:
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("kB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


# ------------------------------------------------------------------------ gitignore patterns
def _pattern_regex(pattern: str) -> str:
    """A gitignore glob as a regular expression over a '/'-separated relative path."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1:end].replace("\\", "\\\\")
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = end
        elif c == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


class IgnoreRules:
    """``.tfclusterignore``'s patterns, as git reads a ``.gitignore`` at the folder's top:
    ``#`` comments, ``!`` negation (the last match wins), a leading or inner ``/`` anchors
    a pattern to the top, a trailing ``/`` matches folders only, ``*``, ``?``, ``[...]``
    and ``**``."""

    def __init__(self, lines: list[str]):
        self.rules: list[tuple[re.Pattern[str], bool, bool]] = []
        for raw in lines:
            line = raw.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            line = line.rstrip(" ") if not line.endswith("\\ ") else line
            negate = line.startswith("!")
            line = line[1:] if negate else line
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            anchored = "/" in line
            body = _pattern_regex(line.lstrip("/"))
            regex = ("^" if anchored else "^(?:.*/)?") + body + "$"
            self.rules.append((re.compile(regex), negate, dir_only))

    @classmethod
    def of(cls, root: str) -> IgnoreRules:
        path = os.path.join(root, IGNORE_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                return cls(f.readlines())
        except FileNotFoundError:
            return cls([])
        except OSError as e:
            raise PreflightError(f"ssh.sync: cannot read {path}: {e.strerror}") from None

    def ignored(self, rel: str, is_dir: bool) -> bool:
        result = False
        for regex, negate, dir_only in self.rules:
            if dir_only and not is_dir:
                continue
            if regex.match(rel):
                result = not negate
        return result


# ------------------------------------------------------------------------- the manifest
def is_environment(path: str) -> bool:
    """A Python virtual environment or a conda environment."""
    return os.path.isfile(os.path.join(path, "pyvenv.cfg")) or \
        os.path.isdir(os.path.join(path, "conda-meta"))


def _digest(path: str) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
            size += len(block)
    return h.hexdigest(), size


class HashCache:
    """The hashes of the last launch, by path, size, mtime and inode (as git's index): a
    file that did not change is not read again. A file changed less than RACY seconds
    before the launch is hashed anyway (its next change could keep its mtime)."""

    RACY = 2.0

    def __init__(self, root: str):
        key = hashlib.sha256(root.encode()).hexdigest()[:16]
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        self.path = os.path.join(base, "tfcluster", "sync-hashes", key + ".json")
        try:
            with open(self.path, encoding="utf-8") as f:
                self.old: dict[str, list] = json.load(f)
        except (OSError, ValueError):
            self.old = {}
        self.new: dict[str, list] = {}
        self.now = time.time()

    def digest(self, full: str, st: os.stat_result) -> tuple[str, int]:
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        known = self.old.get(full)
        if known is not None and known[:3] == stamp:
            digest, size = known[3], st.st_size
        else:
            digest, size = _digest(full)
        if self.now - st.st_mtime > self.RACY:
            self.new[full] = [*stamp, digest]
        return digest, size

    def save(self) -> None:
        """Kept for the next launch (private to the user); a cache that cannot be written
        costs only time."""
        try:
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            temporary = f"{self.path}.{os.getpid()}"
            with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w",
                      encoding="utf-8") as f:
                json.dump(self.new, f)
            os.replace(temporary, self.path)
        except OSError:
            pass


def inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def _link(root: str, full: str, rel: str) -> str:
    """A symlink's target, relative, when it stays inside the folder; else refused."""
    target = os.readlink(full)
    resolved = os.path.realpath(full)
    if not inside(os.path.realpath(root), resolved):
        raise PreflightError(f"workdir {root}: symlink {rel} points out of the folder (to "
                             f"{target}): ssh.sync never follows it{HINT}")
    if os.path.isabs(target):
        return os.path.relpath(resolved, os.path.dirname(os.path.realpath(full)))
    return target


def manifest(root: str, leave_out: tuple[str, ...] = ()) -> Manifest:
    """The folder ``root`` as it is copied; ``leave_out``: absolute paths left out too
    (model_dir, run_dir). PreflightError: a missing folder, an unreadable file, a symlink
    out of the folder."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise PreflightError(f"workdir {root} does not exist (ssh.sync copies it to every "
                             "host)")
    rules = IgnoreRules.of(root)
    skip = {os.path.abspath(p) for p in leave_out}
    found = Manifest(root)
    cache = HashCache(root)
    _walk(root, "", rules, skip, found, cache)
    cache.save()
    return found


def _walk(root: str, rel_dir: str, rules: IgnoreRules, skip: set[str], found: Manifest,
          cache: HashCache) -> None:
    folder = os.path.join(root, rel_dir)
    try:
        names = sorted(os.listdir(folder))
    except OSError as e:
        raise PreflightError(f"workdir {root}: cannot read folder {rel_dir or '.'}: "
                             f"{e.strerror}{HINT}") from None
    for name in names:
        rel = f"{rel_dir}/{name}" if rel_dir else name
        full = os.path.join(folder, name)
        st = os.lstat(full)
        is_dir = stat.S_ISDIR(st.st_mode)
        if name in ALWAYS_LEFT_OUT or full in skip or rules.ignored(rel, is_dir) or \
                (is_dir and is_environment(full)):
            continue
        top = rel.split("/", 1)[0]
        if stat.S_ISLNK(st.st_mode):
            found.entries.append([rel, "l", 0, _link(root, full, rel)])
        elif is_dir:
            found.entries.append([rel, "d", 0o700, ""])
            _walk(root, rel, rules, skip, found, cache)
        elif stat.S_ISREG(st.st_mode):
            try:
                digest, size = cache.digest(full, st)
            except OSError as e:
                raise PreflightError(f"workdir {root}: cannot read {rel}: {e.strerror}"
                                     f"{HINT}") from None
            found.entries.append([rel, "f", stat.S_IMODE(st.st_mode) & 0o700, digest])
            found.sizes[digest] = size
            found.paths[digest] = full
            found.by_top[top] = found.by_top.get(top, 0) + size


def size_check(found: Manifest, force: bool) -> str | None:
    """One line when the folder is large (naming its largest entries); PreflightError
    above SIZE_LIMIT unless ``force``."""
    total = found.total
    if total > SIZE_LIMIT and not force:
        raise PreflightError(f"workdir {found.root} is {human(total)} (largest: "
                             f"{found.largest()}), above ssh.sync's limit of "
                             f"{human(SIZE_LIMIT)}: leave the large entries out in "
                             f'{IGNORE_FILE}, or set "ssh": {{"sync": "force"}}')
    if total > SIZE_NOTE:
        return (f"ssh.sync: workdir {found.root} is {human(total)} (largest: "
                f"{found.largest()}); {IGNORE_FILE} leaves entries out")
    return None


def write_tar(found: Manifest, digests: list[str], out: IO[bytes]) -> int:
    """The files named by ``digests`` as a tar stream, each under its hash; bytes sent."""
    sent = 0
    now = time.time()
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.GNU_FORMAT) as tar:
        for digest in digests:
            path = found.paths[digest]
            info = tarfile.TarInfo(digest)
            info.size, info.mode, info.mtime = found.sizes[digest], 0o600, now
            with open(path, "rb") as f:
                tar.addfile(info, f)
            sent += info.size
    return sent
