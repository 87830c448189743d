"""The DataFrames the suites validate: a table plus the derived columns its domain rules need.

Each builder is a pure DataFrame transformation (tests pass tiny frames); :func:`load_frame`
reads the lakehouse's tables for a suite. A rule that is not a built-in expectation becomes a
derived column checked by a built-in one, so its result is still a GX result with counts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import Window
from pyspark.sql import functions as F

from pipelines.codec.partitioner import partition_for
from pipelines.runtime import lake
from pipelines.silver import KEY, QUALITY_REASON, RECORD_TABLES
from pipelines.silver.inventory import INVENTORY_KEY
from pipelines.silver.progress import last_progress

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.runtime.tables import Tables
    from pipelines.truth import TruthSnapshot


@dataclass
class Frame:
    """A suite's input: the DataFrame, rules not evaluated (name -> why), notes per rule."""

    df: DataFrame | pa.Table | None  # a Spark DataFrame, or Arrow built on the driver (local_frames.py)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: dict[str, dict[str, Any]] = field(default_factory=dict)
    missing: str | None = None  # why the whole suite is not evaluated


def local_rows(frame: Frame) -> bool:
    """Whether ``frame`` was built on the driver (an Arrow table, local_frames.py)."""
    return isinstance(frame.df, pa.Table)


@dataclass(frozen=True)
class Inputs:
    now_ms: int
    partitions: dict[str, int | None]  # cluster -> offsets_partitions (None: unknown)
    truth: TruthSnapshot | None = None


# -- bronze ----------------------------------------------------------------------------------------
def bronze_offsets_records(bronze: DataFrame) -> DataFrame:
    in_file = Window.partitionBy("cluster", "partition", "source_uri").orderBy("batch_position", "offset")
    in_partition = Window.partitionBy("cluster", "partition").orderBy("offset")
    return bronze.select(
        "cluster",
        "partition",
        "offset",
        "source_uri",
        "batch_position",
        F.when(~F.col("control"), F.col("key").isNotNull()).alias("data_record_has_key"),
        (F.col("offset") - F.lag("offset").over(in_file)).alias("offset_step"),
        # offsets missing before this one (a duplicate counts 0 here: position_unique judges it)
        F.greatest(F.col("offset") - F.lag("offset").over(in_partition) - 1, F.lit(0)).alias("offset_gap"),
    )


# -- silver ----------------------------------------------------------------------------------------
def group_partitions(spark: SparkSession, pairs: list[tuple[str, str]], partitions: dict[str, int | None]):
    """(cluster, group_id, expected_partition) for the pairs whose cluster's count is known."""
    rows = [(c, g, partition_for(g, partitions[c])) for c, g in pairs if partitions.get(c) and g is not None]
    return spark.createDataFrame(rows, "cluster string, group_id string, expected_partition int")


def with_partition_rule(records: DataFrame, partitions: dict[str, int | None]) -> Frame:
    """``records`` plus ``offsets_partition_matches_group``: offsets_partition = partition_for(group_id,
    N) where the cluster's N is known, else null; the rule is skipped when no N is known."""
    pairs = [(r[0], r[1]) for r in records.select("cluster", "group_id").distinct().collect()]
    expected = group_partitions(records.sparkSession, pairs, partitions)
    df = records.join(expected, ["cluster", "group_id"], "left").select(
        *records.columns,
        F.when(
            F.col("expected_partition").isNotNull(), F.col("offsets_partition") == F.col("expected_partition")
        ).alias("offsets_partition_matches_group"),
    )
    frame = Frame(df)
    partition_rule_notes(frame, {c for c, _ in pairs}, partitions)
    return frame


def partition_rule_notes(frame: Frame, clusters: set[str], partitions: dict[str, int | None]) -> None:
    """``offsets_partition_matches_group`` is not evaluated when no cluster of the frame has a known
    partition count, and notes the clusters it judged when only some have."""
    ordered = sorted(clusters)
    known = [c for c in ordered if partitions.get(c)]
    unknown = [c for c in ordered if not partitions.get(c)]
    rule = "offsets_partition_matches_group"
    if not known:
        frame.skipped[rule] = (
            f"offsets_partitions unknown for cluster(s) {', '.join(ordered) or '(none)'}: "
            "set sources.<name>.offsets_partitions in jobs.yaml"
        )
    elif unknown:
        frame.notes[rule] = {"evaluated_clusters": known, "not_evaluated_clusters": unknown}


def silver_offset_commits(commits: DataFrame, partitions: dict[str, int | None], now_ms: int) -> Frame:
    ahead = ((F.col("commit_timestamp") - F.lit(now_ms)) / 60000.0).alias("commit_minutes_ahead_of_clock")
    return with_partition_rule(commits.select("*", ahead), partitions)


def silver_group_members(members: DataFrame, groups: DataFrame) -> DataFrame:
    """One row per member of silver.group_members, plus one per group record without member rows,
    with, per record key (the members and silver.group_metadata's rows in one window: a union, so
    one shuffle and no join)
    ``members_complete``  exactly one group record, whose ``member_count`` members are all there,
                          indexed 0..n-1 once each (false for members without their record);
    ``consumer_protocol_decoded``  for protocol type ``consumer``, the subscription and assignment
                          bytes decoded (null for other protocol types and record-only rows)."""
    key = list(KEY)
    none = {c: F.lit(None).cast(t) for c, t in (("member_index", "int"), ("member_count", "int"), ("s", "string"))}
    member_rows = members.select(
        *key,
        "member_index",
        "group_id",
        "member_id",
        "protocol_type",
        "protocol_error",
        none["member_count"].alias("member_count"),
    )
    record_rows = groups.select(
        *key,
        none["member_index"].alias("member_index"),
        "group_id",
        *(none["s"].alias(c) for c in ("member_id", "protocol_type", "protocol_error")),
        "member_count",
    )
    record = Window.partitionBy(*key)
    index = F.col("member_index")
    n = F.count(index).over(record)
    complete = (
        (F.count("member_count").over(record) == 1)  # the group record, once
        & (F.max("member_count").over(record) == n)
        & (F.size(F.collect_set(index).over(record)) == n)
        & (F.coalesce(F.min(index).over(record), F.lit(0)) == 0)
        & (F.coalesce(F.max(index).over(record), F.lit(-1)) == n - 1)
    )
    decoded = F.when(F.col("protocol_type") == "consumer", F.col("protocol_error").isNull())
    rows = member_rows.unionByName(record_rows).select(
        *key,
        "member_index",
        "group_id",
        "member_id",
        F.max("member_count").over(record).alias("member_count"),
        n.alias("_members"),
        complete.alias("members_complete"),
        decoded.alias("consumer_protocol_decoded"),
    )
    return rows.where(index.isNotNull() | (F.col("_members") == 0)).drop("_members")


# the record types whose tombstone keys carry more than the group id, and the field each names
_OFFSET_TYPES = (0, 1)
_MEMBER_TYPES = (5, 7, 8, 10, 13, 14, 19, 21, 22)
_REGEX_TYPE = 16


def silver_tombstones(tombstones: DataFrame, partitions: dict[str, int | None]) -> Frame:
    """silver.tombstones plus ``tombstone_names_its_key`` (offset tombstones: topic and a partition
    >= 0; member tombstones: member id; regex tombstones: the regex) and the partition rule."""
    t = F.col("record_type")
    names_key = (
        F.when(t.isin(*_OFFSET_TYPES), F.col("topic").isNotNull() & (F.col("partition") >= 0))
        .when(t.isin(*_MEMBER_TYPES), F.col("member_id").isNotNull())
        .when(t == _REGEX_TYPE, F.col("regular_expression").isNotNull())
        .otherwise(F.lit(True))
    )
    return with_partition_rule(
        tombstones.select(*tombstones.columns, F.coalesce(names_key, F.lit(False)).alias("tombstone_names_its_key")),
        partitions,
    )


def silver_version_inventory(inventory: DataFrame, bronze: DataFrame) -> DataFrame:
    """silver.version_inventory (and bronze's :func:`records_per_partition`) plus
    ``rows_with_key``        rows with the row's key (INVENTORY_KEY);
    ``records_fit_offsets``  records >= 1, first <= last offset, and no more records than offsets
                             between them (each record is one offset);
    ``partition_census_complete``  per (cluster, offsets partition): the sum of ``records`` equals
                             bronze's rows; a bronze partition missing from the inventory is one
                             row with null inventory columns (bronze's counts and the inventory in
                             one window: a union, not a join)."""
    part = ["cluster", "offsets_partition"]
    counts = bronze.select(*part, F.col("records").alias("bronze_records"))
    rows = inventory.select(*inventory.columns, F.lit(None).cast("bigint").alias("bronze_records")).unionByName(
        counts, allowMissingColumns=True
    )
    in_partition = Window.partitionBy(*part)
    inventory_records = F.coalesce(F.sum("records").over(in_partition), F.lit(0))
    bronze_records = F.coalesce(F.max("bronze_records").over(in_partition), F.lit(0))
    inventory_rows = F.count("records").over(in_partition)
    fits = (
        (F.col("records") >= 1)
        & (F.col("first_offset") <= F.col("last_offset"))
        & (F.col("records") <= F.col("last_offset") - F.col("first_offset") + 1)
    )
    judged = rows.select(
        *inventory.columns,
        bronze_records.alias("bronze_records"),
        inventory_records.alias("inventory_records"),
        inventory_rows.alias("_inventory_rows"),
        F.when(F.col("records").isNotNull(), F.count("records").over(Window.partitionBy(*INVENTORY_KEY))).alias(
            "rows_with_key"
        ),
        F.when(F.col("records").isNotNull(), fits).alias("records_fit_offsets"),
        (inventory_records == bronze_records).alias("partition_census_complete"),
    )
    # the inventory's rows, and bronze's count row only where the partition has none
    return judged.where(F.col("records").isNotNull() | (F.col("_inventory_rows") == 0)).drop("_inventory_rows")


def silver_topic_ids(topic_ids: DataFrame) -> DataFrame:
    """silver.topic_ids plus ``names_of_topic_id`` (how many names the cluster's log pairs the id
    with) and ``rows_with_key`` (rows of the row's (cluster, topic_id, topic_name))."""
    names = F.size(F.collect_set("topic_name").over(Window.partitionBy("cluster", "topic_id")))
    rows = F.count(F.lit(1)).over(Window.partitionBy("cluster", "topic_id", "topic_name"))
    return topic_ids.select(*topic_ids.columns, names.alias("names_of_topic_id"), rows.alias("rows_with_key"))


def silver_quarantine(bronze: DataFrame, quarantine: DataFrame | None) -> DataFrame:
    """One row per bronze record: in quarantine for a decoder reason? its raw bytes kept?
    (Bytes are compared for quarantined records only: bronze's are joined to the quarantine.)"""
    key = list(KEY)
    records = bronze.select(
        "cluster", F.col("partition").alias("offsets_partition"), F.col("offset").alias("record_offset")
    )
    if quarantine is None:
        return records.select(
            *key, F.lit(False).alias("undecodable"), F.lit(None).cast("boolean").alias("raw_bytes_kept")
        )
    raw = bronze.select(
        "cluster",
        F.col("partition").alias("offsets_partition"),
        F.col("offset").alias("record_offset"),
        F.col("key").alias("_key"),
        F.col("value").alias("_value"),
    )
    flags = quarantine.join(raw, key, "left").select(
        *key,
        "reason",
        (~F.col("reason").startswith(QUALITY_REASON)).alias("_decoder"),
        (F.col("raw_key").eqNullSafe(F.col("_key")) & F.col("raw_value").eqNullSafe(F.col("_value"))).alias(
            "raw_bytes_kept"
        ),
    )
    return records.join(flags, key, "left").select(
        *key, "reason", F.coalesce("_decoder", F.lit(False)).alias("undecodable"), "raw_bytes_kept"
    )


# -- gold ------------------------------------------------------------------------------------------
def gold_current_offsets(offsets: DataFrame) -> DataFrame:
    return offsets.select(
        *offsets.columns,
        F.when(~F.col("deleted"), F.col("record_offset").isNotNull()).alias("live_row_has_position"),
    )


def gold_lag(lag: DataFrame) -> DataFrame:
    """gold.current_lag / gold.lag_history plus their consistency flags (docs/lag.md)."""
    return lag.select(
        *lag.columns,
        # null-safe: lag is null exactly when either side is unknown, else their difference
        F.col("lag").eqNullSafe(F.col("end_offset") - F.col("committed_offset")).alias("lag_is_end_minus_committed"),
        (F.col("lag").isNull() == F.col("end_offset").isNull()).alias("lag_null_iff_end_unknown"),
    )


# gold.current_groups.delete_cause values (schemas/tables/gold.yaml)
DELETE_CAUSES = ("group_deletion", "expiry", "explicit_delete", "transaction_aborted", "converted")


def gold_current_groups(groups: DataFrame) -> DataFrame:
    """gold.current_groups plus
    ``rows_with_key``       rows with the row's (cluster, group_id, protocol);
    ``live_rows_of_group``  live rows with the row's (cluster, group_id), on live rows (null on
                            deleted ones): listGroups lists an id once;
    ``cause_matches_deleted``  deleted rows carry a known cause, live rows none;
    ``exists_for_its_reason``  live rows: a group record's (exists_because = metadata) is traceable
                            to it (record_offset <= state_offset); an offsets-only group's is the
                            classic, protocol-type-"" row Kafka lists, with no record;
    ``assignment_epoch_not_ahead``  consumer groups: the target assignment epoch <= the group epoch."""
    live = ~F.col("deleted")
    same_id = Window.partitionBy("cluster", "group_id")
    live_rows = F.sum(F.when(live, 1).otherwise(0)).over(same_id)
    cause = F.when(F.col("deleted"), F.coalesce(F.col("delete_cause").isin(*DELETE_CAUSES), F.lit(False))).otherwise(
        F.col("delete_cause").isNull()
    )
    because = F.col("exists_because")
    reason = (
        F.when(because == "metadata", F.coalesce(F.col("record_offset") <= F.col("state_offset"), F.lit(False)))
        .when(
            because == "offsets",
            F.coalesce(
                (F.col("protocol") == "classic") & (F.col("protocol_type") == "") & F.col("record_offset").isNull(),
                F.lit(False),
            ),
        )
        .otherwise(F.lit(False))
    )
    ahead = F.when(live & (F.col("protocol") == "consumer"), F.col("assignment_epoch") <= F.col("generation"))
    return groups.select(
        *groups.columns,
        F.count(F.lit(1)).over(Window.partitionBy("cluster", "group_id", "protocol")).alias("rows_with_key"),
        F.when(live, live_rows).alias("live_rows_of_group"),
        cause.alias("cause_matches_deleted"),
        F.when(live, reason).alias("exists_for_its_reason"),
        ahead.alias("assignment_epoch_not_ahead"),
    )


def gold_offset_history(history: DataFrame) -> DataFrame:
    """gold.offset_history's interval columns plus, per key in log order (valid_from_offset):
    ``open_iff_latest``  the interval is open (valid_to_offset null) exactly when it is the key's
                         latest: one open interval per key, and it is the current one;
    ``chains_to_next``   an interval followed by another ends where that one starts, in log
                         position and log time (null-safe): no gap, no overlap; null for the latest;
    ``time_ordered``     valid_from_timestamp <= valid_to_timestamp (null when either is unknown);
    ``has_source_event`` the interval's event is at or before its start: the commit (record_offset)
                         for a live state, the tombstone (deleted_offset) for a deleted one."""
    key = ["cluster", "offsets_partition", "group_id", "topic", "partition"]
    in_log_order = Window.partitionBy(*key).orderBy("valid_from_offset")
    next_from = F.lead("valid_from_offset").over(in_log_order)
    next_from_ts = F.lead("valid_from_timestamp").over(in_log_order)
    source = F.when(F.col("deleted"), F.col("deleted_offset")).otherwise(F.col("record_offset"))
    return history.select(
        *key,
        "valid_from_offset",
        "valid_to_offset",
        "valid_from_timestamp",
        "valid_to_timestamp",
        "deleted",
        (F.col("valid_to_offset").isNull() == next_from.isNull()).alias("open_iff_latest"),
        F.when(
            next_from.isNotNull(),
            F.col("valid_to_offset").eqNullSafe(next_from) & F.col("valid_to_timestamp").eqNullSafe(next_from_ts),
        ).alias("chains_to_next"),
        (F.col("valid_from_timestamp") <= F.col("valid_to_timestamp")).alias("time_ordered"),
        F.coalesce(source <= F.col("valid_from_offset"), F.lit(False)).alias("has_source_event"),
    )


def gold_group_generations(generations: DataFrame) -> DataFrame:
    """gold.group_generations' interval columns plus, per group in log order (started_offset):
    ``open_only_if_latest``  only the group's latest generation may be open, and a closed latest one
                             ended with the group's deletion;
    ``chains_to_next``       a generation that ended with the next one ends where the next starts,
                             with another generation number; one ended by the group's deletion ends
                             before the next starts; an open one has no end reason;
    ``generation_grows``     the generation after a rebalance is higher (null otherwise);
    ``records_within``       at least one record, the last one between the start and the end, and no
                             more records than offsets in between."""
    key = ["cluster", "offsets_partition", "group_id"]
    in_log_order = Window.partitionBy(*key).orderBy("started_offset")
    next_start = F.lead("started_offset").over(in_log_order)
    next_generation = F.lead("generation").over(in_log_order)
    ended, reason = F.col("ended_offset"), F.col("end_reason")
    open_only_if_latest = F.when(next_start.isNull(), ended.isNull() | (reason == "group_deleted")).otherwise(
        ended.isNotNull()
    )
    chains = (
        F.when(ended.isNull(), reason.isNull())
        .when(reason == "next_generation", (ended == next_start) & (F.col("generation") != next_generation))
        .when(reason == "group_deleted", next_start.isNull() | (ended < next_start))
        .otherwise(F.lit(False))
    )
    last, start = F.col("last_record_offset"), F.col("started_offset")
    within = (
        (F.col("records") >= 1)
        & (start <= last)
        & (ended.isNull() | (last < ended))
        & (F.col("records") <= last - start + 1)
    )
    return generations.select(
        *key,
        "generation",
        "started_offset",
        "ended_offset",
        "end_reason",
        "records",
        "last_record_offset",
        open_only_if_latest.alias("open_only_if_latest"),
        F.coalesce(chains, F.lit(False)).alias("chains_to_next"),
        F.when(reason == "next_generation", next_generation > F.col("generation")).alias("generation_grows"),
        F.coalesce(within, F.lit(False)).alias("records_within"),
    )


def _topic_partitions(column: str):
    """array<struct<topic_id, ..., partitions>> -> array<struct<topic_id, partition>>."""
    return F.flatten(
        F.transform(
            F.col(column),
            lambda t: F.transform(t["partitions"], lambda p: F.struct(t["topic_id"].alias("t"), p.alias("p"))),
        )
    )


def gold_consumer_group_members(members: DataFrame, groups: DataFrame) -> DataFrame:
    """gold.consumer_group_members plus ``rows_with_key`` (rows of the row's (cluster, group_id,
    member_id)) and, from gold.current_groups' live consumer group of the member,
    ``in_live_group``  the member's group is a live consumer group (the coordinator writes a
                       member's tombstones before its group's);
    ``member_epoch_not_ahead``  member_epoch <= the group epoch (null without both);
    ``assigned_and_revoking_disjoint``  no (topic id, partition) both assigned and pending
                       revocation (null when either list is unknown)."""
    live = groups.where(~F.col("deleted") & (F.col("protocol") == "consumer")).select(
        "cluster", "group_id", F.col("generation").alias("group_epoch"), F.lit(True).alias("_group")
    )
    joined = members.join(F.broadcast(live), ["cluster", "group_id"], "left")
    overlap = F.arrays_overlap(
        _topic_partitions("assigned_partitions"), _topic_partitions("partitions_pending_revocation")
    )
    return joined.select(
        "cluster",
        "offsets_partition",
        "group_id",
        "member_id",
        "member_epoch",
        "state",
        "group_epoch",
        F.count(F.lit(1)).over(Window.partitionBy("cluster", "group_id", "member_id")).alias("rows_with_key"),
        F.coalesce(F.col("_group"), F.lit(False)).alias("in_live_group"),
        (F.col("member_epoch") <= F.col("group_epoch")).alias("member_epoch_not_ahead"),
        (~overlap).alias("assigned_and_revoking_disjoint"),
    )


def gold_partition_progress(progress: DataFrame, inventory: DataFrame | None) -> DataFrame:
    """gold.partition_progress plus
    ``rows_with_key``       rows of the row's (cluster, offsets_partition);
    ``events_fit_applied``  no applied offset and no event, or between 1 and applied_offset + 1
                            events (each event is a distinct offset <= the applied one);
    ``applied_within_silver``  the applied offset is at or below the last record silver holds for
                            the partition (silver.version_inventory; false when silver holds none)."""
    part = ["cluster", "offsets_partition"]
    if inventory is None:
        inventory = progress.sparkSession.createDataFrame(
            [], "cluster string, offsets_partition int, last_offset bigint"
        )
    last = inventory.groupBy(*part).agg(F.max("last_offset").alias("silver_last_offset"))
    joined = progress.join(F.broadcast(last), part, "left")
    applied, events = F.col("applied_offset"), F.col("events_applied")
    fits = F.when(applied.isNull(), events == 0).otherwise((events >= 1) & (events <= applied + 1))
    within = F.when(applied.isNotNull(), F.coalesce(applied <= F.col("silver_last_offset"), F.lit(False)))
    return joined.select(
        *progress.columns,
        "silver_last_offset",
        F.count(F.lit(1)).over(Window.partitionBy(*part)).alias("rows_with_key"),
        fits.alias("events_fit_applied"),
        within.alias("applied_within_silver"),
    )


def log_clock(bronze: DataFrame) -> DataFrame:
    """(cluster, offsets_partition, log_now_ms): the latest record timestamp of each partition."""
    return bronze.groupBy("cluster", F.col("partition").alias("offsets_partition")).agg(
        F.max(F.unix_millis("timestamp")).alias("log_now_ms")
    )


def gold_pending_transactions(pending: DataFrame, bronze: DataFrame) -> DataFrame:
    joined = pending.join(log_clock(bronze), ["cluster", "offsets_partition"], "left")
    return joined.select(
        *pending.columns, ((F.col("log_now_ms") - F.col("record_timestamp")) / 60000.0).alias("pending_log_minutes")
    )


def records_per_partition(df: DataFrame, partition: str = "offsets_partition") -> DataFrame:
    """(cluster, offsets_partition, records): the rows of ``df`` per offsets partition (bronze names
    its column ``partition``)."""
    return df.groupBy("cluster", F.col(partition).alias("offsets_partition")).agg(F.count("*").alias("records"))


def gold_reconciliation(bronze: DataFrame, silver: list[DataFrame]) -> DataFrame:
    """Per (cluster, offsets partition): bronze's records against the silver tables' rows, each
    given as :func:`records_per_partition` counts."""
    b = bronze.select("cluster", "offsets_partition", F.col("records").alias("bronze_records"))
    if silver:
        s = reduce(lambda a, c: a.unionAll(c), [t.select("cluster", "offsets_partition", "records") for t in silver])
        s = s.groupBy("cluster", "offsets_partition").agg(F.sum("records").alias("silver_records"))
    else:
        s = bronze.sparkSession.createDataFrame([], "cluster string, offsets_partition int, silver_records bigint")
    joined = b.join(s, ["cluster", "offsets_partition"], "full_outer")
    bronze_n = F.coalesce("bronze_records", F.lit(0))
    silver_n = F.coalesce("silver_records", F.lit(0))
    return joined.select(
        "cluster",
        "offsets_partition",
        bronze_n.cast("bigint").alias("bronze_records"),
        silver_n.cast("bigint").alias("silver_records"),
        (silver_n - bronze_n).cast("bigint").alias("record_difference"),
    )


def gold_truth_snapshot(live: DataFrame, progress: DataFrame | None, truth: TruthSnapshot) -> Frame:
    """Truth and gold's live offsets, full outer join on the key, where gold is not ahead."""
    spark = live.sparkSession
    count = len(truth.offsets_topic_end_offsets)
    end = {int(p): int(o) for p, o in truth.offsets_topic_end_offsets.items()}
    ahead: list[int] = []
    if progress is not None:
        for r in progress.where(F.col("cluster") == truth.cluster).collect():
            if r["applied_offset"] is not None and r["applied_offset"] >= end.get(r["offsets_partition"], 0):
                ahead.append(int(r["offsets_partition"]))
    rows = [
        (g, t, p, o.offset, partition_for(g, count))
        for (g, t, p), o in sorted(truth.committed().items())
        if partition_for(g, count) not in ahead
    ]
    want = spark.createDataFrame(
        rows, "group_id string, topic string, partition int, truth_offset bigint, offsets_partition int"
    )
    have = live.where((F.col("cluster") == truth.cluster) & ~F.col("deleted")).select(
        "group_id", "topic", "partition", F.col("committed_offset").alias("gold_offset"), "offsets_partition"
    )
    if ahead:
        have = have.where(~F.col("offsets_partition").isin(ahead))
    key = ["group_id", "topic", "partition"]
    joined = want.drop("offsets_partition").join(have.drop("offsets_partition"), key, "full_outer")
    df = joined.select(
        F.lit(truth.cluster).alias("cluster"),
        *key,
        "truth_offset",
        "gold_offset",
        F.coalesce(F.col("truth_offset") == F.col("gold_offset"), F.lit(False)).alias("agrees"),
    )
    frame = Frame(df)
    if ahead:
        frame.notes["live_offsets_agree_with_truth"] = {"not_compared_partitions_gold_ahead": sorted(ahead)}
    return frame


# -- reading the lakehouse -------------------------------------------------------------------------
# (layer, table, columns) -> the table (a Spark DataFrame, or Arrow on the driver), None when there
# is none. ``columns``: the columns the frame needs of it, a hint that the driver's reads follow
# (Spark prunes columns itself).
Reader = Callable[..., Any]

# The tables each suite's frame reads (load_frame): a suite none of whose tables changed since a
# validation has that validation's outcomes (quality/incremental.py). tests/spark/test_quality_incremental.py
# checks this against what load_frame actually reads.
SOURCES: dict[str, tuple[str, ...]] = {
    "bronze.offsets_records": ("bronze.offsets_records",),
    "silver.quarantine": ("bronze.offsets_records", "silver.progress", "silver.quarantine"),
    "gold.reconciliation": ("bronze.offsets_records", "silver.progress", *(f"silver.{t}" for t in RECORD_TABLES)),
    "silver.group_members": ("silver.group_members", "silver.group_metadata"),
    "silver.version_inventory": ("silver.version_inventory", "bronze.offsets_records", "silver.progress"),
    "gold.consumer_group_members": ("gold.consumer_group_members", "gold.current_groups"),
    "gold.partition_progress": ("gold.partition_progress", "silver.version_inventory"),
    "gold.pending_transactions": ("gold.pending_transactions", "bronze.offsets_records", "silver.progress"),
}


def sources(name: str) -> tuple[str, ...]:
    """The tables the frame of suite ``name`` reads (most frames read their own table alone)."""
    return SOURCES.get(name, (name,))


# A table of at most this many rows is read by delta-rs and handed to Spark as Arrow: no Delta
# snapshot to bring up to date, no file scan (for tables a run has just written, 0.05-0.2 s
# instead of 0.2-1.5 s each, measured on the 200k benchmark's gold tables); larger ones cost more
# through the driver than Spark's own read (178k rows: 1.2 s against 0.6 s).
SMALL_TABLE_ROWS = 50_000

# The columns a frame needs of the tables whose builders keep only some (the driver reads no
# more): bronze's raw bytes are read only where a frame compares them.
BRONZE_COLUMNS = {
    "bronze.offsets_records": ("cluster", "partition", "offset", "source_uri", "batch_position", "control", "key"),
    "silver.quarantine": ("cluster", "partition", "offset", "key", "value"),
    "gold.pending_transactions": ("cluster", "partition", "timestamp"),
}
MEMBER_COLUMNS = (*KEY, "member_index", "group_id", "member_id", "protocol_type", "protocol_error")
GROUP_RECORD_COLUMNS = (*KEY, "group_id", "member_count")
LIVE_GROUP_COLUMNS = ("cluster", "group_id", "generation", "deleted", "protocol")
QUARANTINE_COLUMNS = (*KEY, "reason", "raw_key", "raw_value")
INVENTORY_COLUMNS = ("cluster", "offsets_partition", "last_offset")
TRUTH_COLUMNS = ("cluster", "offsets_partition", "group_id", "topic", "partition", "committed_offset", "deleted")
EMPTY_GROUP_RECORDS = pa.schema(
    [("cluster", pa.string()), ("offsets_partition", pa.int32()), ("record_offset", pa.int64()),
     ("group_id", pa.string()), ("member_count", pa.int32())]
)  # fmt: skip


def lakehouse_reader(spark: SparkSession, tables: Tables) -> Reader:
    """The tables as they are now, as Spark DataFrames."""

    def read(layer: str, table: str, columns: Sequence[str] | None = None) -> DataFrame | None:
        path = tables.path(layer, table)
        rows = None if lake.remote(spark) else lake.row_count(path)
        if rows is not None and 0 < rows <= SMALL_TABLE_ROWS:
            arrow = lake.read_arrow(spark, path)
            if arrow is not None and arrow.num_rows == rows:
                return lake.spark_frame(spark, arrow)
        return lake.read(spark, path)

    return read


def driver_reader(spark: SparkSession, tables: Tables) -> Reader:
    """The tables as they are now, as Arrow read by delta-rs on the driver (:func:`fits_driver`
    says when they can be)."""

    def read(layer: str, table: str, columns: Sequence[str] | None = None) -> pa.Table | None:
        return lake.read_arrow(spark, tables.path(layer, table), columns)

    return read


def fits_driver(spark: SparkSession, tables: Tables, name: str, max_rows: int) -> bool:
    """Whether the frame of suite ``name`` is built on the driver (local_frames.py): the session
    has a JVM beside it (a Spark Connect client reads through Spark), and delta-rs can read every
    table the frame reads, whose rows (from their Delta logs) add up to at most ``max_rows``
    (jobs.yaml ``quality.local_max_rows``: the frame is then validated by GX's pandas engine
    too)."""
    if max_rows <= 0 or lake.remote(spark):
        return False
    total = 0
    for source in sources(name):
        path = tables.path(*source.split(".", 1))
        if not lake.readable_by_driver(path):
            if lake.exists(spark, path):
                return False
            continue  # no table: the frame says what is missing
        rows = lake.row_count(path)
        if rows is None:
            return False
        total += rows
    return total <= max_rows


def _builders(local: bool) -> Any:
    """The frame builders: this module's, on Spark, or local_frames' twins on the driver."""
    if local:
        from pipelines.quality import local_frames  # it builds on this module's Frame

        return local_frames
    return sys.modules[__name__]


def load_frame(
    name: str,
    spark: SparkSession,
    tables: Tables,
    inputs: Inputs,
    read: Reader | None = None,
    local: bool = False,
) -> Frame:
    """The frame of the suite ``name`` from the lakehouse's tables (or from what ``read`` returns
    for them: the rows an increment changed, quality/incremental.py); ``local``: built on the
    driver from Arrow tables (:func:`fits_driver`), else a Spark DataFrame."""
    if not lake.exists(spark, tables.path("bronze", "offsets_records")):
        return Frame(None, missing="no bronze.offsets_records table yet")
    # the counts of whole tables come from their Delta logs' statistics when the tables are read
    # as they are (not the rows of an increment)
    whole = read is None and not lake.remote(spark)
    build = _builders(local)
    read = read or (driver_reader(spark, tables) if local else lakehouse_reader(spark, tables))

    def bronze(columns: Sequence[str] | None = None) -> Any:  # read by the frames that use it only
        return read("bronze", "offsets_records", columns)

    def decoded_version() -> int | None:
        """bronze's version silver last decoded (its watermark), for the rules that hold silver to
        bronze: rows another job's bronze stage appended since are silver's next run's work, not
        rows silver lost."""
        done = last_progress(spark, tables)
        return done.get("bronze_version") if done else None

    def decoded_bronze(columns: Sequence[str]) -> Any:
        version = decoded_version()
        if version is None:
            return bronze(columns)
        path = tables.path("bronze", "offsets_records")
        if local:
            return lake.read_arrow(spark, path, columns, at=version)
        return spark.read.format("delta").option("versionAsOf", version).load(path)

    def arrow_frame(rows: pa.Table) -> Any:
        return rows if local else lake.spark_frame(spark, rows)

    def counted(layer: str, table: str, version: int | None = None) -> Any:
        """:func:`records_per_partition` of a table (at ``version``): summed from its Delta log's
        file statistics where they are exact (no data file read: the large silver tables and
        bronze are partitioned by offsets partition), else counted from its rows."""
        partition = "partition" if layer == "bronze" else "offsets_partition"
        stats = lake.rows_per_partition(tables.path(layer, table), ["cluster", partition], version) if whole else None
        if stats is not None:
            typed = pa.table(
                {
                    "cluster": stats["cluster"].cast(pa.string()),
                    "offsets_partition": stats[partition].cast(pa.int32()),
                    "records": stats["records"].cast(pa.int64()),
                }
            )
            return arrow_frame(typed)
        if layer == "bronze":
            columns = ("cluster", partition)
            rows = decoded_bronze(columns) if version is not None else bronze(columns)
            return build.records_per_partition(rows, partition)
        df = read(layer, table, ("cluster", partition))
        return None if df is None else build.records_per_partition(df, partition)

    if name == "bronze.offsets_records":
        return Frame(build.bronze_offsets_records(bronze(BRONZE_COLUMNS[name])))
    if name == "silver.quarantine":
        if read("silver", "progress") is None:
            return Frame(None, missing="silver has not run yet")
        quarantine = read("silver", "quarantine", QUARANTINE_COLUMNS)
        return Frame(build.silver_quarantine(bronze(BRONZE_COLUMNS[name]), quarantine))
    if name == "gold.reconciliation":
        if read("silver", "progress") is None:
            return Frame(None, missing="silver has not run yet")
        silver = [df for t in RECORD_TABLES if (df := counted("silver", t)) is not None]
        return Frame(build.gold_reconciliation(counted("bronze", "offsets_records", decoded_version()), silver))
    if name == "gold.truth_snapshot":
        if inputs.truth is None:
            return Frame(None, missing="no truth snapshot (quality.truth_snapshot in jobs.yaml)")
        offsets = read("gold", "current_offsets", TRUTH_COLUMNS)
        if offsets is None:
            return Frame(None, missing="no gold.current_offsets table yet")
        return build.gold_truth_snapshot(offsets, read("gold", "partition_progress"), inputs.truth)
    layer, _, table = name.partition(".")
    df = read(layer, table, MEMBER_COLUMNS if name == "silver.group_members" else None)
    if df is None:
        return Frame(None, missing=f"no {name} table (nothing of that kind ingested yet)")
    if name == "silver.offset_commits":
        return build.silver_offset_commits(df, inputs.partitions, inputs.now_ms)
    if name == "silver.group_metadata":
        return build.with_partition_rule(df, inputs.partitions)
    if name == "silver.group_members":
        groups = read("silver", "group_metadata", GROUP_RECORD_COLUMNS)
        if groups is None:  # members without any group record: every one of them is an orphan
            groups = arrow_frame(EMPTY_GROUP_RECORDS.empty_table())
        return Frame(build.silver_group_members(df, groups))
    if name == "silver.tombstones":
        return build.silver_tombstones(df, inputs.partitions)
    if name == "silver.version_inventory":
        return Frame(build.silver_version_inventory(df, counted("bronze", "offsets_records", decoded_version())))
    if name == "silver.topic_ids":
        return Frame(build.silver_topic_ids(df))
    if name == "gold.current_groups":
        return Frame(build.gold_current_groups(df))
    if name == "gold.offset_history":
        return Frame(build.gold_offset_history(df))
    if name == "gold.group_generations":
        return Frame(build.gold_group_generations(df))
    if name == "gold.consumer_group_members":
        groups = read("gold", "current_groups", LIVE_GROUP_COLUMNS)
        if groups is None:
            return Frame(None, missing="no gold.current_groups table yet")
        return Frame(build.gold_consumer_group_members(df, groups))
    if name == "gold.partition_progress":
        return Frame(build.gold_partition_progress(df, read("silver", "version_inventory", INVENTORY_COLUMNS)))
    if name == "gold.current_offsets":
        return Frame(build.gold_current_offsets(df))
    if name == "gold.pending_transactions":
        return Frame(build.gold_pending_transactions(df, decoded_bronze(BRONZE_COLUMNS[name])))
    if name in ("gold.current_lag", "gold.lag_history"):
        return Frame(build.gold_lag(df))
    return Frame(df)
