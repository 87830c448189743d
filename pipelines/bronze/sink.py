"""The bronze sink: the one way rows enter ``bronze.offsets_records``, whatever the source.

An insert-only MERGE on the log position (cluster, partition, offset): re-ingesting overlapping
input never duplicates a record, and a run killed at any point and re-run gives the same table.
The same position delivered again with different bytes is a conflict: the first delivery is
kept, the conflict recorded in ``bronze.conflicts``. Read problems land in ``bronze.read_issues``.
Nothing here updates or deletes bronze rows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from pipelines.bronze.segments_source import content_hash
from pipelines.runtime import faults, lake

if TYPE_CHECKING:
    from pipelines.runtime.tables import Tables

__all__ = ["ISSUE_KEY", "KEY", "IngestResult", "bronze_columns", "content_hash_udf", "merge_issues", "merge_records"]

KEY = ("cluster", "partition", "offset")  # the log position: one bronze row per position
ISSUE_KEY = ("cluster", "source_uri", "position")  # a read problem is reported once per byte position


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
    target_name = tables.ensure("bronze", "offsets_records")
    tables.ensure("bronze", "conflicts")
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
            lake.insert_new(spark, tables.path("bronze", "conflicts"), conflicts, (*KEY, "rejected_hash"))
        before = lake.version(spark, path)
        faults.point("bronze.before_write")
        if os.environ.get("OFFSETS_FAULT") == "bronze.after_write_before_commit":
            # what a writer killed mid-MERGE leaves behind: data files that no commit references
            rows.write.mode("append").partitionBy("cluster", "partition").parquet(path)
            faults.point("bronze.after_write_before_commit")
        with lake.commit_metadata(spark, commit_metadata):
            inserted = lake.insert_new(spark, path, rows, KEY)
        if always_commit and lake.version(spark, path) == before:
            # the commit carries the positions: a range of aborted commits and markers still
            # moves the source forward
            lake.commit_empty(spark, path, rows.schema, commit_metadata)
        faults.point("bronze.after_commit")
    finally:
        rows.unpersist()
    return inserted, n_conflicts


def merge_issues(spark: SparkSession, tables: Tables, issues: DataFrame) -> None:
    """Record read problems in ``bronze.read_issues``, each once however often it is read again."""
    tables.ensure("bronze", "read_issues")
    lake.insert_new(spark, tables.path("bronze", "read_issues"), issues, ISSUE_KEY)


def content_hash_udf() -> Any:
    """A Spark UDF over (key, value) bytes: the content hash conflicts are detected by."""
    return F.udf(
        lambda k, v: content_hash(None if k is None else bytes(k), None if v is None else bytes(v)), StringType()
    )
