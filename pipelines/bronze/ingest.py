"""Bronze ingestion: one source of a job into ``bronze.offsets_records``, idempotent by construction.

Every source produces rows keyed by the log position (cluster, partition, offset) and hands them
to the sink (pipelines/bronze/sink.py: insert-only MERGE, conflicts, read issues), so a run
killed at any point and re-run gives the same table: the data and what it implies about
progress land in the same Delta commit. The Kafka source's read positions (its end offsets,
which can lie past the last returned record) are stored in that very commit's metadata
(pipelines/bronze/kafka_source.py). The segments source reads only what its ingestion log
(pipelines/bronze/file_log.py) has not seen, and writes the log after the data commit.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import asdict
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipelines.bronze import direct, file_log
from pipelines.bronze.dump_source import ingest_dump
from pipelines.bronze.fs import RemoteSegment, crc_at, list_segments
from pipelines.bronze.kafka_source import ingest_kafka
from pipelines.bronze.segments_source import (
    FILE_CHANGED,
    ByteRange,
    arrow_schema,
    cluster_for,
    read_range,
    register,
)
from pipelines.bronze.sink import IngestResult, append_arrow, merge_issues, merge_records, record_issues
from pipelines.errors import InputError, SourceNotFound
from pipelines.runtime import faults
from pipelines.runtime.config import DumpSource, KafkaSource, SegmentsSource

if TYPE_CHECKING:
    from pipelines.runtime.tables import Tables

log = logging.getLogger(__name__)
# a read of at most this many bytes runs on the driver and is appended by delta-rs: Spark's
# Python workers, its persisted read and its write cost 8-12 s of the 200k-record demo's bronze
# (22 MiB), the driver 2-3 s (docs/performance.md); larger reads are spread over Spark's tasks
LOCAL_READ_BYTES = 64 << 20


# -- sources ------------------------------------------------------------------------------------------
def ingest_segments(
    spark: SparkSession, tables: Tables, name: str, source: SegmentsSource, run_id: str, base_dir: str
) -> IngestResult:
    paths = [p if "://" in p or p.startswith("/") else f"{base_dir}/{p}" for p in source.paths]
    segments = list_segments(paths)  # fails fast, on the driver, with one clear line for a missing path
    if not segments:
        raise SourceNotFound(f"source {name}: no __consumer_offsets segment files under {', '.join(paths)}")
    listed = [(seg, _cluster_of(seg, source)) for seg in segments]
    result = IngestResult(name, source.cluster, "segments")
    with result.steps("plan files"):
        log_path = tables.path("bronze", "ingested_files")
        logged = file_log.load(spark, log_path, name)  # before ensure: a table not there yet is not read
        tables.ensure("bronze", "ingested_files")
        plans = file_log.plan_files(listed, logged, crc_at)
        ranges = file_log.ranges(plans, source.split_bytes)
    result.files = file_log.counts(plans)
    result.bytes_read = sum(r.end - r.start for r in ranges)
    faults.point("bronze.listed_before_read")  # where a test changes files under the reader
    args = (spark, tables, name, source, run_id, ranges, result)
    if not ranges:
        progress, changed = [], set()
    elif result.bytes_read <= LOCAL_READ_BYTES:
        progress, changed = _read_local(*args)
    else:  # a large read: its tasks write bronze's files where that is what the sink would write
        progress, changed = direct.read_and_write(*args) or _read(*args)
    _note_changes(result, plans, progress, changed)
    after = file_log.logged_after(plans, progress, name, run_id, changed)
    if file_log.changed(logged, after):  # after the data commit: a run killed before it reads again
        with result.steps("file log"):
            file_log.save(spark, log_path, name, after, tables.spec("bronze", "ingested_files"))
    return result


def _cluster_of(seg: RemoteSegment, source: SegmentsSource) -> str:
    if seg.partition is None:
        raise InputError(
            f"{seg.uri}: cannot tell its __consumer_offsets partition "
            "(segments must sit in __consumer_offsets-<N> directories)"
        )
    return cluster_for(seg.uri, source.cluster, source.cluster_from_path)


def _read(
    spark: SparkSession,
    tables: Tables,
    name: str,
    source: SegmentsSource,
    run_id: str,
    ranges: list[ByteRange],
    result: IngestResult,
) -> tuple[list[dict[str, Any]], set[str]]:
    """Read the byte ranges into bronze (records, read issues); returns the ranges' progress rows
    and the files that changed after they were listed."""
    # registered here, where Spark reads: it ships the class to the JVM (0.7 s of every run that
    # reads on the driver); bronze owns its data source, the runtime session knows no layer
    register(spark)
    raw = (
        spark.read.format("kafka_segments")
        .option("ranges", json.dumps([asdict(r) for r in ranges]))
        .option("cluster", source.cluster)
        .option("split_bytes", str(source.split_bytes))
        .option("cluster_from_path", source.cluster_from_path or "")
        .load()
    )
    raw = raw.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        with result.steps("read"):  # the first action materialises the persisted read
            found = raw.where(f"row_kind = 'progress' OR issue_kind = '{FILE_CHANGED}'")
            found = found.select("row_kind", *direct.PROGRESS_ROW).collect()
        progress, changed = direct.found([r.asDict() for r in found])
        coverage = file_log.coverage(progress)
        kept = raw.where(~F.col("source_uri").isin(sorted(changed))) if changed else raw
        records = (
            kept.where("row_kind = 'record'")
            .withColumn("resolved_by_broker", F.lit(False))
            .withColumn("source_kind", F.lit("segments"))
            .withColumn("run_id", F.lit(run_id))
            .withColumn("ingested_at", F.current_timestamp())
        )
        issues = raw.where(
            F.col("row_kind").eqNullSafe("issue")
            & (F.col("issue_kind").eqNullSafe(FILE_CHANGED) | ~F.col("source_uri").isin(sorted(changed)))
        ).select(
            *[F.col(column).alias(alias) for column, alias in direct.ISSUE_COLUMNS.items()],
            F.lit(run_id).alias("run_id"),
            F.current_timestamp().alias("detected_at"),
        )
        result.issues = [r.asDict() for r in issues.drop("detected_at").collect()]
        if result.issues:
            merge_issues(spark, tables, issues)
        result.rows_read = coverage.records
        if coverage.records:
            meta = {"run_id": run_id, "source": name, "kind": "segments"}
            with result.steps("write"):
                result.rows_inserted, result.conflicts = merge_records(
                    spark, tables, records, run_id, meta, coverage=coverage
                )
    finally:
        raw.unpersist()
    return progress, changed


def _read_local(
    spark: SparkSession,
    tables: Tables,
    name: str,
    source: SegmentsSource,
    run_id: str,
    ranges: list[ByteRange],
    result: IngestResult,
) -> tuple[list[dict[str, Any]], set[str]]:
    """:func:`_read` on the driver for a small read: the same rows (``read_range``, as the Spark
    tasks read them), appended by delta-rs when bronze holds nothing where they lie (the sink's
    Spark MERGE otherwise)."""
    with result.steps("read"):
        schema = arrow_schema()
        batches = [
            b for r in ranges for b in read_range(r, cluster_for(r.uri, source.cluster, source.cluster_from_path))
        ]
        raw = pa.Table.from_batches(batches, schema)
        progress, changed, issues = direct.sides(raw, run_id)
        coverage = file_log.coverage(progress)
        from_changed = pc.is_in(raw["source_uri"], pa.array(sorted(changed), pa.string()))
        records = raw.filter(pc.and_(pc.equal(raw["row_kind"], "record"), pc.invert(from_changed)))
        records = direct.run_columns(records, run_id, datetime.now(timezone.utc))
    record_issues(spark, tables, result, issues)
    result.rows_read = coverage.records
    if coverage.records:
        meta = {"run_id": run_id, "source": name, "kind": "segments"}
        with result.steps("write"):
            result.rows_inserted, result.conflicts = append_arrow(spark, tables, records, run_id, meta, coverage)
    return progress, changed


def _note_changes(
    result: IngestResult, plans: list[file_log.FilePlan], progress: list[dict[str, Any]], changed: set[str]
) -> None:
    """Say in the run's notes (and log) which files changed under the reader, and which grew."""
    if changed:
        reasons = Counter(i["reason"] for i in result.issues if i["kind"] == FILE_CHANGED)
        what = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
        note = f"{len(changed)} file(s) changed after they were listed ({what}): not kept, read again next run"
        result.notes.append(note)
        log.warning("bronze: %s", note)
    listed = {p.segment.uri: p.segment.size for p in plans}
    grew = {r["source_uri"] for r in progress if (r["size_seen"] or 0) > listed.get(r["source_uri"], 0)}
    if grew:
        note = f"{len(grew)} file(s) grew while read: read up to their listed size, the rest next run"
        result.notes.append(note)
        log.info("bronze: %s", note)


def ingest_source(
    spark: SparkSession, tables: Tables, name: str, source: Any, run_id: str, base_dir: str
) -> IngestResult:
    """Ingest one source of a job (segment files, a live cluster or dumps) into bronze."""
    if isinstance(source, SegmentsSource):
        return ingest_segments(spark, tables, name, source, run_id, base_dir)
    if isinstance(source, KafkaSource):
        return ingest_kafka(spark, tables, name, source, run_id)
    if isinstance(source, DumpSource):
        return ingest_dump(spark, tables, name, source, run_id, base_dir)
    raise TypeError(f"unknown source {source!r}")
