"""Records of many v2 batches and magic 0/1 messages read at once with numpy, for ``columnar_reader``.

Everything here reads one records buffer (``columnar_reader`` lays a chunk, its decompressed
sections and its wrappers' messages one after the other) and returns, per parser, the entries it
read completely and their records as spans of that buffer. What does not parse exactly is left
out, for the reference parser to report.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np

from pipelines.codec.compression import decompress
from pipelines.codec.errors import DecodeError
from pipelines.codec.reader import LEGACY_MIN_SIZE, LOG_OVERHEAD, PREFIX
from pipelines.codec.vectors import ByteBuffer, add_checked, subtract_checked, zigzag

_MIN_RECORD = 7  # a length byte and the six one-byte fields of an empty record
_SIZE = struct.Struct(">i")


@dataclass
class Spans:
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
class Framed:
    """What a vectorised parser read: the entries it read completely, and their records."""

    entries: np.ndarray
    records: Spans


# -- v2 records, vectorised ------------------------------------------------------------------------------------
def _varint_tables() -> tuple[np.ndarray, np.ndarray]:
    """For every two bytes (little-endian u16) at a varint's start: its zig-zag value << 2 | its size if it
    fits in them (size 0: longer), and a record's total size when the varint is its length (0: not a record's).
    Small tables (int32, int16) looked up with np.take: they stay in the CPU's caches."""
    pair = np.arange(1 << 16, dtype=np.int64)
    low, high = pair & 0xFF, pair >> 8
    one, two = low < 0x80, (low >= 0x80) & (high < 0x80)
    raw = np.where(one, low, (low & 0x7F) | (high << 7))
    size = np.where(one, 1, np.where(two, 2, 0))
    value = (raw >> 1) ^ -(raw & 1)
    record = np.where((size > 0) & (value >= 6), size + value, 0)  # a record body has six bytes at least
    return ((value << 2) | size).astype(np.int32), record.astype(np.int16)


_VARINT, _RECORD_SIZE = _varint_tables()


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
        step = np.take(_RECORD_SIZE, pairs[at])
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
    both = np.take(_VARINT, pairs[pos])
    size = both & 3
    value = (both >> 2).astype(np.int64)
    longer = np.flatnonzero(size == 0)  # three bytes or more: rare but for timestamp deltas
    if longer.size:
        raw, used, read_ok = data.uvarint(pos[longer], pos[longer] + 10, 10)
        size[longer] = used
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


def frame_v2(data: ByteBuffer, entries: np.ndarray, rstart: np.ndarray, rend: np.ndarray, header: dict) -> Framed:
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
        records = Spans(entry, index, offset, timestamp, np.zeros(len(entry), bool), key, value)
    else:
        records = Spans(
            entry[keep],
            index[keep],
            offset[keep],
            timestamp[keep],
            np.zeros(int(keep.sum()), bool),
            tuple(a[keep] for a in key),
            tuple(a[keep] for a in value),
        )
    return Framed(entries[batch_ok], records)


# -- legacy messages, vectorised ---------------------------------------------------------------------------------
@dataclass
class Messages:
    """Magic 0/1 messages of one buffer, read at once: offset, size, crc, magic, attributes, [timestamp], key, value."""

    ok: np.ndarray
    offset: np.ndarray
    crc: np.ndarray
    magic: np.ndarray
    attributes: np.ndarray
    timestamp: np.ndarray  # -1 for magic 0
    key: tuple[np.ndarray, np.ndarray, np.ndarray]  # start, stop, null
    value: tuple[np.ndarray, np.ndarray, np.ndarray]


def read_messages(data: ByteBuffer, buf: bytes, start: np.ndarray, verify_crc: bool) -> Messages:
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
    return Messages(ok, offset, crc, magic, attributes, timestamp, key, value)


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


def inflate_wrappers(buf: bytes, top: Messages) -> tuple[list[bytes], np.ndarray, np.ndarray]:
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


def frame_legacy(
    data: ByteBuffer,
    buf: bytes,
    entries: np.ndarray,
    top: Messages,
    inner_start: np.ndarray,
    owner: np.ndarray,
    header: dict[str, np.ndarray],
    verify_crc: bool,
) -> list[Framed]:
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
    plain_records = Spans(
        entry=kept,
        index=np.zeros(len(kept), np.int64),
        offset=top.offset[plain],
        timestamp=top.timestamp[plain],
        timestamp_null=top.magic[plain] == 0,
        key=tuple(a[plain] for a in top.key),
        value=tuple(a[plain] for a in top.value),
    )
    framed = [Framed(kept, plain_records)]
    if owner.size:
        framed.append(_frame_wrappers(data, buf, top, entries, inner_start, owner, header, verify_crc))
    return framed


def _frame_wrappers(
    data: ByteBuffer,
    buf: bytes,
    wrappers: Messages,
    entries: np.ndarray,
    inner_start: np.ndarray,
    owner: np.ndarray,
    header: dict[str, np.ndarray],
    verify_crc: bool,
) -> Framed:
    """Compressed magic 0/1 wrappers: their inner messages (in ``buf`` at ``inner_start``) read at once."""
    inner = read_messages(data, buf, inner_start, verify_crc)
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
    records = Spans(
        entry=entries[owner[keep]],
        index=(np.arange(len(owner)) - first[owner])[keep],
        offset=offset[keep],
        timestamp=timestamp[keep],
        timestamp_null=magic[keep] == 0,
        key=tuple(a[keep] for a in inner.key),
        value=tuple(a[keep] for a in inner.value),
    )
    return Framed(kept, records)
