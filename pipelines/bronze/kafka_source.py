"""The live source: ``__consumer_offsets`` read through Spark's Kafka source (batch, read_committed).

Each run reads every partition from its stored position to the partition's **last stable offset**
(the end offset a ``read_committed`` consumer sees), and stores those end offsets in the metadata
of the bronze commit that holds the rows, so data and progress move together. The end offset can
lie past the last returned record (aborted commits, transaction markers and compacted-away
records never arrive), which is why the position is the source's end offset and not
``max(offset) + 1``.

Kafka's consumer hides control records, producer ids and batch attributes: those bronze columns
are null for this source and ``resolved_by_broker`` is true — the broker already applied the
transactions (aborted commits filtered), and committed transactional commits keep their own log
offsets, so later layers still order them by log position.

An open (hanging) transaction holds the last stable offset back: nothing after its first record
is readable with ``read_committed`` until it ends. Every run records each partition's high
watermark next to its last stable offset; ``status`` shows partitions where they differ.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.bronze.kafka_client import (
    SPARK_GROUP_PREFIX,
    TIMEOUT_S,
    KafkaUnavailable,
    client_options,
    failure,
    java_properties,
    refusal,
    require_listener,
)
from pipelines.bronze.sink import IngestResult, content_hash_udf, merge_records
from pipelines.runtime import lake
from pipelines.runtime.config import ConfigError, KafkaSource

if TYPE_CHECKING:
    from pipelines.runtime.tables import Tables

log = logging.getLogger("offsets_lakehouse")

__all__ = ["KafkaUnavailable", "client_options", "ingest_kafka", "partition_ends"]


def _consumer(spark: SparkSession, source: KafkaSource, isolation: str) -> Any:
    """A JVM KafkaConsumer (the kafka-clients jar Spark's Kafka source ships), for metadata only."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    deser = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
    props = java_properties(
        spark,
        source,
        **{
            "key.deserializer": deser,
            "value.deserializer": deser,
            "isolation.level": isolation,
            "default.api.timeout.ms": str(TIMEOUT_S * 1000),
            "request.timeout.ms": str(TIMEOUT_S * 1000),
            "client.id": "offsets-lakehouse-positions",
        },
    )
    return jvm.org.apache.kafka.clients.consumer.KafkaConsumer(props)


def partition_ends(spark: SparkSession, source: KafkaSource) -> dict[int, dict[str, int]]:
    """{partition: {earliest, last_stable, high_watermark}} of the offsets topic, now."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    timeout = jvm.java.time.Duration.ofSeconds(TIMEOUT_S)
    where = f"Kafka at {source.bootstrap_servers}"
    out: dict[int, dict[str, int]] = {}
    require_listener(source)
    try:
        committed = _consumer(spark, source, "read_committed")
        uncommitted = _consumer(spark, source, "read_uncommitted")
        try:
            infos = committed.partitionsFor(source.topic, timeout)
            if infos is None or infos.size() == 0:
                raise KafkaUnavailable(
                    f"{where}: topic {source.topic} not found (does the principal have DESCRIBE on it?)"
                )
            tps = jvm.java.util.ArrayList()
            for info in infos:
                tps.add(jvm.org.apache.kafka.common.TopicPartition(source.topic, info.partition()))
            first = committed.beginningOffsets(tps, timeout)
            # high watermark first: a record appended between the two requests then makes the
            # LSO larger, not the high watermark, so a busy partition is never reported held back
            hw = uncommitted.endOffsets(tps, timeout)
            lso = committed.endOffsets(tps, timeout)
            for tp in tps:
                high = int(hw.get(tp))
                out[tp.partition()] = {
                    "earliest": int(first.get(tp)),
                    "last_stable": min(int(lso.get(tp)), high),
                    "high_watermark": high,
                }
        finally:
            committed.close()
            uncommitted.close()
    except Py4JJavaError as exc:
        raise failure(source, exc) from exc
    return out


def stored_positions(spark: SparkSession, tables: Tables, cluster: str, topic: str) -> dict[int, int] | None:
    """The end offsets of the last run of this cluster's Kafka source, from the bronze commit that
    holds its rows (Delta history); None when no run is recorded there."""
    for _, _, meta in lake.tagged_commits(spark, tables.path("bronze", "offsets_records")):
        if meta.get("kind") == "kafka" and meta.get("cluster") == cluster and meta.get("topic", topic) == topic:
            return {int(p): int(o) for p, o in meta["positions"].items()}
    return None


def last_runs(spark: SparkSession, tables: Tables) -> list[dict[str, Any]]:
    """Per (cluster, partition): the position of the last Kafka run and the high watermark it saw;
    ``held_back`` > 0 means an open transaction kept ingestion at the last stable offset."""
    seen: set[str] = set()
    out = []
    for _, at, meta in lake.tagged_commits(spark, tables.path("bronze", "offsets_records")):
        if meta.get("kind") != "kafka" or meta.get("cluster") in seen:
            continue
        seen.add(meta["cluster"])
        hw = meta.get("high_watermarks", {})
        for p, pos in sorted(meta["positions"].items(), key=lambda kv: int(kv[0])):
            high = int(hw.get(p, pos))
            out.append(
                {
                    "cluster": meta["cluster"],
                    "partition": int(p),
                    "position": int(pos),
                    "high_watermark": high,
                    "held_back": max(0, high - int(pos)),
                    "run_id": meta.get("run_id"),
                    "at": at,
                }
            )
    return out


def positions_from_data(spark: SparkSession, tables: Tables, cluster: str) -> dict[int, int]:
    """Fallback when Delta history no longer has the commit (log retention): max(offset) + 1 of
    the rows this source wrote. Safe because the MERGE never duplicates a position."""
    tables.ensure("bronze", "offsets_records")
    bronze = lake.read(spark, tables.path("bronze", "offsets_records"))
    assert bronze is not None  # ensured above
    rows = (
        bronze.where((F.col("cluster") == cluster) & (F.col("source_kind") == "kafka"))
        .groupBy("partition")
        .agg(F.max("offset").alias("last"))
        .collect()
    )
    return {int(r["partition"]): int(r["last"]) + 1 for r in rows}


def read_range(spark: SparkSession, source: KafkaSource, start: dict[int, int], end: dict[int, int]) -> DataFrame:
    """Spark's Kafka source, batch mode, exactly [start, end) per partition, read_committed."""
    topic = source.topic
    reader = (
        spark.read.format("kafka")
        .option("assign", json.dumps({topic: sorted(end)}))
        .option("startingOffsets", json.dumps({topic: {str(p): start[p] for p in sorted(end)}}))
        .option("endingOffsets", json.dumps({topic: {str(p): end[p] for p in sorted(end)}}))
        .option("kafka.isolation.level", "read_committed")
        .option("includeHeaders", "true")
        # compaction and retention remove records between runs; gaps are normal for this topic
        .option("failOnDataLoss", "false")
        # the group Spark's source looks up offsets for: a prefix an ACL can name (docs/security.md)
        .option("groupIdPrefix", SPARK_GROUP_PREFIX)
    )
    if source.min_partitions:
        reader = reader.option("minPartitions", str(source.min_partitions))
    for k, v in client_options(source).items():
        reader = reader.option(f"kafka.{k}", v)
    # Spark's default (AdminClient-based) offset reader does not see internal topics and fails with
    # "Partitions specified for Kafka start offsets don't match what are assigned"; the
    # consumer-based reader assigns __consumer_offsets partitions like any other.
    spark.conf.set("spark.sql.streaming.kafka.useDeprecatedOffsetFetching", "true")
    return reader.load()


def ingest_kafka(spark: SparkSession, tables: Tables, name: str, source: KafkaSource, run_id: str) -> IngestResult:
    result = IngestResult(name, source.cluster, "kafka")
    ends = partition_ends(spark, source)
    stored = stored_positions(spark, tables, source.cluster, source.topic)
    if stored is None:
        stored = positions_from_data(spark, tables, source.cluster)
        if stored:
            result.notes.append("positions taken from bronze rows (no Kafka run found in the Delta history)")
    start: dict[int, int] = {}
    for p, e in ends.items():
        s = stored.get(p, e["earliest"])
        if s > e["last_stable"] and s > e["high_watermark"]:
            raise ConfigError(
                f"source {name}: partition {p} of {source.topic} ends at {e['high_watermark']}, but bronze already "
                f"read up to {s}: is {source.bootstrap_servers} still cluster {source.cluster!r}?"
            )
        # records compacted or deleted before we read them are gone; start at what exists
        start[p] = max(s, e["earliest"])
    end = {p: max(start[p], e["last_stable"]) for p, e in ends.items()}
    stalled = {p: e for p, e in ends.items() if e["last_stable"] < e["high_watermark"]}
    if stalled:
        result.notes.append(
            "open transactions hold back partitions "
            + ", ".join(
                f"{p} (stable {e['last_stable']} < high watermark {e['high_watermark']})"
                for p, e in sorted(stalled.items())
            )
        )
    hashed = content_hash_udf()
    raw = read_range(spark, source, start, end)
    rows = raw.select(
        F.lit(source.cluster).alias("cluster"),
        F.col("partition").cast("int"),
        F.col("offset").cast("bigint"),
        F.col("topic"),
        F.col("timestamp"),
        F.col("timestampType").cast("int").alias("timestamp_type"),
        F.col("key"),
        F.col("value"),
        F.col("headers"),
        F.lit(None).cast("int").alias("magic"),
        F.lit(None).cast("string").alias("codec"),
        F.lit(None).cast("bigint").alias("producer_id"),
        F.lit(None).cast("int").alias("producer_epoch"),
        F.lit(None).cast("int").alias("base_sequence"),
        F.lit(None).cast("boolean").alias("transactional"),
        F.lit(False).alias("control"),
        F.lit(None).cast("int").alias("partition_leader_epoch"),
        F.lit(None).cast("bigint").alias("base_offset"),
        F.lit(None).cast("bigint").alias("batch_position"),
        F.lit(True).alias("resolved_by_broker"),
        F.lit("kafka").alias("source_kind"),
        F.lit(f"kafka://{source.bootstrap_servers}/{source.topic}").alias("source_uri"),
        hashed("key", "value").alias("content_hash"),
        F.lit(run_id).alias("run_id"),
        F.current_timestamp().alias("ingested_at"),
    )
    try:
        result.rows_read = rows.count()
    except Py4JJavaError as exc:  # the executors' consumers were refused (an ACL, a certificate)
        denied = refusal(source, exc)
        if denied is None:
            raise
        raise denied from exc
    result.positions = {str(p): o for p, o in sorted(end.items())}
    metadata = {
        "run_id": run_id,
        "source": name,
        "kind": "kafka",
        "cluster": source.cluster,
        "topic": source.topic,
        "positions": result.positions,
        "high_watermarks": {str(p): e["high_watermark"] for p, e in sorted(ends.items())},
    }
    result.rows_inserted, result.conflicts = merge_records(spark, tables, rows, run_id, metadata, always_commit=True)
    return result
