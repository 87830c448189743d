"""Spark data source ``kafka_segments``: broker log segments as bronze rows, read in byte ranges.

    spark.read.format("kafka_segments")
        .option("paths", json.dumps(["/var/lib/kafka/data", "s3://bucket/copy/"]))
        .option("cluster", "prod")
        .option("split_bytes", str(64 << 20))
        .load()

The driver lists segment files and plans byte ranges of ``split_bytes`` (or is given them: the
``ranges`` option, a JSON list of :class:`ByteRange`, which is how bronze reads only the files and
tails its ingestion log says are new, pipelines/bronze/file_log.py); each Spark task reads
the batches that *start* in its range (a batch crossing the range end belongs to the range it
starts in), finding its first batch boundary with the segment's ``.index`` as a hint. Memory per
task is bounded by the reader's window and the largest batch: a 1 GiB segment is read by many
tasks and never loaded whole (``binaryFile`` would load it whole).

Rows are ``row_kind = 'record'`` (one per record, control records included),
``row_kind = 'issue'`` (torn tails, corrupt batches, unreadable remainders, with position and
reason) or ``row_kind = 'progress'`` (one per byte range: where reading stopped after the last
complete entry, the offsets read, the last complete batch's position and CRC). Output is
Arrow record batches built column-wise: the log is read a chunk at a time by the codec's
columnar reader (pipelines/codec/columnar_reader.py), each record takes its batch's columns by
index, and Python runs per record only for its content hash (one sha256 call).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from pipelines.bronze.fs import FileChanged, ListedFile, list_segments, read_index_positions
from pipelines.codec.columnar_reader import CHUNK_BYTES, LogColumns, iter_log_columns
from pipelines.codec.compression import CODEC_NAMES
from pipelines.codec.reader import ReadIssue, find_batch_start
from pipelines.errors import InputError

TOPIC = "__consumer_offsets"

SCHEMA_DDL = (
    "row_kind string, cluster string, partition int, offset bigint, topic string, timestamp timestamp, "
    "timestamp_type int, key binary, value binary, headers array<struct<key:string,value:binary>>, magic int, "
    "codec string, producer_id bigint, producer_epoch int, base_sequence int, transactional boolean, "
    "control boolean, partition_leader_epoch int, base_offset bigint, batch_position bigint, source_uri string, "
    "content_hash string, issue_length bigint, issue_kind string, issue_reason string, issue_detail string, "
    "last_segment boolean, range_start bigint, consumed bigint, records bigint, first_offset bigint, "
    "last_offset bigint, offsets_ordered boolean, fingerprint_position bigint, fingerprint_crc bigint, size_seen bigint"
)
# columns of the 'progress' rows only (null in the others)
PROGRESS_COLUMNS = (
    "range_start",
    "consumed",
    "records",
    "first_offset",
    "last_offset",
    "offsets_ordered",
    "fingerprint_position",
    "fingerprint_crc",
    "size_seen",
)
FILE_CHANGED = "file_changed"  # the issue kind of a range whose file is not the one listed


@dataclass(frozen=True)
class ByteRange:
    uri: str
    start: int
    end: int
    partition: int
    is_last: bool
    index_uri: str | None
    boundary: int = 0  # a batch boundary known at or before ``start`` (where a grown file's new bytes begin)
    # the file as listed (fs.ListedFile): a read refuses another file under the same name
    size: int | None = None
    mtime_ns: int | None = None
    identity: str | None = None


class RangePartition(InputPartition):
    """One Spark task: byte ranges of one or more files (small files are packed together)."""

    def __init__(self, ranges: list[ByteRange]) -> None:
        super().__init__([asdict(r) for r in ranges])


def pack(ranges: list[ByteRange], split_bytes: int) -> list[list[ByteRange]]:
    """Group consecutive ranges into tasks of about ``split_bytes``: a task per Python worker
    start is the dominant cost for the many small files of a typical log directory."""
    tasks: list[list[ByteRange]] = []
    size = 0
    for r in ranges:
        length = max(r.end - r.start, 1)
        if tasks and size + length <= split_bytes:
            tasks[-1].append(r)
            size += length
        else:
            tasks.append([r])
            size = length
    return tasks


def content_hash(key: bytes | None, value: bytes | None) -> str:
    """sha256 over key and value with explicit null markers (null and empty differ)."""
    h = hashlib.sha256()
    for part in (key, value):
        if part is None:
            h.update(b"\xff")
        else:
            h.update(b"\x00" + len(part).to_bytes(4, "big") + part)
    return h.hexdigest()


def plan_ranges(paths: list[str], split_bytes: int) -> list[ByteRange]:
    ranges = []
    for seg in list_segments(paths):
        if seg.partition is None:
            raise InputError(
                f"{seg.uri}: cannot tell its __consumer_offsets partition "
                "(segments must sit in __consumer_offsets-<N> directories)"
            )
        for start in range(0, max(seg.size, 1), split_bytes):
            end = min(start + split_bytes, seg.size)
            ranges.append(
                ByteRange(seg.uri, start, end, seg.partition, seg.is_last, seg.index_uri, 0, *seg.listed_as())
            )
    return ranges


class SegmentsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kafka_segments"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> SegmentsReader:
        return SegmentsReader(dict(self.options))


def register(spark: Any) -> None:
    """Make ``spark.read.format("kafka_segments")`` available in this session (idempotent)."""
    spark.dataSource.register(SegmentsDataSource)


class SegmentsReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.paths: list[str] = json.loads(options.get("paths", "[]"))
        self.ranges: list[dict[str, Any]] | None = json.loads(options["ranges"]) if "ranges" in options else None
        self.cluster = options["cluster"]
        self.split_bytes = int(options.get("split_bytes", 64 << 20))
        self.cluster_from_path = options.get("cluster_from_path") or None

    def partitions(self) -> list[InputPartition]:
        if self.ranges is not None:
            planned = [ByteRange(**r) for r in self.ranges]
        else:
            planned = plan_ranges(self.paths, self.split_bytes)
        tasks = pack(planned, self.split_bytes)
        return [RangePartition(t) for t in tasks] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        for value in partition.value or ():
            r = ByteRange(**value)
            yield from read_range(r, cluster_for(r.uri, self.cluster, self.cluster_from_path))


def cluster_for(uri: str, default: str, pattern: str | None) -> str:
    """The cluster of a file: ``default``, or the ``cluster`` group of ``pattern`` in its path."""
    if pattern is None:
        return default
    m = re.search(pattern, uri)
    if m is None or not m.group("cluster"):
        raise InputError(f"{uri}: cluster_from_path {pattern!r} does not match")
    return m.group("cluster")


def _column_names() -> list[str]:
    names, depth, cur = [], 0, ""
    for ch in SCHEMA_DDL:  # split on top-level commas only
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        if ch == "," and depth == 0:
            names.append(cur.strip())
            cur = ""
        else:
            cur += ch
    names.append(cur.strip())
    return names


def arrow_schema() -> pa.Schema:
    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    types = {
        "string": pa.string(),
        "int": pa.int32(),
        "bigint": pa.int64(),
        "binary": pa.binary(),
        "boolean": pa.bool_(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "array<struct<key:string,value:binary>>": pa.list_(header),
    }
    return pa.schema([(c.split(" ", 1)[0], types[c.split(" ", 1)[1]]) for c in _column_names()])


@dataclass
class Progress:
    """What one byte range consumed: the position after its last complete entry (a batch, or a
    corrupt entry whose length was sane; None: none started in the range), its records' offsets
    and whether they strictly increase, and the last complete batch's position and stored CRC."""

    consumed: int | None = None
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None  # the highest of the batches' last offsets and the records' offsets
    offsets_ordered: bool = True
    fingerprint_position: int | None = None
    fingerprint_crc: int | None = None
    size_seen: int | None = None  # the file's size when the range was read (above the listed size: it grew)
    previous: int | None = None  # the offset of the last record seen

    def chunk(self, part: LogColumns) -> None:
        """Fold one stretch of the log, as if its batches and issues were folded one by one in file order."""
        ends = [(i.position, i.position + i.length) for i in part.issues if i.kind == ReadIssue.CORRUPT]
        if part.batches.num_rows:
            ends.append(self._batches(part.batches, part.records["offset"].to_numpy()))
        if ends:  # the last entry consumed, a batch or a corrupt entry, whichever comes later
            self.consumed = max(ends)[1]

    def _batches(self, batches: pa.Table, offsets: np.ndarray) -> tuple[int, int]:
        """Fold batches (in file order) and their records' offsets; returns the last batch's (position, end)."""
        position = batches["position"][-1].as_py()
        self.fingerprint_position, self.fingerprint_crc = position, batches["crc"][-1].as_py()
        # Python ints: a forged base offset plus its delta may leave int64, as Batch.last_offset may
        base, delta = batches["base_offset"].to_pylist(), batches["last_offset_delta"].to_pylist()
        highest = [max(map(int.__add__, base, delta))]
        if self.last_offset is not None:
            highest.append(self.last_offset)
        if len(offsets):
            highest.append(int(offsets.max()))
            chain = offsets if self.previous is None else np.concatenate([[self.previous], offsets])
            if not (chain[1:] > chain[:-1]).all():
                self.offsets_ordered = False
            low = int(offsets.min())
            self.first_offset = low if self.first_offset is None else min(self.first_offset, low)
            self.previous = int(offsets[-1])
            self.records += len(offsets)
        self.last_offset = max(highest)
        return position, position + batches["size"][-1].as_py()

    def columns(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in PROGRESS_COLUMNS if name != "range_start"}


def read_range(
    r: ByteRange, cluster: str, rows_per_batch: int = 8192, chunk_bytes: int = CHUNK_BYTES
) -> Iterator[pa.RecordBatch]:
    """Bronze rows of the batches starting in ``r``, as pyarrow RecordBatches of at most
    ``rows_per_batch`` rows, ending with the range's progress row. The log is read
    ``chunk_bytes`` at a time (iter_log_columns) and each chunk's rows are built column-wise.

    A file that is not the one listed (deleted, swapped, truncated: fs.ListedFile) ends the range
    with a ``file_changed`` issue row; the driver then drops what the run read of that file."""
    schema = arrow_schema()
    progress = Progress()
    try:
        src = ListedFile(r.uri, r.size, r.mtime_ns, r.identity)
    except FileChanged as changed:
        yield pa.RecordBatch.from_pylist([_changed_row(changed, r, cluster)], schema=schema)
        yield pa.RecordBatch.from_pylist([_progress_row(progress, r, cluster)], schema=schema)
        return
    try:
        for part in _entries(src, r, chunk_bytes):
            progress.chunk(part)
            yield from _chunk_rows(part, r, cluster, schema).to_batches(max_chunksize=rows_per_batch)
        src.check()  # after the read too: a truncation or swap while it ran
        progress.size_seen = src.current_size()
    except FileChanged as changed:
        yield pa.RecordBatch.from_pylist([_changed_row(changed, r, cluster)], schema=schema)
    finally:
        src.close()
    yield pa.RecordBatch.from_pylist([_progress_row(progress, r, cluster)], schema=schema)


def _entries(src: ListedFile, r: ByteRange, chunk_bytes: int) -> Iterator[LogColumns]:
    """The entries starting in ``r``: from its start when that is a known boundary, else from the
    first boundary found after it (the .index and the known boundary as hints)."""
    if r.start == r.boundary:
        start: int | None = r.start
    else:
        hints = [*read_index_positions(r.index_uri), r.boundary]
        start = find_batch_start(src, r.start, hints)
    if start is None or start >= r.end:
        return iter(())
    return iter_log_columns(src, start=start, end=r.end, chunk_bytes=chunk_bytes)


def _chunk_rows(part: LogColumns, r: ByteRange, cluster: str, schema: pa.Schema) -> pa.Table:
    """The record rows of a chunk with its issue rows among them, in file order."""
    records = _record_rows(part, r, cluster, schema)
    if not part.issues:
        return records
    positions = records["batch_position"].to_numpy()
    pieces, done = [], 0
    for issue in part.issues:  # few: a slice of records, then the issue
        at = int(np.searchsorted(positions, issue.position))
        pieces += [records.slice(done, at - done), pa.Table.from_pylist([_issue_row(issue, r, cluster)], schema)]
        done = at
    pieces.append(records.slice(done))
    return pa.concat_tables(pieces)


_TS_TYPE_CREATE, _TS_TYPE_LOG_APPEND, _TS_TYPE_NONE = 0, 1, -1
_CODEC_NAMES = pa.array([CODEC_NAMES.get(codec, str(codec)) for codec in range(8)])


def _batch_columns(batches: pa.Table) -> dict[str, pa.Array]:
    """Each batch's bronze columns (one row per batch), gathered to its records afterwards."""
    magic = batches["magic"].to_numpy().astype(np.int32)
    attributes = batches["attributes"].to_numpy()
    v2 = magic >= 2
    log_append = (attributes & 0x08) != 0
    ts_type = np.where(magic == 0, _TS_TYPE_NONE, np.where(log_append, _TS_TYPE_LOG_APPEND, _TS_TYPE_CREATE))
    return {
        "timestamp_type": pa.array(ts_type.astype(np.int32)),
        "magic": pa.array(magic),
        "codec": _CODEC_NAMES.take(pa.array(attributes & 0x07)),
        "producer_id": batches["producer_id"].combine_chunks(),
        "producer_epoch": batches["producer_epoch"].combine_chunks().cast(pa.int32()),
        "base_sequence": batches["base_sequence"].combine_chunks(),
        "transactional": pa.array(v2 & ((attributes & 0x10) != 0)),
        "control": pa.array(v2 & ((attributes & 0x20) != 0)),
        "partition_leader_epoch": batches["partition_leader_epoch"].combine_chunks(),
        "base_offset": batches["base_offset"].combine_chunks(),
        "batch_position": batches["position"].combine_chunks(),
    }


def _record_rows(part: LogColumns, r: ByteRange, cluster: str, schema: pa.Schema) -> pa.Table:
    records = {name: part.records[name].combine_chunks() for name in part.records.column_names}
    n = len(records["offset"])
    gathered = {name: column.take(records["batch"]) for name, column in _batch_columns(part.batches).items()}
    constants = {
        "row_kind": "record",
        "cluster": cluster,
        "partition": r.partition,
        "topic": TOPIC,
        "source_uri": r.uri,
        "last_segment": r.is_last,
    }
    columns = {
        **gathered,
        **{name: pa.repeat(pa.scalar(value, schema.field(name).type), n) for name, value in constants.items()},
        "offset": records["offset"],
        "timestamp": _timestamps(records["timestamp"], r.uri),
        "key": records["key"],
        "value": records["value"],
        "headers": records["headers"],
        "content_hash": content_hashes(records["key"], records["value"]),
    }
    return pa.table([columns.get(f.name, pa.nulls(n, f.type)) for f in schema], schema=schema)


_US = 1_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# what datetime holds (years 1 to 9999), in microseconds since the epoch
_DATETIME_US = tuple(
    (d.replace(tzinfo=timezone.utc) - _EPOCH) // timedelta(microseconds=1) for d in (datetime.min, datetime.max)
)


def _timestamps(millis: pa.Array, uri: str) -> pa.Array:
    """Record timestamps (ms) as the microseconds ``datetime.fromtimestamp(ms / 1000, tz=utc)`` gives,
    which bronze's rows have always held: exact up to about the year 2242, rounded through a double
    (half to even, as CPython rounds) beyond. Out of datetime's range fails as fromtimestamp did."""
    null = millis.is_null().to_numpy(zero_copy_only=False)
    seconds = millis.fill_null(0).to_numpy().astype(np.float64) / 1000  # as Python's int / int rounds it
    far = (seconds < _DATETIME_US[0] / _US - 1) | (seconds > _DATETIME_US[1] / _US + 1)
    seconds[far] = 0  # no int64 overflow below; reported after
    # CPython splits a float timestamp into whole seconds and the rest in microseconds, rounded half
    # to even (a rest rounded to 1e6 or below 0 moves a second, which leaves their sum as it is)
    whole = np.trunc(seconds)
    micros = whole.astype(np.int64) * _US + np.rint((seconds - whole) * _US).astype(np.int64)
    outside = ~null & (far | (micros < _DATETIME_US[0]) | (micros > _DATETIME_US[1]))
    if outside.any():
        ms = millis[int(np.flatnonzero(outside)[0])].as_py()
        raise ValueError(f"{uri}: a record's timestamp {ms} ms is outside years 1-9999")
    return pa.array(micros, pa.timestamp("us", tz="UTC"), mask=null)


def content_hashes(key: pa.Array, value: pa.Array) -> pa.Array:
    """``content_hash`` of every record: its layout built for all records at once by Arrow, then
    one sha256 call per record over its slice of that buffer."""
    joined = pc.binary_join_element_wise(
        _hash_prefix(key), _filled(key), _hash_prefix(value), _filled(value), pa.scalar(b"", pa.large_binary())
    )
    ends = np.frombuffer(joined.buffers()[1], np.int64, len(joined) + 1, joined.offset * 8)
    view = memoryview(joined.buffers()[2] or b"")
    return pa.array([hashlib.sha256(view[a:b]).hexdigest() for a, b in itertools.pairwise(ends.tolist())], pa.string())


def _filled(column: pa.Array) -> pa.Array:
    return column.cast(pa.large_binary()).fill_null(b"")


def _hash_prefix(column: pa.Array) -> pa.Array:
    """Per value: b"\\xff" for null, else b"\\x00" and its length as 4 big-endian bytes."""
    null = column.is_null().to_numpy(zero_copy_only=False)
    length = pc.binary_length(column).fill_null(0).to_numpy().astype(">u4")
    width = np.where(null, 1, 5)
    offsets = np.zeros(len(width) + 1, np.int64)
    np.cumsum(width, out=offsets[1:])
    data = np.zeros(int(offsets[-1]), np.uint8)
    data[offsets[:-1][null]] = 0xFF
    present = offsets[:-1][~null]
    data[present[:, None] + np.arange(1, 5)] = length[~null].view(np.uint8).reshape(-1, 4)
    return pa.Array.from_buffers(pa.large_binary(), len(width), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _issue_row(issue: ReadIssue, r: ByteRange, cluster: str) -> dict[str, Any]:
    # a torn tail is only normal at the end of a partition's last segment
    kind = issue.kind if (issue.kind != ReadIssue.TORN_TAIL or r.is_last) else ReadIssue.CORRUPT
    return {
        "row_kind": "issue",
        "cluster": cluster,
        "partition": r.partition,
        "topic": TOPIC,
        "batch_position": issue.position,
        "source_uri": r.uri,
        "issue_length": issue.length,
        "issue_kind": kind,
        "issue_reason": issue.reason.value,
        "issue_detail": issue.detail,
        "last_segment": r.is_last,
        "control": False,
    }


def _changed_row(changed: FileChanged, r: ByteRange, cluster: str) -> dict[str, Any]:
    """The issue row of a range whose file is not the one listed: the whole range, unread."""
    return _issue_row(ReadIssue(FILE_CHANGED, r.start, r.end - r.start, changed.reason, changed.detail), r, cluster)


def _progress_row(p: Progress, r: ByteRange, cluster: str) -> dict[str, Any]:
    return {
        "row_kind": "progress",
        "cluster": cluster,
        "partition": r.partition,
        "topic": TOPIC,
        "source_uri": r.uri,
        "last_segment": r.is_last,
        "control": False,
        "range_start": r.start,
        **p.columns(),
    }
