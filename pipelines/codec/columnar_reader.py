"""Read a log segment into Arrow columns: what ``reader.iter_log`` yields, without Python per record.

``iter_log_columns(source)`` yields :class:`LogColumns` per chunk of the file (bounded memory,
like ``iter_log``): one row per batch, one row per record, and the read issues. Python runs once
per entry (the walk from one entry header to the next, the CRC call, a decompression call); the
records are parsed with numpy (``columnar_framing``) in one records buffer per chunk: the chunk,
then the decompressed records sections of its compressed v2 batches, then the decompressed
messages of its magic 0/1 wrappers.

* v2 batches, plain and compressed in one pass: record lengths are read in lockstep, record i of
  every batch at once, then every field of every record at once;
* magic 0/1 messages: their fixed layout read for all top-level messages at once, and for the
  inner messages of all compressed wrappers at once.

Keys and values are copied once, from the records buffer into file order. An entry the
vectorised checks do not accept exactly (bad CRC, bad magic, a record or message that does not
parse, headers, a decompression failure) is parsed by the reference, ``reader.parse_entry``, so
its batch or issue is the one ``iter_log`` reports. The one deliberate difference: a batch whose
offsets or timestamps leave int64 (possible only with forged varints) is reported as a
``bad_records`` issue, since an Arrow int64 column cannot hold it.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import crc32c
import numpy as np
import pyarrow as pa

from pipelines.codec.columnar_framing import Spans, frame_legacy, frame_v2, inflate_wrappers, read_messages
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
    iter_log,
    opened,
    parse_entry,
)
from pipelines.codec.vectors import ByteBuffer, spans_to_binary

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
CHUNK_BYTES = 16 * 1024 * 1024  # read at a time
# decoded at a time: numpy's gathers are fastest while their arrays stay in the CPU's caches
# (1M records: 0.50 CPU s in 2-4 MiB pieces, 0.70 s in 16 MiB ones)
DECODE_BYTES = 4 * 1024 * 1024
_V2_FIELDS = {  # Batch field -> (byte offset in the entry, big-endian dtype)
    "base_offset": (0, ">i8"),
    "size": (8, ">i4"),
    "magic": (16, "i1"),
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
# a v2 entry's header as one item: one gather reads every field of every entry
_V2_HEADER_DTYPE = np.dtype(
    {
        "names": list(_V2_FIELDS),
        "formats": [dtype for _, dtype in _V2_FIELDS.values()],
        "offsets": [at for at, _ in _V2_FIELDS.values()],
        "itemsize": 61,
    }
)
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
    n = len(buf)
    last_prefix = n - PREFIX  # the last position with a whole entry prefix in buf
    smallest, largest, overhead = V2_MIN_SIZE, MAX_BATCH_SIZE, LOG_OVERHEAD  # locals: the loop's names
    # once per entry of the whole log: kept to the fewest Python operations
    while pos < limit:
        if pos > last_prefix:
            return positions, pos, PREFIX
        (size,) = unpack(buf, pos + 8)
        if (size < smallest and size < _min_size(buf[pos + 16])) or size > largest:
            return positions, pos, 0
        following = pos + overhead + size
        if following > n:
            return positions, pos, overhead + size
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
    decode_bytes: int = DECODE_BYTES,
) -> Iterator[LogColumns]:
    """The batches starting in ``[start, end)`` and the issues found there, read ``chunk_bytes`` at a
    time and decoded (one LogColumns each) ``decode_bytes`` at a time; a file given by its path is
    closed when the iteration ends or is closed."""
    with opened(source) as src:
        yield from _iter_columns(src, start, end, verify_crc, chunk_bytes, decode_bytes)


def _iter_columns(
    src: ByteSource, start: int, end: int | None, verify_crc: bool, chunk_bytes: int, decode_bytes: int
) -> Iterator[LogColumns]:
    stop = src.size if end is None else min(end, src.size)
    pos = start
    want = chunk_bytes
    while pos < stop:
        buf = src.read_at(pos, min(want, src.size - pos))  # not more: a larger read costs its size, used or not
        positions, walked, need = _walk(buf, stop - pos)
        at = np.array(positions, np.int64)
        for a, b in _pieces(positions, decode_bytes):  # entries a..b-1
            first, last = positions[a], positions[b] if b < len(positions) else walked
            piece = buf if (first, last) == (0, len(buf)) else buf[first:last]
            yield _decode_chunk(piece, pos + first, at[a:b] - first, verify_crc)
        pos += walked
        if need < 0 or pos >= stop:
            return
        if need == 0 or need > src.size - pos:  # an entry iter_log reports and stops at
            yield _from_reference(list(iter_log(src, start=pos, end=stop, verify_crc=verify_crc)))
            return
        want = max(chunk_bytes, need)


def _pieces(positions: list[int], size: int) -> Iterator[tuple[int, int]]:
    """Runs [a, b) of the walked entries spanning about ``size`` bytes each (an entry is never split)."""
    a = 0
    while a < len(positions):
        b = max(bisect.bisect_left(positions, positions[a] + size), a + 1)
        yield a, b
        a = b


def read_log_columns(
    source: ByteSource | bytes | str | os.PathLike,
    *,
    start: int = 0,
    end: int | None = None,
    verify_crc: bool = True,
    chunk_bytes: int = CHUNK_BYTES,
    decode_bytes: int = DECODE_BYTES,
) -> LogColumns:
    """All of ``iter_log_columns`` in one LogColumns (the whole range's records in memory)."""
    parts = list(
        iter_log_columns(
            source, start=start, end=end, verify_crc=verify_crc, chunk_bytes=chunk_bytes, decode_bytes=decode_bytes
        )
    )
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
# after the records buffer: reads a few varints past a damaged record's end stay inside it
_PAD = bytes(64)
# between its regions: a span that ends one region (an empty value) never starts the next
_GAP = b"\x00"


def _decode_chunk(buf: bytes, base: int, pos: np.ndarray, verify_crc: bool) -> LogColumns:
    """The entries starting at ``pos`` (walked: each one whole in ``buf``), ``buf`` starting at byte ``base``."""
    data = ByteBuffer(buf)
    header = _entry_headers(data, pos)
    size, magic = header.pop("size"), header["magic"]

    v2 = np.flatnonzero(magic == 2)
    if verify_crc:
        v2 = v2[_crc32c_matches(buf, pos[v2], size[v2], header["crc"][v2])]
    v2 = v2[header["records_count"][v2] >= 0]
    compressed = (header["attributes"][v2] & 0x07) != 0
    plain = v2[~compressed]
    inflated, bodies = _decompress_all(buf, v2[compressed], pos, size, header["attributes"])
    legacy_entries = np.flatnonzero((magic == 0) | (magic == 1))
    legacy = read_messages(data, buf, pos[legacy_entries], verify_crc)  # plain messages and wrappers at once
    inners, inner_starts, inner_owner = inflate_wrappers(buf, legacy)

    # one buffer for every record's bytes: the chunk, then the decompressed sections, then the
    # wrappers' messages; within each region the records are in file order
    records_buf = b"".join([buf, _GAP, *bodies, _GAP, *inners, _PAD])
    records = ByteBuffer(records_buf)
    body_length = np.array([len(b) for b in bodies], np.int64)
    body_end = len(buf) + len(_GAP) + np.cumsum(body_length)
    body_start = body_end - body_length
    inner_base = len(buf) + len(_GAP) + int(body_length.sum()) + len(_GAP)
    framed = [
        frame_v2(
            records,
            np.concatenate([plain, inflated]),
            np.concatenate([pos[plain] + V2_HEADER, body_start]),
            np.concatenate([pos[plain] + LOG_OVERHEAD + size[plain], body_end]),
            header,
        ),
        *frame_legacy(
            records, records_buf, legacy_entries, legacy, inner_base + inner_starts, inner_owner, header, verify_crc
        ),
    ]

    done = np.zeros(len(pos), bool)
    for part in framed:
        done[part.entries] = True
    rest = np.flatnonzero(~done).tolist()
    results = [_reference_entry(buf, base, int(pos[i]), LOG_OVERHEAD + int(size[i]), verify_crc) for i in rest]
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


def _entry_headers(data: ByteBuffer, pos: np.ndarray) -> dict[str, np.ndarray]:
    """The v2 header fields at every entry (int64). A legacy entry shares the offset, size and magic
    (the other fields are set later); an entry shorter than a v2 header at the very end of the
    chunk (a legacy message) has those three read apart."""
    window = data.window(_V2_HEADER_DTYPE)
    items = window[np.minimum(pos, len(window) - 1)]
    header = {name: items[name].astype(np.int64) for name in _V2_FIELDS}
    short = np.flatnonzero(pos > len(window) - 1)
    if short.size:  # the walk checked that these are inside the chunk
        for name in ("base_offset", "size", "magic"):
            at, dtype = _V2_FIELDS[name]
            header[name][short] = data.read(dtype, pos[short] + at)
    return header


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


def _reference_spans(batches: list[tuple[int, Batch]], at: int) -> tuple[Spans, bytes, list[list[dict]]]:
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
    spans = Spans(
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
    parts: list[Spans],
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
    every = is_batch.all()  # the usual case: no issue among the entries
    batches = pa.table(
        {
            f.name: pa.array((columns[f.name] if every else columns[f.name][is_batch]).astype(f.type.to_pandas_dtype()))
            for f in BATCH_SCHEMA
        },
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
