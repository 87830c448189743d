"""Decode the keys and values of many records at once, as Arrow columns.

``decode_columns(keys, values)`` takes the keys and values of many data records as two Arrow
binary arrays (null value = tombstone) and runs the columnar layouts the declaration compiler
derives from ``schemas/records`` (``schema.columnar_layout``): every field of every record of
one (record type, value version) is read by a handful of numpy operations over the arrays'
offsets and data buffer, not by Python code per record. The layouts stay data; no record type
has code of its own here.

What a columnar layout cannot express (arrays, nested structs, layout variants, unknown tags)
and what does not decode (truncated, trailing bytes, bad lengths, bad UTF-8, unknown types or
versions) is never guessed at: those records are flagged in ``ColumnarResult.fallback`` and the
caller decodes exactly those with ``records.decode_record``, the reference, which also names
the reason of a failure. A record is either decoded to the values ``decode_record`` returns or
flagged; every bounds check is vectorised, and reads past the data are clipped, never raised.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.codec.records import RECORDS, RecordDecoding, decode_record
from pipelines.codec.schema import ColumnarField, ColumnarLayout
from pipelines.codec.vectors import ByteBuffer, spans_to_binary

_ARROW_TYPES = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "uint16": pa.uint16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uuid": pa.string(),  # printed as Kafka prints it, like the per-record decoder
    "string": pa.string(),
    "bytes": pa.binary(),
}
_BIG_ENDIAN = {"int8": ">i1", "int16": ">i2", "uint16": ">u2", "int32": ">i4", "int64": ">i8"}
_FIXED_DTYPES = {**_BIG_ENDIAN, "uuid": "V16"}  # numpy dtypes of the fixed-width types; V16: 16 raw bytes
_BASE64URL = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", np.uint8)
_UUID_CHARS = 22  # 16 bytes in unpadded base64
_TOMBSTONE = 0x10000  # group code of a null value: outside every 16-bit version


# -- result ---------------------------------------------------------------------------------------
@dataclass
class ColumnarGroup:
    """The records of one (record type, value version) that decoded columnar-wise.

    ``rows`` are their positions in the input arrays (ascending); ``key`` and ``value`` hold one
    struct per row whose fields are those of the per-record dicts (snake_case, defaults for
    fields the version lacks). Tombstones form groups of their own: ``value_version`` and
    ``value`` are None.
    """

    record_type: int
    value_version: int | None
    rows: np.ndarray
    key: pa.StructArray
    value: pa.StructArray | None

    @property
    def tombstone(self) -> bool:
        return self.value is None


@dataclass
class ColumnarResult:
    """Every input record is in exactly one group or flagged in ``fallback``."""

    groups: list[ColumnarGroup]
    fallback: np.ndarray  # bool per input record: decode it with records.decode_record

    @property
    def fallback_rows(self) -> np.ndarray:
        return np.flatnonzero(self.fallback)


def decode_fallback(result: ColumnarResult, keys: pa.Array, values: pa.Array) -> Iterator[tuple[int, RecordDecoding]]:
    """``(row, decode_record(key, value))`` for every record the columnar path left to the reference."""
    rows = result.fallback_rows
    # one conversion for all of them: a pyarrow scalar per value costs more than decoding it
    chosen_keys = _combined(keys).take(rows).to_pylist()
    chosen_values = _combined(values).take(rows).to_pylist()
    for row, key, value in zip(rows.tolist(), chosen_keys, chosen_values, strict=True):
        yield row, decode_record(key, value)


# -- binary inputs ------------------------------------------------------------------------------------
@dataclass
class _Binaries:
    """Many binary values of one Arrow array: its data buffer, each value's [start, end) in it."""

    bytes: ByteBuffer
    arrow_data: pa.Buffer
    start: np.ndarray  # int64
    end: np.ndarray  # int64
    valid: np.ndarray  # bool
    offset_type: Any  # numpy dtype of the Arrow offsets (int32 or int64)

    @classmethod
    def of(cls, arr: pa.Array) -> _Binaries:
        if arr.type not in (pa.binary(), pa.large_binary()):
            arr = arr.cast(pa.binary())
        offset_type = np.int32 if arr.type == pa.binary() else np.int64
        _, offsets_buffer, buffer = arr.buffers()
        if offsets_buffer is None:  # an empty array may come without one
            offsets = np.zeros(len(arr) + 1, np.int64)
        else:
            offsets = np.frombuffer(offsets_buffer, offset_type)[arr.offset : arr.offset + len(arr) + 1]
        offsets = offsets.astype(np.int64)
        buffer = buffer or pa.py_buffer(b"")
        valid = np.ones(len(arr), bool) if arr.null_count == 0 else arr.is_valid().to_numpy(zero_copy_only=False)
        return cls(ByteBuffer(buffer), buffer, offsets[:-1], offsets[1:], valid, offset_type)

    def length(self) -> np.ndarray:
        return self.end - self.start

    def int16_at_start(self) -> np.ndarray:
        """The leading int16 (type id, value version) of every value; garbage where shorter than 2."""
        return self.bytes.read(">i2", self.start).astype(np.int32)

    def spans(self, start: np.ndarray, stop: np.ndarray, null: np.ndarray) -> pa.Array:
        return spans_to_binary(self.arrow_data, self.offset_type, start, stop, null)


def _combined(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


# -- the reading cursor ------------------------------------------------------------------------------------
class _Cursor:
    """The read position in each of many values; a row whose check fails is dropped from ``ok``.

    Reads never raise: positions past a value's end are clipped to the buffer, their row is
    marked not ok, and what was read there is never used.
    """

    def __init__(self, source: _Binaries, pos: np.ndarray, end: np.ndarray) -> None:
        self.source = source
        self.pos = pos
        self.end = end
        self.ok = np.ones(len(pos), bool)

    def fixed(self, dtype: str) -> np.ndarray:
        """The ``dtype`` value (one of _FIXED_DTYPES) at every row's position."""
        value = self.source.bytes.read(dtype, self.pos)
        self.pos = self.pos + np.dtype(dtype).itemsize
        self.ok &= self.pos <= self.end
        return value

    def integer(self, type_name: str) -> np.ndarray:
        return self.fixed(_BIG_ENDIAN[type_name]).astype(np.int64)

    def uvarint(self, max_bytes: int = 5) -> np.ndarray:
        """Unsigned varints (compact lengths, tags), as ``primitives.read_uvarint``."""
        value, size, ok = self.source.bytes.uvarint(self.pos, self.end, max_bytes)
        self.ok &= ok
        self.pos = self.pos + size
        return value.astype(np.int64)

    def span(self, n: np.ndarray, null: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``[start, stop)`` of ``n`` bytes at the position (empty where ``null``); n < 0 elsewhere fails."""
        self.ok &= null | (n >= 0)
        n = np.where(null | (n < 0), 0, n)
        start = self.pos
        self.pos = start + n
        self.ok &= self.pos <= self.end
        return start, self.pos


# -- columns read from the wire, materialised once the surviving rows are known ---------------------------
class _Column:
    def build(self, keep: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        """The column for rows ``keep`` and the positions (into ``keep``) of rows it rejects."""
        raise NotImplementedError


_NO_ROWS = np.zeros(0, np.int64)


class _IntColumn(_Column):
    def __init__(self, values: np.ndarray, type_name: str) -> None:
        self.values = values
        self.arrow_type = _ARROW_TYPES[type_name]

    def build(self, keep: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        return pa.array(self.values[keep].astype(self.arrow_type.to_pandas_dtype()), self.arrow_type), _NO_ROWS


class _UuidColumn(_Column):
    def __init__(self, raw: np.ndarray) -> None:
        self.raw = raw  # V16

    def build(self, keep: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        return uuid_strings(self.raw[keep]), _NO_ROWS


class _SpanColumn(_Column):
    """Strings or bytes, each a [start, stop) of the input's data buffer."""

    def __init__(self, source: _Binaries, start: np.ndarray, stop: np.ndarray, null: np.ndarray, text: bool) -> None:
        self.source = source
        self.start = start
        self.stop = stop
        self.null = null
        self.text = text

    def build(self, keep: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        spans = self.source.spans(self.start[keep], self.stop[keep], self.null[keep])
        if not self.text:
            return spans, _NO_ROWS
        try:
            return spans.cast(pa.string()), _NO_ROWS  # the cast validates UTF-8
        except pa.ArrowInvalid:
            bad = np.array([i for i, raw in enumerate(spans.to_pylist()) if raw is not None and not _is_utf8(raw)])
            return pa.nulls(len(keep), pa.string()), bad


class _ConstantColumn(_Column):
    def __init__(self, value: Any, type_name: str) -> None:
        self.value = value
        self.arrow_type = _ARROW_TYPES[type_name]

    def build(self, keep: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        scalar = pa.scalar(self.value, self.arrow_type)
        return pa.repeat(scalar, len(keep)), _NO_ROWS


class _TaggedColumn(_Column):
    """A tagged field: what was read where the tag was present, the default where it was omitted."""

    def __init__(self, read: _Column, found: np.ndarray, default: Any, type_name: str) -> None:
        self.read = read
        self.found = found
        self.default = pa.scalar(default, _ARROW_TYPES[type_name])

    def build(self, keep: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        array, bad = self.read.build(keep)
        return pc.if_else(pa.array(self.found[keep]), array, self.default), bad


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def uuid_strings(raw: np.ndarray) -> pa.Array:
    """16-byte items (V16) -> Kafka's printed form (URL-safe base64, no padding), as ``primitives.uuid_to_str``."""
    rows = len(raw)
    padded = np.zeros((rows, 18), np.uint32)
    padded[:, :16] = raw.view(np.uint8).reshape(rows, 16)
    triples = padded.reshape(rows, 6, 3)
    bits = (triples[..., 0] << 16) | (triples[..., 1] << 8) | triples[..., 2]
    sextets = np.stack([bits >> 18, bits >> 12, bits >> 6, bits], axis=-1).reshape(rows, 24) & 63
    chars = np.ascontiguousarray(_BASE64URL[sextets[:, :_UUID_CHARS]])
    offsets = np.arange(0, _UUID_CHARS * (rows + 1), _UUID_CHARS, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(chars)])


# -- one layout over many values ----------------------------------------------------------------------------
def _read_wire_field(cur: _Cursor, source: _Binaries, f: ColumnarField) -> _Column:
    if f.type == "uuid":
        return _UuidColumn(cur.fixed(_FIXED_DTYPES["uuid"]))
    if f.type in _BIG_ENDIAN:
        return _IntColumn(cur.integer(f.type), f.type)
    # compact: uvarint(N + 1), 0 = null; classic: int16 (string) or int32 (bytes) length, -1 = null
    n = cur.uvarint() - 1 if f.compact else cur.integer("int16" if f.type == "string" else "int32")
    null = n == -1 if f.nullable else np.zeros(len(n), bool)
    start, stop = cur.span(n, null)
    return _SpanColumn(source, start, stop, null, text=f.type == "string")


def _read_tagged_section(cur: _Cursor, tagged: tuple[ColumnarField, ...]) -> dict[str, _Column]:
    """The tagged-field section: known fixed-width tags are read, an unknown tag fails the row.

    A row may carry at most as many tags as there are known ones (more means an unknown or a
    repeated one, left to the per-record decoder), so the loop runs at most once per known tag;
    a known tag repeated within that count is read as the per-record decoder reads it, last wins.
    """
    count = cur.uvarint()
    cur.ok &= count <= len(tagged)
    rows_total = len(count)
    found = {f.key: np.zeros(rows_total, bool) for f in tagged}
    raw = {f.key: np.zeros(rows_total, _FIXED_DTYPES[f.type]) for f in tagged}
    for i in range(len(tagged)):
        rows = np.flatnonzero(cur.ok & (count > i))
        if not rows.size:
            break
        sub = _Cursor(cur.source, cur.pos[rows], cur.end[rows])
        tag = sub.uvarint()
        size = sub.uvarint()
        known = np.zeros(len(rows), bool)
        for f in tagged:
            dtype = _FIXED_DTYPES[f.type]
            mine = (tag == f.tag) & (size == np.dtype(dtype).itemsize)  # another size: the reference reports it
            data = cur.source.bytes.read(dtype, sub.pos)
            found[f.key][rows[mine]] = True
            raw[f.key][rows[mine]] = data[mine]
            known |= mine
        sub.pos = sub.pos + size
        sub.ok &= known & (sub.pos <= sub.end)
        cur.ok[rows] &= sub.ok
        cur.pos[rows] = sub.pos
    columns: dict[str, _Column] = {}
    for f in tagged:
        if f.type == "uuid":
            read: _Column = _UuidColumn(raw[f.key])
        else:
            read = _IntColumn(raw[f.key].astype(np.int64), f.type)
        columns[f.key] = _TaggedColumn(read, found[f.key], f.default, f.type)
    return columns


def _decode_layout(
    layout: ColumnarLayout, source: _Binaries, rows: np.ndarray, skip: int
) -> tuple[np.ndarray, pa.StructArray]:
    """Decode ``rows`` of ``source`` (from byte ``skip`` of each value): (rows that decoded, their structs)."""
    cur = _Cursor(source, source.start[rows] + skip, source.end[rows])
    columns: dict[str, _Column] = {}
    for f in layout.wire:
        columns[f.key] = _read_wire_field(cur, source, f)
    if layout.flexible:
        columns.update(_read_tagged_section(cur, layout.tagged))
    cur.ok &= cur.pos == cur.end  # trailing bytes: another layout, or damage
    for f in layout.fields:
        if not f.present:
            columns[f.key] = _ConstantColumn(f.default, f.type)
    ok = cur.ok
    while True:
        keep = np.flatnonzero(ok)
        arrays, rejected = [], []
        for f in layout.fields:
            array, bad = columns[f.key].build(keep)
            arrays.append(array)
            rejected.append(keep[bad])
        bad_rows = np.concatenate(rejected)
        if not bad_rows.size:
            names = [f.key for f in layout.fields]
            return rows[keep], pa.StructArray.from_arrays(arrays, names=names)
        ok[bad_rows] = False  # a second pass builds the columns without them


# -- keys ----------------------------------------------------------------------------------------------
@dataclass
class _Keys:
    """Each record's key: type id, and where its decoded struct is in that type's key table."""

    type_id: np.ndarray  # int32; meaningful where slot >= 0
    slot: np.ndarray  # int64 index into tables[type_id]; -1 = null, short, unknown or undecodable
    tables: dict[int, pa.StructArray]


def _decode_keys(keys: pa.Array) -> _Keys:
    """Decode each distinct key once (offset-commit keys repeat for every commit), then map back."""
    encoded = pc.dictionary_encode(keys)
    index = encoded.indices.fill_null(-1).to_numpy().astype(np.int64)
    distinct = _Binaries.of(encoded.dictionary)
    # one extra last entry, read by the index -1 of null keys: no type, no slot
    type_ids = np.append(distinct.int16_at_start(), -1)
    slots = np.full(len(type_ids), -1, np.int64)
    tables: dict[int, pa.StructArray] = {}
    long_enough = np.append(distinct.length() >= 2, False)
    for type_id in np.unique(type_ids[long_enough]).tolist():
        compiled = RECORDS.get(type_id)
        if compiled is None or compiled.key_columnar is None:
            continue
        rows = np.flatnonzero(long_enough & (type_ids == type_id))
        decoded, table = _decode_layout(compiled.key_columnar, distinct, rows, skip=2)
        slots[decoded] = np.arange(len(decoded))
        tables[type_id] = table
    return _Keys(type_ids[index].astype(np.int32), slots[index], tables)


# -- the entry point ----------------------------------------------------------------------------------------
def decode_columns(keys: pa.Array | pa.ChunkedArray, values: pa.Array | pa.ChunkedArray) -> ColumnarResult:
    """Decode the keys and values of many data records (not control records) columnar-wise.

    ``keys`` and ``values`` are binary (or large binary) arrays of equal length; a null value is
    a tombstone. Records the columnar layouts do not decode are flagged in the result's
    ``fallback`` for :func:`records.decode_record` (see :func:`decode_fallback`).
    """
    keys, values = _combined(keys), _combined(values)
    if len(keys) != len(values):
        raise ValueError(f"{len(keys)} keys but {len(values)} values")
    decoded_keys = _decode_keys(keys)
    source = _Binaries.of(values)
    fallback = decoded_keys.slot < 0
    codes = _group_codes(decoded_keys, source, fallback)
    groups = []
    for code, rows in _split_by_code(codes):
        type_id, version = code >> 17, code & 0x1FFFF
        key_table = decoded_keys.tables[type_id]
        if version == _TOMBSTONE:
            groups.append(ColumnarGroup(type_id, None, rows, key_table.take(decoded_keys.slot[rows]), None))
            continue
        version = version - 0x8000  # back to the signed int16
        layout = RECORDS[type_id].value_columnar.get(version)
        if layout is None:
            fallback[rows] = True
            continue
        decoded, value = _decode_layout(layout, source, rows, skip=2)
        fallback[np.setdiff1d(rows, decoded, assume_unique=True)] = True
        if decoded.size:
            groups.append(ColumnarGroup(type_id, version, decoded, key_table.take(decoded_keys.slot[decoded]), value))
    return ColumnarResult(groups, fallback)


def _group_codes(keys: _Keys, values: _Binaries, fallback: np.ndarray) -> np.ndarray:
    """type id << 17 | (value version + 0x8000, or _TOMBSTONE) per record; -1 where it falls back.

    A value shorter than its version falls back here (the reference reports it truncated).
    """
    short = values.valid & (values.length() < 2)
    fallback |= short
    version = np.where(values.valid, values.int16_at_start() + 0x8000, _TOMBSTONE)
    codes = (keys.type_id.astype(np.int64) << 17) | version
    return np.where(fallback, -1, codes)


def _split_by_code(codes: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(code, ascending row positions) for every code but -1."""
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    bounds = np.flatnonzero(np.diff(ordered)) + 1
    for rows in np.split(order, bounds):
        code = int(codes[rows[0]]) if rows.size else -1
        if code >= 0:
            yield code, rows
