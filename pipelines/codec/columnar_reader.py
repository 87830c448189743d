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
        buf = src.read_at(pos, want)
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
class _Records:
    """Records of some entries of a chunk: each one's entry number and index in it, and columns."""

    entry: np.ndarray
    index: np.ndarray
    offset: np.ndarray  # int64
    timestamp: np.ndarray  # int64
    timestamp_null: np.ndarray  # bool
    key: pa.Array
    value: pa.Array
    headers: pa.Array


@dataclass
class _Framed:
    """What a vectorised parser read: the entries it read completely, and their records."""

    entries: np.ndarray
    records: _Records


def _decode_chunk(buf: bytes, base: int, positions: list[int], verify_crc: bool) -> LogColumns:
    data = ByteBuffer(buf)
    arrow_buf = pa.py_buffer(buf)
    pos = np.array(positions, np.int64)
    size = data.read(">i4", pos + 8).astype(np.int64)
    magic = data.read("i1", pos + 16).astype(np.int64)
    header = {name: data.read(dtype, pos + at).astype(np.int64) for name, (at, dtype) in _V2_FIELDS.items()}
    header["magic"] = magic
    framed = []

    v2 = np.flatnonzero(magic == 2)
    if verify_crc:
        v2 = v2[_crc32c_matches(buf, pos[v2], size[v2], header["crc"][v2])]
    v2 = v2[header["records_count"][v2] >= 0]
    compressed = (header["attributes"][v2] & 0x07) != 0
    plain = v2[~compressed]
    plain_start = pos[plain] + V2_HEADER
    plain_end = pos[plain] + LOG_OVERHEAD + size[plain]
    framed.append(_frame_v2(data, arrow_buf, plain, plain_start, plain_end, header))
    inflated, body, body_start, body_end = _decompress_all(buf, v2[compressed], pos, size, header["attributes"])
    framed.append(_frame_v2(ByteBuffer(body), pa.py_buffer(body), inflated, body_start, body_end, header))

    legacy = np.flatnonzero((magic == 0) | (magic == 1))
    wrapped = (data.read("u1", pos[legacy] + 17) & 0x07) != 0
    framed.append(_frame_plain_legacy(buf, data, legacy[~wrapped], pos, header, verify_crc))
    framed.append(_frame_legacy_wrappers(buf, data, legacy[wrapped], pos, header, verify_crc))

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
    records = [part.records for part in framed] + [_reference_records(reference)]
    issues = [item for item in results if isinstance(item, ReadIssue)]
    return _assemble(base + pos, LOG_OVERHEAD + size, header, is_batch, records, issues)


def _crc32c_matches(buf: bytes, pos: np.ndarray, size: np.ndarray, stored: np.ndarray) -> np.ndarray:
    """CRC-32C of each v2 batch from its attributes to its end (one C call per batch) against the stored one."""
    view = memoryview(buf)
    starts = (pos + 21).tolist()
    ends = (pos + LOG_OVERHEAD + size).tolist()
    computed = np.fromiter((crc32c.crc32c(view[a:b]) for a, b in zip(starts, ends, strict=True)), np.int64, len(starts))
    return computed == stored


def _decompress_all(
    buf: bytes, entries: np.ndarray, pos: np.ndarray, size: np.ndarray, attributes: np.ndarray
) -> tuple[np.ndarray, bytes, np.ndarray, np.ndarray]:
    """The records sections of compressed v2 batches, decompressed one after the other into one buffer:
    (entries that decompressed, the buffer, each one's start and end in it)."""
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
    lengths = np.array([len(b) for b in bodies], np.int64)
    ends = np.cumsum(lengths)
    return np.array(kept, np.int64), b"".join(bodies), ends - lengths, ends


# -- v2 records, vectorised ------------------------------------------------------------------------------------
def _record_bounds(
    data: ByteBuffer, rstart: np.ndarray, rend: np.ndarray, count: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Record i of every batch at once, i = 0, 1, ...: (batch ok, each record's batch, index, body start, body end).

    A record is a zig-zag varint length and that many bytes; the batches are sorted by record
    count, so the batches that still have an i-th record are a prefix. This loop runs once per
    record index of the longest batch, so it is kept to a few operations: lengths of one or two
    varint bytes (records up to 8191 bytes) from one gather, longer ones apart.
    """
    order = np.argsort(-count, kind="stable")
    descending = count[order]
    pos = rstart[order].copy()
    end = rend[order]
    ok = np.ones(len(order), bool)
    rounds = int(descending[0]) if len(descending) else 0
    active = np.searchsorted(-descending, -np.arange(rounds), side="left")  # batches with more than i records
    pairs = data.window("<u2")
    last = len(pairs) - 1
    body_start, body_end = [], []
    for i in range(rounds):
        at, limit = pos[: active[i]], end[: active[i]]
        pair = pairs[np.minimum(at, last)].astype(np.int64)
        low = pair & 0xFF
        two = low >= 0x80
        raw = np.where(two, (low & 0x7F) | ((pair >> 8) & 0x7F) << 7, low)
        length = (raw >> 1) ^ -(raw & 1)
        body = at + 1 + two
        longer = np.flatnonzero(two & (pair >= 0x8000))  # records of 8 KiB and more: rare
        if longer.size:
            raw_long, used, read_ok = data.uvarint(at[longer], limit[longer], 10)
            length[longer] = np.where(read_ok, zigzag(raw_long), -1)
            body[longer] = at[longer] + used
        good = (length >= 6) & (length <= limit - body)  # the reference's bound, without overflow
        stop = body + np.where(good, length, 0)
        if not good.all():
            ok[: active[i]] &= good
            stop = np.where(good, stop, limit)  # a bad batch stops reading
        body_start.append(body)
        body_end.append(stop)
        pos[: active[i]] = stop
    ok &= pos == end  # records fill the section exactly
    batch_ok = np.empty(len(order), bool)
    batch_ok[order] = ok
    if not rounds:
        return batch_ok, *(np.zeros(0, np.int64) for _ in range(4))
    batch = np.concatenate([order[:n] for n in active.tolist()])
    index = np.repeat(np.arange(rounds), active)
    return batch_ok, batch, index, np.concatenate(body_start), np.concatenate(body_end)


class _FieldReader:
    """Sequential varint fields of many records at once; a field that does not fit fails its record."""

    def __init__(self, data: ByteBuffer, pos: np.ndarray, end: np.ndarray) -> None:
        self.data = data
        self.pos = pos
        self.end = end
        self.ok = np.ones(len(pos), bool)

    def varint(self) -> np.ndarray:
        """Zig-zag varints; most record fields take one byte, the others are read apart."""
        first = self.data.read("u1", self.pos).astype(np.int64)
        value = (first >> 1) ^ -(first & 1)
        used = np.ones(len(first), np.int64)
        self.ok &= self.pos < self.end
        longer = np.flatnonzero(first >= 0x80)
        if longer.size:
            raw, used[longer], ok = self.data.uvarint(self.pos[longer], self.end[longer], 10)
            value[longer] = zigzag(raw)
            self.ok[longer] &= ok
        self.pos = self.pos + used
        return value

    def span(self, length: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start, stop, null) of the bytes a length field announces; -1 = null."""
        null = length == -1
        self.ok &= length >= -1
        length = np.where(length > 0, length, 0)
        self.ok &= length <= self.end - self.pos
        start = self.pos
        self.pos = start + np.where(self.ok, length, 0)
        return start, self.pos, null


def _frame_v2(
    data: ByteBuffer,
    arrow_buf: pa.Buffer,
    entries: np.ndarray,
    rstart: np.ndarray,
    rend: np.ndarray,
    header: dict[str, np.ndarray],
) -> _Framed:
    count = header["records_count"][entries]
    fits = count <= (rend - rstart) // _MIN_RECORD  # more records than bytes allow: the reference reports it
    entries, rstart, rend, count = entries[fits], rstart[fits], rend[fits], count[fits]
    batch_ok, batch, index, body_start, body_end = _record_bounds(data, rstart, rend, count)
    # from round order to file order (the batches are in file order), which the spans need
    in_order = _inverse(_first_of_each(count)[batch] + index)
    keep = batch_ok[batch[in_order]]
    in_order = in_order[keep]
    batch, index, body_start, body_end = batch[in_order], index[in_order], body_start[in_order], body_end[in_order]

    fields = _FieldReader(data, body_start + 1, body_end)  # + 1: the attributes byte, unused
    ts_delta = fields.varint()
    offset_delta = fields.varint()
    key_start, key_stop, key_null = fields.span(fields.varint())
    fields.ok &= fields.pos < fields.end
    value_start, value_stop, value_null = fields.span(fields.varint())
    fields.ok &= fields.pos < fields.end
    fields.ok &= data.read("u1", fields.pos) == 0  # no headers: records with headers go to the reference
    fields.ok &= fields.pos + 1 == fields.end

    entry = entries[batch]
    offset, offset_ok = add_checked(header["base_offset"][entry], offset_delta)
    log_append = (header["attributes"][entry] & 0x08) != 0
    created, created_ok = add_checked(header["base_timestamp"][entry], ts_delta)
    timestamp = np.where(log_append, header["max_timestamp"][entry], created)
    record_ok = fields.ok & offset_ok & (log_append | created_ok)

    bad_batches = np.unique(batch[~record_ok])
    batch_ok[bad_batches] = False
    keep = batch_ok[batch]
    offset_type = np.int32 if len(data.data) < 2**31 else np.int64
    records = _Records(
        entry=entry[keep],
        index=index[keep],
        offset=offset[keep],
        timestamp=timestamp[keep],
        timestamp_null=np.zeros(int(keep.sum()), bool),
        key=spans_to_binary(arrow_buf, offset_type, key_start[keep], key_stop[keep], key_null[keep]),
        value=spans_to_binary(arrow_buf, offset_type, value_start[keep], value_stop[keep], value_null[keep]),
        headers=_no_headers(int(keep.sum())),
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
    fields = _FieldReader(data, start + 18 + 8 * (magic == 1), end)
    key = fields.span(_fixed_length(fields))
    value = fields.span(_fixed_length(fields))
    ok = fields.ok & (fields.pos == end) & ((magic == 0) | (magic == 1))
    if verify_crc:
        ok &= _crc32_matches(buf, start + 16, end, crc)
    offset = data.read(">i8", start).astype(np.int64)
    attributes = data.read("u1", start + 17).astype(np.int64)
    return _Messages(ok, offset, crc, magic, attributes, timestamp, key, value)


def _spans(arrow_buf: pa.Buffer, span: tuple[np.ndarray, np.ndarray, np.ndarray], keep: np.ndarray) -> pa.Array:
    start, stop, null = span
    return spans_to_binary(arrow_buf, np.int32, start[keep], stop[keep], null[keep])


def _legacy_header(header: dict[str, np.ndarray], entries: np.ndarray, values: dict[str, np.ndarray]) -> None:
    """Batch fields of legacy entries (a legacy entry has no producer fields or leader epoch)."""
    for name, value in {**_LEGACY_DEFAULTS, **values}.items():
        header[name][entries] = value


_LEGACY_DEFAULTS = {"partition_leader_epoch": -1, "producer_id": -1, "producer_epoch": -1, "base_sequence": -1}


def _frame_plain_legacy(
    buf: bytes, data: ByteBuffer, entries: np.ndarray, pos: np.ndarray, header: dict[str, np.ndarray], verify_crc: bool
) -> _Framed:
    """Uncompressed top-level magic 0/1 messages: one record each."""
    messages = _read_messages(data, buf, pos[entries], verify_crc)
    ok = messages.ok
    kept = entries[ok]
    _legacy_header(
        header,
        kept,
        {
            "crc": messages.crc[ok],
            "attributes": messages.attributes[ok],
            "base_timestamp": messages.timestamp[ok],
            "max_timestamp": messages.timestamp[ok],
            "last_offset_delta": 0,
            "records_count": 1,
        },
    )
    arrow_buf = pa.py_buffer(buf)
    records = _Records(
        entry=kept,
        index=np.zeros(len(kept), np.int64),
        offset=messages.offset[ok],
        timestamp=messages.timestamp[ok],
        timestamp_null=messages.magic[ok] == 0,
        key=_spans(arrow_buf, messages.key, ok),
        value=_spans(arrow_buf, messages.value, ok),
        headers=_no_headers(len(kept)),
    )
    return _Framed(kept, records)


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


def _frame_legacy_wrappers(
    buf: bytes, data: ByteBuffer, entries: np.ndarray, pos: np.ndarray, header: dict[str, np.ndarray], verify_crc: bool
) -> _Framed:
    """Compressed magic 0/1 wrappers: decompressed one by one, their inner messages read at once."""
    wrappers = _read_messages(data, buf, pos[entries], verify_crc)
    inners, starts, owner = [], [], []
    size = 0
    value_start, value_stop, value_null = wrappers.value
    for w in np.flatnonzero(wrappers.ok & ~value_null).tolist():
        payload = buf[int(value_start[w]) : int(value_stop[w])]
        try:
            inner = decompress(int(wrappers.attributes[w]) & 0x07, payload, int(wrappers.magic[w]))
        except DecodeError:
            continue  # the reference reports it
        positions = _inner_positions(inner)
        if positions is None:
            continue
        inners.append(inner)
        starts += [size + p for p in positions]
        owner += [w] * len(positions)
        size += len(inner)
    if not owner:
        return _Framed(np.zeros(0, np.int64), _reference_records([]))
    joined = b"".join(inners)
    owner_ = np.array(owner, np.int64)
    inner = _read_messages(ByteBuffer(joined), joined, np.array(starts, np.int64), verify_crc)
    magic = wrappers.magic[owner_]
    good = np.zeros(len(entries), bool)
    good[owner_] = True
    good[owner_[~(inner.ok & ((inner.attributes & 0x07) == 0) & (inner.magic == magic))]] = False

    counts = np.bincount(owner_, minlength=len(entries))
    last = np.maximum(np.cumsum(counts) - 1, 0)
    first = last - counts + 1
    # a magic 1 wrapper's offset is that of its last message, whose own offset is relative to it
    shifted = (wrappers.magic == 1) & (wrappers.offset != 0)
    shift, fits = subtract_checked(wrappers.offset, inner.offset[last])
    good &= fits | ~shifted
    shift = np.where(shifted, shift, 0)
    offset, fits = add_checked(inner.offset, shift[owner_])
    good[owner_[~fits]] = False
    log_append = (magic == 1) & ((wrappers.attributes[owner_] & 0x08) != 0)
    timestamp = np.where(log_append, wrappers.timestamp[owner_], inner.timestamp)
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
    keep = good[owner_]
    arrow_buf = pa.py_buffer(joined)
    records = _Records(
        entry=entries[owner_[keep]],
        index=(np.arange(len(owner_)) - first[owner_])[keep],
        offset=offset[keep],
        timestamp=timestamp[keep],
        timestamp_null=magic[keep] == 0,
        key=_spans(arrow_buf, inner.key, keep),
        value=_spans(arrow_buf, inner.value, keep),
        headers=_no_headers(int(keep.sum())),
    )
    return _Framed(kept, records)


def _fixed_length(fields: _FieldReader) -> np.ndarray:
    """An int32 length (legacy key and value), checked to fit."""
    fields.ok &= fields.pos + 4 <= fields.end
    length = fields.data.read(">i4", fields.pos).astype(np.int64)
    fields.pos = fields.pos + 4
    return length


def _crc32_matches(buf: bytes, start: np.ndarray, end: np.ndarray, stored: np.ndarray) -> np.ndarray:
    view = memoryview(buf)
    pairs = zip(start.tolist(), end.tolist(), strict=True)
    return np.fromiter((zlib.crc32(view[a:b]) for a, b in pairs), np.int64, len(start)) == stored


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


def _reference_records(batches: list[tuple[int, Batch]]) -> _Records:
    entry, index, offset, timestamp, keys, values, headers = [], [], [], [], [], [], []
    for i, batch in batches:
        for j, record in enumerate(batch.records or ()):
            entry.append(i)
            index.append(j)
            offset.append(record.offset)
            timestamp.append(record.timestamp)
            keys.append(record.key)
            values.append(record.value)
            headers.append([{"key": k, "value": v} for k, v in record.headers])
    stamps = pa.array(timestamp, pa.int64())
    return _Records(
        entry=np.array(entry, np.int64),
        index=np.array(index, np.int64),
        offset=np.array(offset, np.int64),
        timestamp=stamps.fill_null(0).to_numpy(),
        timestamp_null=stamps.is_null().to_numpy(zero_copy_only=False),
        key=pa.array(keys, pa.binary()),
        value=pa.array(values, pa.binary()),
        headers=pa.array(headers, pa.list_(HEADER_TYPE)),
    )


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
    return _assemble(
        header.pop("position"), header.pop("size"), header, is_batch, [_reference_records(batches)], issues
    )


# -- assembly ------------------------------------------------------------------------------------------------------
def _first_of_each(count: np.ndarray) -> np.ndarray:
    """Where each group starts when groups of ``count`` items are laid one after the other."""
    return np.cumsum(count) - count


def _inverse(permutation: np.ndarray) -> np.ndarray:
    """The order that puts item i at ``permutation[i]`` (no sort: the positions are known)."""
    order = np.empty_like(permutation)
    order[permutation] = np.arange(len(permutation))
    return order


def _no_headers(count: int) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(np.zeros(count + 1, np.int32)), pa.array([], HEADER_TYPE))


def _assemble(
    position: np.ndarray,
    size: np.ndarray,
    header: dict[str, np.ndarray],
    is_batch: np.ndarray,
    parts: list[_Records],
    issues: list[ReadIssue],
) -> LogColumns:
    """The tables: batches in entry order, records in (entry, index) order, batch numbers per record."""
    columns = {"position": position, "size": size, **header}
    batches = pa.table(
        {f.name: pa.array(columns[f.name][is_batch].astype(f.type.to_pandas_dtype()), f.type) for f in BATCH_SCHEMA},
        schema=BATCH_SCHEMA,
    )
    entry = np.concatenate([p.entry for p in parts])
    index = np.concatenate([p.index for p in parts])
    # each part is in file order already: where each record goes is its entry's first row plus its index
    destination = _first_of_each(np.bincount(entry, minlength=len(is_batch)))[entry] + index
    row_of_entry = np.cumsum(is_batch) - 1
    records = pa.table(
        {
            "batch": pa.array(row_of_entry[entry].astype(np.int32)),
            "offset": pa.array(np.concatenate([p.offset for p in parts])),
            "timestamp": pa.array(
                np.concatenate([p.timestamp for p in parts]), mask=np.concatenate([p.timestamp_null for p in parts])
            ),
            "key": pa.concat_arrays([p.key for p in parts]),
            "value": pa.concat_arrays([p.value for p in parts]),
            "headers": pa.concat_arrays([p.headers for p in parts]),
        },
        schema=RECORD_SCHEMA,
    )
    if (destination != np.arange(len(destination))).any():
        records = records.take(pa.array(_inverse(destination)))
    return LogColumns(batches, records, sorted(issues, key=lambda i: i.position))
