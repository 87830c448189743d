"""Large Delta appends written by Spark's Python tasks with pyarrow, committed on the driver by delta-rs.

A Spark write of rows that Python tasks produce (silver's decoded tables, gold's replayed ones)
converts every row from Arrow to the JVM's rows, then encodes it again as Parquet: at 10M records
silver's ``offset_commits`` took 62 s and gold's ``offset_history`` 76 s of task time that way on
2 cores (docs/performance.md), where pyarrow writes the same 8.8M rows in about 6 s. Here the
tasks that unpack the rows write them: each task writes one Parquet file per partition value it
meets and returns its file's add action (path, size, partition values, statistics); the driver
commits the actions in one Delta commit with delta-rs (``create_write_transaction``), as Spark's
driver commits its tasks' files. Readers cannot tell the files from Spark's: same layout
(``col=value`` directories, partition columns not in the files), same statistics.

Appends, and replaces that remove whole files (:func:`replace`: the caller says, per existing
file, whether the commit removes it, keeps it, or cannot tell), only to tables whose protocol
delta-rs writes (:func:`writable`): anything else is written by Spark (the caller's fallback).
Files of a task Spark retried, or of a run killed before the commit, are referenced by no
commit, as with Spark's own writes.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow import fs

from pipelines.runtime.files import data_file_uri, filesystem, normalise, plain_types

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "ADD_DDL",
    "ADD_SCHEMA",
    "Existing",
    "Target",
    "append",
    "commit",
    "existing",
    "file_stats",
    "open_for_writing",
    "opened",
    "partition_dir",
    "removed_files",
    "replace",
    "target",
    "write_files",
]

log = logging.getLogger("offsets_lakehouse")

# what each task returns per file it wrote: the add action's fields
ADD_DDL = "path string, size bigint, partition_values string, stats string, rows bigint"
# table features these writes honour (the rest of the protocol is the caller's: Spark writes those)
WRITER_FEATURES = {"appendOnly", "invariants", "changeDataFeed", "timestampNtz"}
# Delta's defaults for which columns get statistics and how long a string statistic is
DEFAULT_INDEXED_COLUMNS = 32
STRING_PREFIX = 32
# rows a task buffers for one partition value before writing them as a row group
ROW_GROUP_ROWS = 1 << 20
# rows a task buffers over all its partition values before writing the largest buffer
TASK_BUFFER_ROWS = 2 << 20
# characters Hive (and so Spark) escapes in a partition directory's name
_ESCAPED = set("\"#%'*/:=?\\{[]^") | {chr(c) for c in range(0x20)} | {"\x7f"}
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


@dataclass(frozen=True)
class Target:
    """What a task needs to write a table's files: where, in which columns and types, partitioned
    by what, with statistics on which columns. Picklable: it travels to the tasks."""

    root: str  # the table's URI
    schema: pa.Schema  # the table's columns, partition columns included, in the log's order
    partition_by: tuple[str, ...]
    stats_columns: tuple[str, ...]
    compression: str = "snappy"  # Spark's default codec for Parquet


def writable(table: Any) -> str | None:
    """Why these writes must not write the delta-rs ``table``, beyond the writer features
    :func:`open_for_writing` checks (None: they may). Checked on the driver before any task
    writes: a reader feature, CHECK constraints, generated or identity columns, column mapping."""
    protocol = table.protocol()
    if protocol.reader_features:
        return f"reader features {sorted(protocol.reader_features)}"
    config = table.metadata().configuration
    if any(k.startswith("delta.constraints.") for k in config):
        return "CHECK constraints"
    if config.get("delta.columnMapping.mode", "none") != "none":
        return "column mapping"
    for field in json.loads(table.schema().to_json())["fields"]:
        if any(k.startswith(("delta.generationExpression", "delta.identity")) for k in field.get("metadata", {})):
            return f"generated or identity column {field['name']}"
    return None


def target(table: Any, uri: str) -> Target:
    """The :class:`Target` of the delta-rs ``table`` at ``uri``."""
    config = table.metadata().configuration
    partition_by = tuple(table.metadata().partition_columns)
    schema = plain_types(pa.schema(table.schema().to_arrow()))
    data = [f for f in schema if f.name not in partition_by]
    if listed := config.get("delta.dataSkippingStatsColumns"):
        wanted = {c.strip() for c in listed.split(",")}
        stats = [f.name for f in data if f.name in wanted]
    else:
        count = int(config.get("delta.dataSkippingNumIndexedCols", DEFAULT_INDEXED_COLUMNS))
        stats = [f.name for f in data][: count if count >= 0 else None]
    # a struct's statistics nest per field: none here (a reader then reads its files unpruned)
    kept = tuple(s for s in stats if not pa.types.is_struct(schema.field(s).type))
    return Target(uri.rstrip("/"), schema, partition_by, kept)


def _bounded(kind: pa.DataType) -> bool:
    """Delta keeps a minimum and maximum for these types (and a null count for every column, an
    array or map as a whole)."""
    return (
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_timestamp(kind)
        or pa.types.is_date(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_decimal(kind)
    )


# -- in the tasks ----------------------------------------------------------------------------------------
def partition_dir(target: Target, values: Sequence[Any]) -> str:
    """The directory of a partition's files, relative to the table: ``col=value/...`` as Hive
    writes it (special characters escaped as ``%XX``, null as ``__HIVE_DEFAULT_PARTITION__``)."""
    parts = []
    for column, value in zip(target.partition_by, values, strict=True):
        text = NULL_PARTITION if value is None else _partition_text(value)
        parts.append(f"{column}=" + "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text))
    return "/".join(parts)


def _partition_text(value: Any) -> str:
    """A partition value as the Delta log writes it (a string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def file_stats(rows: pa.Table, columns: Sequence[str]) -> dict[str, Any]:
    """Delta's statistics of a file holding ``rows``: ``numRecords``, and for ``columns`` the
    null count and, where its type has them, the minimum and maximum (none when all its values
    are null). Bounds stay bounds where the log cannot hold the value: a string longer than
    :data:`STRING_PREFIX` keeps its prefix as minimum and has no maximum; a timestamp's minimum
    is rounded down and its maximum up to the millisecond the log writes."""
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name in columns:
        column = rows.column(name)
        nulls[name] = column.null_count
        if column.null_count == len(column) or not _bounded(column.type):
            continue
        kind = column.type
        if pa.types.is_floating(kind) and pc.any(pc.is_nan(column)).as_py():
            continue  # NaN has no place in the log's order
        bounds = pc.min_max(column)
        lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        if pa.types.is_timestamp(kind):
            lo, hi = _timestamp(lo, kind, up=False), _timestamp(hi, kind, up=True)
        elif pa.types.is_date(kind):
            lo, hi = lo.isoformat(), hi.isoformat()
        elif pa.types.is_decimal(kind):
            lo, hi = float(lo), float(hi)
        elif isinstance(lo, str):
            lo = lo[:STRING_PREFIX]
            if len(hi) > STRING_PREFIX:
                hi = None
        low[name] = lo
        if hi is not None:
            high[name] = hi
    return {"numRecords": rows.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls}


def _timestamp(value: datetime, kind: pa.TimestampType, up: bool) -> str:
    """A timestamp statistic as the Delta log writes it (UTC, milliseconds), rounded ``up`` or down."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    micros = (value - datetime(1970, 1, 1, tzinfo=timezone.utc)) // _MICRO
    millis = math.ceil(micros / 1000) if up else micros // 1000
    stamp = datetime(1970, 1, 1, tzinfo=timezone.utc) + millis * _MILLI
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


_MICRO = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=timezone.utc) - datetime(1970, 1, 1, tzinfo=timezone.utc)
_MILLI = _MICRO * 1000


class _File:
    """One Parquet file a task is writing for one partition value."""

    def __init__(self, target: Target, values: tuple[Any, ...], task: int):
        self.values = values
        name = f"part-{task:05d}-{uuid.uuid4()}.c000.{target.compression}.parquet"
        self.relative = f"{partition_dir(target, values)}/{name}" if target.partition_by else name
        self.columns = [f for f in target.schema if f.name not in target.partition_by]
        self.pending: list[pa.Table] = []
        self.buffered = 0
        self.parts: list[pa.Table] = []  # the statistics' columns of what was written
        self.writer: pq.ParquetWriter | None = None
        self.sink: Any = None

    def add(self, rows: pa.Table) -> None:
        self.pending.append(rows)
        self.buffered += rows.num_rows

    def flush(self, target: Target) -> None:
        """Write the buffered rows as one row group."""
        if not self.buffered:
            return
        rows = pa.concat_tables(self.pending).select([f.name for f in self.columns])
        if self.writer is None:
            filesys, path = filesystem(f"{target.root}/{self.relative}")
            if isinstance(filesys, fs.LocalFileSystem):
                filesys.create_dir(path.rsplit("/", 1)[0], recursive=True)
            self.sink = filesys.open_output_stream(path)
            self.writer = pq.ParquetWriter(self.sink, pa.schema(self.columns), compression=target.compression)
        self.writer.write_table(rows, row_group_size=max(rows.num_rows, 1))
        self.parts.append(rows.select(list(target.stats_columns)))
        self.pending, self.buffered = [], 0

    def close(self, target: Target) -> dict[str, Any]:
        """Finish the file; its add action's fields (:data:`ADD_DDL`)."""
        self.flush(target)
        assert self.writer is not None
        self.writer.close()
        size = self.sink.tell()
        self.sink.close()
        written = pa.concat_tables(self.parts)
        pairs = zip(target.partition_by, self.values, strict=True)
        values = {c: None if v is None else _partition_text(v) for c, v in pairs}
        return {
            "path": self.relative,  # as it is: delta-rs percent-encodes it in the log
            "size": size,
            "partition_values": json.dumps(values),
            "stats": json.dumps(file_stats(written, target.stats_columns), separators=(",", ":")),
            "rows": written.num_rows,
        }


def write_files(
    batches: Iterable[pa.RecordBatch],
    target: Target,
    rows_of: Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch | pa.Table]],
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: the table's rows made of the task's input (``rows_of``) written as
    Parquet files, one per partition value, each returned as an add action (:data:`ADD_DDL`).
    Rows are cast to the table's types; a null in a NOT NULL column fails the task, as Delta's
    invariant check fails Spark's."""
    from pyspark import TaskContext  # in a task: its index names its files, as Spark's writers do

    context = TaskContext.get()
    task = context.partitionId() if context is not None else 0
    files: dict[tuple[Any, ...], _File] = {}
    buffered = 0
    for chunk in rows_of(batches):
        rows = _conform(chunk if isinstance(chunk, pa.Table) else pa.Table.from_batches([chunk]), target.schema)
        if not rows.num_rows:
            continue
        for values, part in _split(rows, target.partition_by):
            file = files.get(values)
            if file is None:
                file = files[values] = _File(target, values, task)
            file.add(part)
            buffered += part.num_rows
            if file.buffered >= ROW_GROUP_ROWS:
                buffered -= file.buffered
                file.flush(target)
        while buffered > TASK_BUFFER_ROWS:
            largest = max(files.values(), key=lambda f: f.buffered)
            buffered -= largest.buffered
            largest.flush(target)
    actions = [f.close(target) for f in files.values()]
    if actions:
        yield pa.RecordBatch.from_pylist(actions, schema=ADD_SCHEMA)


ADD_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("partition_values", pa.string()),
        ("stats", pa.string()),
        ("rows", pa.int64()),
    ]
)


def _conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` in the table's columns and types; refuses nulls in a NOT NULL column."""
    for field in schema:
        if not field.nullable and rows.column(field.name).null_count:
            raise ValueError(f"NOT NULL constraint violated for column: {field.name}")
    return rows.select(schema.names).cast(schema)


def _split(rows: pa.Table, columns: Sequence[str]) -> Iterator[tuple[tuple[Any, ...], pa.Table]]:
    """``rows`` by the values of ``columns`` (all rows under ``()`` when there are none)."""
    if not columns:
        yield (), rows
        return
    keys = rows.select(list(columns)).group_by(list(columns), use_threads=False).aggregate([])
    if keys.num_rows == 1:
        yield tuple(keys.column(c)[0].as_py() for c in columns), rows
        return
    for i in range(keys.num_rows):
        values = tuple(keys.column(c)[i].as_py() for c in columns)
        mask = None
        for column, value in zip(columns, values, strict=True):
            test = pc.is_null(rows.column(column)) if value is None else pc.equal(rows.column(column), value)
            mask = test if mask is None else pc.and_(mask, test)
        yield values, rows.filter(mask)


# -- on the driver ---------------------------------------------------------------------------------------
def open_for_writing(path: str) -> Any | None:
    """The delta-rs table at ``path``, opened to commit (on an object store by conditional write:
    the coordination Spark's log store uses); None when delta-rs cannot write it (no table there,
    a log it cannot read, a writer feature outside :data:`WRITER_FEATURES`): Spark writes it. A
    store that does not answer raises: Spark's S3A would retry for minutes, past the stage lock's
    lease, and the run would end on the lock instead of on what happened."""
    from deltalake import DeltaTable as RsTable

    from pipelines.runtime.storage import delta_rs_options, unreachable

    uri = normalise(path)
    try:
        table = RsTable(uri, storage_options=delta_rs_options(uri, writing=True))
        refused = set(table.protocol().writer_features or ()) - WRITER_FEATURES
    except Exception as exc:
        if unreachable(str(exc)):
            raise
        log.debug("delta-rs cannot write %s (%s): Spark writes it", path, exc)
        return None
    if refused:
        log.debug("delta-rs does not write %s (writer features %s): Spark writes it", path, sorted(refused))
        return None
    return table


def opened(path: str) -> tuple[Any, Target] | None:
    """The delta-rs table at ``path`` (:func:`open_for_writing`) and its :class:`Target`; None when
    these writes must not write it (that, or :func:`writable`): Spark writes it."""
    table = open_for_writing(path)
    if table is None:
        return None
    if (refused := writable(table)) is not None:
        log.debug("tasks do not write %s (%s): Spark writes it", path, refused)
        return None
    return table, target(table, normalise(path))


def commit(
    table: Any,
    goal: Target,
    written: pa.Table,
    metadata: dict[str, Any] | None = None,
    removed: Sequence[Existing] = (),
) -> int:
    """Commit the files the tasks wrote (``written``: their add actions, :data:`ADD_DDL`) to the
    delta-rs ``table`` in one commit, removing the ``removed`` files in the same commit (a
    replace, :func:`replace`); returns the rows the added files hold. Nothing written and nothing
    removed, no commit (as Spark skips an empty commit)."""
    from deltalake import CommitProperties
    from deltalake.transaction import AddAction, RemoveAction

    if not written.num_rows and not removed:
        return 0
    now = int(time.time() * 1000)
    actions: list[Any] = [
        AddAction(r["path"], r["size"], json.loads(r["partition_values"]), now, True, r["stats"])
        for r in written.to_pylist()
    ]
    actions += [RemoveAction(f.path, True, now, f.size, f.partition_values) for f in removed]
    meta = None if metadata is None else {"userMetadata": json.dumps(metadata, sort_keys=True)}
    table.create_write_transaction(
        actions,
        mode="append",
        schema=table.schema(),
        partition_by=list(goal.partition_by) or None,
        commit_properties=CommitProperties(custom_metadata=meta),
    )
    return int(pc.sum(written.column("rows")).as_py() or 0) if written.num_rows else 0


@dataclass(frozen=True)
class Existing:
    """A data file of a table's current version, as a replace decides on it: its path relative to
    the table, decoded (delta-rs encodes it in the log, as for an added file), ``uri`` to read it,
    its size, its partition values (the log's strings, None for null) and its statistics' bounds
    for the columns asked for."""

    path: str
    uri: str
    size: int | None
    partition_values: dict[str, str | None]
    minimum: dict[str, Any]
    maximum: dict[str, Any]


def existing(table: Any, root: str, stats: Sequence[str] = ()) -> list[Existing]:
    """The data files of the delta-rs ``table`` (at ``root``) at its loaded version."""
    adds = pa.table(table.get_add_actions(flatten=True))
    partition_by = list(table.metadata().partition_columns)

    def column(name: str) -> list[Any]:
        return adds.column(name).to_pylist() if name in adds.column_names else [None] * adds.num_rows

    parts = {c: column(f"partition.{c}") for c in partition_by}
    low = {c: column(f"min.{c}") for c in stats}
    high = {c: column(f"max.{c}") for c in stats}
    sizes = column("size_bytes")
    return [
        Existing(
            path=unquote(path),
            uri=data_file_uri(root, path),
            size=sizes[i],
            partition_values={c: None if v[i] is None else _partition_text(v[i]) for c, v in parts.items()},
            minimum={c: low[c][i] for c in stats},
            maximum={c: high[c][i] for c in stats},
        )
        for i, path in enumerate(adds.column("path").to_pylist())
    ]


def removed_files(files: Sequence[Existing], removes: Callable[[Existing], bool | None]) -> list[Existing] | None:
    """The files a replace removes: those ``removes`` says it replaces whole (True); None when it
    cannot tell for one (None: the file holds rows the replace keeps beside rows it replaces, and
    only a rewrite of that file, Spark's, can keep them)."""
    out = []
    for f in files:
        verdict = removes(f)
        if verdict is None:
            return None
        if verdict:
            out.append(f)
    return out


def append(
    frame: DataFrame,
    path: str,
    rows_of: Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch | pa.Table]],
    metadata: dict[str, Any] | None = None,
) -> int | None:
    """Append the rows ``rows_of`` makes of ``frame``'s Arrow batches, in each of ``frame``'s tasks,
    to the Delta table at ``path`` in one commit (``metadata`` as the commit's ``userMetadata``);
    returns the rows written. None, and nothing written, when these writes must not write the
    table (:func:`opened`): the caller writes it with Spark."""
    found = opened(path)
    if found is None:
        return None
    table, goal = found
    write = functools.partial(write_files, target=goal, rows_of=rows_of)
    return commit(table, goal, frame.mapInArrow(write, ADD_DDL).toArrow(), metadata)


def replace(
    frame: DataFrame,
    path: str,
    rows_of: Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch | pa.Table]],
    removes: Callable[[Existing], bool | None],
    stats: Sequence[str] = (),
    metadata: dict[str, Any] | None = None,
) -> int | None:
    """Replace files of the Delta table at ``path`` by the rows ``rows_of`` makes of ``frame``'s
    Arrow batches, in one commit: the tasks write the new files (as :func:`append`), and the
    commit removes the existing files ``removes`` says it replaces whole (given each file with its
    bounds on ``stats``). A replace whose rows are not file-aligned — a file holding rows it
    replaces beside rows it keeps — cannot be done this way: None, and nothing written, as when
    these writes must not write the table (:func:`opened`); the caller writes it with Spark."""
    found = opened(path)
    if found is None:
        return None
    table, goal = found
    removed = removed_files(existing(table, goal.root, stats), removes)
    if removed is None:
        log.debug("a file of %s holds rows the replace keeps: Spark writes it", path)
        return None
    write = functools.partial(write_files, target=goal, rows_of=rows_of)
    return commit(table, goal, frame.mapInArrow(write, ADD_DDL).toArrow(), metadata, removed)
