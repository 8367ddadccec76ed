"""Writes checkpoint files into a model_dir the way TensorFlow does, through fsspec (a fake of
the file layout only: the contents are not real tensors, except the index header).

Order (FIELD_NOTES, and tf.compat.v1.train.Saver.save in TF 2.15): each ps writes its data
shard to a temporary file and renames it; the chief writes the ``.index`` in place; then the
``checkpoint`` state file is replaced (temporary file + rename), checkpoints beyond keep_max
are deleted, and the ``.meta`` is written last (Estimator layout).
"""

from __future__ import annotations

import struct


def index_header(num_shards: int) -> bytes:
    """The first table entry of a real ``.index``: empty key, BundleHeaderProto value
    (num_shards, endianness LITTLE, version {producer: 1}), as TensorFlow 2.15 writes it."""
    value = bytes([0x08, num_shards, 0x1A, 0x02, 0x08, 0x01])
    return bytes([0x00, 0x00, len(value)]) + value + b"\x00" * 40


def state_text(names: list[str]) -> str:
    lines = [f'model_checkpoint_path: "{names[-1]}"']
    lines += [f'all_model_checkpoint_paths: "{n}"' for n in names]
    lines += ["all_model_checkpoint_timestamps: 1796030244.2"] * len(names)
    lines.append("last_preserved_timestamp: 1796030243.2")
    return "\n".join(lines) + "\n"


class FakeTrainer:
    """Saves checkpoints into ``root`` on ``fs`` in TensorFlow's order."""

    def __init__(self, fs, root: str, prefix: str = "model.ckpt", shards: int = 1,
                 keep_max: int = 5, meta: bool | None = None):
        self.fs = fs
        self.root = root.rstrip("/")
        self.prefix = prefix
        self.shards = shards
        self.keep_max = keep_max
        self.meta = prefix != "ckpt" if meta is None else meta
        self.kept: list[str] = []
        fs.makedirs(self.root, exist_ok=True)

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def write_shard(self, name: str, i: int) -> None:
        tmp = self.path(f"{name}.data-{i:05d}-of-{self.shards:05d}.tempstate123")
        self.fs.pipe_file(tmp, b"\x01" * 64)
        self.fs.mv(tmp, self.path(f"{name}.data-{i:05d}-of-{self.shards:05d}"))

    def write_index(self, name: str) -> None:
        self.fs.pipe_file(self.path(f"{name}.index"), index_header(self.shards))

    def write_meta(self, name: str) -> None:
        if self.meta:
            self.fs.pipe_file(self.path(f"{name}.meta"), b"meta" * 100)

    def write_state(self, names: list[str]) -> None:
        tmp = self.path("checkpoint.tmp9f3")
        self.fs.pipe_file(tmp, state_text(names).encode())
        self.fs.mv(tmp, self.path("checkpoint"))

    def delete(self, name: str) -> None:
        for f in [f"{name}.index", f"{name}.meta"] + \
                 [f"{name}.data-{i:05d}-of-{self.shards:05d}" for i in range(self.shards)]:
            if self.fs.exists(self.path(f)):
                self.fs.rm_file(self.path(f))

    def save(self, number: int, skip_shards: tuple[int, ...] = (), meta: bool = True) -> str:
        """One whole save; shards in ``skip_shards`` are never written (a ps that writes to
        other storage); ``meta=False`` stops before the last file."""
        name = f"{self.prefix}-{number}"
        for i in range(self.shards):
            if i not in skip_shards:
                self.write_shard(name, i)
        self.write_index(name)
        self.kept.append(name)
        dropped = self.kept[:-self.keep_max] if len(self.kept) > self.keep_max else []
        self.kept = self.kept[len(dropped):]
        self.write_state(self.kept)
        for old in dropped:
            self.delete(old)
        if meta:
            self.write_meta(name)
        return name


def tfrecord(step: int, summary: bytes = b"") -> bytes:
    """One TFRecord holding an Event {wall_time: 1.5, step, summary} (CRCs left zero)."""
    event = b"\x09" + struct.pack("<d", 1.5)
    if step:
        event += bytes([0x10]) + _varint(step)
    if summary:
        event += b"\x2a" + _varint(len(summary)) + summary
    return struct.pack("<Q", len(event)) + b"\0" * 4 + event + b"\0" * 4


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)
