"""TensorFlow's file formats, read without TensorFlow: the one home for them.

Just enough of the protobuf wire format and of TFRecord framing to read TensorFlow's own
files: events files (``events.out.tfevents.*``: the newest step, scalars) and checkpoint
index headers (see orchestrator/checkpoints.py). An events file is a TFRecord file of
``Event`` messages: ``Event.wall_time`` (1), ``Event.step`` (2), ``Event.summary`` (5) ->
``Summary.value`` (1) -> ``Value.tag`` (1) with ``simple_value`` (2, TF1 summaries:
Estimator) or a scalar ``tensor`` (8, TF2 ``tf.summary.scalar``). Anything else is
skipped; a record cut short at the end of a file being written ends the reading.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MAX_RECORD = 1 << 30
EVENTS_PREFIX = "events.out.tfevents."


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A protobuf varint at ``pos``: (value, position after it)."""
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protobuf message: an int for varints (wire type
    0), bytes for fixed-size and length-delimited fields (1, 2, 5): callers read the value
    as its wire type says. Raises ValueError on a malformed message."""
    pos, end = 0, len(buf)
    value: int | bytes
    while pos < end:
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire in (1, 2, 5):
            if wire == 2:
                size, pos = read_varint(buf, pos)
            else:
                size = 8 if wire == 1 else 4
            if pos + size > end:
                raise ValueError("truncated protobuf field")
            value, pos = buf[pos:pos + size], pos + size
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, wire, value


def tfrecords(data: bytes) -> Iterator[tuple[bytes, int]]:
    """(record, offset after it) for the whole records at the start of ``data`` (length,
    length crc, data, data crc; CRCs not checked). A record cut short at the end (a file
    being written) ends the iteration; a length no writer makes raises ValueError."""
    pos = 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        if length > MAX_RECORD:
            raise ValueError("not a TFRecord length")
        end = pos + 12 + length + 4
        if end > len(data):
            return
        yield data[pos + 12:pos + 12 + length], end
        pos = end


def num_shards_from_index_head(head: bytes) -> int | None:
    """K from the first bytes of a ``.index`` file, or None when they do not parse.

    The index is a table whose first entry has the empty key and a BundleHeaderProto value
    (field 1: num_shards). Blocks are stored uncompressed, so the entry starts at byte 0:
    varint shared=0, varint key length=0, varint value length, value.
    """
    try:
        shared, pos = read_varint(head, 0)
        key_len, pos = read_varint(head, pos)
        value_len, pos = read_varint(head, pos)
        if shared or key_len or pos + value_len > len(head):
            return None
        for number, wire, v in fields(head[pos:pos + value_len]):
            if number == 1 and wire == 0:
                return v if v >= 1 else None
        return 1  # proto3 leaves out num_shards only when it is 0; a bundle has >= 1 shard
    except ValueError:
        return None


def event_steps(data: bytes) -> tuple[list[int], int]:
    """(the ``Event.step`` of each whole TFRecord at the start of ``data``, in file order,
    bytes they take). Records without a step (the file version) are left out; a record cut
    short at the end is left for the next read. CRCs are not checked; bytes that cannot be
    records raise ValueError."""
    steps, consumed = [], 0
    for record, end in tfrecords(data):
        consumed = end
        step = event_step(record)
        if step is not None:
            steps.append(step)
    return steps, consumed


def newest_event_step(data: bytes) -> tuple[int | None, int]:
    """(the largest ``Event.step`` in the whole TFRecords at the start of ``data``, bytes
    they take): see ``event_steps``."""
    steps, consumed = event_steps(data)
    return (max(steps) if steps else None), consumed


def event_step(record: bytes) -> int | None:
    """Field 2 (step, int64) of an Event; None when absent (step 0)."""
    for number, wire, value in fields(record):
        if number == 2 and wire == 0:
            return value
    return None


# TensorProto dtype enum values and their struct formats (little-endian).
_DTYPES = {1: "<f", 2: "<d", 3: "<i", 9: "<q", 19: "<e"}


@dataclass(frozen=True)
class Scalar:
    """One scalar summary of an events file."""

    tag: str
    step: int
    value: float
    wall_time: float


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _tensor_scalar(buf: bytes) -> float | None:
    """The single number of a scalar TensorProto, or None."""
    dtype, content, values = None, None, []
    for number, wire, value in fields(buf):
        if number == 1 and wire == 0:
            dtype = value
        elif number == 4 and wire == 2:
            content = value
        elif number == 5:      # float_val: packed (2) or not (5)
            values += [v for (v,) in struct.iter_unpack("<f", value)]
        elif number == 6:      # double_val
            values += [v for (v,) in struct.iter_unpack("<d", value)]
        elif number in (7, 10) and wire == 0:  # int_val, int64_val (not packed)
            values.append(_signed64(value))
    if values:
        return float(values[0])
    fmt = _DTYPES.get(dtype) if dtype is not None else None
    if content is not None and fmt and len(content) >= struct.calcsize(fmt):
        return float(struct.unpack_from(fmt, content)[0])
    return None


def _value(buf: bytes) -> tuple[str, float] | None:
    tag, number_value = None, None
    for number, wire, value in fields(buf):
        if number == 1 and wire == 2:
            tag = value.decode("utf-8", "replace")
        elif number == 2 and wire == 5:
            number_value = struct.unpack("<f", value)[0]
        elif number == 8 and wire == 2:
            number_value = _tensor_scalar(value)
    if tag is None or number_value is None:
        return None
    return tag, float(number_value)


def scalars_of_event(record: bytes) -> list[Scalar]:
    wall_time, step, summary = 0.0, 0, None
    for number, wire, value in fields(record):
        if number == 1 and wire == 1:
            wall_time = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            step = _signed64(value)
        elif number == 5 and wire == 2:
            summary = value
    if summary is None:
        return []
    out = []
    for number, wire, value in fields(summary):
        if number == 1 and wire == 2:
            found = _value(value)
            if found:
                out.append(Scalar(found[0], step, found[1], wall_time))
    return out


def read_scalars(data: bytes) -> list[Scalar]:
    """Every scalar of an events file's bytes; broken records are skipped."""
    out: list[Scalar] = []
    try:
        for record, _ in tfrecords(data):
            try:
                out += scalars_of_event(record)
            except (ValueError, IndexError, struct.error):
                continue
    except ValueError:
        pass  # past this point the bytes are not TFRecords
    return out


EVENTS_DEPTH = 3        # model_dir/logs/train/events.out.tfevents.*: the deepest looked at


def events_dir_kind(parent: str, root: str) -> str | None:
    """What the events files in folder ``parent`` of model_dir ``root`` record: ``train``
    (model_dir itself, as Estimator writes, or a ``train/``), ``validation`` (Keras'
    ``validation/``), the folder's own name for TF's evaluator (Estimator's ``eval/``,
    ``eval_NAME/``); None for any other folder."""
    last = parent.rstrip("/").rsplit("/", 1)[-1]
    if parent.rstrip("/") == root.rstrip("/") or last == "train":
        return "train"
    if last == "validation" or last.startswith("eval"):
        return last
    return None


def scalars_in_dir(directory: str) -> list[Scalar]:
    """The scalars of every ``events.out.tfevents.*`` file directly in ``directory`` (any
    fsspec URL), in step order; [] when there is none."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(directory)
    try:
        names = sorted(fs.glob(path.rstrip("/") + "/events.out.tfevents.*"))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out: list[Scalar] = []
    for name in names:
        try:
            with fs.open(name, "rb") as f:
                out += read_scalars(f.read())
        except FileNotFoundError:
            continue
    return sorted(out, key=lambda s: (s.step, s.wall_time))


# ---------------------------------------------------------------- checkpoint index tables
# A ``.index`` is a LevelDB-format table (TensorFlow's tensor bundle: blocks written
# uncompressed): key -> BundleEntryProto (dtype 1, shard_id 3, offset 4, size 5) of each
# tensor, the empty key -> BundleHeaderProto. TF2 object-based checkpoints also hold
# ``_CHECKPOINTABLE_OBJECT_GRAPH``; TF1 ``Saver`` checkpoints (Estimator) do not.
TABLE_MAGIC = 0xDB4775248B80FB57
TABLE_FOOTER = 48
BLOCK_TRAILER = 5          # compression type (1 byte) + crc32c (4)
OBJECT_GRAPH_KEY = b"_CHECKPOINTABLE_OBJECT_GRAPH"
INT_DTYPES = {3: "<i", 9: "<q"}    # DT_INT32, DT_INT64


def _block_handle(buf: bytes, pos: int) -> tuple[int, int, int]:
    offset, pos = read_varint(buf, pos)
    size, pos = read_varint(buf, pos)
    return offset, size, pos


def _block(data: bytes, offset: int, size: int) -> bytes:
    if offset + size + BLOCK_TRAILER > len(data):
        raise ValueError("table block past the end of the file")
    if data[offset + size] != 0:
        raise ValueError("compressed table block (TensorFlow writes bundles uncompressed)")
    return data[offset:offset + size]


def block_entries(block: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of one table block (keys share prefixes with the previous key)."""
    if len(block) < 4:
        raise ValueError("table block too short")
    (restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    end = len(block) - 4 - 4 * restarts
    if end < 0:
        raise ValueError("bad table block restart count")
    pos, key = 0, b""
    while pos < end:
        shared, pos = read_varint(block, pos)
        own, pos = read_varint(block, pos)
        size, pos = read_varint(block, pos)
        if shared > len(key) or pos + own + size > end:
            raise ValueError("bad table block entry")
        key = key[:shared] + block[pos:pos + own]
        pos += own
        yield key, block[pos:pos + size]
        pos += size


def table_entries(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of every entry of a whole ``.index`` file, in key order. Raises
    ValueError for bytes that are not such a table."""
    if len(data) < TABLE_FOOTER:
        raise ValueError("too short for a table")
    footer = data[-TABLE_FOOTER:]
    if struct.unpack_from("<Q", footer, TABLE_FOOTER - 8)[0] != TABLE_MAGIC:
        raise ValueError("not a table (no magic number)")
    _, _, pos = _block_handle(footer, 0)            # the metaindex block: unused
    offset, size, _ = _block_handle(footer, pos)
    for _, handle in block_entries(_block(data, offset, size)):
        block_offset, block_size, _ = _block_handle(handle, 0)
        yield from block_entries(_block(data, block_offset, block_size))


@dataclass(frozen=True)
class BundleEntry:
    """Where one tensor of a checkpoint lies: data shard, offset, size, dtype."""

    dtype: int
    shard: int
    offset: int
    size: int


def bundle_entry(value: bytes) -> BundleEntry:
    found = {1: 0, 3: 0, 4: 0, 5: 0}
    for number, wire, v in fields(value):
        if number in found and wire == 0:
            found[number] = v
    return BundleEntry(found[1], found[3], found[4], found[5])


def index_entries(data: bytes) -> dict[str, BundleEntry]:
    """The tensors a ``.index`` lists (the header's empty key left out)."""
    return {key.decode("utf-8", "replace"): bundle_entry(value)
            for key, value in table_entries(data) if key}


def is_object_graph(data: bytes) -> bool:
    """Whether a ``.index`` is a TF2 object-based checkpoint's."""
    return any(key == OBJECT_GRAPH_KEY for key, _ in table_entries(data))


def int_scalar(entry: BundleEntry, raw: bytes) -> int | None:
    """The value of an int32/int64 scalar tensor from its bytes in the data shard."""
    fmt = INT_DTYPES.get(entry.dtype)
    if fmt is None or len(raw) != struct.calcsize(fmt) or entry.size != len(raw):
        return None
    return int(struct.unpack(fmt, raw)[0])
