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
produced as Arrow record batches.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from pipelines.bronze.fs import ArrowFileSource, list_segments, read_index_positions
from pipelines.codec.reader import Batch, ReadIssue, find_batch_start, iter_log
from pipelines.errors import InputError

TOPIC = "__consumer_offsets"

SCHEMA_DDL = (
    "row_kind string, cluster string, partition int, offset bigint, topic string, timestamp timestamp, "
    "timestamp_type int, key binary, value binary, headers array<struct<key:string,value:binary>>, magic int, "
    "codec string, producer_id bigint, producer_epoch int, base_sequence int, transactional boolean, "
    "control boolean, partition_leader_epoch int, base_offset bigint, batch_position bigint, source_uri string, "
    "content_hash string, issue_length bigint, issue_kind string, issue_reason string, issue_detail string, "
    "last_segment boolean, range_start bigint, consumed bigint, records bigint, first_offset bigint, "
    "last_offset bigint, offsets_ordered boolean, fingerprint_position bigint, fingerprint_crc bigint"
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
)


@dataclass(frozen=True)
class ByteRange:
    uri: str
    start: int
    end: int
    partition: int
    is_last: bool
    index_uri: str | None
    boundary: int = 0  # a batch boundary known at or before ``start`` (where a grown file's new bytes begin)


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
            ranges.append(
                ByteRange(seg.uri, start, min(start + split_bytes, seg.size), seg.partition, seg.is_last, seg.index_uri)
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


def _empty_columns() -> dict[str, list]:
    return {name.split(" ")[0]: [] for name in _column_names()}


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
    previous: int | None = None  # the offset of the last record seen

    def batch(self, b: Batch) -> None:
        self.consumed = b.end
        self.fingerprint_position, self.fingerprint_crc = b.position, b.crc
        offsets = [rec.offset for rec in b.records or ()]
        highest = max(offsets, default=b.last_offset)
        if self.last_offset is not None:
            highest = max(highest, self.last_offset)
        self.last_offset = max(highest, b.last_offset)
        if not offsets:
            return
        chain = offsets if self.previous is None else [self.previous, *offsets]
        if any(a >= b for a, b in itertools.pairwise(chain)):
            self.offsets_ordered = False
        low = min(offsets)
        self.first_offset = low if self.first_offset is None else min(self.first_offset, low)
        self.previous = offsets[-1]
        self.records += len(offsets)

    def issue(self, issue: ReadIssue) -> None:
        if issue.kind == ReadIssue.CORRUPT:  # a whole entry, skipped: the next one follows it
            self.consumed = issue.position + issue.length

    def columns(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in PROGRESS_COLUMNS if name != "range_start"}


def read_range(r: ByteRange, cluster: str, rows_per_batch: int = 8192) -> Iterator[Any]:
    """Bronze rows of the batches starting in ``r``, as pyarrow RecordBatches, ending with the
    range's progress row."""
    schema = arrow_schema()
    cols = _empty_columns()
    progress = Progress()
    src = ArrowFileSource(r.uri)
    n = 0

    def flush() -> Any:
        nonlocal cols, n
        batch = pa.RecordBatch.from_pydict(cols, schema=schema)
        cols, n = _empty_columns(), 0
        return batch

    try:
        for item in _entries(src, r):
            if isinstance(item, Batch):
                _add_batch(cols, item, r, cluster)
                progress.batch(item)
                n += len(item.records or ())
            else:
                _add_issue(cols, item, r, cluster)
                progress.issue(item)
                n += 1
            if n >= rows_per_batch:
                yield flush()
    finally:
        src.close()
    _add_progress(cols, progress, r, cluster)
    yield flush()


def _entries(src: ArrowFileSource, r: ByteRange) -> Iterator[Batch | ReadIssue]:
    """The entries starting in ``r``: from its start when that is a known boundary, else from the
    first boundary found after it (the .index and the known boundary as hints)."""
    if r.start == r.boundary:
        start: int | None = r.start
    else:
        hints = [*read_index_positions(r.index_uri), r.boundary]
        start = find_batch_start(src, r.start, hints)
    if start is None or start >= r.end:
        return iter(())
    return iter_log(src, start=start, end=r.end)


_TS_TYPE = {"CreateTime": 0, "LogAppendTime": 1, None: -1}


def _add_batch(cols: dict[str, list], b: Any, r: ByteRange, cluster: str) -> None:
    ts_type = _TS_TYPE[b.timestamp_type]
    for rec in b.records or ():
        cols["row_kind"].append("record")
        cols["cluster"].append(cluster)
        cols["partition"].append(r.partition)
        cols["offset"].append(rec.offset)
        cols["topic"].append(TOPIC)
        cols["timestamp"].append(
            None if rec.timestamp is None else datetime.fromtimestamp(rec.timestamp / 1000, tz=timezone.utc)
        )
        cols["timestamp_type"].append(ts_type)
        cols["key"].append(rec.key)
        cols["value"].append(rec.value)
        cols["headers"].append([{"key": k, "value": v} for k, v in rec.headers])
        cols["magic"].append(b.magic)
        cols["codec"].append(b.codec_name)
        cols["producer_id"].append(b.producer_id)
        cols["producer_epoch"].append(b.producer_epoch)
        cols["base_sequence"].append(b.base_sequence)
        cols["transactional"].append(b.is_transactional)
        cols["control"].append(b.is_control)
        cols["partition_leader_epoch"].append(b.partition_leader_epoch)
        cols["base_offset"].append(b.base_offset)
        cols["batch_position"].append(b.position)
        cols["source_uri"].append(r.uri)
        cols["content_hash"].append(content_hash(rec.key, rec.value))
        for name in ("issue_length", "issue_kind", "issue_reason", "issue_detail", *PROGRESS_COLUMNS):
            cols[name].append(None)
        cols["last_segment"].append(r.is_last)


def _add_progress(cols: dict[str, list], p: Progress, r: ByteRange, cluster: str) -> None:
    values = {name: None for name in cols}
    values.update(
        row_kind="progress",
        cluster=cluster,
        partition=r.partition,
        topic=TOPIC,
        source_uri=r.uri,
        last_segment=r.is_last,
        control=False,
        range_start=r.start,
        **p.columns(),
    )
    for name, value in values.items():
        cols[name].append(value)


def _add_issue(cols: dict[str, list], issue: Any, r: ByteRange, cluster: str) -> None:
    values = {name: None for name in cols}
    # a torn tail is only normal at the end of a partition's last segment
    kind = issue.kind if (issue.kind != "torn_tail" or r.is_last) else "corrupt_batch"
    values.update(
        row_kind="issue",
        cluster=cluster,
        partition=r.partition,
        topic=TOPIC,
        batch_position=issue.position,
        source_uri=r.uri,
        issue_length=issue.length,
        issue_kind=kind,
        issue_reason=issue.reason.value,
        issue_detail=issue.detail,
        last_segment=r.is_last,
        control=False,
    )
    for name, value in values.items():
        cols[name].append(value)
