"""The bronze sink: the one way rows enter ``bronze.offsets_records``, whatever the source.

An insert-only MERGE on the log position (cluster, partition, offset): re-ingesting overlapping
input never duplicates a record, and a run killed at any point and re-run gives the same table.
The same position delivered again with different bytes is a conflict: the first delivery is
kept, the conflict recorded in ``bronze.conflicts``. Read problems land in ``bronze.read_issues``.
Nothing here updates or deletes bronze rows.

A source that knows where its rows lie (the segments source: per (cluster, partition) the offset
spans it read, :class:`Coverage`) gets writes proportional to what it read: the Delta log's file
statistics tell whether bronze may hold anything in those spans; when it cannot, the rows are
appended (no join, no MERGE), otherwise the conflict check and the MERGE see only those spans.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from pipelines.bronze.segments_source import content_hash
from pipelines.runtime import faults, lake
from pipelines.runtime.files import filesystem
from pipelines.runtime.steps import Steps

if TYPE_CHECKING:
    from pipelines.runtime.tables import Tables

__all__ = [
    "ISSUE_KEY",
    "KEY",
    "Coverage",
    "IngestResult",
    "append_arrow",
    "bronze_columns",
    "content_hash_udf",
    "merge_issues",
    "merge_records",
    "spans_meeting_files",
]

KEY = ("cluster", "partition", "offset")  # the log position: one bronze row per position
ISSUE_KEY = ("cluster", "source_uri", "position")  # a read problem is reported once per byte position
Span = tuple[int, int]  # offsets [first, last], both included


@dataclass(frozen=True)
class Coverage:
    """Where a read's records lie: per (cluster, partition) the offset spans holding all of them,
    whether a log position may appear twice among them, and how many there are."""

    spans: dict[tuple[str, int], list[Span]]
    unique: bool
    records: int


@dataclass
class IngestResult:
    source: str
    cluster: str
    kind: str
    rows_read: int = 0
    rows_inserted: int = 0
    conflicts: int = 0
    issues: list[dict[str, Any]] = field(default_factory=list)
    positions: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    files: dict[str, int] = field(default_factory=dict)  # segments: files per plan (new, unchanged, grown, replaced)
    bytes_read: int = 0  # segments: bytes of the byte ranges read
    steps: Steps = field(default_factory=lambda: Steps("bronze"))  # wall time per step

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "cluster": self.cluster,
            "kind": self.kind,
            "rows_read": self.rows_read,
            "rows_inserted": self.rows_inserted,
            "conflicts": self.conflicts,
            "issues": self.issues,
            "positions": self.positions,
            "notes": self.notes,
            "files": self.files,
            "bytes_read": self.bytes_read,
            "steps": self.steps,
        }


def bronze_columns(tables: Tables) -> list[str]:
    return [c.name for c in tables.spec("bronze", "offsets_records").columns]


def merge_records(
    spark: SparkSession,
    tables: Tables,
    rows: DataFrame,
    run_id: str,
    commit_metadata: dict[str, Any] | None = None,
    always_commit: bool = False,
    coverage: Coverage | None = None,
) -> tuple[int, int]:
    """Insert-only MERGE of bronze rows; returns (rows inserted, conflicts recorded).

    ``always_commit``: when the MERGE has nothing to insert (no new table version), write an empty
    commit carrying ``commit_metadata`` anyway: the Kafka source's positions must advance past
    ranges that held only aborted commits or markers.

    ``coverage``: where every row lies (offset spans per (cluster, partition)) and whether a key
    may repeat among them. The table is then only looked at inside those spans, and when it has
    no row there the rows are appended."""
    tables.ensure("bronze", "offsets_records")
    tables.ensure("bronze", "conflicts")
    path = tables.path("bronze", "offsets_records")
    rows = rows.select(*bronze_columns(tables))
    if coverage is None or not coverage.unique:
        rows = rows.dropDuplicates(list(KEY))
    if coverage is not None and not may_hold(spark, path, coverage):
        return _append(spark, path, rows, commit_metadata), 0
    where = None if coverage is None else lake.offset_ranges_predicate(coverage.spans)
    rows = rows.persist()  # read twice: the conflict check and the MERGE
    try:
        n_conflicts = _record_conflicts(spark, tables, rows, run_id, where)
        before = lake.version(spark, path)
        _before_commit(rows, path)
        target_where = None if coverage is None else lake.offset_ranges_predicate(coverage.spans, prefix="t.")
        with lake.commit_metadata(spark, commit_metadata):
            inserted = lake.insert_new(spark, path, rows, KEY, target_where=target_where)
        if always_commit and lake.version(spark, path) == before:
            # the commit carries the positions: a range of aborted commits and markers still
            # moves the source forward
            lake.commit_empty(spark, path, rows.schema, commit_metadata)
        faults.point("bronze.after_commit")
    finally:
        rows.unpersist()
    return inserted, n_conflicts


def append_arrow(
    spark: SparkSession,
    tables: Tables,
    rows: pa.Table,
    run_id: str,
    commit_metadata: dict[str, Any],
    coverage: Coverage,
) -> tuple[int, int]:
    """:func:`merge_records` for rows the driver holds: appended in one commit by delta-rs when
    bronze holds nothing in their spans and no position repeats among them (a first read, an
    increment); otherwise, or when delta-rs cannot write the table, handed to Spark's MERGE."""
    tables.ensure("bronze", "offsets_records")
    tables.ensure("bronze", "conflicts")
    path = tables.path("bronze", "offsets_records")
    rows = rows.select(bronze_columns(tables))
    if coverage.unique and not may_hold(spark, path, coverage):
        _before_commit(rows, path)
        if lake.write_arrow(rows, path, metadata=commit_metadata):
            faults.point("bronze.after_commit")
            return rows.num_rows, 0
    frame = lake.spark_frame(spark, rows)
    return merge_records(spark, tables, frame, run_id, commit_metadata, coverage=coverage)


def _orphan_files(rows: pa.Table, path: str) -> None:
    """Driver-held rows as data files in the table's directory that no commit references."""
    filesys, root = filesystem(path)
    pq.write_table(rows, f"{root}/part-00000-{uuid.uuid4()}.c000.snappy.parquet", filesystem=filesys)


def may_hold(spark: SparkSession, path: str, coverage: Coverage) -> bool:
    """Whether bronze may hold a row in the coverage's spans: not when none of its data files of
    those partitions has an offset range meeting a span (the Delta log's file statistics, no data
    file read; a file without statistics may hold anything)."""
    listed = lake.data_files(spark, {"bronze": path}, ("cluster", "partition"), ("offset",))["bronze"]
    files = [(f.partition, f.minimum["offset"], f.maximum["offset"]) for f in listed]
    return bool(spans_meeting_files(coverage.spans, files))


def spans_meeting_files(
    spans: dict[tuple[str, int], list[Span]], files: list[tuple[tuple[str, ...], Any, Any]]
) -> set[tuple[str, int]]:
    """The (cluster, partition) pairs with a data file (partition values as strings, offset
    minimum and maximum; None: no statistics, so it may hold anything) meeting one of their spans."""
    out = set()
    for (cluster, part), low, high in files:
        pair = (cluster, int(part))
        for lo, hi in spans.get(pair, ()):
            if low is None or high is None or (low <= hi and lo <= high):
                out.add(pair)
                break
    return out


def _append(spark: SparkSession, path: str, rows: DataFrame, commit_metadata: dict[str, Any] | None) -> int:
    """Rows the table has nothing of in their spans: appended, one commit, no join."""
    _before_commit(rows, path)
    with lake.commit_metadata(spark, commit_metadata):
        inserted = lake.append_counted(spark, path, rows)
    faults.point("bronze.after_commit")
    return inserted


def _before_commit(rows: DataFrame | pa.Table, path: str) -> None:
    """The fault points before the commit (crash tests, pipelines/runtime/faults.py), for rows in
    Spark or on the driver."""
    faults.point("bronze.before_write")
    if os.environ.get("OFFSETS_FAULT") == "bronze.after_write_before_commit":
        # what a writer killed mid-write leaves behind: data files that no commit references
        if isinstance(rows, pa.Table):
            _orphan_files(rows, path)
        else:
            rows.write.mode("append").partitionBy("cluster", "partition").parquet(path)
        faults.point("bronze.after_write_before_commit")


def _record_conflicts(spark: SparkSession, tables: Tables, rows: DataFrame, run_id: str, where: str | None) -> int:
    """Record in ``bronze.conflicts`` the rows whose position bronze holds with other bytes (only
    the table's rows matching ``where`` are compared); returns how many."""
    existing = lake.read(spark, tables.path("bronze", "offsets_records"), where)
    assert existing is not None  # ensured by the caller
    existing = existing.select(*KEY, "content_hash", "source_uri")
    conflicts = (
        rows.alias("s")
        .join(existing.alias("t"), list(KEY))
        .where(F.col("s.content_hash") != F.col("t.content_hash"))
        .select(
            *[F.col(f"s.{k}") for k in KEY],
            F.col("t.content_hash").alias("kept_hash"),
            F.col("t.source_uri").alias("kept_source_uri"),
            F.col("s.content_hash").alias("rejected_hash"),
            F.col("s.source_uri").alias("rejected_source_uri"),
            F.lit(run_id).alias("run_id"),
            F.current_timestamp().alias("detected_at"),
        )
    )
    n_conflicts = conflicts.count()
    if n_conflicts:
        lake.insert_new(spark, tables.path("bronze", "conflicts"), conflicts, (*KEY, "rejected_hash"))
    return n_conflicts


def merge_issues(spark: SparkSession, tables: Tables, issues: DataFrame) -> None:
    """Record read problems in ``bronze.read_issues``, each once however often it is read again."""
    tables.ensure("bronze", "read_issues")
    lake.insert_new(spark, tables.path("bronze", "read_issues"), issues, ISSUE_KEY)


def record_issues(spark: SparkSession, tables: Tables, result: IngestResult, issues: pa.Table) -> None:
    """A read's issues (bronze.read_issues' columns but ``detected_at``), held on the driver: in
    the run's result, and recorded (:func:`merge_issues`)."""
    result.issues = issues.to_pylist()
    if result.issues:
        merge_issues(spark, tables, spark.createDataFrame(issues).withColumn("detected_at", F.current_timestamp()))


def content_hash_udf() -> Any:
    """A Spark UDF over (key, value) bytes: the content hash conflicts are detected by."""
    return F.udf(
        lambda k, v: content_hash(None if k is None else bytes(k), None if v is None else bytes(v)), StringType()
    )
