"""Scalars from TensorFlow events files, without TensorFlow (the launcher never imports it).

An ``events.out.tfevents.*`` file is a TFRecord file of ``Event`` protocol buffers. This
module reads the records (length, crc, data, crc) and decodes just the fields a scalar
needs: ``Event.wall_time`` (1), ``Event.step`` (2), ``Event.summary`` (5) →
``Summary.value`` (1) → ``Value.tag`` (1) with ``simple_value`` (2, TF1 summaries:
Estimator) or a scalar ``tensor`` (8, TF2 ``tf.summary.scalar``). Anything else is skipped;
a record cut short at the end of a file being written ends the reading.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import fsspec

from orchestrator.protowire import fields, tfrecords

# TensorProto dtype enum values and their struct formats (little-endian).
_DTYPES = {1: "<f", 2: "<d", 3: "<i", 9: "<q", 19: "<e"}


@dataclass(frozen=True)
class Scalar:
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
    fmt = _DTYPES.get(dtype)
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


def scalars_in_dir(directory: str) -> list[Scalar]:
    """The scalars of every ``events.out.tfevents.*`` file directly in ``directory`` (any
    fsspec URL), in step order; [] when there is none."""
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
