"""The DataFrames the suites validate: a table plus the derived columns its domain rules need.

Each builder is a pure DataFrame transformation (tests pass tiny frames); :func:`load_frame`
reads the lakehouse's tables for a suite. A rule that is not a built-in expectation becomes a
derived column checked by a built-in one, so its result is still a GX result with counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, Any

from pyspark.sql import Window
from pyspark.sql import functions as F

from pipelines.codec.partitioner import partition_for
from pipelines.runtime import lake
from pipelines.silver import KEY, QUALITY_REASON, RECORD_TABLES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.runtime.tables import Tables
    from pipelines.truth import TruthSnapshot


@dataclass
class Frame:
    """A suite's input: the DataFrame, rules not evaluated (name -> why), notes per rule."""

    df: DataFrame | None
    skipped: dict[str, str] = field(default_factory=dict)
    notes: dict[str, dict[str, Any]] = field(default_factory=dict)
    missing: str | None = None  # why the whole suite is not evaluated


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
    clusters = sorted({c for c, _ in pairs})
    known = [c for c in clusters if partitions.get(c)]
    unknown = [c for c in clusters if not partitions.get(c)]
    expected = group_partitions(records.sparkSession, pairs, partitions)
    df = records.join(expected, ["cluster", "group_id"], "left").select(
        *records.columns,
        F.when(
            F.col("expected_partition").isNotNull(), F.col("offsets_partition") == F.col("expected_partition")
        ).alias("offsets_partition_matches_group"),
    )
    frame = Frame(df)
    rule = "offsets_partition_matches_group"
    if not known:
        frame.skipped[rule] = (
            f"offsets_partitions unknown for cluster(s) {', '.join(clusters) or '(none)'}: "
            "set sources.<name>.offsets_partitions in jobs.yaml"
        )
    elif unknown:
        frame.notes[rule] = {"evaluated_clusters": known, "not_evaluated_clusters": unknown}
    return frame


def silver_offset_commits(commits: DataFrame, partitions: dict[str, int | None], now_ms: int) -> Frame:
    ahead = ((F.col("commit_timestamp") - F.lit(now_ms)) / 60000.0).alias("commit_minutes_ahead_of_clock")
    return with_partition_rule(commits.select("*", ahead), partitions)


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


def gold_reconciliation(bronze: DataFrame, silver: list[DataFrame]) -> DataFrame:
    b = bronze.groupBy("cluster", F.col("partition").alias("offsets_partition")).agg(
        F.count("*").alias("bronze_records")
    )
    keys = [t.select("cluster", "offsets_partition") for t in silver]
    if keys:
        s = reduce(lambda a, c: a.unionAll(c), keys).groupBy("cluster", "offsets_partition")
        s = s.agg(F.count("*").alias("silver_records"))
    else:
        s = bronze.sparkSession.createDataFrame([], "cluster string, offsets_partition int, silver_records bigint")
    joined = b.join(s, ["cluster", "offsets_partition"], "full_outer")
    bronze_n = F.coalesce("bronze_records", F.lit(0))
    silver_n = F.coalesce("silver_records", F.lit(0))
    return joined.select(
        "cluster",
        "offsets_partition",
        bronze_n.alias("bronze_records"),
        silver_n.alias("silver_records"),
        (silver_n - bronze_n).alias("record_difference"),
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
def _read(spark: SparkSession, tables: Tables, layer: str, table: str) -> DataFrame | None:
    return lake.read(spark, tables.path(layer, table))


def load_frame(name: str, spark: SparkSession, tables: Tables, inputs: Inputs) -> Frame:
    """The frame of the suite ``name`` from the lakehouse's tables."""
    bronze = _read(spark, tables, "bronze", "offsets_records")
    if bronze is None:
        return Frame(None, missing="no bronze.offsets_records table yet")
    if name == "bronze.offsets_records":
        return Frame(bronze_offsets_records(bronze))
    if name == "silver.quarantine":
        if _read(spark, tables, "silver", "progress") is None:
            return Frame(None, missing="silver has not run yet")
        return Frame(silver_quarantine(bronze, _read(spark, tables, "silver", "quarantine")))
    if name == "gold.reconciliation":
        if _read(spark, tables, "silver", "progress") is None:
            return Frame(None, missing="silver has not run yet")
        silver = [df for t in RECORD_TABLES if (df := _read(spark, tables, "silver", t)) is not None]
        return Frame(gold_reconciliation(bronze, silver))
    if name == "gold.truth_snapshot":
        if inputs.truth is None:
            return Frame(None, missing="no truth snapshot (quality.truth_snapshot in jobs.yaml)")
        offsets = _read(spark, tables, "gold", "current_offsets")
        if offsets is None:
            return Frame(None, missing="no gold.current_offsets table yet")
        return gold_truth_snapshot(offsets, _read(spark, tables, "gold", "partition_progress"), inputs.truth)
    layer, _, table = name.partition(".")
    df = _read(spark, tables, layer, table)
    if df is None:
        return Frame(None, missing=f"no {name} table (nothing of that kind ingested yet)")
    if name == "silver.offset_commits":
        return silver_offset_commits(df, inputs.partitions, inputs.now_ms)
    if name == "silver.group_metadata":
        return with_partition_rule(df, inputs.partitions)
    if name == "gold.current_offsets":
        return Frame(gold_current_offsets(df))
    if name == "gold.pending_transactions":
        return Frame(gold_pending_transactions(df, bronze))
    if name in ("gold.current_lag", "gold.lag_history"):
        return Frame(gold_lag(df))
    return Frame(df)
