"""Bronze ingestion: idempotent by construction.

Every source produces rows keyed by the log position (cluster, partition, offset). They enter
``bronze.offsets_records`` through an insert-only MERGE on that key, so re-ingesting
overlapping input never duplicates a record, and a run killed at any point and re-run gives
the same table: the data and what it implies about progress (the per-partition maximum
offset) land in the same Delta commit. The Kafka source's read positions (its end offsets,
which can lie past the last returned record) are stored in that very commit's metadata
(pipelines/bronze/kafka_source.py).

The same position delivered again with different bytes is a conflict: the first delivery is
kept, the conflict recorded in ``bronze.conflicts`` and counted in the run summary. Nothing in
this module updates or deletes bronze rows.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipelines.errors import SourceNotFound
from pipelines.runtime import faults, lake
from pipelines.runtime.config import DumpSource, KafkaSource, SegmentsSource

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.runtime.tables import Tables

KEY = ("cluster", "partition", "offset")


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
) -> tuple[int, int]:
    """Insert-only MERGE of bronze rows; returns (rows inserted, conflicts recorded).

    ``always_commit``: when the MERGE has nothing to insert (no new table version), write an empty
    commit carrying ``commit_metadata`` anyway: the Kafka source's positions must advance past
    ranges that held only aborted commits or markers."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    target_name = tables.ensure("bronze", "offsets_records")
    conflicts_name = tables.ensure("bronze", "conflicts")
    path = tables.path("bronze", "offsets_records")
    rows = rows.select(*bronze_columns(tables)).dropDuplicates(list(KEY))
    rows = rows.persist()
    try:
        existing = spark.table(target_name).select(*KEY, "content_hash", "source_uri")
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
            (
                DeltaTable.forName(spark, conflicts_name)
                .alias("t")
                .merge(conflicts.alias("s"), " AND ".join(f"t.{k} = s.{k}" for k in (*KEY, "rejected_hash")))
                .whenNotMatchedInsertAll()
                .execute()
            )
        before = lake.version(spark, path)
        faults.point("bronze.before_write")
        if os.environ.get("OFFSETS_FAULT") == "bronze.after_write_before_commit":
            # what a writer killed mid-MERGE leaves behind: data files that no commit references
            rows.write.mode("append").partitionBy("cluster", "partition").parquet(path)
            faults.point("bronze.after_write_before_commit")
        with lake.commit_metadata(spark, commit_metadata):
            inserted = lake.insert_new(spark, path, rows, KEY)
        if always_commit and lake.version(spark, path) == before:
            # Delta skips commits that change nothing unless told otherwise; this one carries the
            # positions (a range of aborted commits and markers still moves the source forward)
            with lake.commit_metadata(spark, commit_metadata):
                spark.conf.set(SKIP_EMPTY, "false")
                try:
                    spark.createDataFrame([], rows.schema).write.format("delta").mode("append").save(path)
                finally:
                    spark.conf.unset(SKIP_EMPTY)
        faults.point("bronze.after_commit")
    finally:
        rows.unpersist()
    return inserted, n_conflicts


SKIP_EMPTY = "spark.databricks.delta.skipRecordingEmptyCommits"


def merge_issues(spark: SparkSession, tables: Tables, issues: DataFrame) -> None:
    from delta.tables import DeltaTable

    name = tables.ensure("bronze", "read_issues")
    (
        DeltaTable.forName(spark, name)
        .alias("t")
        .merge(issues.alias("s"), "t.cluster = s.cluster AND t.source_uri = s.source_uri AND t.position = s.position")
        .whenNotMatchedInsertAll()
        .execute()
    )


# -- sources ------------------------------------------------------------------------------------------
def ingest_segments(
    spark: SparkSession, tables: Tables, name: str, source: SegmentsSource, run_id: str, base_dir: str
) -> IngestResult:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from pipelines.bronze.fs import list_segments
    from pipelines.bronze.segments_source import cluster_for, register

    register(spark)  # bronze owns its data source; the runtime session knows no layer

    paths = [p if "://" in p or p.startswith("/") else f"{base_dir}/{p}" for p in source.paths]
    segments = list_segments(paths)  # fails fast, on the driver, with one clear line for a missing path
    if not segments:
        raise SourceNotFound(f"source {name}: no __consumer_offsets segment files under {', '.join(paths)}")
    for seg in segments:
        cluster_for(seg.uri, source.cluster, source.cluster_from_path)
    raw = (
        spark.read.format("kafka_segments")
        .option("paths", json.dumps(paths))
        .option("cluster", source.cluster)
        .option("split_bytes", str(source.split_bytes))
        .option("cluster_from_path", source.cluster_from_path or "")
        .load()
    )
    raw = raw.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        result = IngestResult(name, source.cluster, "segments")
        records = (
            raw.where("row_kind = 'record'")
            .withColumn("resolved_by_broker", F.lit(False))
            .withColumn("source_kind", F.lit("segments"))
            .withColumn("run_id", F.lit(run_id))
            .withColumn("ingested_at", F.current_timestamp())
        )
        issues = raw.where("row_kind = 'issue'").select(
            "cluster",
            "partition",
            "source_uri",
            F.col("batch_position").alias("position"),
            F.col("issue_length").alias("length"),
            F.col("issue_kind").alias("kind"),
            F.col("issue_reason").alias("reason"),
            F.col("issue_detail").alias("detail"),
            F.col("last_segment"),
            F.lit(run_id).alias("run_id"),
            F.current_timestamp().alias("detected_at"),
        )
        result.issues = [r.asDict() for r in issues.drop("detected_at").collect()]
        if result.issues:
            merge_issues(spark, tables, issues)
        result.rows_read = records.count()
        result.rows_inserted, result.conflicts = merge_records(
            spark, tables, records, run_id, {"run_id": run_id, "source": name, "kind": "segments"}
        )
    finally:
        raw.unpersist()
    return result


def ingest(spark: SparkSession, tables: Tables, name: str, source: Any, run_id: str, base_dir: str) -> IngestResult:
    if isinstance(source, SegmentsSource):
        return ingest_segments(spark, tables, name, source, run_id, base_dir)
    if isinstance(source, KafkaSource):
        from pipelines.bronze.kafka_source import ingest_kafka

        return ingest_kafka(spark, tables, name, source, run_id)
    if isinstance(source, DumpSource):
        from pipelines.bronze.dump_source import ingest_dump

        return ingest_dump(spark, tables, name, source, run_id, base_dir)
    raise TypeError(f"unknown source {source!r}")
