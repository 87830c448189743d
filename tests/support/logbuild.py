"""Tiny byte builders for hand-made ``__consumer_offsets`` log segments (tests only).

Follows the spec (offsets-topic-format.md §2, §10.3-10.8). Deliberately independent of
``pipelines`` so the DumpLogSegments parser can be validated without our decoder.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Iterable, Sequence

import crc32c

# ---------------------------------------------------------------- primitives


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint(n: int) -> bytes:
    """Zig-zag varint/varlong (record-batch v2 fields)."""
    return uvarint((n << 1) ^ (n >> 63))


def i8(n: int) -> bytes:
    return struct.pack(">b", n)


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def u16(n: int) -> bytes:
    return struct.pack(">H", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


def string(s: str | None) -> bytes:
    """Classic (non-flexible) string: int16 length, -1 = null."""
    if s is None:
        return i16(-1)
    b = s.encode()
    return i16(len(b)) + b


def cstring(s: str | None) -> bytes:
    """Compact (flexible) string: uvarint(N+1), 0 = null."""
    if s is None:
        return uvarint(0)
    b = s.encode()
    return uvarint(len(b) + 1) + b


def cbytes(b: bytes | None) -> bytes:
    if b is None:
        return uvarint(0)
    return uvarint(len(b) + 1) + b


def carray(items: Sequence[bytes] | None) -> bytes:
    """Compact array of already-encoded elements (None = null array)."""
    if items is None:
        return uvarint(0)
    return uvarint(len(items) + 1) + b"".join(items)


def tags(fields: dict[int, bytes] | None = None) -> bytes:
    """Tagged-field section: {tag: data}, written in ascending tag order."""
    fields = fields or {}
    out = uvarint(len(fields))
    for tag in sorted(fields):
        out += uvarint(tag) + uvarint(len(fields[tag])) + fields[tag]
    return out


def uuid(hex_or_bytes: str | bytes) -> bytes:
    b = bytes.fromhex(hex_or_bytes) if isinstance(hex_or_bytes, str) else hex_or_bytes
    assert len(b) == 16
    return b


def key(type_id: int, *strings_then_ints: str | int) -> bytes:
    """Classic key: int16 type id, then classic strings / int32s in order."""
    out = i16(type_id)
    for part in strings_then_ints:
        out += string(part) if isinstance(part, str) else i32(part)
    return out


# ---------------------------------------------------------------- record batch v2

CODECS = {"none": 0, "gzip": 1}


def record_v2(
    offset_delta: int,
    key_bytes: bytes | None,
    value: bytes | None,
    ts_delta: int = 0,
    headers: Iterable[tuple[str, bytes | None]] = (),
) -> bytes:
    body = b"\x00" + varint(ts_delta) + varint(offset_delta)
    body += varint(-1) if key_bytes is None else varint(len(key_bytes)) + key_bytes
    body += varint(-1) if value is None else varint(len(value)) + value
    headers = list(headers)
    body += varint(len(headers))
    for hk, hv in headers:
        hkb = hk.encode()
        body += varint(len(hkb)) + hkb
        body += varint(-1) if hv is None else varint(len(hv)) + hv
    return varint(len(body)) + body


def batch_v2(
    base_offset: int,
    records: Sequence[tuple[bytes | None, bytes | None]],
    *,
    base_ts: int = 1700000000000,
    codec: str = "none",
    transactional: bool = False,
    control: bool = False,
    log_append_time: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    leader_epoch: int = 0,
    offset_deltas: Sequence[int] | None = None,
) -> bytes:
    """A complete v2 batch; ``records`` are (key, value) pairs, one per offset."""
    deltas = list(offset_deltas) if offset_deltas is not None else list(range(len(records)))
    raw = b"".join(record_v2(d, k, v) for d, (k, v) in zip(deltas, records, strict=True))
    if codec == "gzip":
        raw = gzip.compress(raw, mtime=0)
    elif codec != "none":
        raise ValueError(codec)
    attrs = CODECS[codec] | (0x08 if log_append_time else 0) | (0x10 if transactional else 0) | (0x20 if control else 0)
    after_crc = (
        i16(attrs)
        + i32(deltas[-1] if deltas else -1)
        + i64(base_ts)
        + i64(base_ts)
        + i64(producer_id)
        + i16(producer_epoch)
        + i32(base_sequence)
        + i32(len(records))
        + raw
    )
    crc = crc32c.crc32c(after_crc)
    tail = i32(leader_epoch) + b"\x02" + struct.pack(">I", crc) + after_crc
    return i64(base_offset) + i32(len(tail)) + tail


def control_batch(
    base_offset: int,
    commit: bool,
    coordinator_epoch: int,
    *,
    producer_id: int,
    producer_epoch: int = 0,
    base_ts: int = 1700000000000,
) -> bytes:
    k = i16(0) + i16(1 if commit else 0)
    v = i16(0) + i32(coordinator_epoch)
    return batch_v2(
        base_offset,
        [(k, v)],
        base_ts=base_ts,
        transactional=True,
        control=True,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
    )


# ---------------------------------------------------------------- legacy messages (magic 0/1)


def message_legacy(
    offset: int,
    key_bytes: bytes | None,
    value: bytes | None,
    *,
    magic: int = 1,
    timestamp: int = 1700000000000,
    attributes: int = 0,
) -> bytes:
    body = bytes([magic, attributes])
    if magic == 1:
        body += i64(timestamp)
    body += i32(-1) if key_bytes is None else i32(len(key_bytes)) + key_bytes
    body += i32(-1) if value is None else i32(len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return i64(offset) + i32(len(msg)) + msg
