"""Which (cluster, offsets partition) a gold run replays, and how; and the progress it leaves.

``gold.partition_progress`` holds per partition the last applied log offset and the events
applied; the latest commit of that table carries the versions of the silver tables the run
consumed (``{"silver_versions": {...}}``). A run reads the change data feed of each silver table
that moved since, and plans:

* **incremental** — every new row lies above the partition's applied offset: replay the new
  events on the persisted state;
* **full** — no progress yet, a new row at or below the applied offset (late data, a re-decoded
  quarantine row), a row silver rewrote or removed (a quality move, a resolved topic name, a
  silver full refresh), a previous run that died between its writes, or ``--full-refresh``:
  replay the partition from its start.

Without consumed versions (the first run, a lakehouse from before they were recorded) or when a
feed cannot serve the range (switched on later, files vacuumed), the plan scans the events'
positions instead and compares their count at or below the applied offset with the count
recorded: slower, same answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipelines.gold.events import SOURCE_TABLES, positions_frame
from pipelines.runtime import lake
from pipelines.runtime.lake import partitions_predicate
from pipelines.runtime.tables import Tables
from pipelines.silver.topics import TOPIC_ARRAYS

__all__ = ["PART", "Plan", "make_plan", "progress_rows"]

log = logging.getLogger("offsets_lakehouse")

PART = ("cluster", "offsets_partition")
Pair = tuple[str, int]
# what reading a change data feed raises when it cannot serve the range
FEED_ERRORS = (AnalysisException, Py4JJavaError)
# silver updates rows of these tables only to fill in topic names it learnt; gold names topics
# itself when it writes (build.py), so such updates change nothing gold replays
NAMED_ONLY = frozenset(t for t, _, _ in TOPIC_ARRAYS)
TOPIC_IDS = "topic_ids"
PROGRESS_COLUMNS = ("cluster", "offsets_partition", "applied_offset", "events_applied", "run_id", "recomputed",
                    "in_flight_run")  # fmt: skip


@dataclass
class Plan:
    source: str  # change data feed, scan, full refresh, nothing new
    versions: dict[str, int | None]  # silver versions this run consumes
    consumed: dict[str, int | None] | None  # the versions the last run consumed
    why: dict[Pair, str] = field(default_factory=dict)  # recomputed partitions, with why
    incremental_from: dict[Pair, int] = field(default_factory=dict)  # incremental partitions -> applied offset
    events_before: dict[Pair, int] = field(default_factory=dict)  # events applied before (incremental)
    progress: dict[Pair, dict[str, Any]] = field(default_factory=dict)  # partition_progress rows

    @property
    def full(self) -> list[Pair]:
        return sorted(self.why)

    @property
    def incremental(self) -> list[Pair]:
        return sorted(self.incremental_from)

    @property
    def pairs(self) -> list[Pair]:
        return sorted([*self.why, *self.incremental_from])

    @property
    def partitions(self) -> int:
        return len(self.why) + len(self.incremental_from)

    @property
    def consumed_changed(self) -> bool:
        return self.consumed != self.versions

    @property
    def names_changed(self) -> bool:
        """silver.topic_ids moved since the last run: topic names gold wrote may be missing."""
        return self.consumed is None or self.consumed.get(TOPIC_IDS) != self.versions.get(TOPIC_IDS)

    def replay_predicate(self) -> str:
        """A predicate on the partition columns and ``record_offset`` that holds for every event the
        plan replays (and maybe a few more): what lets Delta skip files. Kept to one term per
        cluster — a term per partition made planning the read take seconds."""
        low = -1 if self.why or not self.incremental_from else min(self.incremental_from.values())
        return f"({partitions_predicate(self.pairs)}) AND record_offset > {int(low)}" if self.pairs else "false"

    def replay_from(self) -> list[tuple[str, int, int]]:
        """(cluster, offsets partition, offset after which its events replay): -1 for a recomputed
        partition, the applied offset for an incremental one."""
        return [(c, p, -1) for c, p in self.full] + [
            (c, p, int(o)) for (c, p), o in sorted(self.incremental_from.items())
        ]


def _progress(spark: SparkSession, tables: Tables) -> dict[Pair, dict[str, Any]]:
    rows = lake.read_arrow(spark, tables.path("gold", "partition_progress"), PROGRESS_COLUMNS)
    return {} if rows is None else {(r["cluster"], r["offsets_partition"]): r for r in rows.to_pylist()}


def make_plan(spark: SparkSession, tables: Tables, full_refresh: bool) -> Plan:
    versions = {t: lake.version(spark, tables.path("silver", t)) for t in (*SOURCE_TABLES, TOPIC_IDS)}
    meta = lake.latest_metadata(spark, tables.path("gold", "partition_progress")) or {}
    consumed = meta.get("silver_versions")
    plan = Plan("nothing new", versions, consumed, progress=_progress(spark, tables))
    if full_refresh:
        plan.source = "full refresh"
        return _from_scan(spark, tables, plan, "full refresh")
    if consumed is None:
        plan.source = "scan"
        return _from_scan(spark, tables, plan)
    in_flight = {pair for pair, r in plan.progress.items() if r["in_flight_run"]}
    moved = [t for t in SOURCE_TABLES if versions[t] != consumed.get(t)]
    if not moved and not in_flight:
        return plan  # nothing to replay (topic names, if silver learnt any, are refreshed by the caller)
    try:
        rows = _feed(spark, tables, moved, versions, consumed)
    except FEED_ERRORS as exc:
        log.warning("gold: change data feed of silver unavailable (%s); planning from a scan", str(exc).split("\n")[0])
        plan.source = "scan"
        return _from_scan(spark, tables, plan)
    plan.source = "change data feed"
    for pair in in_flight:
        plan.why[pair] = f"run {plan.progress[pair]['in_flight_run']} stopped between its writes"
    for r in rows:
        pair = (r["cluster"], r["offsets_partition"])
        prog = plan.progress.get(pair)
        if pair in plan.why:
            continue
        if prog is None or prog["applied_offset"] is None:
            plan.why[pair] = "first run"
        elif r["rewritten"]:
            plan.why[pair] = "silver rewrote or removed rows"
        elif r["min_offset"] <= prog["applied_offset"]:
            plan.why[pair] = f"late data at or below applied offset {prog['applied_offset']}"
        else:
            plan.incremental_from[pair] = prog["applied_offset"]
            plan.events_before[pair] = prog["events_applied"]
    return plan


def _feed(
    spark: SparkSession,
    tables: Tables,
    moved: list[str],
    versions: dict[str, int | None],
    consumed: dict[str, int | None],
) -> list[dict[str, Any]]:
    """Per partition, over the silver tables that moved: the lowest new record offset, and
    whether any row was rewritten or removed (anything but an insert). Read on the driver (the
    feed of an increment is small)."""
    cols = [*PART, "record_offset"]
    parts = []
    for table in moved:
        path, now, before = tables.path("silver", table), versions[table], consumed.get(table)
        if now is None:  # the table went away: everything it held is gone
            raise AnalysisException(f"silver.{table} no longer exists")
        if before is None:  # a table new since: all of it is new
            rows = lake.read_arrow(spark, path, cols)
            rows = rows.append_column("_change_type", pa.array(["insert"] * rows.num_rows, pa.string()))  # type: ignore[union-attr]
        else:
            rows = lake.changes_arrow(spark, path, before + 1, now, cols)
            if table in NAMED_ONLY:  # topic names silver filled in: nothing gold replays changed
                kind = rows.column("_change_type")
                rows = rows.filter(pc.invert(pc.is_in(kind, pa.array(["update_preimage", "update_postimage"]))))
        parts.append(rows.select([*cols, "_change_type"]).cast(_FEED_SCHEMA))
    if not parts:
        return []
    feed = pa.concat_tables(parts)
    insert = pc.equal(feed.column("_change_type"), "insert")
    feed = feed.append_column("_insert_offset", pc.if_else(insert, feed.column("record_offset"), None))
    feed = feed.append_column("_rewritten", pc.cast(pc.invert(insert), pa.int8()))
    grouped = feed.group_by(list(PART), use_threads=False).aggregate([("_insert_offset", "min"), ("_rewritten", "max")])
    return [
        {"cluster": r["cluster"], "offsets_partition": r["offsets_partition"], "min_offset": r["_insert_offset_min"],
         "rewritten": bool(r["_rewritten_max"])}
        for r in grouped.to_pylist()
    ]  # fmt: skip


_FEED_SCHEMA = pa.schema(
    [("cluster", pa.string()), ("offsets_partition", pa.int32()), ("record_offset", pa.int64()),
     ("_change_type", pa.string())]
)  # fmt: skip


def _from_scan(spark: SparkSession, tables: Tables, plan: Plan, force: str | None = None) -> Plan:
    """Plan from the positions of all events: a partition is incremental when exactly the events
    it applied lie at or below its applied offset and some lie above."""
    applied = {pair: r["applied_offset"] for pair, r in plan.progress.items() if r["applied_offset"] is not None}
    if force or not applied:
        # every partition replays from its start: which partitions silver holds decoded rows of is
        # all the plan needs, and silver's census says it in one small read
        held = _partitions_held(spark, tables)
        if held is not None:
            for pair in held:
                plan.why[pair] = force or "first run"
            return plan
    positions = positions_frame(spark, tables)
    if positions is None:
        return plan
    counts = positions.groupBy(*PART).agg(F.max("record_offset").alias("max_offset"), F.count("*").alias("events"))
    below: dict[Pair, int] = {}
    if applied and not force:
        marks = spark.createDataFrame(
            [(c, p, o) for (c, p), o in applied.items()], "cluster string, offsets_partition int, applied bigint"
        )
        rows = positions.join(F.broadcast(marks), list(PART)).where("record_offset <= applied")
        below = {(r[0], r[1]): r[2] for r in rows.groupBy(*PART).count().collect()}
    for r in counts.collect():
        pair = (r["cluster"], r["offsets_partition"])
        prog = plan.progress.get(pair)
        if force:
            plan.why[pair] = force
        elif prog is None or prog["applied_offset"] is None:
            plan.why[pair] = "first run"
        elif prog["in_flight_run"]:
            plan.why[pair] = f"run {prog['in_flight_run']} stopped between its writes"
        elif below.get(pair, 0) != prog["events_applied"]:
            plan.why[pair] = f"late data at or below applied offset {prog['applied_offset']}"
        elif r["max_offset"] > prog["applied_offset"]:
            plan.incremental_from[pair] = prog["applied_offset"]
            plan.events_before[pair] = prog["events_applied"]
    return plan


def _partitions_held(spark: SparkSession, tables: Tables) -> list[Pair] | None:
    """The partitions silver holds decoded records of, from silver.version_inventory (None when it
    does not exist: a lakehouse silver never counted; the caller scans the events instead)."""
    # read on the driver (a small table): a Spark job here was the first Parquet scan of a build's
    # gold stage, ~5 s of the JVM's warm-up on 2 cores
    inventory = lake.read_arrow(spark, tables.path("silver", "version_inventory"), [*PART, "status"])
    if inventory is None:
        return None
    decoded = inventory.filter(pc.equal(inventory.column("status"), "decoded"))
    return sorted(set(zip(*(decoded.column(c).to_pylist() for c in PART), strict=True)))


def progress_rows(
    spark: SparkSession,
    tables: Tables,
    plan: Plan,
    done: dict[Pair, dict[str, Any]],
    run_id: str,
    in_flight: bool = False,
) -> None:
    """Write the plan's partition_progress rows: marked in flight before the writes (the commit
    still carries the versions consumed before), or with what the replay applied after them (and
    the versions this run consumed). The table is small: it is overwritten whole, the other
    partitions' rows as they were (a predicate on a column that is not a partition column would
    make Delta scan and rewrite its files)."""
    path = tables.path("gold", "partition_progress")
    spec = tables.spec("gold", "partition_progress")
    schema = spec.struct()
    rows = []
    for pair in plan.pairs:
        old = plan.progress.get(pair)
        if in_flight:
            row = dict(old) if old else {"applied_offset": None, "events_applied": 0, "recomputed": True}
            row |= {"run_id": row.get("run_id") or run_id, "in_flight_run": run_id}
        else:
            out = done.get(pair) or {}
            before = plan.events_before.get(pair, 0) if pair in plan.incremental_from else 0
            row = {
                "applied_offset": out.get("applied_offset", plan.incremental_from.get(pair)),
                "events_applied": before + (out.get("events") or 0),
                "run_id": run_id,
                "recomputed": pair in plan.why,
                "in_flight_run": None,
            }
        rows.append(tuple({**row, "cluster": pair[0], "offsets_partition": pair[1]}[c] for c in PROGRESS_COLUMNS))
    planned = set(plan.pairs)
    rows += [tuple(r[c] for c in PROGRESS_COLUMNS) for pair, r in sorted(plan.progress.items()) if pair not in planned]
    versions = plan.consumed if in_flight else plan.versions
    metadata = {"silver_versions": versions} if versions is not None else None
    if rows:
        table = pa.Table.from_pylist([dict(zip(PROGRESS_COLUMNS, r, strict=True)) for r in rows], spec.arrow())
        lake.write_rows(spark, table, path, schema, "true", metadata)
    else:
        lake.commit_empty(spark, path, schema, metadata)
