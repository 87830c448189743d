"""Gold: the coordinator's state by an ordered replay per (cluster, offsets partition), on Spark.

One run (docs/gold.md):

1. **Plan** (:mod:`pipelines.gold.plan`): which partitions have new silver rows, from the change
   data feed of the silver tables gold reads since the versions the last run consumed; each is
   *incremental* (only events after its applied offset), or *full* (no progress yet, late data at
   or below the applied offset, rows silver rewrote or removed, a previous run that died between
   its writes, or ``--full-refresh``): replayed from its start. Nothing new: no job, no commit.
2. **Replay**: the planned events and the persisted rows of the incremental partitions, co-grouped
   by partition; each group runs :class:`pipelines.gold.engine.PartitionReplay` in a Spark task and
   returns the partition's complete current state, the history and generation intervals it
   closed, and the open ones.
3. **Write**, after marking the partitions in flight: each current table's rows of the processed
   partitions are replaced (``replaceWhere``); offset_history and group_generations replace only
   the partitions' open intervals (and, for a recomputed partition, all of its rows). No MERGE.
4. **Progress** last, carrying the silver versions consumed. A run killed between its writes
   leaves the in-flight mark, and the next run recomputes those partitions from their start.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.gold.engine import DEFAULT_RETENTION_MS, PartitionInput, PartitionReplay
from pipelines.gold.events import events_frame
from pipelines.gold.lag import build_lag
from pipelines.gold.plan import PART, Pair, Plan, make_plan, progress_rows
from pipelines.runtime import faults, lake
from pipelines.runtime.ddl import arrow_type
from pipelines.runtime.lake import partitions_predicate
from pipelines.runtime.steps import Steps
from pipelines.runtime.tables import Tables
from pipelines.silver.topics import fill_topic_names, topic_names

if TYPE_CHECKING:
    from pipelines.runtime.config import KafkaSource

__all__ = ["GOLD_TABLES", "GoldResult", "run_gold"]

log = logging.getLogger("offsets_lakehouse")

# the tables the replay writes, each a struct column of its output (and of the state it reads)
CURRENT = ("current_offsets", "pending_transactions", "current_groups", "consumer_group_members")
# interval tables: a run rewrites only a partition's open intervals -> (table, end column)
INTERVALS = {"offset_history": "valid_to_offset", "group_generations": "ended_offset"}
GOLD_TABLES = (*CURRENT, *INTERVALS)
MEMBERS = "consumer_group_members"
# its assignments name topics by id; gold fills in the names silver.topic_ids knows when it writes
NAMED_ARRAYS = ("target_partitions", "assigned_partitions", "partitions_pending_revocation")
PROGRESS = "struct<applied_offset:bigint,events:bigint,log_now:bigint,purged:bigint>"


@dataclass
class GoldResult:
    mode: str = "incremental"
    partitions_incremental: int = 0
    partitions_recomputed: int = 0
    events: int = 0
    offsets_rows: int = 0  # current_offsets rows of the processed partitions
    pending_rows: int = 0
    group_rows: int = 0
    recomputed: list[str] = field(default_factory=list)
    derived_rows: dict[str, int] = field(default_factory=dict)  # rows written per table
    purged: int = 0  # soft-deleted current_offsets rows past their retention, removed
    plan_source: str = ""  # change data feed, or a scan of silver (first run, feed unavailable)
    lag: dict[str, Any] = field(default_factory=dict)  # pipelines/gold/lag.py's report
    steps: Steps = field(default_factory=lambda: Steps("gold"))  # wall time per step

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _payload(tables: Tables, table: str) -> list[Any]:
    """A gold table's columns in its struct of the replay's state and output (all but the partition)."""
    return [c for c in tables.spec("gold", table).columns if c.name not in PART]


def _struct_ddl(tables: Tables, table: str) -> str:
    return "struct<" + ",".join(f"`{c.name}`:{c.type}" for c in _payload(tables, table)) + ">"


# the replay's output: per processed partition and table, its rows as one Arrow IPC stream — a few
# rows per partition to cache, and each table's write reads only its own (one row per gold row
# with every table's columns made each write scan all of them)
OUTPUT_DDL = "cluster string, offsets_partition int, table string, rows bigint, changed boolean, data binary"
PROGRESS_TABLE = "progress"


def _arrow_schema(tables: Tables, table: str) -> pa.Schema:
    return pa.schema([pa.field(c.name, arrow_type(c.type)) for c in tables.spec("gold", table).columns])


def _state_frame(spark: SparkSession, tables: Tables, plan: Plan) -> DataFrame:
    """The persisted rows the incremental partitions resume from, in the output's layout: each
    current table's rows, the open intervals, and the applied offset."""
    where = partitions_predicate(plan.incremental)

    def rows(table: str) -> DataFrame | None:
        if plan.incremental:
            return lake.read(spark, tables.path("gold", table), where)
        # nothing resumes (a first run, a full refresh): no scan, an empty frame of the table's columns
        return spark.createDataFrame([], tables.spec("gold", table).ddl_columns())

    out = None
    for table in (*GOLD_TABLES, "progress"):
        if table == "progress":
            df = rows("partition_progress")
            value = F.struct(F.col("applied_offset"), *(F.lit(None).cast("bigint").alias(c) for c in
                                                        ("events", "log_now", "purged")))  # fmt: skip
        else:
            df = rows(table)
            if table in INTERVALS:
                df = df.where(F.col(INTERVALS[table]).isNull())
            value = F.struct(*[F.col(c.name) for c in _payload(tables, table)])
        cols = [F.lit(None).cast(_struct_ddl(tables, t)).alias(t) for t in GOLD_TABLES]
        cols.append(F.lit(None).cast(PROGRESS).alias("progress"))
        names = [*GOLD_TABLES, "progress"]
        cols[names.index(table)] = value.alias(table)
        df = df.select(*PART, *cols)  # type: ignore[union-attr]
        out = df if out is None else out.unionByName(df)
    return out  # type: ignore[return-value]


def _flatten(state: pa.Table, table: str) -> pa.Table | None:
    col = state.column(table)
    rows = state.filter(col.is_valid())
    if not rows.num_rows:
        return None
    return pa.Table.from_struct_array(rows.column(table).combine_chunks())


def _replay_function(run_id: str, retention_ms: int, soft_delete_ms: int | None, schemas: dict[str, pa.Schema]):
    """The co-grouped function run in Spark tasks: Arrow in, Arrow out, one partition a call."""

    def run(events: pa.Table, state: pa.Table) -> pa.Table:
        first = events if events.num_rows else state
        cluster, part = first.column("cluster")[0].as_py(), first.column("offsets_partition")[0].as_py()
        progress = _flatten(state, "progress")
        inp = PartitionInput(
            cluster,
            part,
            events.sort_by("record_offset"),
            offsets=_flatten(state, "current_offsets"),
            pending=_flatten(state, "pending_transactions"),
            groups=_flatten(state, "current_groups"),
            history=_flatten(state, "offset_history"),
            generations=_flatten(state, "group_generations"),
            members=_flatten(state, "consumer_group_members"),
            applied_offset=None if progress is None else progress.column("applied_offset")[0].as_py(),
        )
        out = PartitionReplay(inp, run_id, retention_ms, soft_delete_ms).run()
        full = progress is None
        done = pa.table(
            {
                "applied_offset": pa.array([out.applied_offset], pa.int64()),
                "events": pa.array([out.events], pa.int64()),
                "log_now": pa.array([out.log_now], pa.int64()),
                "purged": pa.array([out.purged], pa.int64()),
            }
        )
        tables = {t: _with_partition(out.tables[t], cluster, part, schema) for t, schema in schemas.items()}
        tables[PROGRESS_TABLE] = done
        n = len(tables)
        return pa.table(
            {
                "cluster": pa.array([cluster] * n, pa.string()),
                "offsets_partition": pa.array([part] * n, pa.int32()),
                "table": pa.array(list(tables), pa.string()),
                "rows": pa.array([t.num_rows for t in tables.values()], pa.int64()),
                # a recomputed partition is rewritten whole; else only the tables the run changed
                "changed": pa.array([full or out.changed.get(t, True) for t in tables], pa.bool_()),
                "data": pa.array([_ipc(t) for t in tables.values()], pa.binary()),
            }
        )

    return run


def _with_partition(rows: pa.Table, cluster: str, part: int, schema: pa.Schema) -> pa.Table:
    """A gold table's rows of one partition in its declared columns and types."""
    n = rows.num_rows
    cols = []
    for f in schema:
        if f.name == "cluster":
            cols.append(pa.array([cluster] * n, f.type))
        elif f.name == "offsets_partition":
            cols.append(pa.array([part] * n, f.type))
        else:
            cols.append(rows.column(f.name).cast(f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _unpack(batches):  # Iterator[pa.RecordBatch] -> Iterator[pa.RecordBatch]
    """mapInArrow body: the rows of the IPC streams in the ``data`` column."""
    for batch in batches:
        for blob in batch.column("data").to_pylist():
            yield from pa.ipc.open_stream(blob)


def _progress_of(out: DataFrame) -> dict[tuple[str, int], dict[str, Any]]:
    """Per processed partition: applied offset, events, log time, soft deletes purged."""
    done = {}
    for r in out.where(F.col("table") == PROGRESS_TABLE).select(*PART, "data").collect():
        [row] = pa.ipc.open_stream(r["data"]).read_all().to_pylist()
        done[(r["cluster"], r["offsets_partition"])] = row
    return done


def _write(spark: SparkSession, tables: Tables, out: DataFrame, plan: Plan, changed: dict[str, list[Pair]]) -> None:
    """Write each table's rows of the partitions whose rows the run changed (replaceWhere, see the
    module docstring); a table no partition changed is not written (no commit)."""
    predicates = {}
    for table, pairs in changed.items():
        if table not in INTERVALS:
            predicates[table] = partitions_predicate(pairs)
            continue
        end = INTERVALS[table]
        full = [p for p in pairs if p not in plan.incremental_from]
        terms = [f"({partitions_predicate(full)})"] if full else []
        for pair in sorted(set(pairs) - set(full)):
            applied = int(plan.incremental_from[pair])
            terms.append(f"({partitions_predicate([pair])} AND ({end} IS NULL OR {end} > {applied}))")
        predicates[table] = " OR ".join(terms)
    names = topic_names(spark, tables).persist() if changed.get(MEMBERS) else None

    def write(table: str) -> None:
        ddl = tables.spec("gold", table).ddl_columns()
        # the replay's tasks each hold whole partitions: one file per partition (a file has a fixed cost)
        blobs = out.where((F.col("table") == table) & F.col("changed")).select("data")
        rows = blobs.mapInArrow(_unpack, ddl)
        if table == MEMBERS and names is not None:
            rows = fill_topic_names(rows, list(NAMED_ARRAYS), names)
        lake.replace_where(rows, tables.path("gold", table), predicates[table])

    todo = [t for t in GOLD_TABLES if changed.get(t)]
    try:
        lake.first_then_parallel(todo, write, lambda: faults.point("gold.between_merges"))
    finally:
        if names is not None:
            names.unpersist()


def _refresh_names(spark: SparkSession, tables: Tables) -> bool:
    """silver learnt topic ids: fill the names into consumer_group_members' assignments (every
    partition; a small table, rewritten only where a name changed). True when it wrote."""
    path = tables.path("gold", MEMBERS)
    rows = lake.read(spark, path)
    if rows is None:
        return False
    named = fill_topic_names(rows, list(NAMED_ARRAYS), topic_names(spark, tables))
    key = ("cluster", "offsets_partition", "group_id", "member_id")
    columns = [c.name for c in tables.spec("gold", MEMBERS).columns if c.name != "updated_run_id"]
    return lake.replace_if_changed(spark, path, named, "true", key, columns)[0]


def _rebuild_if_outdated(spark: SparkSession, tables: Tables) -> bool:
    """Gold tables an older version wrote with another partitioning cannot take this version's
    writes: gold is derived from silver, so it is dropped and rebuilt (a full refresh). True then."""
    outdated = []
    for name, spec in tables.specs["gold"].items():
        path = tables.path("gold", name)
        if lake.exists(spark, path) and lake.partition_columns(spark, path) != list(spec.partitioned_by):
            outdated.append(name)
    if not outdated:
        return False
    log.warning("gold: %s laid out by an older version; rebuilding gold from silver", ", ".join(outdated))
    for name in tables.specs["gold"]:
        spark.sql(f"DROP TABLE IF EXISTS {tables.name('gold', name)}")
        lake.drop(spark, tables.path("gold", name))
    return True


def run_gold(
    spark: SparkSession,
    tables: Tables,
    run_id: str,
    full_refresh: bool = False,
    retention_ms: int = DEFAULT_RETENTION_MS,
    soft_delete_retention_days: float | None = None,
    admin_sources: dict[str, KafkaSource] | None = None,
) -> GoldResult:
    """The replay and its writes, then consumer lag on the tables they left (pipelines/gold/lag.py;
    ``admin_sources``: the job's sources whose end offsets are fetched with the Admin API now)."""
    result = _replay(spark, tables, run_id, full_refresh, retention_ms, soft_delete_retention_days)
    with result.steps("lag"):
        result.lag = build_lag(spark, tables, run_id, admin_sources).to_json()
    return result


def _replay(
    spark: SparkSession,
    tables: Tables,
    run_id: str,
    full_refresh: bool,
    retention_ms: int,
    soft_delete_retention_days: float | None,
) -> GoldResult:
    full_refresh = _rebuild_if_outdated(spark, tables) or full_refresh
    lake.in_parallel([lambda t=t: tables.ensure("gold", t) for t in tables.specs["gold"]])  # a first run creates them
    tables.ensure_views("gold")
    result = GoldResult(mode="full refresh" if full_refresh else "incremental")
    with result.steps("plan"):
        plan = make_plan(spark, tables, full_refresh)
    result.plan_source = plan.source
    if not plan.partitions:
        if plan.names_changed:
            with result.steps("topic names"):
                _refresh_names(spark, tables)
        if plan.consumed_changed:  # silver moved but nothing gold replays did: remember the versions
            progress_rows(spark, tables, plan, {}, run_id)
        return result
    result.partitions_recomputed = len(plan.full)
    result.partitions_incremental = len(plan.incremental)
    result.recomputed = [f"{c}/{p}: {why}" for (c, p), why in sorted(plan.why.items())]
    schemas = {t: _arrow_schema(tables, t) for t in GOLD_TABLES}
    soft_ms = None if soft_delete_retention_days is None else int(soft_delete_retention_days * 86_400_000)
    events = events_frame(spark, tables, plan.replay_predicate(), plan.replay_from())
    state = _state_frame(spark, tables, plan)
    replayed = (
        events.groupBy(*PART)
        .cogroup(state.groupBy(*PART))
        .applyInArrow(_replay_function(run_id, retention_ms, soft_ms, schemas), OUTPUT_DDL)
    )
    with result.steps("read events and replay"):
        # a checkpoint, not a cache: the replay read the gold tables it is about to write, and
        # Spark re-computes cached plans over a table written to (each write would replay again,
        # on the tables as the earlier writes left them)
        out = replayed.localCheckpoint(eager=True)
    try:
        with result.steps("count"):
            listing = out.select(*PART, "table", "rows", "changed").collect()
            rows = {t: sum(r["rows"] for r in listing if r["table"] == t) for t in GOLD_TABLES}
            changed = {
                t: sorted((r[0], r[1]) for r in listing if r["table"] == t and r["changed"]) for t in GOLD_TABLES
            }
            done = _progress_of(out)
        result.events = sum(p["events"] for p in done.values())
        result.purged = sum(p["purged"] for p in done.values())
        result.derived_rows = {t: rows.get(t, 0) for t in GOLD_TABLES}
        result.offsets_rows = result.derived_rows["current_offsets"]
        result.pending_rows = result.derived_rows["pending_transactions"]
        result.group_rows = result.derived_rows["current_groups"]
        # a crash from here on makes the next run recompute these partitions from their start
        progress_rows(spark, tables, plan, done, run_id, in_flight=True)
        faults.point("gold.before_merge")
        with result.steps("write tables"):
            _write(spark, tables, out, plan, changed)
        if plan.names_changed and plan.progress:  # a first run wrote every member row with today's names
            with result.steps("topic names"):
                _refresh_names(spark, tables)
        with result.steps("progress"):
            progress_rows(spark, tables, plan, done, run_id)
    finally:
        out.unpersist()
    return result
