"""Gold group tables derived from silver group records: ``group_generations`` (classic groups) and
``consumer_group_members`` (KIP-848 groups: member metadata, target and current assignment).

Group records are never transactional and a later record of a key replaces the earlier one, so
these need no replay: each processed (cluster, offsets partition) is recomputed from all its silver
rows with window functions and replaces that partition's rows (``replaceWhere``). Group records are a small
share of the log, so recomputing a touched partition costs little and is trivially idempotent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipelines.runtime import lake
from pipelines.runtime.lake import partitions_predicate

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.runtime.tables import Tables

PART = ["cluster", "offsets_partition"]


def _silver(spark: SparkSession, tables: Tables, table: str, parts: str) -> DataFrame | None:
    return lake.read(spark, tables.path("silver", table), parts)  # partition columns: files pruned


def generations_frame(spark: SparkSession, tables: Tables, parts: str) -> DataFrame | None:
    """One row per classic group generation: from the first group record carrying it to the next
    record with another generation, or the group's tombstone; members and assignment from the
    generation's last record (the one written after SyncGroup carries the assignments)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    groups = _silver(spark, tables, "group_metadata", parts)
    if groups is None:
        return None
    records = groups.select(
        *PART,
        "group_id",
        "record_offset",
        "timestamp",
        "generation",
        "protocol_type",
        F.col("protocol").alias("assignor"),
        "leader",
        "member_count",
        F.lit(False).alias("tombstone"),
    )
    tombs = _silver(spark, tables, "tombstones", parts)
    if tombs is not None:
        records = records.unionByName(
            tombs.where("record_type = 2").select(
                *PART, "group_id", "record_offset", "timestamp", F.lit(True).alias("tombstone")
            ),
            allowMissingColumns=True,
        )
    w = Window.partitionBy(*PART, "group_id").orderBy("record_offset")
    starts = (
        F.col("prev_tombstone").isNull() | F.col("prev_tombstone") | (F.col("prev_generation") != F.col("generation"))
    )
    marked = (
        records.withColumn("prev_generation", F.lag("generation").over(w))
        .withColumn("prev_tombstone", F.lag("tombstone").over(w))
        .withColumn("next_offset", F.lead("record_offset").over(w))
        .withColumn("next_timestamp", F.lead("timestamp").over(w))
        .withColumn("next_tombstone", F.lead("tombstone").over(w))
        .withColumn("segment", F.sum((~F.col("tombstone") & starts).cast("int")).over(w))
        .where(~F.col("tombstone"))
    )
    last = Window.partitionBy(*PART, "group_id", "segment").orderBy(F.col("record_offset").desc())
    spans = marked.groupBy(*PART, "group_id", "segment").agg(
        F.min("record_offset").alias("started_offset"),
        F.min("timestamp").alias("started_ts"),
        F.count("*").alias("records"),
    )
    ends = marked.withColumn("n", F.row_number().over(last)).where("n = 1")
    gens = spans.join(ends, [*PART, "group_id", "segment"]).select(
        *PART,
        "group_id",
        "generation",
        "protocol_type",
        "assignor",
        "leader",
        "member_count",
        "started_offset",
        F.unix_millis("started_ts").alias("started_timestamp"),
        F.col("next_offset").alias("ended_offset"),
        F.unix_millis("next_timestamp").alias("ended_timestamp"),
        F.when(F.col("next_tombstone"), "group_deleted")
        .when(F.col("next_offset").isNotNull(), "next_generation")
        .alias("end_reason"),
        "records",
        F.col("record_offset").alias("last_record_offset"),
    )
    members = _silver(spark, tables, "group_members", parts)
    member = F.struct(
        "member_index",
        "member_id",
        "group_instance_id",
        "client_id",
        "client_host",
        "session_timeout_ms",
        "rebalance_timeout_ms",
        "subscribed_topics",
        "assigned_partitions",
    )
    if members is None:
        return gens.withColumn("members", F.lit(None).cast(f"array<{_member_type()}>"))
    per_record = members.groupBy(*PART, F.col("record_offset").alias("last_record_offset")).agg(
        F.array_sort(F.collect_list(member)).alias("members")
    )
    return gens.join(per_record, [*PART, "last_record_offset"], "left")


def _member_type() -> str:
    return (
        "struct<member_index:int,member_id:string,group_instance_id:string,client_id:string,client_host:string,"
        "session_timeout_ms:int,rebalance_timeout_ms:int,subscribed_topics:array<string>,"
        "assigned_partitions:array<struct<topic:string,partitions:array<int>>>>"
    )


def consumer_members_frame(spark: SparkSession, tables: Tables, parts: str) -> DataFrame | None:
    """Current members of KIP-848 consumer groups: the latest member metadata (type 5), target
    assignment (type 7) and current assignment (type 8) of every (group, member) whose latest
    record of that type is not a tombstone — the coordinator's compaction, done by window."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    tombs = _silver(spark, tables, "tombstones", parts)

    def latest(table: str, rtype: int, cols: list[Any]) -> DataFrame | None:
        df = _silver(spark, tables, table, parts)
        if df is None:
            return None
        live = df.select(*PART, "group_id", "member_id", "record_offset", F.lit(False).alias("tomb"), *cols)
        if tombs is not None:
            dead = tombs.where(F.col("record_type") == rtype).select(
                *PART, "group_id", "member_id", "record_offset", F.lit(True).alias("tomb")
            )
            live = live.unionByName(dead, allowMissingColumns=True)
        w = Window.partitionBy(*PART, "group_id", "member_id").orderBy(F.col("record_offset").desc())
        return (
            live.withColumn("n", F.row_number().over(w))
            .where("n = 1 AND NOT tomb")
            .drop("n", "tomb")
            .withColumnRenamed("record_offset", f"record_offset_{rtype}")
        )

    meta = latest(
        "consumer_group_member_metadata",
        5,
        [
            "instance_id",
            "rack_id",
            "client_id",
            "client_host",
            "subscribed_topic_names",
            "subscribed_topic_regex",
            "server_assignor",
            "rebalance_timeout_ms",
        ],
    )
    target = latest(
        "consumer_group_target_assignment_member", 7, [F.col("topic_partitions").alias("target_partitions")]
    )
    current = latest(
        "consumer_group_current_member_assignment",
        8,
        ["member_epoch", "previous_member_epoch", "state", "assigned_partitions", "partitions_pending_revocation"],
    )
    frames = [f for f in (meta, target, current) if f is not None]
    if not frames:
        return None
    out = frames[0]
    for f in frames[1:]:
        out = out.join(f, [*PART, "group_id", "member_id"], "full")
    columns = [c.name for c in tables.spec("gold", "consumer_group_members").columns if c.name != "updated_run_id"]
    return out.select(*[(F.col(c) if c in out.columns else F.lit(None)).alias(c) for c in columns])


def target_partitions(plan: list[dict[str, Any]]) -> str:
    """MERGE condition selecting the target rows of the plan's (cluster, offsets partition) pairs."""
    return partitions_predicate([(p["cluster"], p["offsets_partition"]) for p in plan], prefix="t.")


def merge_condition(key: list[str], plan: list[dict[str, Any]], op: str = "<=>") -> str:
    """MERGE condition: the key columns equal, and the target side restricted to the plan's
    partitions (so Delta reads and rewrites only their files)."""
    return " AND ".join(f"t.{k} {op} s.{k}" for k in key) + f" AND ({target_partitions(plan)})"


def pairs(plan: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(p["cluster"], p["offsets_partition"]) for p in plan]


def replace_partitions(rows: DataFrame, path: str, plan: list[dict[str, Any]]) -> None:
    """Replace the plan's (cluster, offsets partition) rows of a gold table by ``rows``'."""
    lake.replace_partitions(rows, path, pairs(plan))


def run_groups(spark: SparkSession, tables: Tables, plan: list[dict[str, Any]], run_id: str) -> dict[str, int]:
    """Recompute the group tables of the plan's partitions and replace them; returns rows per table."""
    from pyspark.sql import functions as F

    parts = partitions_predicate(pairs(plan))
    counts = {}
    for table, frame in (
        ("group_generations", generations_frame),
        ("consumer_group_members", consumer_members_frame),
    ):
        rows = frame(spark, tables, parts)
        if rows is None:
            continue
        rows = rows.withColumn("updated_run_id", F.lit(run_id)).persist()
        columns = [c.name for c in tables.spec("gold", table).columns]
        replace_partitions(rows.select(*columns), tables.path("gold", table), plan)
        counts[table] = rows.count()
        rows.unpersist()
    return counts
