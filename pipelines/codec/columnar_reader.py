"""Read a log segment into Arrow columns: what ``reader.iter_log`` yields, without Python per record.

``iter_log_columns(source)`` yields :class:`LogColumns` per chunk of the file (bounded memory,
like ``iter_log``): one row per batch, one row per record, and the read issues. Python runs once
per entry (the walk from one entry header to the next, and the CRC call); the records are parsed
with numpy:

* v2 batches (compressed ones decompressed one call each, into one buffer): record lengths are
  read in lockstep, record i of every batch at once, then every field of every record at once;
* magic 0/1 messages: their fixed layout read for all messages at once, and for the inner
  messages of all compressed wrappers (decompressed one call each) at once.

An entry the vectorised checks do not accept exactly (bad CRC, bad magic, a record or message
that does not parse, headers, a decompression failure) is parsed by the reference,
``reader.parse_entry``, so its batch or issue is the one ``iter_log`` reports. The one deliberate
difference: a batch whose offsets or timestamps leave int64 (possible only with forged varints)
is reported as a ``bad_records`` issue, since an Arrow int64 column cannot hold it.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import crc32c
import numpy as np
import pyarrow as pa

from pipelines.codec.compression import decompress
from pipelines.codec.errors import DecodeError, Reason
from pipelines.codec.reader import (
    LEGACY_MIN_SIZE,
    LOG_OVERHEAD,
    MAX_BATCH_SIZE,
    PREFIX,
    V2_HEADER,
    V2_MIN_SIZE,
    Batch,
    ByteSource,
    ReadIssue,
    as_source,
    iter_log,
    parse_entry,
)
from pipelines.codec.vectors import ByteBuffer, add_checked, spans_to_binary, subtract_checked, zigzag

HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
BATCH_SCHEMA = pa.schema(
    [
        ("position", pa.int64()),
        ("size", pa.int64()),
        ("base_offset", pa.int64()),
        ("magic", pa.int8()),
        ("crc", pa.int64()),  # uint32 on disk
        ("attributes", pa.int16()),
        ("partition_leader_epoch", pa.int32()),
        ("last_offset_delta", pa.int64()),  # int32 on disk; a legacy wrapper's can be wider
        ("base_timestamp", pa.int64()),
        ("max_timestamp", pa.int64()),
        ("producer_id", pa.int64()),
        ("producer_epoch", pa.int16()),
        ("base_sequence", pa.int32()),
        ("records_count", pa.int32()),
    ]
)
RECORD_SCHEMA = pa.schema(
    [
        ("batch", pa.int32()),  # row of the record's batch in LogColumns.batches
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),  # null: magic 0
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", pa.list_(HEADER_TYPE)),
    ]
)
CHUNK_BYTES = 16 * 1024 * 1024
_V2_FIELDS = {  # Batch field -> (byte offset in the entry, big-endian dtype)
    "base_offset": (0, ">i8"),
    "partition_leader_epoch": (12, ">i4"),
    "crc": (17, ">u4"),
    "attributes": (21, ">i2"),
    "last_offset_delta": (23, ">i4"),
    "base_timestamp": (27, ">i8"),
    "max_timestamp": (35, ">i8"),
    "producer_id": (43, ">i8"),
    "producer_epoch": (51, ">i2"),
    "base_sequence": (53, ">i4"),
    "records_count": (57, ">i4"),
}
_MIN_RECORD = 7  # a length byte and the six one-byte fields of an empty record
_SIZE = struct.Struct(">i")


@dataclass
class LogColumns:
    """The batches, records and issues of one stretch of a log, as ``iter_log`` yields them."""

    batches: pa.Table  # BATCH_SCHEMA, in file order
    records: pa.Table  # RECORD_SCHEMA, in file order
    issues: list[ReadIssue] = field(default_factory=list)  # in file order


# -- the walk over entry headers ----------------------------------------------------------------------------
def _min_size(magic: int) -> int:
    return V2_MIN_SIZE if magic == 2 else LEGACY_MIN_SIZE.get(magic, 14)


def _walk(buf: bytes, limit: int) -> tuple[list[int], int, int]:
    """Entries complete in ``buf`` that start before ``limit``: (positions, where the walk stopped,
    bytes the next entry needs: 0 when it cannot be read at all, as iter_log decides)."""
    positions: list[int] = []
    append = positions.append
    unpack = _SIZE.unpack_from
    pos = 0
    last_prefix = len(buf) - PREFIX  # the last position with a whole entry prefix in buf
    # once per entry of the whole log: kept to the fewest Python operations
    while pos < limit:
        if pos > last_prefix:
            return positions, pos, PREFIX
        (size,) = unpack(buf, pos + 8)
        if (size < V2_MIN_SIZE and size < _min_size(buf[pos + 16])) or size > MAX_BATCH_SIZE:
            return positions, pos, 0
        following = pos + LOG_OVERHEAD + size
        if following > len(buf):
            return positions, pos, LOG_OVERHEAD + size
        append(pos)
        pos = following
    return positions, pos, -1


def iter_log_columns(
    source: ByteSource | bytes | str | os.PathLike,
    *,
    start: int = 0,
    end: int | None = None,
    verify_crc: bool = True,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[LogColumns]:
    """The batches starting in ``[start, end)`` and the issues found there, ``chunk_bytes`` at a time."""
    src = as_source(source)
    stop = src.size if end is None else min(end, src.size)
    pos = start
    want = chunk_bytes
    while pos < stop:
        buf = src.read_at(pos, min(want, src.size - pos))  # not more: a larger read costs its size, used or not
        positions, walked, need = _walk(buf, stop - pos)
        if positions:
            yield _decode_chunk(buf, pos, positions, verify_crc)
        pos += walked
        if need < 0 or pos >= stop:
            return
        if need == 0 or need > src.size - pos:  # an entry iter_log reports and stops at
            yield _from_reference(list(iter_log(src, start=pos, end=stop, verify_crc=verify_crc)))
            return
        want = max(chunk_bytes, need)


def read_log_columns(
    source: ByteSource | bytes | str | os.PathLike,
    *,
    start: int = 0,
    end: int | None = None,
    verify_crc: bool = True,
    chunk_bytes: int = CHUNK_BYTES,
) -> LogColumns:
    """All of ``iter_log_columns`` in one LogColumns (the whole range's records in memory)."""
    parts = list(iter_log_columns(source, start=start, end=end, verify_crc=verify_crc, chunk_bytes=chunk_bytes))
    if not parts:
        return LogColumns(BATCH_SCHEMA.empty_table(), RECORD_SCHEMA.empty_table())
    batches = pa.concat_tables([p.batches for p in parts])
    records = []
    shift = 0
    for p in parts:  # batch numbers are per chunk: shift them to the concatenated table
        records.append(p.records.set_column(0, "batch", pa.array(p.records["batch"].to_numpy() + shift, pa.int32())))
        shift += p.batches.num_rows
    return LogColumns(batches, pa.concat_tables(records), [i for p in parts for i in p.issues])


# -- one chunk -------------------------------------------------------------------------------------------------
@dataclass
class _Spans:
    """Records of some entries of a chunk: each one's entry number and index in it, its fields, and
    where its key and value are in the chunk's records buffer (start, stop, null)."""

    entry: np.ndarray
    index: np.ndarray
    offset: np.ndarray  # int64
    timestamp: np.ndarray  # int64
    timestamp_null: np.ndarray  # bool
    key: tuple[np.ndarray, np.ndarray, np.ndarray]
    value: tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass
class _Framed:
    """What a vectorised parser read: the entries it read completely, and their records."""

    entries: np.ndarray
    records: _Spans


# Bytes after the records buffer: reads a few varints past a damaged record's end stay inside it.
_PAD = bytes(64)
_GAP = b"\x00"


def _decode_chunk(buf: bytes, base: int, positions: list[int], verify_crc: bool) -> LogColumns:
    data = ByteBuffer(buf)
    pos = np.array(positions, np.int64)
    size = data.read(">i4", pos + 8).astype(np.int64)
    magic = data.read("i1", pos + 16).astype(np.int64)
    header = {name: data.read(dtype, pos + at).astype(np.int64) for name, (at, dtype) in _V2_FIELDS.items()}
    header["magic"] = magic

    v2 = np.flatnonzero(magic == 2)
    if verify_crc:
        v2 = v2[_crc32c_matches(buf, pos[v2], size[v2], header["crc"][v2])]
    v2 = v2[header["records_count"][v2] >= 0]
    compressed = (header["attributes"][v2] & 0x07) != 0
    plain = v2[~compressed]
    inflated, bodies = _decompress_all(buf, v2[compressed], pos, size, header["attributes"])
    legacy_entries = np.flatnonzero((magic == 0) | (magic == 1))
    legacy = _read_messages(data, buf, pos[legacy_entries], verify_crc)  # plain messages and wrappers at once
    inners, inner_starts, inner_owner = _inflate_wrappers(buf, legacy)

    # one buffer for every record's bytes: the chunk, then the decompressed sections, then the
    # wrappers' messages (a byte between regions: a span ending one region never starts the next)
    records_buf = b"".join([buf, _GAP, *bodies, _GAP, *inners, _PAD])
    records = ByteBuffer(records_buf)
    body_length = np.array([len(b) for b in bodies], np.int64)
    body_end = len(buf) + len(_GAP) + np.cumsum(body_length)
    body_start = body_end - body_length
    inner_base = len(buf) + len(_GAP) + int(body_length.sum()) + len(_GAP)
    framed = [
        _frame_v2(
            records,
            np.concatenate([plain, inflated]),
            np.concatenate([pos[plain] + V2_HEADER, body_start]),
            np.concatenate([pos[plain] + LOG_OVERHEAD + size[plain], body_end]),
            header,
        ),
        *_frame_legacy(
            records, records_buf, legacy_entries, legacy, inner_base + inner_starts, inner_owner, header, verify_crc
        ),
    ]

    done = np.zeros(len(pos), bool)
    for part in framed:
        done[part.entries] = True
    rest = np.flatnonzero(~done).tolist()
    results = [_reference_entry(buf, base, positions[i], LOG_OVERHEAD + int(size[i]), verify_crc) for i in rest]
    is_batch = done.copy()
    reference = []
    for i, item in zip(rest, results, strict=True):
        if isinstance(item, Batch):
            is_batch[i] = True
            reference.append((i, item))
            for name, value in _batch_header(item).items():
                header[name][i] = value
    issues = [item for item in results if isinstance(item, ReadIssue)]
    spans = [part.records for part in framed]
    boundaries = [len(buf) + len(_GAP), inner_base, len(records_buf)]  # where the regions of records_buf start
    return _assemble(
        base + pos, LOG_OVERHEAD + size, header, is_batch, spans, records_buf, boundaries, reference, issues
    )


def _crc32c_matches(buf: bytes, pos: np.ndarray, size: np.ndarray, stored: np.ndarray) -> np.ndarray:
    """CRC-32C of each v2 batch from its attributes to its end (one C call per batch) against the stored one."""
    slices = map(slice, (pos + 21).tolist(), (pos + LOG_OVERHEAD + size).tolist())
    computed = np.fromiter(map(crc32c.crc32c, map(memoryview(buf).__getitem__, slices)), np.int64, len(pos))
    return computed == stored


def _decompress_all(
    buf: bytes, entries: np.ndarray, pos: np.ndarray, size: np.ndarray, attributes: np.ndarray
) -> tuple[np.ndarray, list[bytes]]:
    """The records sections of compressed v2 batches, decompressed: (entries that decompressed, their sections)."""
    bodies, kept = [], []
    starts = (pos[entries] + V2_HEADER).tolist()
    ends = (pos[entries] + LOG_OVERHEAD + size[entries]).tolist()
    codecs = (attributes[entries] & 0x07).tolist()
    for i, start, end, codec in zip(entries.tolist(), starts, ends, codecs, strict=True):
        try:
            bodies.append(decompress(codec, buf[start:end]))
        except DecodeError:
            continue  # the reference reports it
        kept.append(i)
    return np.array(kept, np.int64), bodies


# -- v2 records, vectorised ------------------------------------------------------------------------------------
def _varint_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every two bytes (little-endian u16) at a varint's start: its size if it fits in them (0: longer),
    its zig-zag value, and a record's total size when the varint is its length (0: not a record's)."""
    pair = np.arange(1 << 16, dtype=np.int64)
    low, high = pair & 0xFF, pair >> 8
    one, two = low < 0x80, (low >= 0x80) & (high < 0x80)
    raw = np.where(one, low, (low & 0x7F) | (high << 7))
    size = np.where(one, 1, np.where(two, 2, 0))
    value = (raw >> 1) ^ -(raw & 1)
    record = np.where((size > 0) & (value >= 6), size + value, 0)  # a record body has six bytes at least
    return size, value, record


_VARINT_SIZE, _VARINT_VALUE, _RECORD_SIZE = _varint_tables()


def _record_bounds(
    data: ByteBuffer, rstart: np.ndarray, rend: np.ndarray, count: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Record i of every batch at once, i = 0, 1, ...: (batch ok, each record's batch, index, start, end).

    A record is a zig-zag varint length and that many bytes; the batches are sorted by record
    count, so the batches that still have an i-th record are a prefix. This loop runs once per
    record index of the longest batch, so it is kept to a few operations: a table gives the size
    of a record whose length takes one or two varint bytes (up to 8191 bytes), longer ones apart.
    """
    order = np.argsort(-count, kind="stable")
    descending = count[order]
    end = rend[order]
    ok = np.ones(len(order), bool)
    rounds = int(descending[0]) if len(descending) else 0
    active = np.searchsorted(-descending, -np.arange(rounds + 1), side="left")  # batches with more than i records
    pairs = data.window("<u2")
    at = rstart[order]
    stopped = at.copy()  # where each batch's last record ends
    starts, stops = [], []
    for i in range(rounds):
        at = at[: active[i]]
        step = _RECORD_SIZE[pairs[at]]
        following = at + step
        bad = (step == 0) | (following > end[: active[i]])
        if bad.any():
            following = _long_records(data, at, following, end[: active[i]], ok, np.flatnonzero(bad))
        starts.append(at)
        stops.append(following)
        stopped[active[i + 1] : active[i]] = following[active[i + 1] :]
        at = following
    ok &= stopped == end  # records fill the section exactly
    batch_ok = np.empty(len(order), bool)
    batch_ok[order] = ok
    if not rounds:
        return batch_ok, *(np.zeros(0, np.int64) for _ in range(4))
    batch = np.concatenate([order[:n] for n in active[:-1].tolist()])
    index = np.repeat(np.arange(rounds), active[:-1])
    return batch_ok, batch, index, np.concatenate(starts), np.concatenate(stops)


def _long_records(
    data: ByteBuffer, at: np.ndarray, following: np.ndarray, end: np.ndarray, ok: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """Where the records at ``at[rows]`` end, read with a varint of any size (records of 8 KiB and more,
    or damage): a record that does not fit fails its batch, which then stops there."""
    raw, used, read_ok = data.uvarint(at[rows], end[rows], 10)
    length = zigzag(raw)
    good = read_ok & (length >= 6) & (length <= end[rows] - at[rows] - used)  # without overflow
    following = following.copy()
    following[rows] = np.where(good, at[rows] + used + np.where(good, length, 0), end[rows])
    ok[rows[~good]] = False
    return following


def _varints(data: ByteBuffer, pairs: np.ndarray, pos: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zig-zag varints at ``pos``: (values, positions after them); one of more than ten bytes fails its row."""
    pair = pairs[pos]
    size = _VARINT_SIZE[pair]
    value = _VARINT_VALUE[pair]
    longer = np.flatnonzero(size == 0)  # three bytes or more: rare but for timestamp deltas
    if longer.size:
        raw, size[longer], read_ok = data.uvarint(pos[longer], pos[longer] + 10, 10)
        value[longer] = zigzag(raw)
        ok[longer] &= read_ok
    return value, pos + size


def _span(length: np.ndarray, pos: np.ndarray, end: np.ndarray, ok: np.ndarray) -> tuple[tuple, np.ndarray]:
    """((start, stop, null), position after it) of the bytes a length announces (-1: null); not fitting fails."""
    null = length == -1
    ok &= length >= -1
    fits = length <= end - pos
    ok &= fits
    stop = pos + np.where(fits & (length > 0), length, 0)
    return (pos, stop, null), stop


def _frame_v2(data: ByteBuffer, entries: np.ndarray, rstart: np.ndarray, rend: np.ndarray, header: dict) -> _Framed:
    count = header["records_count"][entries]
    fits = count <= (rend - rstart) // _MIN_RECORD  # more records than bytes allow: the reference reports it
    entries, rstart, rend, count = entries[fits], rstart[fits], rend[fits], count[fits]
    batch_ok, batch, index, start, stop = _record_bounds(data, rstart, rend, count)

    # the fields of every record (in round order); a position only grows, so a record whose
    # fields run past its end ends elsewhere than its end and fails the last check
    pairs = data.window("<u2")
    ok = np.ones(len(start), bool)
    _, pos = _varints(data, pairs, start, ok)  # the length, checked by _record_bounds
    ts_delta, pos = _varints(data, pairs, pos + 1, ok)  # + 1: the attributes byte, unused
    offset_delta, pos = _varints(data, pairs, pos, ok)
    length, pos = _varints(data, pairs, pos, ok)
    key, pos = _span(length, pos, stop, ok)
    length, pos = _varints(data, pairs, pos, ok)
    value, pos = _span(length, pos, stop, ok)
    ok &= (pos + 1 == stop) & ((pairs[pos] & 0xFF) == 0)  # no headers: records with headers go to the reference

    entry = entries[batch]
    offset, offset_ok = add_checked(header["base_offset"][entry], offset_delta)
    log_append = (header["attributes"][entry] & 0x08) != 0
    created, created_ok = add_checked(header["base_timestamp"][entry], ts_delta)
    timestamp = np.where(log_append, header["max_timestamp"][entry], created)
    ok &= offset_ok & (log_append | created_ok)
    batch_ok[batch[~ok]] = False
    keep = batch_ok[batch]
    if keep.all():
        records = _Spans(entry, index, offset, timestamp, np.zeros(len(entry), bool), key, value)
    else:
        records = _Spans(
            entry[keep],
            index[keep],
            offset[keep],
            timestamp[keep],
            np.zeros(int(keep.sum()), bool),
            tuple(a[keep] for a in key),
            tuple(a[keep] for a in value),
        )
    return _Framed(entries[batch_ok], records)


# -- legacy messages, vectorised ---------------------------------------------------------------------------------
@dataclass
class _Messages:
    """Magic 0/1 messages of one buffer, read at once: offset, size, crc, magic, attributes, [timestamp], key, value."""

    ok: np.ndarray
    offset: np.ndarray
    crc: np.ndarray
    magic: np.ndarray
    attributes: np.ndarray
    timestamp: np.ndarray  # -1 for magic 0
    key: tuple[np.ndarray, np.ndarray, np.ndarray]  # start, stop, null
    value: tuple[np.ndarray, np.ndarray, np.ndarray]


def _read_messages(data: ByteBuffer, buf: bytes, start: np.ndarray, verify_crc: bool) -> _Messages:
    """The messages starting at ``start``, each as long as its size field says (the walk checked it fits)."""
    end = start + LOG_OVERHEAD + data.read(">i4", start + 8).astype(np.int64)
    magic = data.read("i1", start + 16).astype(np.int64)
    crc = data.read(">u4", start + 12).astype(np.int64)
    timestamp = np.where(magic == 1, data.read(">i8", start + 18), -1).astype(np.int64)
    ok = (magic == 0) | (magic == 1)
    pos = start + 18 + 8 * (magic == 1)
    key, pos = _span(_fixed_length(data, pos, end, ok), pos + 4, end, ok)
    value, pos = _span(_fixed_length(data, pos, end, ok), pos + 4, end, ok)
    ok &= pos == end
    if verify_crc:
        ok &= _crc32_matches(buf, start + 16, end, crc)
    offset = data.read(">i8", start).astype(np.int64)
    attributes = data.read("u1", start + 17).astype(np.int64)
    return _Messages(ok, offset, crc, magic, attributes, timestamp, key, value)


def _fixed_length(data: ByteBuffer, pos: np.ndarray, end: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """An int32 length (legacy key and value), checked to fit."""
    ok &= pos + 4 <= end
    return data.read(">i4", pos).astype(np.int64)


def _crc32_matches(buf: bytes, start: np.ndarray, end: np.ndarray, stored: np.ndarray) -> np.ndarray:
    slices = map(slice, start.tolist(), end.tolist())
    return np.fromiter(map(zlib.crc32, map(memoryview(buf).__getitem__, slices)), np.int64, len(start)) == stored


def _inner_positions(inner: bytes) -> list[int] | None:
    """Where the messages of a decompressed wrapper start; None when one does not fit (the reference reports it)."""
    positions = []
    pos = 0
    n = len(inner)
    while pos < n:
        if pos + PREFIX + 1 > n:
            return None
        (size,) = _SIZE.unpack_from(inner, pos + 8)
        if size < LEGACY_MIN_SIZE.get(inner[pos + 16], 1 << 31) or pos + LOG_OVERHEAD + size > n:
            return None
        positions.append(pos)
        pos += LOG_OVERHEAD + size
    return positions or None


def _inflate_wrappers(buf: bytes, top: _Messages) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """The compressed wrappers among ``top``, decompressed one by one: (their inner messages' bytes, where each
    inner message starts in them joined, which message of ``top`` holds it)."""
    inners, starts, owner = [], [], []
    size = 0
    value_start, value_stop, value_null = top.value
    wrapped = top.ok & ~value_null & ((top.attributes & 0x07) != 0)
    for w in np.flatnonzero(wrapped).tolist():
        payload = buf[int(value_start[w]) : int(value_stop[w])]
        try:
            inner = decompress(int(top.attributes[w]) & 0x07, payload, int(top.magic[w]))
        except DecodeError:
            continue  # the reference reports it
        positions = _inner_positions(inner)
        if positions is None:
            continue
        inners.append(inner)
        starts += [size + p for p in positions]
        owner += [w] * len(positions)
        size += len(inner)
    return inners, np.array(starts, np.int64), np.array(owner, np.int64)


def _legacy_header(header: dict[str, np.ndarray], entries: np.ndarray, values: dict[str, np.ndarray]) -> None:
    """Batch fields of legacy entries (a legacy entry has no producer fields or leader epoch)."""
    for name, value in {**_LEGACY_DEFAULTS, **values}.items():
        header[name][entries] = value


_LEGACY_DEFAULTS = {"partition_leader_epoch": -1, "producer_id": -1, "producer_epoch": -1, "base_sequence": -1}


def _frame_legacy(
    data: ByteBuffer,
    buf: bytes,
    entries: np.ndarray,
    top: _Messages,
    inner_start: np.ndarray,
    owner: np.ndarray,
    header: dict[str, np.ndarray],
    verify_crc: bool,
) -> list[_Framed]:
    """The top-level magic 0/1 messages ``top`` of ``entries``: plain ones (one record each) and compressed
    wrappers (their inner messages, in ``buf`` at ``inner_start``, read at once)."""
    plain = top.ok & ((top.attributes & 0x07) == 0)
    kept = entries[plain]
    _legacy_header(
        header,
        kept,
        {
            "crc": top.crc[plain],
            "attributes": top.attributes[plain],
            "base_timestamp": top.timestamp[plain],
            "max_timestamp": top.timestamp[plain],
            "last_offset_delta": 0,
            "records_count": 1,
        },
    )
    plain_records = _Spans(
        entry=kept,
        index=np.zeros(len(kept), np.int64),
        offset=top.offset[plain],
        timestamp=top.timestamp[plain],
        timestamp_null=top.magic[plain] == 0,
        key=tuple(a[plain] for a in top.key),
        value=tuple(a[plain] for a in top.value),
    )
    framed = [_Framed(kept, plain_records)]
    if owner.size:
        framed.append(_frame_wrappers(data, buf, top, entries, inner_start, owner, header, verify_crc))
    return framed


def _frame_wrappers(
    data: ByteBuffer,
    buf: bytes,
    wrappers: _Messages,
    entries: np.ndarray,
    inner_start: np.ndarray,
    owner: np.ndarray,
    header: dict[str, np.ndarray],
    verify_crc: bool,
) -> _Framed:
    """Compressed magic 0/1 wrappers: their inner messages (in ``buf`` at ``inner_start``) read at once."""
    inner = _read_messages(data, buf, inner_start, verify_crc)
    magic = wrappers.magic[owner]
    good = np.zeros(len(entries), bool)
    good[owner] = True
    good[owner[~(inner.ok & ((inner.attributes & 0x07) == 0) & (inner.magic == magic))]] = False

    counts = np.bincount(owner, minlength=len(entries))
    last = np.maximum(np.cumsum(counts) - 1, 0)
    first = last - counts + 1
    # a magic 1 wrapper's offset is that of its last message, whose own offset is relative to it
    shifted = (wrappers.magic == 1) & (wrappers.offset != 0)
    shift, fits = subtract_checked(wrappers.offset, inner.offset[last])
    good &= fits | ~shifted
    shift = np.where(shifted, shift, 0)
    offset, fits = add_checked(inner.offset, shift[owner])
    good[owner[~fits]] = False
    log_append = (magic == 1) & ((wrappers.attributes[owner] & 0x08) != 0)
    timestamp = np.where(log_append, wrappers.timestamp[owner], inner.timestamp)
    delta, fits = subtract_checked(offset[last], offset[np.minimum(first, last)])
    good &= fits & (counts > 0)

    kept = entries[good]
    _legacy_header(
        header,
        kept,
        {
            "base_offset": offset[first[good]],
            "crc": wrappers.crc[good],
            "attributes": wrappers.attributes[good],
            "base_timestamp": wrappers.timestamp[good],
            "max_timestamp": wrappers.timestamp[good],
            "last_offset_delta": delta[good],
            "records_count": counts[good],
        },
    )
    keep = good[owner]
    records = _Spans(
        entry=entries[owner[keep]],
        index=(np.arange(len(owner)) - first[owner])[keep],
        offset=offset[keep],
        timestamp=timestamp[keep],
        timestamp_null=magic[keep] == 0,
        key=tuple(a[keep] for a in inner.key),
        value=tuple(a[keep] for a in inner.value),
    )
    return _Framed(kept, records)


# -- the reference, for everything else -----------------------------------------------------------------------------
_INT64 = (-(2**63), 2**63 - 1)


def _reference_entry(buf: bytes, base: int, pos: int, total: int, verify_crc: bool) -> Batch | ReadIssue:
    """The entry as ``iter_log`` reports it (parse_entry), unless Arrow's int64 cannot hold it."""
    try:
        batch = parse_entry(buf[pos : pos + total], base + pos, verify_crc)
    except DecodeError as exc:
        return ReadIssue(ReadIssue.CORRUPT, base + pos, total, exc.reason, exc.detail)
    values = [v for r in batch.records or () for v in (r.offset, r.timestamp) if v is not None]
    values += _batch_header(batch).values()
    if not (_INT64[0] <= min(values) and max(values) <= _INT64[1]):
        return ReadIssue(ReadIssue.CORRUPT, base + pos, total, Reason.BAD_RECORDS, "offset or timestamp outside int64")
    return batch


def _batch_header(batch: Batch) -> dict[str, int]:
    return {name: getattr(batch, name) for name in BATCH_SCHEMA.names if name not in ("position", "size")}


def _reference_spans(batches: list[tuple[int, Batch]], at: int) -> tuple[_Spans, bytes, list[list[dict]]]:
    """The records of batches the reference parsed: their keys and values laid one after the other from byte
    ``at`` of the records buffer (returned joined), and each record's headers."""
    entry, index, offset, timestamp, lengths, nulls, pieces, headers = [], [], [], [], [], [], [], []
    for i, batch in batches:
        for j, record in enumerate(batch.records or ()):
            entry.append(i)
            index.append(j)
            offset.append(record.offset)
            timestamp.append(record.timestamp)
            for raw in (record.key, record.value):
                lengths.append(0 if raw is None else len(raw))
                nulls.append(raw is None)
                pieces.append(raw or b"")
            headers.append([{"key": k, "value": v} for k, v in record.headers])
    stamps = pa.array(timestamp, pa.int64())
    stop = at + np.cumsum(np.array(lengths, np.int64))
    start = stop - np.array(lengths, np.int64)
    null = np.array(nulls, bool)
    spans = _Spans(
        entry=np.array(entry, np.int64),
        index=np.array(index, np.int64),
        offset=np.array(offset, np.int64),
        timestamp=stamps.fill_null(0).to_numpy(),
        timestamp_null=stamps.is_null().to_numpy(zero_copy_only=False),
        key=(start[0::2], stop[0::2], null[0::2]),
        value=(start[1::2], stop[1::2], null[1::2]),
    )
    return spans, b"".join(pieces), headers


def _from_reference(items: list[Batch | ReadIssue]) -> LogColumns:
    """LogColumns of what iter_log yielded (the entries it reports and stops at)."""
    batches = [(i, item) for i, item in enumerate(items) if isinstance(item, Batch)]
    header = {name: np.zeros(len(items), np.int64) for name in BATCH_SCHEMA.names}
    is_batch = np.zeros(len(items), bool)
    for i, batch in batches:
        is_batch[i] = True
        for name in BATCH_SCHEMA.names:
            header[name][i] = getattr(batch, name)
    issues = [item for item in items if isinstance(item, ReadIssue)]
    position, size = header.pop("position"), header.pop("size")
    return _assemble(position, size, header, is_batch, [], b"", [], batches, issues)


# -- assembly ------------------------------------------------------------------------------------------------------
def _first_of_each(count: np.ndarray) -> np.ndarray:
    """Where each group starts when groups of ``count`` items are laid one after the other."""
    return np.cumsum(count) - count


def _inverse(permutation: np.ndarray) -> np.ndarray:
    """The order that puts item i at ``permutation[i]`` (no sort: the positions are known)."""
    order = np.empty_like(permutation)
    order[permutation] = np.arange(len(permutation))
    return order


def _assemble(
    position: np.ndarray,
    size: np.ndarray,
    header: dict[str, np.ndarray],
    is_batch: np.ndarray,
    parts: list[_Spans],
    records_buf: bytes,
    boundaries: list[int],
    reference: list[tuple[int, Batch]],
    issues: list[ReadIssue],
) -> LogColumns:
    """The tables: batches in entry order, records in (entry, index) order, batch numbers per record.

    ``records_buf`` holds every key and value of ``parts``, in regions starting at ``boundaries``
    (the chunk, the decompressed sections, the wrappers' messages); within a region the records
    are in file order. The reference's records are appended as one more region.
    """
    columns = {"position": position, "size": size, **header}
    batches = pa.table(
        {f.name: pa.array(columns[f.name][is_batch].astype(f.type.to_pandas_dtype()), f.type) for f in BATCH_SCHEMA},
        schema=BATCH_SCHEMA,
    )
    headers = None
    if not parts and not reference:
        return LogColumns(batches, RECORD_SCHEMA.empty_table(), sorted(issues, key=lambda i: i.position))
    if reference:
        spans, joined, headers = _reference_spans(reference, len(records_buf))
        parts = [*parts, spans]
        boundaries = [*boundaries, len(records_buf)]
        records_buf += joined
    entry = np.concatenate([p.entry for p in parts])
    # each part is in file order already: where each record goes is its entry's first row plus its index
    destination = _first_of_each(np.bincount(entry, minlength=len(is_batch)))[entry] + np.concatenate(
        [p.index for p in parts]
    )
    in_order = _inverse(destination)

    def ordered(values: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(values)[in_order]

    row_of_entry = np.cumsum(is_batch) - 1
    arrow_buf = pa.py_buffer(records_buf)
    offset_type = np.int32 if len(records_buf) < 2**31 else np.int64
    binaries = []
    for side in ("key", "value"):
        start, stop, null = (ordered([getattr(p, side)[k] for p in parts]) for k in range(3))
        binaries.append(_spans_in_order(arrow_buf, offset_type, start, stop, null, boundaries))
    records = pa.table(
        {
            "batch": pa.array(row_of_entry[entry[in_order]].astype(np.int32)),
            "offset": pa.array(ordered([p.offset for p in parts])),
            "timestamp": pa.array(
                ordered([p.timestamp for p in parts]), mask=ordered([p.timestamp_null for p in parts])
            ),
            "key": binaries[0],
            "value": binaries[1],
            "headers": _headers(len(entry), headers, destination[len(entry) - len(headers or ()) :]),
        },
        schema=RECORD_SCHEMA,
    )
    return LogColumns(batches, records, sorted(issues, key=lambda i: i.position))


def _spans_in_order(
    buffer: pa.Buffer, offset_type: Any, start: np.ndarray, stop: np.ndarray, null: np.ndarray, boundaries: list[int]
) -> pa.Array:
    """The spans as a binary array, in the given order, copied once.

    ``spans_to_binary`` needs them laid one after the other in the buffer: within a region of
    the buffer they are (file order), so a stable sort by region (a radix sort of small
    numbers) lays them out, and the copy takes them back in the given order.
    """
    region = np.searchsorted(np.array(boundaries, np.int64), start, side="right").astype(np.uint8)
    if not len(region) or (region[1:] >= region[:-1]).all():
        return spans_to_binary(buffer, offset_type, start, stop, null)
    laid = np.argsort(region, kind="stable")
    return spans_to_binary(buffer, offset_type, start[laid], stop[laid], null[laid], rows=_inverse(laid))


def _headers(count: int, reference: list[list[dict]] | None, rows: np.ndarray) -> pa.Array:
    """The headers column: empty lists but for the reference's records (at ``rows``), the only ones with headers."""
    lengths = np.zeros(count, np.int32)
    items: list[dict] = []
    if reference:
        lengths[rows] = [len(h) for h in reference]
        order = np.argsort(rows, kind="stable")
        items = [item for k in order.tolist() for item in reference[k]]
    offsets = np.zeros(count + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(items, HEADER_TYPE))
