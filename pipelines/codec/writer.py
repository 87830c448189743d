"""Encode record batches (magic 2) and legacy messages (magic 0/1), every codec.

The inverse of ``reader.py``; used by the generator and by round-trip tests. A parsed
uncompressed batch re-encodes to the same bytes (``encode_batch(parse(b)) == b``).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

import crc32c

from pipelines.codec import primitives as P
from pipelines.codec.compression import compress
from pipelines.codec.reader import Batch, Record

_V2_AFTER_CRC = struct.Struct(">hiqqqhii")
_V2_HEAD = struct.Struct(">qiib")


def encode_v2_record(out: bytearray, record: Record, base_offset: int, base_timestamp: int) -> None:
    body = bytearray(b"\x00")  # record attributes: unused
    P.write_varlong(body, (record.timestamp or 0) - base_timestamp)
    P.write_varint(body, record.offset - base_offset)
    for part in (record.key, record.value):
        if part is None:
            P.write_varint(body, -1)
        else:
            P.write_varint(body, len(part))
            body += part
    P.write_varint(body, len(record.headers))
    for hkey, hval in record.headers:
        raw = hkey.encode("utf-8")
        P.write_varint(body, len(raw))
        body += raw
        if hval is None:
            P.write_varint(body, -1)
        else:
            P.write_varint(body, len(hval))
            body += hval
    P.write_varint(out, len(body))
    out += body


def encode_v2_batch(
    records: Sequence[Record],
    *,
    base_offset: int | None = None,
    codec: int = 0,
    log_append_time: bool = False,
    transactional: bool = False,
    control: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = 0,
    delete_horizon_ms: int | None = None,
    last_offset_delta: int | None = None,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """One record batch. Offsets and timestamps are taken from the records.

    ``last_offset_delta`` defaults to the last record's delta (compaction may leave a
    larger one); ``base_timestamp`` to the first record's timestamp, or the delete
    horizon when ``delete_horizon_ms`` is given (spec 10.5).
    """
    if base_offset is None:
        base_offset = records[0].offset if records else 0
    stamps = [r.timestamp or 0 for r in records]
    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
    if base_timestamp is None:
        base_timestamp = stamps[0] if stamps else -1
    if max_timestamp is None:
        max_timestamp = max(stamps) if stamps else -1
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset - base_offset if records else 0
    body = bytearray()
    for r in records:
        encode_v2_record(body, r, base_offset, base_timestamp)
    payload = compress(codec, bytes(body), 2) if codec else bytes(body)
    attributes = (
        codec
        | (0x08 if log_append_time else 0)
        | (0x10 if transactional else 0)
        | (0x20 if control else 0)
        | (0x40 if delete_horizon_ms is not None else 0)
    )
    tail = (
        _V2_AFTER_CRC.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        + payload
    )
    crc = crc32c.crc32c(tail)
    size = 4 + 1 + 4 + len(tail)  # leader epoch + magic + crc + rest
    return _V2_HEAD.pack(base_offset, size, partition_leader_epoch, 2) + struct.pack(">I", crc) + tail


def encode_legacy_message(
    offset: int, magic: int, attributes: int, timestamp: int | None, key: bytes | None, value: bytes | None
) -> bytes:
    body = bytearray([magic, attributes])
    if magic == 1:
        body += struct.pack(">q", timestamp if timestamp is not None else -1)
    P.write_bytes(body, key)
    P.write_bytes(body, value)
    crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, 4 + len(body), crc) + bytes(body)


def encode_legacy(records: Sequence[Record], *, magic: int, codec: int = 0, log_append_time: bool = False) -> bytes:
    """Legacy entries: one message per record, or one compressed wrapper holding them all."""
    ts_bit = 0x08 if (magic == 1 and log_append_time) else 0
    if codec == 0:
        return b"".join(encode_legacy_message(r.offset, magic, ts_bit, r.timestamp, r.key, r.value) for r in records)
    first = records[0].offset
    inner = b"".join(
        # magic 1 inner offsets are relative (0, 1, ...); magic 0 carries absolute offsets
        encode_legacy_message(r.offset - first if magic == 1 else r.offset, magic, 0, r.timestamp, r.key, r.value)
        for r in records
    )
    wrapper_ts = max((r.timestamp or 0) for r in records) if magic == 1 else None
    return encode_legacy_message(
        records[-1].offset, magic, codec | ts_bit, wrapper_ts, None, compress(codec, inner, magic)
    )


def encode_batch(batch: Batch) -> bytes:
    """Re-encode a parsed batch from its header fields and records."""
    assert batch.records is not None
    if batch.magic < 2:
        return encode_legacy(
            batch.records, magic=batch.magic, codec=batch.codec, log_append_time=bool(batch.attributes & 0x08)
        )
    return encode_v2_batch(
        batch.records,
        base_offset=batch.base_offset,
        codec=batch.codec,
        log_append_time=bool(batch.attributes & 0x08),
        transactional=batch.is_transactional,
        control=batch.is_control,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        partition_leader_epoch=batch.partition_leader_epoch,
        delete_horizon_ms=batch.base_timestamp if batch.has_delete_horizon else None,
        last_offset_delta=batch.last_offset_delta,
        base_timestamp=batch.base_timestamp,
        max_timestamp=batch.max_timestamp,
    )
