"""Just enough of the protobuf wire format and of TFRecord framing to read TensorFlow's own
files (checkpoint index headers, events files) without importing TensorFlow."""

from __future__ import annotations

import struct
from collections.abc import Iterator

MAX_RECORD = 1 << 30


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


def fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of a protobuf message: an int for varints, bytes for
    fixed-size and length-delimited fields. Raises ValueError on a malformed message."""
    pos, end = 0, len(buf)
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
