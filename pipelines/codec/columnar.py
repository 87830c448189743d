"""Decode the keys and values of many records at once, as Arrow columns.

``decode_columns(keys, values)`` takes the keys and values of many data records as two Arrow
binary arrays (null value = tombstone) and runs the columnar layouts the declaration compiler
derives from ``schemas/records`` (``schema.columnar_layout``): every field of every record of
one (record type, value version) is read by a handful of numpy operations over the arrays'
offsets and data buffer, not by Python code per record. The layouts stay data; no record type
has code of its own here.

Arrays (of scalars or of structs, nested too) are read element k of every record at once, or
with one gather when their elements have a fixed width. What a columnar layout cannot express
(a struct outside an array, a tagged struct, layout variants, unknown tags, arrays of more than
256 variable-length elements) and what does not decode (truncated, trailing bytes, bad lengths,
bad UTF-8, unknown types or versions, consumer-protocol bytes the reference warns about) is
never guessed at: those records are flagged in ``ColumnarResult.fallback`` and the caller
decodes exactly those with ``records.decode_record``, the reference, which also names the reason
of a failure. A record is either decoded to the values ``decode_record`` returns or flagged;
every bounds check is vectorised, and reads past the data are clipped, never raised.

Versions of a record type whose layouts differ only in which fields are present are read in
one pass (``columnar_versions``), each field for the rows whose version has it; the result still
has one group per (type, version). A call costs a few numpy operations per such pass, field and
array element index, whatever the number of records: call it on large batches
(docs/performance.md).
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.codec.columnar_versions import Merged, VersionedLayout, single
from pipelines.codec.errors import DecodeError
from pipelines.codec.records import ASSIGNMENT, RECORDS, SUBSCRIPTION, RecordDecoding, decode_key, decode_record
from pipelines.codec.schema import ARRAY, ColumnarField, ColumnarLayout, columnar_layout
from pipelines.codec.vectors import ByteBuffer, shortest, spans_to_binary

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
_UUID_CHARS = 22  # 16 bytes in unpadded base64
# Group codes (type id << 6 | slot) fit 16 bits, which numpy sorts by radix: slot 0 is a tombstone,
# slot v + 1 value version v. Versions outside [0, _MAX_VERSION] are decoded per record (the
# declarations have none: the equality tests would flag a columnar layout left unused).
_VERSION_BITS = 6
_MAX_VERSION = (1 << _VERSION_BITS) - 2
_TOMBSTONE = 0


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
    """Every input record (but those ignored) is in exactly one group or flagged in ``fallback``."""

    groups: list[ColumnarGroup]
    fallback: np.ndarray  # bool per input record: decode it with records.decode_record
    # bool per input record, within fallback: flagged only because its (type, version) had too few
    # records for the columnar path to pay off (see decode_columns' small_groups_per_record)
    too_few: np.ndarray

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
        """The spans as a binary array. The rows of one version are in buffer order; those of several
        versions read in one pass are one such run per version: each run is copied, then the runs
        joined (cheaper than sorting the spans into buffer order and copying them back)."""
        if len(start) < 2:
            return spans_to_binary(self.arrow_data, self.offset_type, start, stop, null)
        bounds = [0, *(np.flatnonzero(start[1:] < stop[:-1]) + 1).tolist(), len(start)]
        runs = [
            spans_to_binary(self.arrow_data, self.offset_type, start[a:b], stop[a:b], null[a:b])
            for a, b in itertools.pairwise(bounds)
        ]
        return runs[0] if len(runs) == 1 else pa.concat_arrays(runs)


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
        self.ok &= ok & shortest(value, size)
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


def _rows(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``values[keep]``, without the copy when ``keep`` is every row (the usual case: keep is ascending)."""
    return values if len(keep) == len(values) else values[keep]


class _IntColumn(_Column):
    def __init__(self, values: np.ndarray, type_name: str) -> None:
        self.values = values
        self.arrow_type = _ARROW_TYPES[type_name]

    def build(self, keep: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        # values may be big-endian as read: one conversion to the column's native type
        return pa.array(_rows(self.values, keep).astype(self.arrow_type.to_pandas_dtype()), self.arrow_type), _NO_ROWS


class _UuidColumn(_Column):
    def __init__(self, raw: np.ndarray) -> None:
        self.raw = raw  # V16

    def build(self, keep: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        return uuid_strings(_rows(self.raw, keep)), _NO_ROWS


class _SpanColumn(_Column):
    """Strings or bytes, each a [start, stop) of the input's data buffer."""

    def __init__(self, source: _Binaries, start: np.ndarray, stop: np.ndarray, null: np.ndarray, text: bool) -> None:
        self.source = source
        self.start = start
        self.stop = stop
        self.null = null
        self.text = text

    def build(self, keep: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        spans = self.source.spans(_rows(self.start, keep), _rows(self.stop, keep), _rows(self.null, keep))
        if not self.text:
            return spans, _NO_ROWS
        try:
            return spans.cast(pa.string()), _NO_ROWS  # the cast validates UTF-8
        except pa.ArrowInvalid:
            values = spans.to_pylist()
            bad = np.array([i for i, raw in enumerate(values) if raw is not None and not _is_utf8(raw)], np.int64)
            if not bad.size:  # Arrow's and Python's UTF-8 checks disagree: let the reference decide
                bad = np.arange(len(keep))
            return pa.nulls(len(keep), pa.string()), bad


class _ConstantColumn(_Column):
    def __init__(self, value: Any, arrow_type: pa.DataType) -> None:
        self.value = value
        self.arrow_type = arrow_type

    def build(self, keep: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        if not len(keep):  # pa.repeat refuses zero copies of a list
            return pa.array([], self.arrow_type), _NO_ROWS
        return pa.repeat(pa.scalar(self.value, self.arrow_type), len(keep)), _NO_ROWS


class _TaggedColumn(_Column):
    """A tagged field: what was read where the tag was present, the default where it was omitted."""

    def __init__(self, read: _Column, found: np.ndarray, default: Any, arrow_type: pa.DataType) -> None:
        self.read = read
        self.found = found
        self.default = pa.scalar(default, arrow_type)

    def build(self, keep: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        array, bad = self.read.build(keep)
        return pc.if_else(pa.array(self.found[keep]), array, self.default), bad


class _SomeRows(_Column):
    """A field that only some rows' versions have: read for those (``rows``), its default for the others."""

    def __init__(self, read: _Column, rows: np.ndarray, count: int, default: Any, arrow_type: pa.DataType) -> None:
        self.read = read
        self.rows = rows
        self.count = count
        self.default = default
        self.arrow_type = arrow_type

    def build(self, keep: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        rank = np.full(self.count, -1, np.int64)
        rank[self.rows] = np.arange(len(self.rows))
        mine = rank[keep]
        has = mine >= 0
        array, bad = self.read.build(mine[has])
        bad = np.flatnonzero(has)[bad]
        if has.all():
            return array, bad
        full = array.take(pa.array(np.cumsum(has) - 1, mask=~has))  # null where the version lacks the field
        if self.default is None:
            return full, bad
        return pc.if_else(pa.array(has), full, pa.scalar(self.default, self.arrow_type)), bad


class _StructColumn(_Column):
    """The fields of a layout read over the same rows, built as one struct array."""

    def __init__(self, layout: ColumnarLayout, columns: dict[str, _Column]) -> None:
        self.layout = layout
        self.columns = columns

    def build(self, keep: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        arrays, rejected = [], []
        for f in self.layout.fields:
            array, bad = self.columns[f.key].build(keep)
            arrays.append(array)
            rejected.append(bad)
        names = [f.key for f in self.layout.fields]
        return pa.StructArray.from_arrays(arrays, names=names), _distinct(np.concatenate(rejected))


def _distinct(rows: np.ndarray) -> np.ndarray:
    return np.unique(rows) if rows.size else _NO_ROWS  # rejections are rare: skip the sort


def _list_array(count: np.ndarray, null: np.ndarray, child: pa.Array) -> pa.Array:
    offsets = np.zeros(len(count) + 1, np.int32)
    np.cumsum(np.where(null, 0, count), out=offsets[1:])
    mask = pa.array(null) if null.any() else None
    return pa.ListArray.from_arrays(pa.array(offsets), child, mask=mask)


class _FlatListColumn(_Column):
    """An array of scalars whose elements are all in one column, element by element, row by row."""

    def __init__(self, count: np.ndarray, null: np.ndarray, element: _Column, item_row: np.ndarray) -> None:
        self.count = count
        self.null = null
        self.element = element  # one item per element, rows one after the other
        self.item_row = item_row

    def build(self, keep: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        rank = np.full(len(self.count), -1, np.int64)
        rank[keep] = np.arange(len(keep))
        items = np.flatnonzero(rank[self.item_row] >= 0)
        child, bad = self.element.build(items)
        return _list_array(self.count[keep], self.null[keep], child), _distinct(rank[self.item_row[items[bad]]])


class _ListColumn(_Column):
    """An array of strings, bytes or structs, read element k of every row at once (k = 0, 1, ...)."""

    def __init__(
        self,
        count: np.ndarray,
        null: np.ndarray,
        element_type: pa.DataType,
        rounds: list[tuple[np.ndarray, _Column]],
    ) -> None:
        self.count = count
        self.null = null
        self.element_type = element_type
        self.rounds = rounds  # per k: the rows having an element k, and those elements

    def build(self, keep: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        rank = np.full(len(self.count), -1, np.int64)
        rank[keep] = np.arange(len(keep))
        arrays, owners, rounds, rejected = [], [], [], []
        for k, (rows, element) in enumerate(self.rounds):
            chosen = np.flatnonzero(rank[rows] >= 0)
            if not chosen.size:
                continue
            array, bad = element.build(chosen)
            arrays.append(array)
            owners.append(rank[rows[chosen]])
            rounds.append(np.full(chosen.size, k))
            rejected.append(rank[rows[chosen[bad]]])  # an element's bad UTF-8 rejects its row
        if not arrays:
            return _list_array(self.count[keep], self.null[keep], pa.array([], self.element_type)), _NO_ROWS
        order = np.lexsort((np.concatenate(rounds), np.concatenate(owners)))  # by row, then element
        child = pa.concat_arrays(arrays).take(pa.array(order))
        return _list_array(self.count[keep], self.null[keep], child), _distinct(np.concatenate(rejected))


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def uuid_strings(raw: np.ndarray) -> pa.Array:
    """16-byte items (V16) -> Kafka's printed form (URL-safe base64, no padding), as ``primitives.uuid_to_str``.

    Each uuid is padded to 18 bytes (six 3-byte groups), so that one base64 call over all of them
    gives 24 characters per uuid, of which the first 22 are its own.
    """
    rows = len(raw)
    padded = np.zeros((rows, 18), np.uint8)
    padded[:, :16] = raw.view(np.uint8).reshape(rows, 16)
    encoded = np.frombuffer(base64.urlsafe_b64encode(padded.tobytes()), np.uint8).reshape(rows, 24)
    chars = np.ascontiguousarray(encoded[:, :_UUID_CHARS])
    offsets = np.arange(0, _UUID_CHARS * (rows + 1), _UUID_CHARS, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(chars)])


# -- one layout over many values ----------------------------------------------------------------------------
_MAX_ROUNDS = 256  # elements per array read element by element; a longer array is left to the reference


def arrow_type(f: ColumnarField | ColumnarLayout) -> pa.DataType:
    """The Arrow type of a column (a struct for a layout), as the per-record values look."""
    if isinstance(f, ColumnarLayout):
        return pa.struct([(g.key, arrow_type(g)) for g in f.fields])
    if f.type == ARRAY:
        assert f.element is not None
        return pa.list_(arrow_type(f.element))
    return _ARROW_TYPES[f.type]


def _read_struct(cur: _Cursor, source: _Binaries, shape: VersionedLayout, version: np.ndarray | None) -> _StructColumn:
    """One struct per row at the cursor: its wire fields, its tagged section, defaults for the rest.

    ``version``: each row's version, where ``shape`` is the layout of several; a field that only
    some of them have is read for those rows alone.
    """
    layout = shape.layout
    columns: dict[str, _Column] = {}
    tagged = []
    having: dict[tuple[int, ...], np.ndarray] = {}  # the rows of some versions (fields share them)
    for f, has, element in zip(shape.fields, shape.present, shape.elements, strict=True):
        if has == ():
            columns[f.key] = _ConstantColumn(f.default, arrow_type(f))
        elif f.tag is not None:
            tagged.append(f)  # present in every version (a tag that is not does not merge)
        elif has is None:
            columns[f.key] = _read_field(cur, source, f, element, version)
        elif f.type in _BIG_ENDIAN and f.default is not None:
            # an integer: read at every row, kept where the version has it (cheaper than a subset)
            assert version is not None
            mine = having[has] if has in having else having.setdefault(has, np.isin(version, has))
            value = source.bytes.read(_BIG_ENDIAN[f.type], cur.pos).astype(np.int64)
            cur.pos = cur.pos + np.where(mine, np.dtype(_BIG_ENDIAN[f.type]).itemsize, 0)
            cur.ok &= cur.pos <= cur.end
            columns[f.key] = _IntColumn(np.where(mine, value, f.default), f.type)
        else:
            assert version is not None
            mine = having[has] if has in having else having.setdefault(has, np.isin(version, has))
            rows = np.flatnonzero(mine)
            sub = _Cursor(source, cur.pos[rows], cur.end[rows])
            read = _read_field(sub, source, f, element, version[rows])
            cur.pos = cur.pos.copy()  # not in place: the previous field's column may hold this array as its stops
            cur.pos[rows] = sub.pos
            cur.ok[rows] &= sub.ok
            columns[f.key] = _SomeRows(read, rows, len(cur.pos), f.default, arrow_type(f))
    if layout.flexible:
        columns.update(_read_tagged_section(cur, tuple(tagged)))
    return _StructColumn(layout, columns)


def _read_field(
    cur: _Cursor,
    source: _Binaries,
    f: ColumnarField,
    element: VersionedLayout | None = None,
    version: np.ndarray | None = None,
) -> _Column:
    """A field at the cursor; ``element``: an array's struct elements (their rows' versions: ``version``)."""
    if f.type == ARRAY:
        return _read_array(cur, source, f, element, version)
    if f.type in _FIXED_DTYPES:
        value = cur.fixed(_FIXED_DTYPES[f.type])
        return _UuidColumn(value) if f.type == "uuid" else _IntColumn(value, f.type)
    # compact: uvarint(N + 1), 0 = null; classic: int16 (string) or int32 (bytes) length, -1 = null
    n = cur.uvarint() - 1 if f.compact else cur.integer("int16" if f.type == "string" else "int32")
    null = n == -1 if f.nullable else np.zeros(len(n), bool)
    start, stop = cur.span(n, null)
    return _SpanColumn(source, start, stop, null, text=f.type == "string")


def _read_array(
    cur: _Cursor, source: _Binaries, f: ColumnarField, shape: VersionedLayout | None, version: np.ndarray | None
) -> _Column:
    """An array: its count (checked as ``primitives.read_array_length`` checks it), then its elements."""
    n = cur.uvarint() - 1 if f.compact else cur.integer("int32")
    null = n == -1
    cur.ok &= (null & f.nullable) | ((n >= 0) & (n <= cur.end - cur.pos))  # each element takes a byte at least
    count = np.where(cur.ok & ~null, n, 0)
    element = f.element
    if isinstance(element, ColumnarField) and element.type in _FIXED_DTYPES:
        return _read_fixed_elements(cur, count, null, element)
    cur.ok &= count <= _MAX_ROUNDS
    count = np.where(cur.ok, count, 0)
    if isinstance(element, ColumnarField):
        return _read_span_elements(cur, source, count, null, element)
    rounds: list[tuple[np.ndarray, _Column]] = []
    for k in range(int(count.max()) if len(count) else 0):
        rows = np.flatnonzero(count > k)
        sub = _Cursor(source, cur.pos[rows], cur.end[rows])
        if isinstance(element, ColumnarLayout):
            assert shape is not None
            rounds.append((rows, _read_struct(sub, source, shape, None if version is None else version[rows])))
        else:
            assert element is not None
            rounds.append((rows, _read_field(sub, source, element)))
        cur.pos[rows] = sub.pos
        cur.ok[rows] &= sub.ok
    assert element is not None
    return _ListColumn(count, null, arrow_type(element), rounds)


def _read_span_elements(
    cur: _Cursor, source: _Binaries, count: np.ndarray, null: np.ndarray, element: ColumnarField
) -> _Column:
    """Strings or bytes: element k of every row at once, their spans kept in one column."""
    item_row = np.repeat(np.arange(len(count)), count)
    first_item = np.cumsum(count) - count
    start = np.zeros(len(item_row), np.int64)
    stop = np.zeros(len(item_row), np.int64)
    for k in range(int(count.max()) if len(count) else 0):
        rows = np.flatnonzero(count > k)
        sub = _Cursor(source, cur.pos[rows], cur.end[rows])
        span = _read_field(sub, source, element)
        assert isinstance(span, _SpanColumn)
        start[first_item[rows] + k], stop[first_item[rows] + k] = span.start, span.stop
        cur.pos[rows] = sub.pos
        cur.ok[rows] &= sub.ok
    items = _SpanColumn(source, start, stop, np.zeros(len(item_row), bool), text=element.type == "string")
    return _FlatListColumn(count, null, items, item_row)


def _read_fixed_elements(cur: _Cursor, count: np.ndarray, null: np.ndarray, element: ColumnarField) -> _Column:
    """Fixed-width elements sit at known distances: one gather reads all of them."""
    dtype = _FIXED_DTYPES[element.type]
    width = np.dtype(dtype).itemsize
    cur.ok &= count * width <= cur.end - cur.pos
    count = np.where(cur.ok, count, 0)
    item_row = np.repeat(np.arange(len(count)), count)
    first_item = np.cumsum(count) - count
    item_pos = cur.pos[item_row] + width * (np.arange(len(item_row)) - first_item[item_row])
    cur.pos = cur.pos + width * count
    value = cur.source.bytes.read(dtype, item_pos)
    items: _Column = _UuidColumn(value) if element.type == "uuid" else _IntColumn(value, element.type)
    return _FlatListColumn(count, null, items, item_row)


class _FixedTag:
    """A tagged fixed-width field or uuid: its data is exactly the value."""

    def __init__(self, f: ColumnarField, source: _Binaries, rows: int) -> None:
        self.f = f
        self.source = source
        self.dtype = _FIXED_DTYPES[f.type]
        self.found = np.zeros(rows, bool)
        self.raw = np.zeros(rows, self.dtype)

    def read(
        self, rows: np.ndarray, tag: np.ndarray, pos: np.ndarray, size: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rows of this tag, rows to fail) among ``rows``; a repeated tag: the last one wins, as in the reference."""
        mine = (tag == self.f.tag) & (size == np.dtype(self.dtype).itemsize)  # another size: the reference reports it
        self.found[rows[mine]] = True
        self.raw[rows[mine]] = self.source.bytes.read(self.dtype, pos)[mine]
        return mine, np.zeros(len(rows), bool)

    def column(self) -> _Column:
        f = self.f
        read = _UuidColumn(self.raw) if f.type == "uuid" else _IntColumn(self.raw.astype(np.int64), f.type)
        return _TaggedColumn(read, self.found, f.default, arrow_type(f))


class _FixedArrayTag:
    """A tagged array of fixed-width elements: a compact count, then the elements, filling the data exactly."""

    def __init__(self, f: ColumnarField, source: _Binaries, rows: int) -> None:
        assert isinstance(f.element, ColumnarField)
        self.f = f
        self.source = source
        self.dtype = _FIXED_DTYPES[f.element.type]
        self.found = np.zeros(rows, bool)
        self.null = np.zeros(rows, bool)
        self.count = np.zeros(rows, np.int64)
        self.start = np.zeros(rows, np.int64)

    def read(
        self, rows: np.ndarray, tag: np.ndarray, pos: np.ndarray, size: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rows of this tag, rows to fail): a repeated array tag is left to the reference."""
        mine = tag == self.f.tag
        at = np.flatnonzero(mine)
        raw, used, ok = self.source.bytes.uvarint(pos[at], pos[at] + size[at], 5)
        ok &= shortest(raw, used)
        null = raw == 0
        n = raw.astype(np.int64) - 1
        width = np.dtype(self.dtype).itemsize
        fits = np.where(null, self.f.nullable & (used == size[at]), used + n * width == size[at])
        bad = np.zeros(len(rows), bool)
        bad[at] = ~(ok & fits) | self.found[rows[at]]
        self.found[rows[at]] = True
        self.null[rows[at]] = null
        self.count[rows[at]] = np.where(null | ~fits, 0, n)
        self.start[rows[at]] = pos[at] + used
        return mine, bad

    def column(self) -> _Column:
        assert isinstance(self.f.element, ColumnarField)
        count = np.where(self.found, self.count, 0)
        null = np.where(self.found, self.null, self.f.default is None)  # an omitted tag: its default, [] or None
        item_row = np.repeat(np.arange(len(count)), count)
        first_item = np.cumsum(count) - count
        width = np.dtype(self.dtype).itemsize
        item_pos = self.start[item_row] + width * (np.arange(len(item_row)) - first_item[item_row])
        value = self.source.bytes.read(self.dtype, item_pos)
        element = self.f.element.type
        items: _Column = _UuidColumn(value) if element == "uuid" else _IntColumn(value, element)
        return _FlatListColumn(count, null, items, item_row)


def _read_tagged_section(cur: _Cursor, tagged: tuple[ColumnarField, ...]) -> dict[str, _Column]:
    """The tagged-field section: known tags are read, an unknown tag fails the row.

    A row may carry at most as many tags as there are known ones (more means an unknown or a
    repeated one, left to the per-record decoder), so the loop runs at most once per known tag.
    """
    count = cur.uvarint()
    cur.ok &= count <= len(tagged)
    readers = [(_FixedArrayTag if f.type == ARRAY else _FixedTag)(f, cur.source, len(count)) for f in tagged]
    prev = np.full(len(count), -1, np.int64)  # tags ascend (the per-record decoder's rule)
    for i in range(len(tagged)):
        rows = np.flatnonzero(cur.ok & (count > i))
        if not rows.size:
            break
        sub = _Cursor(cur.source, cur.pos[rows], cur.end[rows])
        tag = sub.uvarint()
        sub.ok &= tag > prev[rows]
        prev[rows] = tag
        size = sub.uvarint()
        known = np.zeros(len(rows), bool)
        for reader in readers:
            mine, bad = reader.read(rows, tag, sub.pos, size)
            known |= mine
            sub.ok &= ~bad
        sub.pos = sub.pos + size
        sub.ok &= known & (sub.pos <= sub.end)
        cur.ok[rows] &= sub.ok
        cur.pos[rows] = sub.pos
    return {f.key: reader.column() for f, reader in zip(tagged, readers, strict=True)}


def _decode_rows(
    shape: VersionedLayout,
    source: _Binaries,
    rows: np.ndarray,
    skip: int,
    exact: bool = True,
    version: np.ndarray | None = None,
) -> tuple[np.ndarray, pa.StructArray]:
    """Decode ``rows`` of ``source`` (from byte ``skip`` of each value): (positions in ``rows`` of
    those that decoded, their structs in that order).

    ``version``: each row's version where ``shape`` merges several. ``exact``: the layout must
    consume each value to its end (keys, values); embedded consumer protocol structs ignore what
    follows, as Kafka reads a newer version.
    """
    cur = _Cursor(source, source.start[rows] + skip, source.end[rows])
    struct = _read_struct(cur, source, shape, version)
    if exact:
        cur.ok &= cur.pos == cur.end  # trailing bytes: another layout, or damage
    ok = cur.ok
    while True:
        keep = np.flatnonzero(ok)
        array, bad = struct.build(keep)
        if not bad.size:
            return keep, array
        ok[keep[bad]] = False  # a second pass builds the columns without them


_SINGLE: dict[int, VersionedLayout] = {}


def _single(layout: ColumnarLayout) -> VersionedLayout:
    """The layout as a VersionedLayout of its own (made once per layout)."""
    shape = _SINGLE.get(id(layout))
    if shape is None or shape.layout is not layout:
        shape = _SINGLE[id(layout)] = single(layout)
    return shape


# -- consumer protocol structs inside classic group members (records._decode_members) ---------------------------
_CLASSIC_GROUP = 2  # the record type whose members carry them
_EMBEDDED = {
    name: Merged(
        {
            version: columnar_layout(decl.decl.struct, version, version in decl.decl.flexible_versions)
            for version in decl.decoders
        }
    )
    for name, decl in (("subscription", SUBSCRIPTION), ("assignment", ASSIGNMENT))
}


@dataclass
class _Decoded:
    """Values of some versions of a record type decoded in one pass, in version order (rows ascending
    within a version)."""

    type_id: int
    versions: tuple[int, ...]
    rows: np.ndarray
    version: np.ndarray  # per row, ascending
    value: pa.StructArray

    def consumer_protocol(self, fallback: np.ndarray) -> _Decoded:
        """Classic group values with their members' consumer protocol structs (records._decode_members);
        rows the reference would add a warning to go to ``fallback``."""
        if self.type_id != _CLASSIC_GROUP:
            return self
        value, ok = _add_consumer_protocol(self.value)
        if ok.all():
            return _Decoded(self.type_id, self.versions, self.rows, self.version, value)
        fallback[self.rows[~ok]] = True
        return _Decoded(self.type_id, self.versions, self.rows[ok], self.version[ok], value.filter(pa.array(ok)))

    def groups(self, keys: _Keys) -> Iterator[ColumnarGroup]:
        """One group per version that kept a row (its rows are a slice of the pass's)."""
        table = keys.tables[self.type_id]
        for v in self.versions:
            a, b = np.searchsorted(self.version, [v, v + 1]).tolist()
            if b > a:
                rows = self.rows[a:b]
                yield ColumnarGroup(self.type_id, v, rows, table.take(keys.slot[rows]), self.value.slice(a, b - a))


def _add_consumer_protocol(value: pa.StructArray) -> tuple[pa.StructArray, np.ndarray]:
    """Add ``subscription_info`` and ``assignment_info`` to every member, as ``decode_record`` does:
    decoded for groups of protocol type "consumer", None otherwise. Returns the values and which
    rows are ok: where an embedded struct does not decode, the reference adds a warning instead."""
    members = value.field("members")
    count = np.diff(members.offsets.to_numpy())
    member_row = np.repeat(np.arange(len(value)), count)
    consumer = pc.equal(value.field("protocol_type"), "consumer").to_numpy(zero_copy_only=False)[member_row]
    flat = members.flatten()
    ok = np.ones(len(value), bool)
    arrays = [flat.field(i) for i in range(flat.type.num_fields)]
    names = [flat.type.field(i).name for i in range(flat.type.num_fields)]
    for part, decl in (("subscription", SUBSCRIPTION), ("assignment", ASSIGNMENT)):
        # a zero-length assignment is "no assignment" (records.decode_assignment)
        info, decoded = _decode_embedded(_EMBEDDED[part], decl.max_version, flat.field(part), consumer, part)
        ok[member_row[~decoded]] = False
        arrays.append(info)
        names.append(f"{part}_info")
    members = pa.ListArray.from_arrays(members.offsets, pa.StructArray.from_arrays(arrays, names=names))
    fields = [members if f.name == "members" else value.field(f.name) for f in value.type]
    return pa.StructArray.from_arrays(fields, names=[f.name for f in value.type]), ok


def _decode_embedded(
    layouts: Merged, newest: int, data: pa.Array, wanted: np.ndarray, part: str
) -> tuple[pa.Array, np.ndarray]:
    """The embedded struct in each wanted item (null elsewhere) and which items decoded.

    As ``records._decode_embedded``: an int16 version (negative: an error), a newer version read
    as the newest known, trailing bytes ignored, the version itself kept in the struct.
    """
    source = _Binaries.of(data)
    length = source.length()
    absent = ~wanted | ((length == 0) if part == "assignment" else np.zeros(len(length), bool))
    version = source.int16_at_start()
    decoded = absent | ((length >= 2) & (version >= 0))
    readable = np.minimum(version, newest)
    index = np.full(len(length), -1, np.int64)
    arrays, total = [], 0
    versions = np.unique(readable[~absent & decoded]).tolist()
    for v in versions:
        if v not in layouts.layouts:
            decoded[~absent & (readable == v)] = False
    for run in layouts.classes([v for v in versions if v in layouts.layouts]):
        parts = [np.flatnonzero(~absent & decoded & (readable == v)) for v in run]
        rows = np.concatenate(parts)
        shape = layouts.of(run)
        assert shape is not None
        keep, struct = _decode_rows(shape, source, rows, skip=2, exact=False, version=readable[rows])
        failed = np.ones(len(rows), bool)
        failed[keep] = False
        decoded[rows[failed]] = False
        kept = rows[keep]
        fields = [pa.array(version[kept].astype(np.int16)), *(struct.field(i) for i in range(struct.type.num_fields))]
        arrays.append(pa.StructArray.from_arrays(fields, names=["version", *(f.name for f in struct.type)]))
        index[kept] = total + np.arange(len(kept))
        total += len(kept)
    struct_type = pa.struct([("version", pa.int16()), *arrow_type(next(iter(layouts.layouts.values()))).fields])
    combined = pa.concat_arrays(arrays) if arrays else pa.array([], struct_type)
    return combined.take(pa.array(index, mask=index < 0)), decoded


# -- keys ----------------------------------------------------------------------------------------------
@dataclass
class _Keys:
    """Each record's key: type id, and where its decoded struct is in that type's key table."""

    type_id: np.ndarray  # int32; meaningful where slot >= 0
    slot: np.ndarray  # int64 index into tables[type_id]; -1 = null, short, unknown or undecodable
    tables: dict[int, pa.StructArray]


def _decode_keys(keys: pa.Array, small_groups_per_record: bool) -> _Keys:
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
        if small_groups_per_record and not _pays_off(compiled.key_columnar, len(rows)):
            decoded, table = _keys_one_by_one(compiled.key_columnar, encoded.dictionary.cast(pa.binary()), rows)
        else:
            keep, table = _decode_rows(_single(compiled.key_columnar), distinct, rows, skip=2)
            decoded = rows[keep]
        slots[decoded] = np.arange(len(decoded))
        tables[type_id] = table
    return _Keys(type_ids[index].astype(np.int32), slots[index], tables)


def _keys_one_by_one(layout: ColumnarLayout, distinct: pa.Array, rows: np.ndarray) -> tuple[np.ndarray, pa.StructArray]:
    """A few keys: ``records.decode_key`` each, its dicts made a struct array of the columnar type."""
    kept, fields = [], []
    for row, raw in zip(rows.tolist(), distinct.take(pa.array(rows)).to_pylist(), strict=True):
        try:
            fields.append(decode_key(raw)[1])
        except DecodeError:
            continue
        kept.append(row)
    return np.array(kept, np.int64), pa.array(fields, arrow_type(layout))


# The columnar path costs a few numpy calls per field of a layout (arrays' element fields count
# too) whatever the number of records, about as much per field as decoding 40 records one by one
# (measured on the generator's mix: offset commits pay off from ~110 records, classic group
# metadata with its members' consumer protocol from ~1,000).
_RECORDS_PER_FIELD = 40


def _field_count(layout: ColumnarLayout) -> int:
    return sum(1 + (_field_count(f.element) if isinstance(f.element, ColumnarLayout) else 0) for f in layout.fields)


def _pays_off(layout: ColumnarLayout, records: int, type_id: int | None = None) -> bool:
    fields = _field_count(layout)
    if type_id == _CLASSIC_GROUP:  # the members' consumer protocol structs are decoded too
        fields += sum(_field_count(next(iter(layouts.layouts.values()))) for layouts in _EMBEDDED.values())
    return records >= _RECORDS_PER_FIELD * fields


# -- the entry point ----------------------------------------------------------------------------------------
def decode_columns(
    keys: pa.Array | pa.ChunkedArray,
    values: pa.Array | pa.ChunkedArray,
    ignore: np.ndarray | None = None,
    *,
    small_groups_per_record: bool = True,
) -> ColumnarResult:
    """Decode the keys and values of many data records columnar-wise.

    ``keys`` and ``values`` are binary (or large binary) arrays of equal length; a null value is
    a tombstone. Records the columnar layouts do not decode are flagged in the result's
    ``fallback`` for :func:`records.decode_record` (see :func:`decode_fallback`). ``ignore``
    (bool per record) leaves records out, in no group and not flagged: control records, which
    ``decode_record`` does not decode either, without copying the arrays to drop them.

    ``small_groups_per_record``: a (type, version) with too few records to pay for the columnar
    path's fixed cost (alone, or beside the other versions of its pass: ``_worth_decoding``) is
    flagged too (``ColumnarResult.too_few`` tells which), and keys of a type
    with few distinct keys are decoded one by one (same values); False decodes everything it can
    columnar-wise (what the equality tests use).
    """
    keys, values = _combined(keys), _combined(values)
    if len(keys) != len(values):
        raise ValueError(f"{len(keys)} keys but {len(values)} values")
    decoded_keys = _decode_keys(keys, small_groups_per_record)
    too_few = np.zeros(len(keys), bool)
    source = _Binaries.of(values)
    fallback = decoded_keys.slot < 0
    codes = _group_codes(decoded_keys, source, fallback)
    if ignore is not None:
        fallback &= ~ignore
        codes[ignore] = -1
    groups: list[ColumnarGroup] = []
    by_type: dict[int, dict[int, np.ndarray]] = {}  # type id -> value version -> rows
    for code, rows in _split_by_code(codes):
        type_id, version = code >> _VERSION_BITS, code & ((1 << _VERSION_BITS) - 1)
        if version == _TOMBSTONE:
            key_table = decoded_keys.tables[type_id]
            groups.append(ColumnarGroup(type_id, None, rows, key_table.take(decoded_keys.slot[rows]), None))
            continue
        version -= 1
        if RECORDS[type_id].value_columnar.get(version) is None:
            fallback[rows] = True
            continue
        by_type.setdefault(type_id, {})[version] = rows
    for type_id, rows_of in by_type.items():
        merged = _VALUES[type_id]
        for run in merged.classes(sorted(rows_of)):  # versions decoded in one pass
            if small_groups_per_record:
                run = _worth_decoding(type_id, merged, run, rows_of, fallback, too_few)
            if run:
                decoded = _decode_versions(type_id, merged, run, rows_of, source, fallback)
                groups += decoded.consumer_protocol(fallback).groups(decoded_keys)
    return ColumnarResult(groups, fallback, too_few)


_VALUES = {type_id: Merged(compiled.value_columnar) for type_id, compiled in RECORDS.items()}
if max(RECORDS) >= 1 << (16 - _VERSION_BITS):  # a declaration error, not data: codes would collide
    raise ValueError(f"record type {max(RECORDS)} does not fit the columnar decoder's 16-bit group codes")


def _worth_decoding(
    type_id: int,
    merged: Merged,
    run: tuple[int, ...],
    rows_of: dict[int, np.ndarray],
    fallback: np.ndarray,
    too_few: np.ndarray,
) -> tuple[int, ...]:
    """The versions of ``run`` worth a columnar pass; the others' rows are flagged as too few.

    The pass must pay for its fields (``_pays_off``), and a version beside others for the fields
    whose presence differs between them (each is read for a subset of the rows).
    """
    included = list(run)
    while included:
        shape = merged.of(tuple(included))
        assert shape is not None
        if not _pays_off(shape.layout, sum(len(rows_of[v]) for v in included), type_id):
            included = []
            break
        least = _RECORDS_PER_FIELD * shape.varying()
        few = [v for v in included if len(rows_of[v]) < least]
        if not few or len(included) == 1:
            break
        included = [v for v in included if v not in few]
    for v in run:
        if v not in included:
            fallback[rows_of[v]] = too_few[rows_of[v]] = True
    return tuple(included)


def _decode_versions(
    type_id: int,
    merged: Merged,
    run: tuple[int, ...],
    rows_of: dict[int, np.ndarray],
    source: _Binaries,
    fallback: np.ndarray,
) -> _Decoded:
    """The values of the versions in ``run`` in one pass; rows that do not decode go to ``fallback``."""
    shape = merged.of(run)
    assert shape is not None
    rows = np.concatenate([rows_of[v] for v in run])
    version = np.repeat(np.array(run, np.int64), [len(rows_of[v]) for v in run])
    keep, value = _decode_rows(shape, source, rows, skip=2, version=version if len(run) > 1 else None)
    failed = np.ones(len(rows), bool)
    failed[keep] = False
    fallback[rows[failed]] = True
    return _Decoded(type_id, run, rows[keep], version[keep], value)


def _group_codes(keys: _Keys, values: _Binaries, fallback: np.ndarray) -> np.ndarray:
    """type id << 6 | (1 + value version, or _TOMBSTONE) per record; -1 where it falls back.

    A value shorter than its version falls back here (the reference reports it truncated), and
    so does a version no layout has (outside [0, _MAX_VERSION]).
    """
    version = values.int16_at_start()
    fallback |= values.valid & ((values.length() < 2) | (version < 0) | (version > _MAX_VERSION))
    slot = np.where(values.valid, version + 1, _TOMBSTONE)
    codes = (keys.type_id.astype(np.int32) << _VERSION_BITS) | slot
    return np.where(fallback, -1, codes)


def _split_by_code(codes: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(code, ascending row positions) for every code but -1."""
    order = np.argsort(codes.astype(np.uint16), kind="stable")  # a radix sort (-1 sorts last)
    ordered = codes[order]
    bounds = np.flatnonzero(np.diff(ordered)) + 1
    for rows in np.split(order, bounds):
        code = int(codes[rows[0]]) if rows.size else -1
        if code >= 0:
            yield code, rows
