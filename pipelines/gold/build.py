"""Gold: the coordinator's state by an ordered replay per (cluster, offsets partition) and Delta writes.

One run:

1. **Events**: the silver rows gold needs (offset commits, offset and group tombstones, group
   records of every type, consumer target assignments, COMMIT/ABORT markers) as one frame, with the batch they came in
   (silver's ``batch_base_offset``; records from the Kafka source are their own batch).
2. **Plan** per (cluster, offsets partition) against ``gold.partition_progress``: *skip* (nothing
   new), *incremental* (events after the applied offset only), or *full* (no progress yet, late
   data at or below the applied offset — more events there than were applied —, a previous run
   that died between its MERGEs, or ``--full-refresh``).
3. **Replay**: events and persisted state co-grouped by partition; each group runs
   :func:`pipelines.gold.state.replay_partition` (the reference replay, resumed) in a Spark task.
4. **Write** each gold table: recomputed partitions are replaced whole (``replaceWhere``, no
   MERGE of a table against itself), and so is the pending set of every processed partition;
   incremental partitions are MERGEd, a row replacing the stored one only if its
   ``state_offset`` is not lower (a replayed or older batch never overwrites a later state).
5. **Progress** last. Before step 4 the processed partitions are marked in flight; a run killed
   between its writes leaves the mark, and the next run recomputes those partitions from the start.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipelines.gold.groups import merge_condition, pairs, replace_partitions, run_groups
from pipelines.reference.replay import DEFAULT_RETENTION_MS
from pipelines.runtime import faults, lake
from pipelines.runtime.lake import partitions_predicate

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.runtime.tables import Tables

log = logging.getLogger("offsets_lakehouse")

PART = ("cluster", "offsets_partition")

EVENT_COLUMNS = """cluster string, offsets_partition int, record_offset bigint, batch_id bigint, timestamp_ms bigint,
producer_id bigint, transactional boolean, record_type int, value_version int, kind string, group_id string,
topic string, partition int, committed_offset bigint, leader_epoch int, metadata string, commit_timestamp bigint,
expire_timestamp bigint, topic_id string, protocol_type string, generation int, assignor string, leader string,
current_state_timestamp bigint, member_count int, control_type_id int"""

STATE_COLUMNS = "cluster string, offsets_partition int, row_kind string, payload string"
# new-protocol group record types gold replays: consumer group metadata and target assignment
# metadata, share and streams group metadata
NEW_GROUP_TYPES = "3, 6, 11, 17"


@dataclass
class GoldResult:
    mode: str = "incremental"
    partitions_incremental: int = 0
    partitions_recomputed: int = 0
    events: int = 0
    offsets_rows: int = 0
    pending_rows: int = 0
    group_rows: int = 0
    recomputed: list[str] = field(default_factory=list)
    derived_rows: dict[str, int] = field(default_factory=dict)  # group tables recomputed this run
    purged: int = 0  # soft-deleted current_offsets rows past their retention, removed
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per step, for operators and benchmarks

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        self.seconds[name] = round(time.perf_counter() - start, 1)
        log.info("gold: %s took %.1f s", name, self.seconds[name])

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _silver(spark: SparkSession, tables: Tables, table: str) -> DataFrame | None:
    return lake.read(spark, tables.path("silver", table))


def _sources(spark: SparkSession, tables: Tables) -> list[tuple[DataFrame, Any, Any]]:
    """The silver rows gold replays, per table: (rows, kind column, record_type override)."""
    from pyspark.sql import functions as F

    out = []
    commits = _silver(spark, tables, "offset_commits")
    if commits is not None:
        out.append((commits, F.lit("commit"), None))
    tombs = _silver(spark, tables, "tombstones")
    if tombs is not None:
        kind = (
            F.when(F.col("record_type").isin(0, 1), "offset_tombstone")
            .when(F.col("record_type") == 2, "group_tombstone")
            .otherwise("consumer_group_tombstone")
        )
        out.append((tombs.where(f"record_type IN (0, 1, 2, {NEW_GROUP_TYPES})"), kind, None))
    groups = _silver(spark, tables, "group_metadata")
    if groups is not None:
        out.append((groups.withColumnRenamed("protocol", "assignor"), F.lit("group"), None))
    # new-protocol group records (gold/state.py): the group epoch, and a consumer group's target
    # assignment epoch, which decide whether the group exists and in which state Kafka lists it
    cgroups = _silver(spark, tables, "consumer_group_metadata")
    if cgroups is not None:
        out.append((cgroups.withColumn("generation", F.col("epoch")), F.lit("consumer_group"), None))
    targets = _silver(spark, tables, "consumer_group_target_assignment_metadata")
    if targets is not None:
        out.append((targets.withColumn("generation", F.col("assignment_epoch")), F.lit("consumer_group"), None))
    for table in ("share_group_records", "streams_group_records"):
        df = _silver(spark, tables, table)
        if df is not None:
            metadata = df.where("metadata IS NOT NULL").withColumn("generation", F.col("metadata.epoch"))
            out.append((metadata, F.lit("consumer_group"), None))
    markers = _silver(spark, tables, "transaction_markers")
    if markers is not None:
        out.append((markers.where("control_type_id IN (0, 1)"), F.lit("marker"), F.lit(None)))
    return out


def positions_frame(spark: SparkSession, tables: Tables) -> DataFrame | None:
    """(cluster, offsets_partition, record_offset) of every event: all the plan needs, and a narrow
    scan, so an incremental run reads whole events only where it replays."""
    frames = [df.select(*PART, "record_offset") for df, _, _ in _sources(spark, tables)]
    if not frames:
        return None
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def events_frame(spark: SparkSession, tables: Tables, where: str = "true") -> DataFrame:
    """The silver rows gold replays that satisfy ``where`` (over cluster, offsets_partition and
    record_offset), in the event schema (one row per record), with the batch each came in."""
    from pyspark.sql import functions as F

    typed = dict(c.strip().split(" ", 1) for c in EVENT_COLUMNS.replace("\n", " ").split(","))
    cols = list(typed)
    parts = []
    for df, kind, record_type in _sources(spark, tables):
        df = (
            df.where(where)
            .withColumn("kind", kind)
            .withColumn("timestamp_ms", F.unix_millis("timestamp"))
            .withColumn("record_type", F.col("record_type") if record_type is None else record_type)
        )
        present = set(df.columns)
        # records from segments carry their batch's base offset; from the Kafka source each record
        # is its own batch
        batch_id = F.coalesce("batch_base_offset", "record_offset").alias("batch_id")
        parts.append(
            df.select(
                *[
                    batch_id if c == "batch_id" else (F.col(c) if c in present else F.lit(None)).cast(typed[c]).alias(c)
                    for c in cols
                ]
            )
        )
    if not parts:
        return spark.createDataFrame([], EVENT_COLUMNS.replace("\n", " "))
    events = parts[0]
    for p in parts[1:]:
        events = events.unionByName(p)
    return events


def _plan(spark: SparkSession, tables: Tables, full_refresh: bool) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    positions = positions_frame(spark, tables)
    if positions is None:
        return []
    progress = spark.read.format("delta").load(tables.path("gold", "partition_progress"))
    stored = ["applied_offset", "events_applied", "in_flight_run"]  # one progress row per partition
    rows = (
        positions.join(F.broadcast(progress.select(*PART, *stored)), list(PART), "left")
        .groupBy(*PART, *stored)
        .agg(
            F.count("*").alias("events"),
            F.max("record_offset").alias("max_offset"),
            F.count_if(F.col("record_offset") <= F.col("applied_offset")).alias("events_at_or_below"),
        )
    )
    plan = []
    for r in rows.collect():
        if full_refresh:
            mode, why = "full", "full refresh"
        elif r["applied_offset"] is None:
            mode, why = "full", "first run"
        elif r["in_flight_run"] is not None:
            mode, why = "full", f"run {r['in_flight_run']} stopped between its MERGEs"
        elif (r["events_at_or_below"] or 0) != r["events_applied"]:
            mode, why = "full", f"late data at or below applied offset {r['applied_offset']}"
        elif r["max_offset"] > r["applied_offset"]:
            mode, why = "incremental", ""
        else:
            continue
        plan.append(
            {
                "cluster": r["cluster"],
                "offsets_partition": r["offsets_partition"],
                "mode": mode,
                "why": why,
                "from_offset": None if mode == "full" else r["applied_offset"],
                "applied_offset": r["max_offset"],
                "events_applied": r["events"],
            }
        )
    return plan


def _replay_predicate(plan: list[dict[str, Any]]) -> str:
    """The events the plan replays: every event of a recomputed partition, those after the applied
    offset of an incremental one. Over partition columns first, so silver and bronze prune files."""
    full = [(p["cluster"], p["offsets_partition"]) for p in plan if p["mode"] == "full"]
    terms = [f"({partitions_predicate(full)})"] if full else []
    for p in plan:
        if p["mode"] != "full":
            one = partitions_predicate([(p["cluster"], p["offsets_partition"])])
            terms.append(f"({one} AND record_offset > {int(p['from_offset'])})")
    return " OR ".join(terms) or "false"


def _state(spark: SparkSession, tables: Tables, incremental: str) -> DataFrame:
    """Persisted gold rows of the incrementally processed partitions, as JSON payloads."""
    from pyspark.sql import functions as F

    out = None
    for table, kind in (
        ("current_offsets", "offset"),
        ("pending_transactions", "pending"),
        ("current_groups", "group"),
    ):
        df = spark.read.format("delta").load(tables.path("gold", table)).where(incremental)
        df = df.select(
            *PART,
            F.lit(kind).alias("row_kind"),
            F.to_json(F.struct(*df.columns), {"ignoreNullFields": "false"}).alias("payload"),
        )
        out = df if out is None else out.unionByName(df)
    progress = spark.read.format("delta").load(tables.path("gold", "partition_progress"))
    prog = progress.where(incremental).select(
        *PART,
        F.lit("progress").alias("row_kind"),
        F.to_json(F.struct("applied_offset"), {"ignoreNullFields": "false"}).alias("payload"),
    )
    return out.unionByName(prog)  # type: ignore[union-attr]


def _replay_groups(retention_ms: int):
    """The cogrouped function run in Spark tasks (Arrow in, Arrow out)."""

    def run(events, state):  # pyarrow.Table, pyarrow.Table -> pyarrow.Table
        import pyarrow as pa

        from pipelines.gold.state import PartitionState, replay_partition

        rows = events.to_pylist()
        srows = state.to_pylist()
        key = rows[0] if rows else srows[0]
        cluster, part = key["cluster"], key["offsets_partition"]
        ps = PartitionState()
        for s in srows:
            payload = json.loads(s["payload"])
            if s["row_kind"] == "offset":
                ps.offsets.append(payload)
            elif s["row_kind"] == "pending":
                ps.pending.append(payload)
            elif s["row_kind"] == "group":
                ps.groups.append(payload)
            else:
                ps.applied_offset = payload["applied_offset"]
        rows.sort(key=lambda e: e["record_offset"])
        res = replay_partition(part, ps, rows, retention_ms)
        out = [("offset", r) for r in res.offsets] + [("pending", r) for r in res.pending]
        out += [("group", r) for r in res.groups] + [("history", r) for r in res.history]
        return pa.table(
            {
                "cluster": [cluster] * len(out),
                "offsets_partition": [part] * len(out),
                "row_kind": [k for k, _ in out],
                "payload": [json.dumps(r) for _, r in out],
            },
            schema=pa.schema(
                [
                    ("cluster", pa.string()),
                    ("offsets_partition", pa.int32()),
                    ("row_kind", pa.string()),
                    ("payload", pa.string()),
                ]
            ),
        )

    return run


def _merge(
    spark: SparkSession,
    tables: Tables,
    table: str,
    rows: DataFrame,
    key: list[str],
    processed: list[dict[str, Any]],
    replace_all: bool,
) -> None:
    """Write ``rows`` into a gold table. Recomputed partitions — with ``replace_all`` (pending: the
    rows are the complete set of every processed partition) all processed ones — are replaced
    whole with ``replaceWhere``: no MERGE of the table against itself. Incremental partitions are
    MERGEd: a row replaces the stored one only if its ``state_offset`` is not lower."""
    from delta.tables import DeltaTable

    path = tables.path("gold", table)
    columns = [c.name for c in tables.spec("gold", table).columns]
    replaced = processed if replace_all else [p for p in processed if p["mode"] == "full"]
    merged = [] if replace_all else [p for p in processed if p["mode"] != "full"]
    if replaced:
        replace_partitions(rows.select(*columns), path, replaced)
    if merged:
        source = rows.where(partitions_predicate(pairs(merged))).select(*columns)
        (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(source.alias("s"), merge_condition(key, merged))
            .whenMatchedUpdateAll("s.state_offset >= t.state_offset")
            .whenNotMatchedInsertAll()
            .execute()
        )


def run_gold(
    spark: SparkSession,
    tables: Tables,
    run_id: str,
    full_refresh: bool = False,
    retention_ms: int = DEFAULT_RETENTION_MS,
    soft_delete_retention_days: float | None = None,
) -> GoldResult:
    from pyspark.sql import functions as F

    for t in tables.specs["gold"]:
        tables.ensure("gold", t)
    tables.ensure_views("gold")
    result = GoldResult(mode="full refresh" if full_refresh else "incremental")
    with result.step("plan"):
        plan = _plan(spark, tables, full_refresh)
    if not plan:
        return result
    result.partitions_recomputed = sum(p["mode"] == "full" for p in plan)
    result.partitions_incremental = len(plan) - result.partitions_recomputed
    result.recomputed = [f"{p['cluster']}/{p['offsets_partition']}: {p['why']}" for p in plan if p["mode"] == "full"]
    plan_df = spark.createDataFrame(
        [(p["cluster"], p["offsets_partition"], p["mode"] == "full") for p in plan],
        "cluster string, offsets_partition int, recomputed boolean",
    )
    todo = events_frame(spark, tables, _replay_predicate(plan)).persist()
    try:
        incremental = [(p["cluster"], p["offsets_partition"]) for p in plan if p["mode"] != "full"]
        state = _state(spark, tables, partitions_predicate(incremental))
        out = (
            todo.groupBy(*PART)
            .cogroup(state.groupBy(*PART))
            .applyInArrow(_replay_groups(retention_ms), STATE_COLUMNS)
            .join(F.broadcast(plan_df), list(PART))
            .persist()
        )
        with result.step("read events and replay"):
            result.events = todo.count()
            out.count()

        def rows(kind: str, table: str) -> DataFrame:
            spec = tables.spec("gold", table)
            payload_schema = ", ".join(
                f"{c.name} {c.type}" for c in spec.columns if c.name not in (*PART, "updated_run_id")
            )
            df = out.where(F.col("row_kind") == kind).select(
                *PART, "recomputed", F.from_json("payload", payload_schema).alias("p")
            )
            df = df.select(*PART, "recomputed", "p.*").withColumn("updated_run_id", F.lit(run_id))
            return df

        # 1. mark in flight (a crash from here on makes the next run recompute these partitions)
        _upsert_progress(spark, tables, plan, run_id, in_flight=True)
        faults.point("gold.before_merge")
        offsets = rows("offset", "current_offsets")
        with result.step("MERGE current_offsets"):
            _merge(spark, tables, "current_offsets", offsets, [*PART, "group_id", "topic", "partition"], plan, False)
        faults.point("gold.between_merges")
        pending = rows("pending", "pending_transactions").drop("recomputed", "updated_run_id")
        with result.step("MERGE pending_transactions"):
            _merge(
                spark,
                tables,
                "pending_transactions",
                pending,
                [*PART, "producer_id", "group_id", "topic", "partition"],
                plan,
                True,
            )
        groups = rows("group", "current_groups")
        with result.step("MERGE current_groups"):
            _merge(spark, tables, "current_groups", groups, [*PART, "group_id", "protocol"], plan, False)
        history = rows("history", "offset_history").drop("recomputed")
        with result.step("MERGE offset_history"):
            _merge_history(spark, tables, history, plan, run_id)
        with result.step("group_generations and consumer_group_members"):
            result.derived_rows = run_groups(spark, tables, plan, run_id)
        if soft_delete_retention_days is not None:
            with result.step("purge soft deletes"):
                result.purged = _purge_deleted(spark, tables, todo, soft_delete_retention_days)
        result.offsets_rows = offsets.count()
        result.pending_rows = pending.count()
        result.group_rows = groups.count()
        _upsert_progress(spark, tables, plan, run_id, in_flight=False)
        out.unpersist()
    finally:
        todo.unpersist()
    return result


def _merge_history(
    spark: SparkSession, tables: Tables, history: DataFrame, plan: list[dict[str, Any]], run_id: str
) -> None:
    """MERGE offset_history (SCD type 2). A replay emits every state a key took in its events, each
    closed by the next; the interval that was open before an incremental run is closed here, by the
    key's first new state. Recomputed partitions are replaced whole."""
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    key = [*PART, "group_id", "topic", "partition"]
    target = DeltaTable.forPath(spark, tables.path("gold", "offset_history"))
    incremental = [(p["cluster"], p["offsets_partition"]) for p in plan if p["mode"] != "full"]
    first = Window.partitionBy(*key).orderBy("valid_from_offset")
    closers = None
    if incremental:
        inc = spark.createDataFrame(incremental, "cluster string, offsets_partition int")
        opening = (
            history.join(F.broadcast(inc), list(PART), "left_semi")
            .withColumn("n", F.row_number().over(first))
            .where("n = 1")
            .select(*key, F.col("valid_from_offset").alias("to_offset"), F.col("valid_from_timestamp").alias("to_ts"))
        )
        closers = (
            target.toDF()
            .where(f"({partitions_predicate(incremental)}) AND valid_to_offset IS NULL")
            .join(opening, key)
            .where(F.col("valid_from_offset") < F.col("to_offset"))
            .select(
                *key,
                "valid_from_offset",
                F.col("to_offset").alias("valid_to_offset"),
                F.col("to_ts").alias("valid_to_timestamp"),
                F.lit(run_id).alias("updated_run_id"),
            )
        )
    columns = [c.name for c in tables.spec("gold", "offset_history").columns]
    recomputed = [p for p in plan if p["mode"] == "full"]
    if recomputed:  # replaced whole: the replay emitted every state of these partitions
        replace_partitions(history.select(*columns), tables.path("gold", "offset_history"), recomputed)
    if closers is None:
        return
    merged = [p for p in plan if p["mode"] != "full"]
    source = history.where(partitions_predicate(pairs(merged))).withColumn("closer", F.lit(False))
    source = source.unionByName(closers.withColumn("closer", F.lit(True)), allowMissingColumns=True)
    (
        target.alias("t")
        .merge(source.alias("s"), merge_condition([*key, "valid_from_offset"], merged, op="="))
        .whenMatchedUpdate(
            "s.closer",
            set={c: f"s.{c}" for c in ("valid_to_offset", "valid_to_timestamp", "updated_run_id")},
        )
        .whenMatchedUpdate("NOT s.closer", set={c: f"s.{c}" for c in columns})
        .whenNotMatchedInsert("NOT s.closer", values={c: f"s.{c}" for c in columns})
        .execute()
    )


def _purge_deleted(spark: SparkSession, tables: Tables, events: DataFrame, days: float) -> int:
    """Remove soft-deleted current_offsets rows deleted more than ``days`` before the latest event
    of their partition (log time, so replaying old files purges like the live cluster would). Safe:
    silver keeps the tombstone, and any event at or below a partition's applied offset makes the
    next run recompute it from all of silver, so a purged key cannot come back to life."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    now = events.groupBy(*PART).agg(F.max("timestamp_ms").alias("log_now"))
    cutoff = int(days * 86_400_000)
    target = DeltaTable.forPath(spark, tables.path("gold", "current_offsets"))
    (
        target.alias("t")
        .merge(now.alias("s"), "t.cluster = s.cluster AND t.offsets_partition = s.offsets_partition AND t.deleted")
        .whenMatchedDelete(f"t.deleted_timestamp < s.log_now - {cutoff}")
        .execute()
    )
    metrics = lake.last_commit(spark, tables.path("gold", "current_offsets"))["operationMetrics"] or {}
    return int(metrics.get("numTargetRowsDeleted", 0))


def _upsert_progress(
    spark: SparkSession, tables: Tables, plan: list[dict[str, Any]], run_id: str, in_flight: bool
) -> None:
    from delta.tables import DeltaTable

    target = DeltaTable.forPath(spark, tables.path("gold", "partition_progress"))
    if in_flight:
        marks = spark.createDataFrame(
            [(p["cluster"], p["offsets_partition"]) for p in plan], "cluster string, offsets_partition int"
        )
        (
            target.alias("t")
            .merge(marks.alias("s"), "t.cluster = s.cluster AND t.offsets_partition = s.offsets_partition")
            .whenMatchedUpdate(set={"in_flight_run": f"'{run_id}'"})
            .execute()
        )
        return
    rows = spark.createDataFrame(
        [
            (
                p["cluster"],
                p["offsets_partition"],
                p["applied_offset"],
                p["events_applied"],
                run_id,
                p["mode"] == "full",
                None,
            )
            for p in plan
        ],
        "cluster string, offsets_partition int, applied_offset bigint, events_applied bigint, run_id string, "
        "recomputed boolean, in_flight_run string",
    )
    (
        target.alias("t")
        .merge(rows.alias("s"), "t.cluster = s.cluster AND t.offsets_partition = s.offsets_partition")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
