"""Consumer lag: ``gold.topic_end_offsets``, ``gold.current_lag`` and ``gold.lag_history`` (docs/lag.md).

Lag = a topic partition's end offset minus a group's committed offset. The end offsets are the
observations in ``bronze.end_offsets`` (snapshot files ingested by bronze, or fetched here with
the Admin API for the partitions the live offsets reference); without one, lag is unknown (null),
never zero. The rules themselves are in ``gold/asof.py``; this module decides what a run must
compute, reads it and writes it.

A run costs what it brings, never what the lakehouse has kept:

* ``topic_end_offsets`` (one row per topic partition) folds in the observations the run's
  ``bronze.end_offsets`` commits added (read from those commits' files, runtime/deltalog.py);
* ``current_lag`` (one row per live key) is the live offsets joined with it;
* ``lag_history`` gets the rows of the new observations, and the rows at or after the earliest
  time a changed state of ``offset_history`` took effect are recomputed (a run's new commits are
  recent, so normally only the new observations' rows are). The changed states are those of the
  files the range of gold's commits added and removed, net of the rows that were only rewritten
  (an offsets partition's current states are rewritten whole by each run that touches it). A
  late observation (a snapshot file of last week) recomputes from its own time on.

Each table's commit carries the versions of the inputs its rows follow from (``lag_inputs`` in
its ``userMetadata``); a run whose inputs did not move skips the table, and a run that finds no
earlier computation it can build on (a first run, a log expired by its retention, a table laid
out by an older version) computes the table whole, in windows of bounded size.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from pipelines.bronze.end_offsets import fetch_admin, write
from pipelines.gold import asof
from pipelines.runtime import deltalog, lake
from pipelines.runtime.lake import sql_str
from pipelines.runtime.steps import Steps

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.runtime.config import KafkaSource
    from pipelines.runtime.tables import Tables

__all__ = ["LAG_TABLES", "LagResult", "build_lag", "drop_outdated_lag"]

log = logging.getLogger("offsets_lakehouse")

LAG_TABLES = ("topic_end_offsets", "current_lag", "lag_history")
INPUTS_KEY = "lag_inputs"
ENDS, CURRENT, HISTORY = "bronze.end_offsets", "gold.current_offsets", "gold.offset_history"
# what each table's rows follow from
INPUTS = {
    "topic_end_offsets": (ENDS,),
    "current_lag": (ENDS, CURRENT),
    "lag_history": (ENDS, HISTORY),
}
OBSERVATION_COLUMNS = [*asof.PARTITION_KEY, "observed_at", "end_offset"]
OFFSET_COLUMNS = ["cluster", "group_id", "topic", "partition", "committed_offset", "commit_timestamp"]
# a state's identity: a row of offset_history that a run only rewrote (same identity) changes no lag
IDENTITY = [*asof.STATE_COLUMNS]
READ_STATE_COLUMNS = [*IDENTITY, "is_current", "valid_to_timestamp"]
# lag_history rows a first build writes per commit: bounds the driver's memory
ROWS_PER_WINDOW = 1_000_000


@dataclass
class LagResult:
    admin_observations: int = 0  # fetched with the Admin API this run
    admin_inserted: int = 0
    unknown_partitions: list[str] = field(default_factory=list)  # the broker answered with an error
    skipped: bool = False  # no input moved since the last computation
    written: list[str] = field(default_factory=list)  # tables written (one commit each, a first build more)
    # per table: "incremental" (what the inputs' new commits touched) or "whole" (no computation to build on)
    how: dict[str, str] = field(default_factory=dict)
    history_rows: int = 0  # lag_history rows this run wrote
    history_windows: int = 0  # and in how many commits
    recomputed_since: dict[str, str | None] = field(default_factory=dict)  # cluster -> earliest time recomputed
    steps: Steps = field(default_factory=lambda: Steps("lag"))

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


# -- reading -------------------------------------------------------------------------------------------
def _read(spark: SparkSession, path: str, columns: list[str], where: Any, where_sql: str) -> pa.Table:
    """The table's rows matching ``where`` (a pyarrow expression: files its partition values and
    statistics rule out are not read) by delta-rs, by Spark (``where_sql``) when delta-rs cannot."""
    try:
        return lake.read_arrow_where(path, columns, where)
    except Exception as exc:
        log.debug("lag: delta-rs cannot read %s (%s): Spark reads it", path, exc)
    frame = lake.read(spark, path, where_sql)
    return pa.table({c: [] for c in columns}) if frame is None else frame.select(*columns).toArrow()


def _cluster_is(cluster: str) -> tuple[Any, str]:
    return ds.field("cluster") == cluster, f"cluster = {sql_str(cluster)}"


def _utc(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1_000_000, timezone.utc)


def _iso(us: int) -> str:
    return _utc(us).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _micros(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return pc.cast(pc.cast(column, pa.timestamp("us", "UTC")), pa.int64()).to_numpy(zero_copy_only=False)


def _metadata(spark: SparkSession, path: str) -> dict[str, Any] | None:
    meta = (lake.latest_metadata(spark, path) or {}).get(INPUTS_KEY)
    return meta if isinstance(meta, dict) else None


def _added_rows(path: str, since: dict[str, Any] | None, upto: int | None, schema: pa.Schema) -> pa.Table | None:
    """The rows the table's commits after the version ``since`` names added, up to ``upto``; None
    when that cannot be told from its log (no earlier version, the log expired)."""
    if since is None or since.get(ENDS) is None or upto is None:
        return None
    if since[ENDS] == upto:
        return schema.empty_table()
    changes = deltalog.changed_files(path, since[ENDS], upto)
    # an observation a retention removed stays the latest known (and in lag_history) until a newer one
    return None if changes is None else _rows_of(changes.added, schema)


def _rows_of(files: Sequence[deltalog.FileChange], schema: pa.Schema) -> pa.Table | None:
    """The files' rows; None when one is gone (vacuumed since): the caller computes whole."""
    try:
        return deltalog.read_rows(files, schema)
    except FileNotFoundError as exc:
        log.debug("lag: a file of the range is gone (%s): computed whole", exc)
        return None


# -- the tables ----------------------------------------------------------------------------------------
def _topic_end_offsets(spark: SparkSession, tables: Tables, inputs: dict[str, Any], result: LagResult) -> None:
    path = tables.path("gold", "topic_end_offsets")
    ends_path = tables.path("bronze", "end_offsets")
    schema = tables.spec("bronze", "end_offsets").arrow()
    observations = pa.schema([schema.field(c) for c in OBSERVATION_COLUMNS])
    new = _added_rows(ends_path, _metadata(spark, path), inputs[ENDS], observations)
    if new is None:
        result.how["topic_end_offsets"] = "whole"
        rows = _read(spark, ends_path, OBSERVATION_COLUMNS, ds.scalar(True), "true")
    else:
        result.how["topic_end_offsets"] = "incremental"
        held = _read(spark, path, [*asof.PARTITION_KEY, "end_offset", "observed_at"], ds.scalar(True), "true")
        rows = pa.concat_tables(
            [held.select(OBSERVATION_COLUMNS), new.select(OBSERVATION_COLUMNS)], promote_options="permissive"
        )
    latest = asof.latest_ends(rows)
    spec = tables.spec("gold", "topic_end_offsets")
    lake.write_rows(spark, latest.cast(spec.arrow()), path, spec.struct(), "true", {INPUTS_KEY: inputs})


def _current_lag(spark: SparkSession, tables: Tables, inputs: dict[str, Any], result: LagResult) -> None:
    """One row per live key of current_offsets with the latest end offset of its partition."""
    live = _read(
        spark, tables.path("gold", "current_offsets"), [*OFFSET_COLUMNS, "deleted"], ~ds.field("deleted"), "NOT deleted"
    ).select(OFFSET_COLUMNS)
    ends = _read(
        spark,
        tables.path("gold", "topic_end_offsets"),
        [*asof.PARTITION_KEY, "end_offset", "observed_at"],
        ds.scalar(True),
        "true",
    ).rename_columns([*asof.PARTITION_KEY, "end_offset", "end_offset_observed_at"])
    spec = tables.spec("gold", "current_lag")
    joined = live.join(ends, asof.PARTITION_KEY, join_type="left outer")
    rows = joined.append_column("lag", pc.subtract(joined["end_offset"], joined["committed_offset"]))
    lake.write_rows(spark, rows.select(spec.arrow().names).cast(spec.arrow()), tables.path("gold", "current_lag"),
                    spec.struct(), "true", {INPUTS_KEY: inputs})  # fmt: skip
    result.how["current_lag"] = "whole"


def _changed_states(path: str, since: dict[str, Any] | None, upto: int | None) -> pa.Table | None:
    """The states of offset_history that commits after the version ``since`` names added or
    removed (up to ``upto``), net of rows only rewritten; None when the log cannot say."""
    if since is None or since.get(HISTORY) is None or upto is None:
        return None
    if since[HISTORY] == upto:
        return pa.table({c: [] for c in IDENTITY})
    changes = deltalog.changed_files(path, since[HISTORY], upto)
    if changes is None:
        return None
    schema = pa.schema([f for f in _history_schema(path) if f.name in IDENTITY])
    added, removed = _rows_of(changes.added, schema), _rows_of(changes.removed, schema)
    if added is None or removed is None:
        return None
    added, removed = added.select(IDENTITY), removed.select(IDENTITY)
    # rows in one and not the other (a state's identity is unique per key: a multiset is a set here)
    added, removed = (t.cast(pa.schema([f.with_nullable(True) for f in t.schema])) for t in (added, removed))
    only_added = added.join(removed, IDENTITY, join_type="left anti") if removed.num_rows else added
    only_removed = removed.join(added, IDENTITY, join_type="left anti") if added.num_rows else removed
    return pa.concat_tables([only_added, only_removed])


def _history_schema(path: str) -> pa.Schema:
    schema = lake.arrow_schema(path)
    if schema is None:
        raise ValueError(f"no table at {path}")
    return schema


def _recompute_from(changed: pa.Table, new: pa.Table) -> dict[str, int | None]:
    """Per cluster, the earliest time (µs) whose lag rows the changes may alter: a changed state's
    time (an untimed one: every time, None) and a new observation's."""
    since: dict[str, int | None] = {}

    def lower(cluster: str, us: int | None) -> None:
        if cluster in since and (since[cluster] is None or (us is not None and us >= since[cluster])):
            return
        since[cluster] = us

    if changed.num_rows:
        ts = changed["valid_from_timestamp"].to_pylist()
        for cluster, t in zip(changed["cluster"].to_pylist(), ts, strict=True):
            lower(cluster, None if t is None else t * 1000)
    if new.num_rows:
        for cluster, us in zip(new["cluster"].to_pylist(), _micros(new["observed_at"]).tolist(), strict=True):
            lower(cluster, us)
    return since


def _lag_history(spark: SparkSession, tables: Tables, inputs: dict[str, Any], result: LagResult) -> None:
    path = tables.path("gold", "lag_history")
    ends_path = tables.path("bronze", "end_offsets")
    prior = _metadata(spark, path)
    ends_schema = tables.spec("bronze", "end_offsets").arrow()
    observations = pa.schema([ends_schema.field(c) for c in OBSERVATION_COLUMNS])
    new = _added_rows(ends_path, prior, inputs[ENDS], observations)
    changed = (
        _changed_states(tables.path("gold", "offset_history"), prior, inputs[HISTORY]) if new is not None else None
    )
    if changed is None:
        result.how["lag_history"] = "whole"
        clusters = _clusters(spark, ends_path)
        since: dict[str, int | None] = dict.fromkeys(clusters)
        predicate = "true"
    else:
        result.how["lag_history"] = "incremental"
        since = _recompute_from(changed, new)
        predicate = " OR ".join(f"({_since_predicate(c, us)})" for c, us in sorted(since.items())) or None
    result.recomputed_since = {c: None if us is None else _iso(us) for c, us in since.items()}
    _write_windows(spark, tables, since, predicate, inputs, result)


def _clusters(spark: SparkSession, path: str) -> list[str]:
    """The clusters a table holds, from its partition values (every table here is partitioned by cluster)."""
    actions = lake.add_actions(path)
    if actions is not None and "partition.cluster" in actions.column_names:
        return sorted(set(actions["partition.cluster"].to_pylist()))
    return sorted(set(_read(spark, path, ["cluster"], ds.scalar(True), "true")["cluster"].to_pylist()))


def _since_predicate(cluster: str, us: int | None) -> str:
    if us is None:
        return f"cluster = {sql_str(cluster)}"
    day = _utc(us).date().isoformat()
    return f"cluster = {sql_str(cluster)} AND observed_date >= '{day}' AND observed_at >= '{_iso(us)}'"


def _observations_since(spark: SparkSession, tables: Tables, cluster: str, us: int | None) -> pa.Table:
    """The observations of ``cluster`` at or after ``us`` (None: all), in time order."""
    where, where_sql = _cluster_is(cluster)
    if us is not None:
        where = where & (ds.field("observed_at") >= pa.scalar(us, pa.timestamp("us", "UTC")))
        where_sql += f" AND observed_at >= '{_iso(us)}'"
    obs = _read(spark, tables.path("bronze", "end_offsets"), OBSERVATION_COLUMNS, where, where_sql)
    return obs.sort_by([("observed_at", "ascending"), ("topic", "ascending"), ("partition", "ascending")])


def _windows(spark: SparkSession, tables: Tables, cluster: str, obs: pa.Table) -> list[pa.Table]:
    """``obs`` (one cluster's, in time and partition order) cut into windows of about :data:`ROWS_PER_WINDOW`
    lag rows (estimated from the groups each partition has now), an instant never cut."""
    if obs.num_rows == 0:
        return []
    where, where_sql = _cluster_is(cluster)
    keys = _read(
        spark,
        tables.path("gold", "offset_history"),
        [*asof.PARTITION_KEY, "group_id", "is_current"],
        where & ds.field("is_current"),
        f"{where_sql} AND is_current",
    )
    per_partition = keys.group_by(asof.PARTITION_KEY, use_threads=False).aggregate([("group_id", "count")])
    order = pa.array(np.arange(obs.num_rows, dtype=np.int64))
    weighed = obs.append_column("_n", order).join(per_partition, asof.PARTITION_KEY, join_type="left outer")
    weighed = weighed.take(pc.sort_indices(weighed["_n"]))
    weight = np.cumsum(weighed["group_id_count"].fill_null(0).to_numpy(zero_copy_only=False))
    times = _micros(obs["observed_at"])
    topics, partitions = obs["topic"].to_pylist(), obs["partition"].to_pylist()

    def same(i: int) -> bool:  # one partition's observations at one instant stay together (the larger end wins)
        return times[i] == times[i - 1] and topics[i] == topics[i - 1] and partitions[i] == partitions[i - 1]

    out, start = [], 0
    while start < obs.num_rows:
        base = weight[start - 1] if start else 0
        stop = max(int(np.searchsorted(weight, base + ROWS_PER_WINDOW, side="right")), start + 1)
        while stop < obs.num_rows and same(stop):
            stop += 1
        out.append(obs.slice(start, stop - start))
        start = stop
    return out


def _write_windows(
    spark: SparkSession,
    tables: Tables,
    since: dict[str, int | None],
    predicate: str | None,
    inputs: dict[str, Any],
    result: LagResult,
) -> None:
    """The lag rows of each cluster from its ``since`` on, written over the rows ``predicate``
    matches: one commit when they fit one window (the common case: a run's new observations);
    else the first window's commit replaces, the others append and the last records the inputs
    (a run killed in between finds no inputs recorded and computes the table whole)."""
    path = tables.path("gold", "lag_history")
    spec = tables.spec("gold", "lag_history")
    windows = [
        (cluster, w)
        for cluster, us in sorted(since.items())
        for w in _windows(spark, tables, cluster, _observations_since(spark, tables, cluster, us))
    ]
    if not windows:  # nothing to add; the rows in range (if any) go, and the inputs are recorded
        lake.write_rows(spark, _with_date(asof.no_rows(), spec), path, spec.struct(), predicate, {INPUTS_KEY: inputs})
        return
    for i, (cluster, obs) in enumerate(windows):
        rows = _window(spark, tables, cluster, obs)
        last = i == len(windows) - 1
        lake.write_rows(
            spark, rows, path, spec.struct(), predicate if i == 0 else None, {INPUTS_KEY: inputs} if last else None
        )
        result.history_rows += rows.num_rows
        result.history_windows += 1


def _window(spark: SparkSession, tables: Tables, cluster: str, obs: pa.Table) -> pa.Table:
    """The lag rows of the observations ``obs`` of one cluster, from the states they need."""
    spec = tables.spec("gold", "lag_history")
    if obs.num_rows == 0:
        return _with_date(asof.no_rows(), spec)
    micros = _micros(obs["observed_at"])
    first_ms, last_ms = int(micros.min()) // 1000, int(micros.max()) // 1000
    where, where_sql = _cluster_is(cluster)
    took_effect = ds.field("valid_from_timestamp").is_null() | (ds.field("valid_from_timestamp") <= last_ms)
    where = where & asof.needed(first_ms) & took_effect
    where_sql += (
        f" AND (is_current OR valid_to_timestamp > {first_ms})"
        f" AND (valid_from_timestamp IS NULL OR valid_from_timestamp <= {last_ms})"
    )
    states = _read(spark, tables.path("gold", "offset_history"), READ_STATE_COLUMNS, where, where_sql)
    return _with_date(asof.lag_rows(states.select(asof.STATE_COLUMNS), obs), spec)


def _with_date(rows: pa.Table, spec: Any) -> pa.Table:
    day = pc.cast(rows["observed_at"], pa.date32()) if rows.num_rows else pa.array([], pa.date32())
    return rows.append_column("observed_date", day).select(spec.arrow().names).cast(spec.arrow())


# -- the stage's part ----------------------------------------------------------------------------------
def _fetch_admin(
    spark: SparkSession, tables: Tables, run_id: str, sources: dict[str, KafkaSource], result: LagResult
) -> None:
    """End offsets now, for the partitions the live offsets of each admin source's cluster reference."""
    for name, source in sources.items():
        where, where_sql = _cluster_is(source.cluster)
        live = _read(
            spark,
            tables.path("gold", "current_offsets"),
            ["topic", "partition", "deleted"],
            where & ~ds.field("deleted"),
            f"{where_sql} AND NOT deleted",
        )
        parts = sorted(set(zip(live["topic"].to_pylist(), live["partition"].to_pylist(), strict=True)))
        observations, unknown = fetch_admin(spark, source, parts)
        result.admin_observations += len(observations)
        result.admin_inserted += write(spark, tables, observations, name, run_id)
        result.unknown_partitions += [f"{source.cluster}/{u}" for u in unknown]
        for u in unknown:  # counted in gold's summary line
            log.debug("lag: %s: no end offset for %s (lag unknown)", name, u)


def drop_outdated_lag(spark: SparkSession, tables: Tables) -> None:
    """Lag tables an older version laid out otherwise are dropped: they are computed whole again
    from bronze.end_offsets and gold's tables."""
    for table in LAG_TABLES:
        path = tables.path("gold", table)
        have = lake.partition_columns(spark, path)
        if have is not None and have != list(tables.spec("gold", table).partitioned_by):
            log.warning("gold: %s laid out by an older version; computing it again", table)
            spark.sql(f"DROP TABLE IF EXISTS {tables.name('gold', table)}")
            lake.drop(spark, path)


BUILD = {"topic_end_offsets": _topic_end_offsets, "current_lag": _current_lag, "lag_history": _lag_history}


def build_lag(
    spark: SparkSession, tables: Tables, run_id: str, admin_sources: dict[str, KafkaSource] | None = None
) -> LagResult:
    result = LagResult()
    if admin_sources:
        with result.steps("fetch end offsets"):
            _fetch_admin(spark, tables, run_id, admin_sources, result)
    if not lake.any_rows(spark, tables.path("bronze", "end_offsets"), "true") and not admin_sources:
        # no end offset configured or ever observed: nothing to know lag from, so no lag tables to
        # keep in step with current_offsets (a job without lag inputs pays nothing for lag)
        result.skipped = True
        return result
    tables.ensure("bronze", "end_offsets")
    drop_outdated_lag(spark, tables)
    for table in LAG_TABLES:
        tables.ensure("gold", table)
    versions = {name: lake.version(spark, tables.path(*name.split(".", 1))) for name in (ENDS, CURRENT, HISTORY)}
    for table in LAG_TABLES:  # in this order: current_lag reads topic_end_offsets
        inputs = {name: versions[name] for name in INPUTS[table]}
        if _metadata(spark, tables.path("gold", table)) == inputs:
            continue  # computed from these very inputs
        with result.steps(table.replace("_", " ")):
            BUILD[table](spark, tables, inputs, result)
        result.written.append(table)
    result.skipped = not result.written
    return result
