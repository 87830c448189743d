"""Bronze from record dumps: JSON lines with base64 key/value, or Parquet with binary columns.

JSON lines, one record per line (docs/sources.md)::

    {"partition": 13, "offset": 4711, "timestamp": 1700000000000, "key": "AAEACXRlc3Rncm91cA==",
     "value": "AAMAAAAAAAAAKg==", "headers": [{"key": "h", "value": null}], "control": false}

``key``/``value`` are standard base64 (``null`` = null); ``timestamp`` is epoch milliseconds;
``headers``, ``timestamp_type``, ``control``, ``producer_id``, ``transactional`` are optional.
Parquet uses the same column names with ``key``/``value`` as binary and ``timestamp`` as a
timestamp or epoch milliseconds. kcat's ``-J`` output is not accepted: it prints binary keys
and values as text, which loses bytes.

Lines that are not valid JSON or lack partition/offset are not dropped: they go to
``bronze.read_issues`` with the raw line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.bronze.sink import IngestResult, content_hash_udf, merge_issues, merge_records
from pipelines.runtime.config import DumpSource

if TYPE_CHECKING:
    from pipelines.runtime.tables import Tables

JSON_SCHEMA = (
    "partition int, offset bigint, timestamp bigint, timestamp_type int, key string, value string, "
    "headers array<struct<key:string,value:string>>, control boolean, producer_id bigint, transactional boolean, "
    "topic string, _corrupt_record string"
)


def _read_jsonl(spark: SparkSession, paths: list[str]) -> tuple[DataFrame, DataFrame]:
    raw = (
        spark.read.schema(JSON_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", "_corrupt_record")
        .json(paths)
        .withColumn("source_uri", F.input_file_name())
    )
    bad = raw.where("_corrupt_record IS NOT NULL OR partition IS NULL OR offset IS NULL")
    good = raw.where("_corrupt_record IS NULL AND partition IS NOT NULL AND offset IS NOT NULL").select(
        "partition",
        "offset",
        F.timestamp_millis("timestamp").alias("timestamp"),
        F.coalesce("timestamp_type", F.lit(0)).alias("timestamp_type"),
        F.unbase64("key").alias("key"),
        F.unbase64("value").alias("value"),
        F.coalesce(
            F.transform("headers", lambda h: F.struct(h["key"].alias("key"), F.unbase64(h["value"]).alias("value"))),
            F.array().cast("array<struct<key:string,value:binary>>"),
        ).alias("headers"),
        F.coalesce("control", F.lit(False)).alias("control"),
        "producer_id",
        "transactional",
        "source_uri",
    )
    return good, bad


def _read_parquet(spark: SparkSession, paths: list[str]) -> tuple[DataFrame, DataFrame]:
    raw = spark.read.parquet(*paths).withColumn("source_uri", F.input_file_name())
    cols = set(raw.columns)
    ts = F.col("timestamp")
    if dict(raw.dtypes).get("timestamp") in ("bigint", "int"):
        ts = F.timestamp_millis("timestamp")
    good = raw.select(
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("bigint").alias("offset"),
        ts.alias("timestamp"),
        (F.col("timestamp_type") if "timestamp_type" in cols else F.lit(0)).cast("int").alias("timestamp_type"),
        F.col("key").cast("binary").alias("key"),
        F.col("value").cast("binary").alias("value"),
        (F.col("headers") if "headers" in cols else F.array().cast("array<struct<key:string,value:binary>>")).alias(
            "headers"
        ),
        (F.col("control") if "control" in cols else F.lit(False)).alias("control"),
        (F.col("producer_id") if "producer_id" in cols else F.lit(None).cast("bigint")).alias("producer_id"),
        (F.col("transactional") if "transactional" in cols else F.lit(None).cast("boolean")).alias("transactional"),
        "source_uri",
    )
    bad = good.where("partition IS NULL OR offset IS NULL").withColumn("_corrupt_record", F.lit(None).cast("string"))
    return good.where("partition IS NOT NULL AND offset IS NOT NULL"), bad


def ingest_dump(
    spark: SparkSession, tables: Tables, name: str, source: DumpSource, run_id: str, base_dir: str
) -> IngestResult:
    paths = [p if "://" in p or p.startswith("/") else f"{base_dir}/{p}" for p in source.paths]
    good, bad = (_read_jsonl if source.format == "jsonl" else _read_parquet)(spark, paths)
    hashed = content_hash_udf()
    rows = good.select(
        F.lit(source.cluster).alias("cluster"),
        "partition",
        "offset",
        F.lit("__consumer_offsets").alias("topic"),
        "timestamp",
        "timestamp_type",
        "key",
        "value",
        "headers",
        F.lit(None).cast("int").alias("magic"),
        F.lit(None).cast("string").alias("codec"),
        "producer_id",
        F.lit(None).cast("int").alias("producer_epoch"),
        F.lit(None).cast("int").alias("base_sequence"),
        "transactional",
        "control",
        F.lit(None).cast("int").alias("partition_leader_epoch"),
        F.lit(None).cast("bigint").alias("base_offset"),
        F.lit(None).cast("bigint").alias("batch_position"),
        F.lit(False).alias("resolved_by_broker"),
        F.lit("dump").alias("source_kind"),
        "source_uri",
        hashed("key", "value").alias("content_hash"),
        F.lit(run_id).alias("run_id"),
        F.current_timestamp().alias("ingested_at"),
    )
    result = IngestResult(name, source.cluster, "dump")
    issues = bad.select(
        F.lit(source.cluster).alias("cluster"),
        F.col("partition"),
        F.col("source_uri"),
        F.xxhash64("_corrupt_record", "partition", "offset").alias("position"),  # stable across re-runs
        F.coalesce(F.length("_corrupt_record"), F.lit(0)).cast("bigint").alias("length"),
        F.lit("corrupt_row").alias("kind"),
        F.lit("bad_dump_row").alias("reason"),
        F.coalesce(F.col("_corrupt_record"), F.lit("missing partition or offset")).alias("detail"),
        F.lit(None).cast("boolean").alias("last_segment"),
        F.lit(run_id).alias("run_id"),
        F.current_timestamp().alias("detected_at"),
    )
    issue_rows = issues.collect()
    if issue_rows:
        result.issues = [r.asDict() for r in issue_rows]
        merge_issues(spark, tables, spark.createDataFrame(issue_rows, issues.schema))
    result.rows_read = rows.count()
    result.rows_inserted, result.conflicts = merge_records(
        spark, tables, rows, run_id, {"run_id": run_id, "source": name, "kind": "dump"}
    )
    return result
