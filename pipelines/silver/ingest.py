"""Silver: bronze rows decoded into typed Delta tables, incrementally and idempotently.

One run (docs/silver.md):

1. **Select** the bronze rows not yet decoded: the Delta change data feed of
   ``bronze.offsets_records`` from the version after silver's watermark (the last completed
   ``silver.progress`` row) to the current version. Without a watermark (first run), or when the
   feed cannot serve the range (switched on later, files vacuumed), the whole bronze snapshot of
   the current version instead — correct, only slower, because the writes are then keyed MERGEs.
2. **Decode** each row once (``mapInArrow`` over :func:`pipelines.silver.decode.decode_batches`)
   into a wide row, persisted, then **split** into the tables.
3. **Intent**: a ``started`` progress row, before any table is written.
4. **Write** each table keyed on the log position (cluster, offsets_partition, record_offset
   [, member_index]): appended when the previous run completed and the rows come from the feed
   (none of them can be in silver yet), else — after a killed run, in snapshot mode — with an
   insert-only MERGE that skips what is already there. Killed writers leave only unreferenced
   files or complete commits.
5. **Derive** ``topic_ids`` (only grows), topic names next to topic ids, and
   ``version_inventory`` (recomputed for the touched partitions, written where it differs).
6. **Watermark**: the completed progress row with the bronze version, written last. A run killed
   before it leaves the intent row; the next run re-processes the same bronze rows with MERGEs.

``--full-refresh`` writes a ``refresh_pending`` progress row, rebuilds every table from the
bronze snapshot with overwrites, then writes the watermark; a killed refresh is completed by the
next run, whatever its flags. One silver run at a time per lakehouse.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from pipelines.runtime import faults, lake
from pipelines.runtime.lake import partitions_predicate
from pipelines.silver.decode import (
    ENVELOPE_COLUMNS,
    INPUT_COLUMNS,
    MEMBER_TABLE,
    MEMBERS,
    QUALITY_REASON,
    RECORD_TABLES,
    DecodePlan,
    build_plan,
    decode_batches,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.runtime.tables import Tables

log = logging.getLogger("offsets_lakehouse")

KEY = ("cluster", "offsets_partition", "record_offset")
MEMBER_KEY = (*KEY, "member_index")
# the tables the decoder feeds, in write order
DATA_TABLES = (*RECORD_TABLES[:2], MEMBER_TABLE, *RECORD_TABLES[2:])
BRONZE = ("bronze", "offsets_records")
CDF = "delta.enableChangeDataFeed"

# array<struct<topic_id, topic, ...>> columns whose `topic` is resolved from silver.topic_ids:
# (table, struct column or None for a top-level array, array field)
TOPIC_ARRAYS = (
    ("consumer_group_target_assignment_member", None, "topic_partitions"),
    ("consumer_group_current_member_assignment", None, "assigned_partitions"),
    ("consumer_group_current_member_assignment", None, "partitions_pending_revocation"),
    ("consumer_group_current_member_assignment", None, "partitions_pending_assignment"),
    ("share_group_records", "target_assignment_member", "topic_partitions"),
    ("share_group_records", "current_member_assignment", "assigned_partitions"),
)


@dataclass
class SilverResult:
    mode: str  # up_to_date, incremental, snapshot, full_refresh, redecode, no_bronze
    bronze_version_from: int | None = None
    bronze_version: int | None = None
    bronze_rows: int = 0
    rows: dict[str, int] = field(default_factory=dict)  # decoded rows per table in this run
    inserted: dict[str, int] = field(default_factory=dict)  # rows the writes added per table
    quarantined: int = 0
    released: int = 0  # redecode: quarantine rows now decoded into their tables
    topic_names_resolved: int = 0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "bronze_version_from": self.bronze_version_from,
            "bronze_version": self.bronze_version,
            "bronze_rows": self.bronze_rows,
            "rows": self.rows,
            "inserted": self.inserted,
            "quarantined": self.quarantined,
            "released": self.released,
            "topic_names_resolved": self.topic_names_resolved,
            "notes": self.notes,
        }


# -- decoding on Spark ---------------------------------------------------------------------------------
def wide_schema(plan: DecodePlan):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(plan.schema)


def decode_frame(rows: DataFrame, plan: DecodePlan) -> DataFrame:
    """Bronze-shaped rows -> wide decoded rows (one per input row), decoded in Spark tasks."""
    present = [c for c in INPUT_COLUMNS if c in rows.columns]
    return rows.select(*present).mapInArrow(functools.partial(decode_batches, plan=plan), wide_schema(plan))


def table_frame(wide: DataFrame, tables: Tables, table: str) -> DataFrame:
    """The rows of one silver table from the wide decoded rows, in the declared column order."""
    from pyspark.sql import functions as F

    columns = [c.name for c in tables.spec("silver", table).columns]
    if table == MEMBER_TABLE:
        exploded = wide.where(F.col("group_metadata").isNotNull()).select(
            *ENVELOPE_COLUMNS, F.explode(f"group_metadata.{MEMBERS}").alias("_m")
        )
        return exploded.select(*ENVELOPE_COLUMNS, "_m.*").select(*columns)
    return wide.where(F.col(table).isNotNull()).select(*ENVELOPE_COLUMNS, f"{table}.*").select(*columns)


def _counts(wide: DataFrame) -> dict[str, Any]:
    """Rows per table, topic-id counters and the touched (cluster, offsets_partition) pairs: one job."""
    from pyspark.sql import functions as F

    aggs = [F.count(F.col(t)).alias(t) for t in RECORD_TABLES]
    aggs.append(F.coalesce(F.sum(F.size(f"group_metadata.{MEMBERS}")), F.lit(0)).alias(MEMBER_TABLE))
    aggs.append(F.count(F.lit(1)).alias("_rows"))
    # records that carry topic id -> name pairs, and records with topic ids to resolve
    carriers = [
        "offset_commits.topic_id",
        "consumer_group_partition_metadata",
        "share_group_records.partition_metadata",
        "share_group_records.state_partition_metadata",
        "streams_group_records.partition_metadata",
    ]
    aggs.append(sum((F.count(F.col(c)) for c in carriers), F.lit(0)).alias("_topic_carriers"))
    resolvable = ["consumer_group_target_assignment_member", "consumer_group_current_member_assignment"]
    resolvable += ["share_group_records.target_assignment_member", "share_group_records.current_member_assignment"]
    aggs.append(sum((F.count(F.col(c)) for c in resolvable), F.lit(0)).alias("_topic_ids_to_resolve"))
    rows = wide.groupBy(*KEY[:2]).agg(*aggs).collect()
    totals: dict[str, Any] = {k: 0 for k in (*RECORD_TABLES, MEMBER_TABLE, "_rows", "_topic_carriers")}
    totals["_topic_ids_to_resolve"] = 0
    for r in rows:
        for k, v in r.asDict().items():
            if k not in KEY[:2]:
                totals[k] += int(v or 0)
    totals["_pairs"] = sorted((r["cluster"], r["offsets_partition"]) for r in rows)
    return totals


# -- bronze selection and the watermark -----------------------------------------------------------------
def _version(spark: SparkSession, path: str) -> int | None:
    return lake.version(spark, path)


COMPLETED = ("incremental", "snapshot", "full_refresh", "redecode", "up_to_date")


def progress_state(spark: SparkSession, tables: Tables) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(latest progress row, latest row that is not a ``started`` intent), one Spark job."""
    progress = lake.read(spark, tables.path("silver", "progress"))
    if progress is None:
        return None, None
    progress.createOrReplaceTempView("_silver_progress")
    row = spark.sql(
        "SELECT max_by(struct(*), committed_at) AS last, "
        "max_by(struct(*), CASE WHEN mode != 'started' THEN committed_at END) AS done FROM _silver_progress"
    ).collect()[0]
    return (
        row["last"].asDict() if row["last"] is not None else None,
        row["done"].asDict() if row["done"] is not None else None,
    )


def last_progress(spark: SparkSession, tables: Tables) -> dict[str, Any] | None:
    """The latest completed (or refresh_pending) progress row: where silver stands."""
    return progress_state(spark, tables)[1]


def _ensure_bronze_cdf(spark: SparkSession, tables: Tables, result: SilverResult) -> bool:
    """True when bronze already had the change data feed on; else switch it on (one metadata commit)."""
    from delta.tables import DeltaTable

    path = tables.path(*BRONZE)
    props = DeltaTable.forPath(spark, path).detail().collect()[0]["properties"] or {}
    if str(props.get(CDF, "false")).lower() == "true":
        return True
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{CDF}' = 'true')")
    result.notes.append("enabled the change data feed on bronze.offsets_records (this run reads the snapshot)")
    return False


def _bronze_changes(spark: SparkSession, path: str, start: int, end: int) -> DataFrame:
    """Rows inserted into bronze in versions start..end (the feed's errors surface on first use)."""
    return (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", start)
        .option("endingVersion", end)
        .load(path)
        .where("_change_type = 'insert'")
    )


def _feed_errors() -> tuple[type[BaseException], ...]:
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import AnalysisException

    return (AnalysisException, Py4JJavaError)


# -- writes ------------------------------------------------------------------------------------------
def _last_commit(spark: SparkSession, path: str) -> Any:
    return lake.last_commit(spark, path)


def _exists(spark: SparkSession, tables: Tables, table: str) -> bool:
    return lake.exists(spark, tables.path("silver", table))


def merge_insert(
    spark: SparkSession,
    tables: Tables,
    table: str,
    frame: DataFrame,
    pairs: list[tuple[str, int]] | None = None,
    rows: int | None = None,
    append: bool = False,
) -> int:
    """Insert-only MERGE on the log position; returns rows inserted (a MERGE inserting nothing
    writes no table version). A table that does not exist yet is created and appended to: with
    nothing to collide with, that inserts exactly what the MERGE would (``frame`` is keyed), and a
    run killed after it finds the table and MERGEs. ``append``: the caller knows none of the rows
    can be in the table (see run_silver). ``rows``: rows in ``frame``, when known."""

    path = tables.path("silver", table)
    exists = _exists(spark, tables, table)
    if not exists or append:
        if not exists:
            tables.ensure("silver", table)
        frame.write.format("delta").mode("append").save(path)
        return rows if rows is not None else int(_last_commit(spark, path)["operationMetrics"]["numOutputRows"])
    key = MEMBER_KEY if table == MEMBER_TABLE else KEY
    return lake.insert_new(spark, path, frame, key, pairs)  # pairs: Delta skips other partitions' files


def _overwrite(tables: Tables, table: str, frame: DataFrame) -> None:
    tables.ensure("silver", table)
    frame.write.format("delta").mode("overwrite").save(tables.path("silver", table))


def _write_progress(
    spark: SparkSession, tables: Tables, run_id: str, mode: str, bronze_version: int | None, rows: int, summary: dict
) -> None:
    from pyspark.sql import Row

    if not _exists(spark, tables, "progress"):
        tables.ensure("silver", "progress")
    row = Row(
        run_id=run_id,
        mode=mode,
        bronze_version=bronze_version,
        bronze_rows=rows,
        decoder_version=summary.get("decoder_version", ""),
        committed_at=datetime.now(timezone.utc),
        summary=json.dumps(summary, sort_keys=True, default=str),
    )
    spark.createDataFrame([row], tables.spec("silver", "progress").struct()).write.format("delta").mode("append").save(
        tables.path("silver", "progress")
    )


# -- the stage -------------------------------------------------------------------------------------
def run_silver(spark: SparkSession, tables: Tables, run_id: str, full_refresh: bool = False) -> SilverResult:
    """Decode what bronze holds and silver does not yet; see the module docstring."""
    from pyspark import StorageLevel

    bronze_path = tables.path(*BRONZE)
    latest = _version(spark, bronze_path)
    if latest is None:
        return SilverResult("no_bronze", notes=["no bronze table yet: run the bronze stage first"])
    last, done = progress_state(spark, tables)
    pending = done is not None and done["mode"] == "refresh_pending"
    watermark = None if done is None or pending else done["bronze_version"]
    killed = last is not None and last["mode"] == "started"  # a run died after its intent row
    if pending and not full_refresh:
        log.info("silver: the last full refresh did not finish; completing it")
    full = full_refresh or pending
    plan = build_plan()
    result = SilverResult("full_refresh" if full else "incremental", watermark, latest)
    recorded = json.loads((done or {}).get("summary") or "{}")
    if not full and watermark is not None and watermark >= latest:
        result.mode = "up_to_date"
        if _version(spark, tables.path("silver", "topic_ids")) != recorded.get("topic_ids_version"):
            # a killed run or redecode learnt topic ids after the last watermark: finish its work
            result.topic_names_resolved = resolve_topic_names(spark, tables)
            _finish(spark, tables, run_id, result, plan, latest)
        return result

    wide, counts = None, None
    if not full and watermark is not None:
        try:
            wide = decode_frame(_bronze_changes(spark, bronze_path, watermark + 1, latest), plan)
            wide = wide.persist(StorageLevel.MEMORY_AND_DISK)
            counts = _counts(wide)
        except _feed_errors() as exc:  # feed switched on later, files vacuumed: read the snapshot
            log.warning("silver: change data feed unavailable for bronze %d..%d: %s", watermark + 1, latest, exc)
            if wide is not None:
                wide.unpersist()
            wide = None
            if not _ensure_bronze_cdf(spark, tables, result):
                latest = _version(spark, bronze_path)  # switching it on was a bronze commit (no rows)
                result.bronze_version = latest
    if wide is None:
        if not full:
            result.mode = "snapshot"
        source = spark.read.format("delta").option("versionAsOf", latest).load(bronze_path)
        wide = decode_frame(source, plan).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        counts = counts or _counts(wide)
        result.bronze_rows = counts["_rows"]
        result.rows = {t: counts[t] for t in DATA_TABLES}
        result.quarantined = counts["quarantine"]
        faults.point("silver.after_decode")
        if full:
            pending_summary = {"decoder_version": plan.decoder_version}
            _write_progress(spark, tables, run_id, "refresh_pending", None, 0, pending_summary)
            update_topic_ids(spark, tables, wide, overwrite=True)
            _refresh_tables(spark, tables, wide, result)
            faults.point("silver.before_derived")
            update_inventory(spark, tables, latest, None)
        else:
            # the intent row: a run killed from here on makes the next run MERGE instead of append
            _write_progress(spark, tables, run_id, "started", latest, result.bronze_rows, {"from": watermark})
            # appending is exactly inserting when the rows cannot be in silver yet: they come from
            # bronze commits after a completed watermark, and no run has written since
            append = result.mode == "incremental" and not killed
            pairs = counts["_pairs"]
            ids_before = _version(spark, tables.path("silver", "topic_ids"))
            learnt = update_topic_ids(spark, tables, wide) if counts["_topic_carriers"] else set()
            _insert_tables(spark, tables, wide, pairs, result, counts["_topic_ids_to_resolve"] > 0, append)
            faults.point("silver.before_derived")
            # rows written before this run may name topics learnt since: by a killed run (all
            # clusters), or by this one (the clusters that learnt ids and hold such rows)
            if ids_before != recorded.get("topic_ids_version"):
                result.topic_names_resolved = resolve_topic_names(spark, tables)
            elif learnt and _named_rows_in(spark, tables, learnt):
                result.topic_names_resolved = resolve_topic_names(spark, tables, learnt)
            update_inventory(spark, tables, latest, pairs, changed=True if sum(result.inserted.values()) else None)
    finally:
        wide.unpersist()
    faults.point("silver.before_watermark")
    _finish(spark, tables, run_id, result, plan, latest)
    return result


def _finish(
    spark: SparkSession, tables: Tables, run_id: str, result: SilverResult, plan: DecodePlan, bronze_version: int
) -> None:
    """The watermark, written last: bronze version done, and the topic_ids version it saw."""
    summary = result.to_json() | {
        "decoder_version": plan.decoder_version,
        "topic_ids_version": _version(spark, tables.path("silver", "topic_ids")),
    }
    _write_progress(spark, tables, run_id, result.mode, bronze_version, result.bronze_rows, summary)


def _insert_tables(
    spark: SparkSession,
    tables: Tables,
    wide: DataFrame,
    pairs: list[tuple[str, int]],
    result: SilverResult,
    resolve: bool,
    append: bool,
) -> None:
    names = topic_names(spark, tables).persist() if resolve else None
    written = 0
    try:
        for table in DATA_TABLES:
            if not result.rows.get(table):
                continue
            frame = table_frame(wide, tables, table)
            if names is not None:
                frame = with_topic_names(frame, table, names)
            crash = os.environ.get("OFFSETS_FAULT") == "silver.after_write_before_commit"
            if crash and written == 1 and _exists(spark, tables, table):
                # what a writer killed mid-MERGE leaves behind: data files that no commit references
                frame.write.mode("append").partitionBy("cluster", "offsets_partition").parquet(
                    tables.path("silver", table)
                )
                faults.point("silver.after_write_before_commit")
            result.inserted[table] = merge_insert(spark, tables, table, frame, pairs, result.rows[table], append)
            written += 1
            if written == 1:
                faults.point("silver.after_first_table")
    finally:
        if names is not None:
            names.unpersist()


def _refresh_tables(spark: SparkSession, tables: Tables, wide: DataFrame, result: SilverResult) -> None:

    names = topic_names(spark, tables).persist()
    first = True
    try:
        for table in DATA_TABLES:
            exists = _exists(spark, tables, table)
            if not result.rows.get(table) and not exists:
                continue  # tables appear with their first row
            frame = with_topic_names(table_frame(wide, tables, table), table, names)
            _overwrite(tables, table, frame)
            result.inserted[table] = result.rows.get(table, 0)
            if first:
                faults.point("silver.refresh_after_first_table")
                first = False
    finally:
        names.unpersist()


def replace_if_changed(
    spark: SparkSession,
    tables: Tables,
    table: str,
    fresh: DataFrame,
    where: str,
    key: tuple[str, ...],
    changed: bool | None = None,
) -> tuple[bool, bool]:
    """Make the rows of ``table`` matching ``where`` equal ``fresh`` (which all match it).

    Writes (one ``replaceWhere`` overwrite) only when something differs, so an unchanged
    recomputation adds no table version; ``changed=True`` skips the comparison when the caller
    knows. Returns (rows changed, keys added or removed).
    """
    from pyspark.sql import functions as F

    path = tables.path("silver", table)
    if not _exists(spark, tables, table):
        tables.ensure("silver", table)
        where = "true"
    if where == "true" or changed:
        writer = fresh.write.format("delta").mode("overwrite")
        (writer if where == "true" else writer.option("replaceWhere", where)).save(path)
        return True, True
    fresh = fresh.persist()
    try:
        columns = [c.name for c in tables.spec("silver", table).columns]
        existing = spark.read.format("delta").load(path).where(where)
        on = F.expr(" AND ".join(f"s.{k} <=> t.{k}" for k in key))
        joined = fresh.alias("s").join(existing.withColumn("_present", F.lit(True)).alias("t"), on, "full_outer")
        same = " AND ".join(f"s.{c} <=> t.{c}" for c in columns)
        row = joined.agg(
            F.count(F.when(F.expr(f"NOT ({same})"), 1)).alias("changed"),
            F.count(F.when(F.expr("t._present IS NULL OR s.cluster IS NULL"), 1)).alias("keys"),
        ).collect()[0]
        if row["changed"]:
            fresh.write.format("delta").mode("overwrite").option("replaceWhere", where).save(path)
        return row["changed"] > 0, row["keys"] > 0
    finally:
        fresh.unpersist()


# -- topic ids ------------------------------------------------------------------------------------
_PAIR = "struct<topic_id:string,topic_name:string>"
# arrays of structs with topic_id and topic_name in the decoded rows: the map the log carries
_PAIR_ARRAYS = (
    "consumer_group_partition_metadata.topics",
    "share_group_records.partition_metadata.topics",
    "share_group_records.state_partition_metadata.initializing_topics",
    "share_group_records.state_partition_metadata.initialized_topics",
    "share_group_records.state_partition_metadata.deleting_topics",
    "streams_group_records.partition_metadata.topics",
)
TOPIC_ID_KEY = ("cluster", "topic_id", "topic_name")
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"  # the all-zero UUID: no topic id


def _silver(spark: SparkSession, tables: Tables, table: str) -> DataFrame | None:
    """A silver table, or None when it does not exist yet (tables appear with their first row)."""
    return lake.read(spark, tables.path("silver", table))


def topic_pairs(wide: DataFrame) -> DataFrame:
    """(cluster, topic_id, topic_name, first_seen) that the decoded rows carry."""
    from pyspark.sql import functions as F

    empty = F.array().cast(f"array<{_PAIR}>")
    commit = F.col("offset_commits")
    parts = [
        F.when(
            commit["topic_id"].isNotNull(),
            F.array(F.struct(commit["topic_id"].alias("topic_id"), commit["topic"].alias("topic_name"))),
        ).otherwise(empty)
    ]
    for path in _PAIR_ARRAYS:
        pairs = F.transform(
            F.col(path), lambda x: F.struct(x["topic_id"].alias("topic_id"), x["topic_name"].alias("topic_name"))
        )
        parts.append(F.coalesce(pairs, empty))
    return (
        wide.select("cluster", "timestamp", F.explode(F.concat(*parts)).alias("_t"))
        .select("cluster", "_t.topic_id", "_t.topic_name", "timestamp")
        .where(f"topic_id IS NOT NULL AND topic_id != '{ZERO_UUID}' AND topic_name IS NOT NULL")
        .groupBy(*TOPIC_ID_KEY)
        .agg(F.min("timestamp").alias("first_seen"))
    )


def update_topic_ids(spark: SparkSession, tables: Tables, wide: DataFrame, overwrite: bool = False) -> set[str]:
    """Add the pairs the decoded rows carry to silver.topic_ids; returns the clusters that learnt any.

    Pairs are only ever added and ``first_seen`` only ever lowered, so applying the same rows
    again (a re-run, a re-processed range) changes nothing and the order of runs does not matter.
    """
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    fresh = topic_pairs(wide).select(*[c.name for c in tables.spec("silver", "topic_ids").columns]).persist()
    try:
        path = tables.path("silver", "topic_ids")
        new_table = not _exists(spark, tables, "topic_ids")
        if new_table:
            tables.ensure("silver", "topic_ids")
        if overwrite or new_table:
            fresh.write.format("delta").mode("overwrite").save(path)
            return {r[0] for r in fresh.select("cluster").distinct().collect()}
        on = " AND ".join(f"t.{k} = s.{k}" for k in TOPIC_ID_KEY)
        earlier = "s.first_seen < t.first_seen OR (t.first_seen IS NULL AND s.first_seen IS NOT NULL)"
        existing = spark.read.format("delta").load(path)
        news = fresh.alias("s").join(existing.alias("t"), F.expr(on), "left").where(f"t.topic_id IS NULL OR {earlier}")
        learnt = {r[0] for r in news.select("s.cluster").distinct().collect()}
        if learnt:
            (
                DeltaTable.forPath(spark, path)
                .alias("t")
                .merge(fresh.alias("s"), on)
                .whenMatchedUpdate(condition=earlier, set={"first_seen": "s.first_seen"})
                .whenNotMatchedInsertAll()
                .execute()
            )
        return learnt
    finally:
        fresh.unpersist()


def _named_rows_in(spark: SparkSession, tables: Tables, clusters: set[str]) -> bool:
    """Did silver hold records with topic ids (types 7, 8, 13, 14) in these clusters before this run?

    Asked of version_inventory, which this run has not updated yet.
    """
    inventory = _silver(spark, tables, "version_inventory")
    if inventory is None or not clusters:
        return False
    from pipelines.runtime.lake import sql_str

    listed = ", ".join(sql_str(c) for c in sorted(clusters))
    return bool(inventory.where(f"cluster IN ({listed}) AND record_type IN (7, 8, 13, 14)").limit(1).count())


def topic_names(spark: SparkSession, tables: Tables) -> DataFrame:
    """cluster -> map(topic id -> name) for ids with exactly one name in silver.topic_ids."""
    from pyspark.sql import functions as F

    ids = _silver(spark, tables, "topic_ids")
    if ids is None:
        ids = spark.createDataFrame([], "cluster string, topic_id string, topic_name string")
    return (
        ids.groupBy("cluster", "topic_id")
        .agg(F.count_distinct("topic_name").alias("n"), F.first("topic_name").alias("topic_name"))
        .where("n = 1")
        .groupBy("cluster")
        .agg(F.map_from_entries(F.collect_list(F.struct("topic_id", "topic_name"))).alias("_names"))
    )


def _fill_topic(x: Any) -> Any:
    from pyspark.sql import functions as F

    return x.withField("topic", F.try_element_at(F.col("_names"), x["topic_id"]))


def resolved_columns(table: str) -> dict[str, Any]:
    """Column -> expression with ``topic`` filled from a ``_names`` map column, for one table."""
    from pyspark.sql import functions as F

    out: dict[str, Any] = {}
    for t, struct, array in TOPIC_ARRAYS:
        if t != table:
            continue
        resolved = F.transform(F.col(array if struct is None else f"{struct}.{array}"), _fill_topic)
        if struct is None:
            out[array] = resolved
        else:
            inner = out.get(struct, F.col(struct)).withField(array, resolved)
            out[struct] = F.when(F.col(struct).isNull(), F.lit(None)).otherwise(inner)
    return out


def with_topic_names(frame: DataFrame, table: str, names: DataFrame) -> DataFrame:
    """``frame`` (rows of ``table``) with topic names filled in, same columns and order."""
    from pyspark.sql import functions as F

    columns = resolved_columns(table)
    if not columns:
        return frame
    joined = frame.join(F.broadcast(names), "cluster", "left")
    return joined.select(*[columns[c].alias(c) if c in columns else F.col(c) for c in frame.columns])


def resolve_topic_names(spark: SparkSession, tables: Tables, clusters: set[str] | None = None) -> int:
    """Set ``topic`` next to every topic id already in silver from silver.topic_ids; rows updated.

    Only rows whose arrays change are rewritten, so the outcome depends on the map alone: the
    same however rows and map arrived (incremental, refresh, re-decode, in any order).
    """
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from pipelines.runtime.lake import sql_str

    where = "true" if clusters is None else f"cluster IN ({', '.join(sql_str(c) for c in sorted(clusters))})"
    names = topic_names(spark, tables).where(where).persist()
    updated = 0
    try:
        for table in sorted({t for t, _, _ in TOPIC_ARRAYS}):
            df = _silver(spark, tables, table)
            if df is None:
                continue
            df = df.where(where)
            new_cols = resolved_columns(table)
            base = df.join(F.broadcast(names), "cluster", "left")
            computed = base.select(
                *KEY, *[F.col(c).alias(f"_old_{c}") for c in new_cols], *[v.alias(c) for c, v in new_cols.items()]
            )
            differs = " OR ".join(f"NOT ({c} <=> _old_{c})" for c in new_cols)
            changes = computed.where(differs).select(*KEY, *new_cols).persist()
            n = changes.count()
            if n:
                (
                    DeltaTable.forPath(spark, tables.path("silver", table))
                    .alias("t")
                    .merge(changes.alias("s"), " AND ".join(f"t.{k} = s.{k}" for k in KEY))
                    .whenMatchedUpdate(set={c: f"s.{c}" for c in new_cols})
                    .execute()
                )
                updated += n
            changes.unpersist()
    finally:
        names.unpersist()
    return updated


# -- version inventory ---------------------------------------------------------------------------------
def int16_sql(column: str) -> str:
    """SQL: the leading big-endian int16 of a binary column, null when it has fewer than 2 bytes."""
    u = f"cast(conv(hex(substring({column}, 1, 2)), 16, 10) as int)"
    return f"CASE WHEN length({column}) >= 2 THEN (CASE WHEN {u} >= 32768 THEN {u} - 65536 ELSE {u} END) END"


def inventory_frame(spark: SparkSession, tables: Tables, bronze_version: int, pairs: list[tuple[str, int]] | None):
    """Per (cluster, offsets partition, kind, type, version, status): counts and first/last seen.

    Counted from the bronze rows silver has processed (up to ``bronze_version``) — type and
    version are the leading int16 of key and value, as every decoder reads them — with the
    status from silver.quarantine. A census of the log, independent of the typed tables.
    """
    from pyspark.sql import functions as F

    bronze = spark.read.format("delta").option("versionAsOf", bronze_version).load(tables.path(*BRONZE))
    if pairs is not None:
        bronze = bronze.where(partitions_predicate(pairs, column="partition"))
    records = bronze.select(
        "cluster",
        F.col("partition").alias("offsets_partition"),
        F.col("offset").alias("record_offset"),
        "timestamp",
        F.expr("CASE WHEN control THEN 'control' WHEN value IS NULL THEN 'tombstone' ELSE 'data' END").alias(
            "record_kind"
        ),
        F.expr(f"CASE WHEN NOT control THEN {int16_sql('key')} END").alias("record_type"),
        F.expr(f"CASE WHEN NOT control THEN {int16_sql('value')} END").alias("value_version"),
    )
    quarantine = _silver(spark, tables, "quarantine")
    if quarantine is None:
        records = records.withColumn("status", F.lit("decoded"))
    else:
        if pairs is not None:
            quarantine = quarantine.where(partitions_predicate(pairs))
        flagged = quarantine.select(*KEY, F.lit("quarantined").alias("_status"))
        records = records.join(flagged, list(KEY), "left").withColumn(
            "status", F.coalesce(F.col("_status"), F.lit("decoded"))
        )
    return (
        records.groupBy("cluster", "offsets_partition", "record_kind", "record_type", "value_version", "status")
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.min("record_offset").alias("first_offset"),
            F.max("record_offset").alias("last_offset"),
            F.min("timestamp").alias("first_timestamp"),
            F.max("timestamp").alias("last_timestamp"),
        )
        .select(*[c.name for c in tables.spec("silver", "version_inventory").columns])
    )


INVENTORY_KEY = ("cluster", "offsets_partition", "record_kind", "record_type", "value_version", "status")


def update_inventory(
    spark: SparkSession,
    tables: Tables,
    bronze_version: int,
    pairs: list[tuple[str, int]] | None,
    changed: bool | None = None,
) -> None:
    """Recompute the inventory of the touched partitions; write only what differs (None: all, overwrite)."""

    if pairs == []:
        return
    fresh = inventory_frame(spark, tables, bronze_version, pairs)
    replace_if_changed(
        spark,
        tables,
        "version_inventory",
        fresh,
        "true" if pairs is None else partitions_predicate(pairs),
        INVENTORY_KEY,
        changed,
    )


# -- status ------------------------------------------------------------------------------------------
def silver_status(spark: SparkSession, tables: Tables) -> dict[str, Any] | None:
    """For ``offsets-lakehouse status``: the watermark against bronze, the last run, the quarantine."""
    from pyspark.sql import functions as F

    last, done = progress_state(spark, tables)
    if last is None:
        return None
    bronze = _version(spark, tables.path(*BRONZE))
    quarantine = _silver(spark, tables, "quarantine")
    reasons = {}
    if quarantine is not None:
        reasons = {r["reason"]: r["n"] for r in quarantine.groupBy("reason").agg(F.count("*").alias("n")).collect()}
    return {
        "watermark": None if done is None else done["bronze_version"],
        "bronze_version": bronze,
        "last_run": last["run_id"],
        "last_mode": last["mode"],
        "last_at": last["committed_at"],
        "killed": last["mode"] == "started",
        "quarantined": reasons,
    }


# -- quarantine re-decoding -------------------------------------------------------------------------
def redecode_quarantine(spark: SparkSession, tables: Tables, run_id: str) -> SilverResult:
    """Decode every quarantine row again; move the ones this decoder reads into their tables.

    Tables first, quarantine second: a run killed in between leaves a record in both, and the
    next ``redecode`` finishes the move (the inserts are keyed, so nothing is duplicated).
    Rows still undecodable keep their place with this decoder's reason and version.
    """
    from delta.tables import DeltaTable
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    result = SilverResult("redecode")
    quarantine = _silver(spark, tables, "quarantine")
    if quarantine is not None:
        # records a quality rule moved there decode fine: they stay (pipelines/quality/quarantine.py)
        quarantine = quarantine.where(~F.col("reason").startswith(QUALITY_REASON))
    progress = last_progress(spark, tables)
    if quarantine is None or progress is None or progress["bronze_version"] is None:
        result.notes.append("nothing quarantined (or silver never completed a run)")
        return result
    result.bronze_version = progress["bronze_version"]
    rows = quarantine.select(
        "cluster",
        F.col("offsets_partition").alias("partition"),
        F.col("record_offset").alias("offset"),
        "timestamp",
        "producer_id",
        "producer_epoch",
        "transactional",
        "control",
        F.col("raw_key").alias("key"),
        F.col("raw_value").alias("value"),
        "source_uri",
        "batch_position",
    )
    plan = build_plan()
    wide = decode_frame(rows, plan).persist(StorageLevel.MEMORY_AND_DISK)
    changed = False
    try:
        counts = _counts(wide)
        result.bronze_rows = counts["_rows"]
        if not result.bronze_rows:
            return result
        result.rows = {t: counts[t] for t in DATA_TABLES if t != "quarantine"}
        result.quarantined = counts["quarantine"]
        result.released = result.bronze_rows - result.quarantined
        pairs = counts["_pairs"]
        learnt = update_topic_ids(spark, tables, wide) if counts["_topic_carriers"] else set()
        names = topic_names(spark, tables)
        for table in DATA_TABLES:
            if table != "quarantine" and result.rows.get(table):
                frame = with_topic_names(table_frame(wide, tables, table), table, names)
                result.inserted[table] = merge_insert(spark, tables, table, frame, pairs)
        faults.point("silver.redecode_before_quarantine")
        still = table_frame(wide, tables, "quarantine")
        decided = wide.select(*KEY, F.col("quarantine").isNull().alias("_released"))
        source = decided.join(still, list(KEY), "left")
        columns = [c.name for c in tables.spec("silver", "quarantine").columns]
        differs = " OR ".join(f"NOT (t.{c} <=> s.{c})" for c in columns if c not in KEY)
        on = " AND ".join(f"t.{k} = s.{k}" for k in KEY)
        changes = source.alias("s").join(quarantine.alias("t"), F.expr(on)).where(f"s._released OR {differs}")
        changed = bool(changes.limit(1).count())
        if changed:
            (
                DeltaTable.forPath(spark, tables.path("silver", "quarantine"))
                .alias("t")
                .merge(source.alias("s"), on)
                .whenMatchedDelete(condition="s._released")
                .whenMatchedUpdate(condition=f"NOT s._released AND ({differs})", set={c: f"s.{c}" for c in columns})
                .execute()
            )
        if learnt:
            result.topic_names_resolved = resolve_topic_names(spark, tables, learnt)
        update_inventory(spark, tables, result.bronze_version, pairs)
    finally:
        wide.unpersist()
    if changed or sum(result.inserted.values()):
        _finish(spark, tables, run_id, result, plan, result.bronze_version)
    return result
