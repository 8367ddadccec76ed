"""The newest complete checkpoint in a model_dir: through fsspec (s3://, sftp://), or for a local
path through orchestrator/local_fs.py.

TensorFlow writes one checkpoint in this order: the data shards (one per ps, through a
temporary file and a rename), the ``.index`` (in place), the ``.meta`` (Estimator), and last
the ``checkpoint`` state file (replaced atomically); old checkpoints are deleted after that.
So the reader follows the state file and never lists model_dir: once per new checkpoint it
reads the named ``.index`` (a table: its header holds the number of data shards, its keys
say what wrote it) and looks up every ``.data-0000i-of-0000K`` by name. Its cost does not
grow with the number of files in model_dir.

Complete means: the state file names it, and its ``.index`` and all K data shards exist
(what a restore reads; the ``.meta`` of a ``Saver`` comes after the state file and is not
needed). A checkpoint with a missing ps shard is never complete (the reader then reports
the newest older one that is, and what is missing).

Checkpoints are told apart by what TensorFlow writes, not by their names: an index that
holds ``_CHECKPOINTABLE_OBJECT_GRAPH`` is a TF2 object-based checkpoint
(``tf.train.CheckpointManager``'s ``ckpt-N`` or ``model.ckpt-N``, Keras ``ModelCheckpoint``'s
``ckpt_{epoch}``): its number counts saves or epochs, and its step is read from the
checkpoint itself (``step``, ``global_step``, the optimizer's ``iter``/``iterations``); one
without is a ``tf.compat.v1.train.Saver``'s (Estimator: ``model.ckpt-N``, N the global
step; a name without N: its ``global_step`` tensor). A checkpoint whose step cannot be
known has ``step`` None (``Checkpoint.progress`` says so). The step is read without
TensorFlow (orchestrator/tfformats.py); ``stored_global_step`` reads it with TensorFlow.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass, field
from typing import Any

from orchestrator.local_fs import url_to_fs
from orchestrator.tfformats import (
    OBJECT_GRAPH_KEY,
    BundleEntry,
    index_entries,
    int_scalar,
    num_shards_from_index_head,
)

STATE_FILE = "checkpoint"
TF2_BASENAME = "ckpt"
_INDEX_HEAD_BYTES = 64
STATE_MAX_BYTES = 1 << 20   # the newest name is on the first line; the rest may be cut
_NAME_RE = re.compile(r"^(?P<base>.+)-(?P<number>\d+)$")
_TRAILING_NUMBER_RE = re.compile(r"(\d+)$")
INDEX_MAX_BYTES = 64 << 20   # an index larger than this is not read whole (its step unknown)
_STATE_LINE_RE = re.compile(r'^\s*(model_checkpoint_path|all_model_checkpoint_paths)\s*:\s*"(.*)"')


@dataclass(frozen=True)
class Checkpoint:
    """One complete checkpoint."""

    name: str            # file prefix inside model_dir: "model.ckpt-3000", "ckpt-7", "ckpt_10"
    path: str            # the prefix as a full URL or path: "s3://b/run/model.ckpt-3000"
    number: int          # the number the name ends with (-1: none)
    layout: str          # "estimator" (a Saver's: Estimator, TF1) or "tf2" (object-based)
    shards: int          # K: number of .data files (one per ps)
    step: int | None     # global step (from the name or the checkpoint); None: not known
    step_from: str = "name"   # where the step came from: "name" or the tensor's key

    @property
    def progress(self) -> str:
        if self.step is not None:
            return f"step {self.step}"
        return f"{self.name} (its step is neither in its name nor in the checkpoint)"


@dataclass
class Scan:
    """What one look at model_dir found."""

    state_text: str | None          # the state file as read (None: no checkpoint yet)
    named: str | None = None        # newest checkpoint the state file names
    complete: Checkpoint | None = None
    missing: dict[str, list[str]] = field(default_factory=dict)  # incomplete name -> files


def parse_state(text: str) -> list[str]:
    """Checkpoint names in a ``checkpoint`` state file, newest first, without directories."""
    newest: str | None = None
    others: list[str] = []
    for line in text.splitlines():
        m = _STATE_LINE_RE.match(line)
        if not m:
            continue
        value = _unescape(m.group(2))
        name = re.split(r"[/\\]", value.rstrip("/\\"))[-1]
        if m.group(1) == "model_checkpoint_path":
            newest = name
        else:
            others.append(name)
    ordered = ([newest] if newest else []) + others[::-1]
    return list(dict.fromkeys(n for n in ordered if n))


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    try:
        return value.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError:
        return value


def layout_of(name: str) -> tuple[str, int] | None:
    """("estimator"|"tf2", N) for ``model.ckpt-N`` / ``ckpt-N``; None for other names."""
    m = _NAME_RE.match(name)
    if not m:
        return None
    layout = "tf2" if m.group("base") == TF2_BASENAME else "estimator"
    return layout, int(m.group("number"))


def shard_name(prefix: str, i: int, k: int) -> str:
    return f"{prefix}.data-{i:05d}-of-{k:05d}"


class CheckpointReader:
    """Reads model_dir through fsspec: ``newest_complete()`` and ``scan()``.

    ``tf2_number_is_step``: the script saves TF2 checkpoints with
    ``CheckpointManager.save(checkpoint_number=step)``, so ``ckpt-N`` carries the step
    where the checkpoint holds no step variable; one that does (``step``, an optimizer's
    iterations) is read by it: a plain ``save()`` (PreemptionCheckpointHandler's) numbers
    saves, not steps.
    """

    def __init__(self, model_dir: str, storage_options: dict[str, Any] | None = None,
                 fs: Any = None, tf2_number_is_step: bool = False, keras: bool = False):
        if fs is None:
            fs, root = url_to_fs(model_dir, **_fresh(model_dir, storage_options))
        else:
            root = fs._strip_protocol(model_dir)
        self.model_dir = model_dir
        self.fs = fs
        self.root = root.rstrip("/") or "/"
        self.tf2_number_is_step = tf2_number_is_step
        self.keras = keras      # Keras 3's own files count as checkpoints (newest_keras)
        self._keras_seen: dict[tuple[str, Any], Checkpoint] = {}
        self._verified: dict[str, Checkpoint] = {}   # complete checkpoints seen, by name

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}" if self.root != "/" else f"/{name}"

    def url(self, name: str) -> str:
        """A file of model_dir as a URL the user can paste (with the host of sftp:// and the
        like, which fsspec's own paths leave out)."""
        if "://" in self.model_dir:
            return f"{self.model_dir.rstrip('/')}/{name}"
        return self.fs.unstrip_protocol(self._path(name))

    def read_state(self) -> str | None:
        """The state file's text; None when there is none yet."""
        try:
            # a ranged read is one GET on S3 (a plain one is HEAD + GET)
            text = self.fs.cat_file(self._path(STATE_FILE), start=0, end=STATE_MAX_BYTES)
            return text.decode("utf-8", "replace")
        except FileNotFoundError:
            return None

    def _exists(self, name: str) -> bool:
        try:
            return self.fs.info(self._path(name)).get("type") != "directory"
        except FileNotFoundError:
            return False

    def list_prefix(self, prefix: str) -> list[str]:
        """Files of model_dir whose names start with ``prefix``: on S3 one listing limited
        to the prefix; elsewhere a glob (a directory listing)."""
        if _protocols(self.fs) & {"s3", "s3a"}:
            return sorted(self.fs.find(self.root, maxdepth=1, prefix=prefix))
        return sorted(self.fs.glob(self._path(glob.escape(prefix) + "*")))

    def _index(self, prefix: str) -> bytes | None:
        """The ``.index`` (whole, up to INDEX_MAX_BYTES); None when it is missing."""
        try:
            return self.fs.cat_file(self._path(prefix + ".index"), start=0,
                                    end=INDEX_MAX_BYTES)
        except FileNotFoundError:
            return None

    def _num_shards(self, prefix: str, head: bytes) -> int:
        """K from the index header."""
        k = num_shards_from_index_head(head[:_INDEX_HEAD_BYTES])
        if k is not None:
            return k
        # Unknown index format: fall back to a listing limited to this prefix's data files.
        found = self.list_prefix(prefix + ".data-")
        counts = {int(m.group(1)) for f in found
                  if (m := re.search(r"-of-(\d+)$", f))}
        return max(counts) if counts else 0

    def check(self, name: str) -> tuple[Checkpoint | None, list[str]]:
        """(the checkpoint, []) when ``name`` is complete, else (None, files missing)."""
        index = self._index(name)
        if index is None:
            return None, [name + ".index"]
        k = self._num_shards(name, index)
        missing = [f for f in (shard_name(name, i, k) for i in range(k)) if not self._exists(f)]
        if missing or k == 0:
            return None, missing or [shard_name(name, 0, 1)]
        try:
            entries: dict[str, BundleEntry] | None = index_entries(index)
        except (ValueError, IndexError):
            entries = None      # not a whole table (cut, or another format): go by the name
        kind = layout_of(name)
        if entries is not None:
            layout = "tf2" if OBJECT_GRAPH_KEY.decode() in entries else "estimator"
        else:
            layout = kind[0] if kind else "estimator"
        numbered = _TRAILING_NUMBER_RE.search(name)
        number = kind[1] if kind else int(numbered.group(1)) if numbered else -1
        step, key = self._step_of(name, k, entries, layout, number if kind else None)
        return Checkpoint(name, self.url(name), number, layout, k, step, key), []

    def _step_of(self, name: str, k: int, entries: dict[str, BundleEntry] | None,
                 layout: str, number: int | None) -> tuple[int | None, str]:
        """(a complete checkpoint's step, where it came from): an Estimator's number; a
        TF2 checkpoint's step variable, else its number where numbers are steps."""
        if number is not None and layout == "estimator":
            return number, "name"
        step, key = self._stored_step(name, k, entries or {})
        if step is None and number is not None and self.tf2_number_is_step:
            return number, "name"
        return step, key or "name"

    def stored_step(self, ckpt: Checkpoint) -> int | None:
        """The step stored in a complete checkpoint's data, whatever its name says (an
        Estimator's ``model.ckpt-N`` can hold another step under asynchronous training):
        its index and one ranged read of a data shard, no TensorFlow. None when it holds
        no step variable."""
        index = self._index(ckpt.name)
        try:
            entries = index_entries(index) if index is not None else {}
        except (ValueError, IndexError):
            return None
        return self._stored_step(ckpt.name, ckpt.shards, entries)[0]

    def _stored_step(self, name: str, k: int, entries: dict[str, BundleEntry]
                     ) -> tuple[int | None, str | None]:
        """(the step a checkpoint holds, its key): one ranged read of a data shard."""
        for key in STEP_KEYS:
            entry = entries.get(key)
            if entry is None or entry.shard >= k:
                continue
            try:
                raw = self.fs.cat_file(self._path(shard_name(name, entry.shard, k)),
                                       start=entry.offset, end=entry.offset + entry.size)
            except FileNotFoundError:
                return None, None
            value = int_scalar(entry, raw)
            if value is not None:
                return value, key
        return None, None

    def scan(self) -> Scan:
        """Read the state file and find the newest complete checkpoint it names."""
        text = self.read_state()
        if text is None:
            return Scan(None)
        names = parse_state(text)
        scan = Scan(text, names[0] if names else None)
        for name in names:
            if name in self._verified:
                scan.complete = self._verified[name]
                break
            ckpt, missing = self.check(name)
            if ckpt is not None:
                self._verified = {name: ckpt}
                scan.complete = ckpt
                break
            scan.missing[name] = missing
        return scan

    def newest_complete(self) -> Checkpoint | None:
        """The newest complete checkpoint the state file names, or None; for a reader of
        Keras 3's files (``keras``), without a state file, the newest of those."""
        found = self.scan().complete
        if found is None and self.keras:
            found = self.newest_keras()
        return found

    def newest_keras(self) -> Checkpoint | None:
        """The newest file Keras 3 saved into model_dir (``ModelCheckpoint``'s
        ``.weights.h5`` or ``.keras``, ``BackupAndRestore``'s ``backup/latest.weights.h5``),
        by modification time: its step is the optimizer's ``iterations`` it holds
        (``keras_step``), None where it cannot be read. One listing per call; each file is
        read once per modification. None when there is none."""
        found = []
        for pattern in KERAS_PATTERNS:
            try:
                found += [(path, self.fs.info(path))
                          for path in self.fs.glob(self._path(pattern))]
            except (FileNotFoundError, NotADirectoryError, OSError):
                continue        # none, or one deleted between the listing and its info
        if not found:
            return None
        path, info = max(found, key=lambda item: (_mtime(item[1]), item[0]))
        key = (path, _mtime(info))
        if key not in self._keras_seen:
            name = path[len(self.root):].lstrip("/") if path.startswith(self.root) else \
                path.rsplit("/", 1)[-1]
            numbered = _TRAILING_NUMBER_RE.search(name.split(".", 1)[0])
            step = keras_step(self.fs, path)
            self._keras_seen = {key: Checkpoint(
                name, self.url(name), int(numbered.group(1)) if numbered else -1, "keras", 1,
                step, KERAS_STEP_KEY if step is not None else "name")}
        return self._keras_seen[key]


# Object stores whose fsspec implementations cache directory listings: a cached listing
# would hide files written since (and s3fs answers ``info`` from it), so the reader turns it off.
LISTING_CACHES = {"s3", "s3a", "gs", "gcs", "abfs", "az", "adl"}


def _protocols(fs: Any) -> set[str]:
    proto = fs.protocol
    return set(proto) if isinstance(proto, (tuple, list)) else {proto}


def _fresh(url: str, options: dict[str, Any] | None) -> dict[str, Any]:
    options = dict(options or {})
    if url.split("://", 1)[0] in LISTING_CACHES and "://" in url:
        options.setdefault("use_listings_cache", False)
    return options


def newest_complete(model_dir: str, storage_options: dict[str, Any] | None = None,
                    tf2_number_is_step: bool = False) -> Checkpoint | None:
    """One-shot: the newest complete checkpoint in ``model_dir`` (any fsspec URL), or None."""
    return CheckpointReader(model_dir, storage_options,
                            tf2_number_is_step=tf2_number_is_step).newest_complete()


KERAS_PATTERNS = ("*.weights.h5", "*.keras", "backup/latest.weights.h5")
KERAS_STEP_KEY = "optimizer/vars/0"     # Keras 3's optimizer.iterations in a weights file


def _mtime(info: dict[str, Any]) -> float:
    """A file's modification time from an fsspec listing (local: mtime; S3: LastModified)."""
    found = info.get("mtime", info.get("LastModified", info.get("updated", 0)))
    if hasattr(found, "timestamp"):
        return float(found.timestamp())
    try:
        return float(found or 0)
    except (TypeError, ValueError):
        return 0.0


def keras_steps_readable() -> bool:
    """Whether this Python can read the step of a Keras 3 file (``keras_step``): h5py
    imports (the ``keras`` extra of tfcluster; TensorFlow's environments have it)."""
    import importlib

    try:
        importlib.import_module("h5py")
    except ImportError:
        return False
    return True


def keras_step(fs: Any, path: str) -> int | None:
    """The optimizer's ``iterations`` (the step) in a Keras 3 file: a ``.weights.h5``, or
    the ``model.weights.h5`` inside a ``.keras`` archive. Read with h5py, imported here
    only (TensorFlow's and Keras' environments have it; None without it, or when the file
    is not one Keras wrote, or is being written)."""
    try:
        import h5py  # type: ignore[import-untyped]
    except ImportError:
        return None
    import io
    import zipfile

    try:
        with fs.open(path, "rb") as f:
            if path.endswith(".keras"):
                with zipfile.ZipFile(f) as archive:
                    data = io.BytesIO(archive.read("model.weights.h5"))
            else:
                data = io.BytesIO(f.read())
        with h5py.File(data, "r") as h5:
            value = h5.get(KERAS_STEP_KEY)
            return int(value[()]) if value is not None and value.shape == () else None
    except (OSError, KeyError, ValueError, TypeError, zipfile.BadZipFile):
        return None


STEP_KEYS = (
    "global_step",
    "global_step/.ATTRIBUTES/VARIABLE_VALUE",
    "step/.ATTRIBUTES/VARIABLE_VALUE",
    "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE",
    "optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE",
    "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE",   # tf_keras 2.11+ optimizers
    "estimator_global_step/.ATTRIBUTES/VARIABLE_VALUE",   # tf.keras.estimator.model_to_estimator
)


def stored_global_step(prefix: str) -> int | None:
    """The step stored inside a checkpoint (needs TensorFlow, imported here; the prefix must
    be a path TensorFlow's file systems can open). None when it holds no step variable.

    Under asynchronous training it can differ from the number in the file name
    (``model.ckpt-1003`` held 1005)."""
    import tensorflow as tf

    if prefix.startswith("file://"):
        prefix = prefix[len("file://"):]
    reader = tf.train.load_checkpoint(prefix)
    keys = reader.get_variable_to_shape_map()
    for key in STEP_KEYS:
        if key in keys:
            return int(reader.get_tensor(key))
    return None
