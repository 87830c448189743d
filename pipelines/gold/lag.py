"""Consumer lag: ``gold.current_lag`` and ``gold.lag_history`` (docs/lag.md).

Lag = a topic partition's end offset minus a group's committed offset. The end offsets are the
observations in ``bronze.end_offsets`` (snapshot files ingested by bronze, or fetched here with
the Admin API for the partitions the live offsets reference); without one, lag is unknown (null),
never zero.

They exist once an end offset is configured (an admin source) or observed: until then gold runs
skip lag entirely. Both tables are recomputed whole on every gold run, after the replay's writes: they are small
(one row per live key; one per observation and group of its partition), and an observation can
arrive late (a snapshot file of last week) or a commit older than an observation can arrive late
(a backfill), so an incremental rule would need the same joins anyway. Each table's commit
carries the versions of the inputs its rows follow from (current_lag: bronze.end_offsets and
gold.current_offsets; lag_history: bronze.end_offsets and gold.offset_history, or nothing while
there is no observation at all); a run whose inputs did not move skips the table, so an unchanged
re-run adds no table version and costs a few Delta log look-ups.
"""

from __future__ import annotations

import bisect
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from pipelines.bronze.end_offsets import fetch_admin, write
from pipelines.runtime import lake
from pipelines.runtime.steps import Steps

if TYPE_CHECKING:
    from pipelines.runtime.config import KafkaSource
    from pipelines.runtime.tables import Tables

__all__ = ["LagResult", "build_lag", "current_lag", "lag_history"]

log = logging.getLogger("offsets_lakehouse")

PARTITION_KEY = ["cluster", "topic", "partition"]
# what the lag tables are computed from; the versions a table's rows are of ride in its commit
INPUTS = (("bronze", "end_offsets"), ("gold", "current_offsets"), ("gold", "offset_history"))
INPUTS_KEY = "lag_inputs"
KEYS = {
    "current_lag": ("cluster", "group_id", "topic", "partition"),
    "lag_history": ("cluster", "group_id", "topic", "partition", "observed_at"),
}
# inputs (current offsets, history, observations) and lag_history rows of at most this many rows
# are computed on the driver and written by delta-rs: the demo's two Spark joins and writes took
# 14.8 of its gold stage's 18.7 s on 2 cores, on 200k history rows
LOCAL_LAG_ROWS = 1_000_000
HISTORY_COLUMNS = [
    *PARTITION_KEY, "group_id", "valid_from_offset", "valid_from_timestamp", "committed_offset", "deleted"
]  # fmt: skip
OBSERVATION_COLUMNS = [*PARTITION_KEY, "observed_at", "end_offset"]
OFFSET_COLUMNS = [*KEYS["current_lag"], "committed_offset", "commit_timestamp", "deleted"]


@dataclass
class LagResult:
    admin_observations: int = 0  # fetched with the Admin API this run
    admin_inserted: int = 0
    unknown_partitions: list[str] = field(default_factory=list)  # the broker answered with an error
    skipped: bool = False  # no input moved since the last computation
    written: list[str] = field(default_factory=list)  # tables whose rows changed (one commit each)
    steps: Steps = field(default_factory=lambda: Steps("lag"))

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def latest_observations(observations: DataFrame) -> DataFrame:
    """The latest observation per (cluster, topic, partition); at the same instant the larger end."""
    order = Window.partitionBy(*PARTITION_KEY).orderBy(F.col("observed_at").desc(), F.col("end_offset").desc())
    return observations.withColumn("_n", F.row_number().over(order)).where("_n = 1").drop("_n")


def current_lag(offsets: DataFrame, observations: DataFrame) -> DataFrame:
    """One row per live key of current_offsets with the latest end offset of its partition."""
    latest = latest_observations(observations).select(
        *PARTITION_KEY, "end_offset", F.col("observed_at").alias("end_offset_observed_at")
    )
    live = offsets.where(~F.col("deleted")).select(*KEYS["current_lag"], "committed_offset", "commit_timestamp")
    return live.join(latest, PARTITION_KEY, "left").select(
        *KEYS["current_lag"],
        "committed_offset",
        "commit_timestamp",
        "end_offset",
        "end_offset_observed_at",
        (F.col("end_offset") - F.col("committed_offset")).alias("lag"),
    )


def lag_history(history: DataFrame, observations: DataFrame) -> DataFrame:
    """Each observation x each group with a state for that partition in offset_history, with the
    offset committed as of the observation's time t: the last state (in log order) that took effect
    at or before t in log time (``valid_from_timestamp <= t``; a null one — magic-0 records carry
    no timestamp — counts as before every timestamped record); null if that state is a deletion
    or the group had no state yet."""
    # one observation per instant (the larger end, as latest_observations): the rows' key
    obs = observations.groupBy(*PARTITION_KEY, "observed_at").agg(F.max("end_offset").alias("end_offset"))
    obs = obs.withColumn("_t", F.unix_millis("observed_at"))
    groups = history.select(*PARTITION_KEY, "group_id").distinct()
    pairs = obs.join(groups, PARTITION_KEY).alias("p")
    h = history.select(
        *PARTITION_KEY, "group_id", "valid_from_offset", "valid_from_timestamp", "committed_offset", "deleted"
    ).alias("h")
    on = [F.col(f"p.{c}") == F.col(f"h.{c}") for c in (*PARTITION_KEY, "group_id")]
    on.append(F.col("h.valid_from_timestamp").isNull() | (F.col("h.valid_from_timestamp") <= F.col("p._t")))
    joined = pairs.join(h, on, "left")
    # the latest state by log position rather than by the interval's end time: the same answer
    # while log time moves forward, and one answer when it steps back (clock skew between hosts)
    key = [F.col(f"p.{c}") for c in KEYS["lag_history"]]
    order = Window.partitionBy(*key).orderBy(F.col("h.valid_from_offset").desc_nulls_last())
    ranked = joined.withColumn("_n", F.row_number().over(order)).where("_n = 1")
    committed = F.when(~F.col("h.deleted"), F.col("h.committed_offset"))
    return ranked.select(
        *key,
        F.col("p.end_offset").alias("end_offset"),
        committed.alias("committed_offset"),
        (F.col("p.end_offset") - committed).alias("lag"),
    )


def _latest_arrow(observations: pa.Table) -> dict[tuple, tuple[Any, int]]:
    """:func:`latest_observations` on the driver: (observed_at, end_offset) per partition key."""
    latest: dict[tuple, tuple[Any, int]] = {}
    cols = observations.select(OBSERVATION_COLUMNS).to_pydict()
    for c, t, p, at, end in zip(*cols.values(), strict=True):
        key = (c, t, p)
        if key not in latest or (at, end) > latest[key]:
            latest[key] = (at, end)
    return latest


def current_lag_arrow(offsets: pa.Table, observations: pa.Table) -> pa.Table:
    """:func:`current_lag` on the driver, for small inputs."""
    latest = _latest_arrow(observations)
    live = offsets.filter(pc.invert(offsets.column("deleted")))
    cols = live.select([*KEYS["current_lag"], "committed_offset", "commit_timestamp"]).to_pydict()
    ends = [latest.get((c, t, p)) for c, t, p in zip(cols["cluster"], cols["topic"], cols["partition"], strict=True)]
    end = [None if e is None else e[1] for e in ends]
    lag = [None if e is None or o is None else e - o for e, o in zip(end, cols["committed_offset"], strict=True)]
    return pa.table(
        {
            **cols,
            "end_offset": pa.array(end, pa.int64()),
            "end_offset_observed_at": pa.array([None if e is None else e[0] for e in ends], pa.timestamp("us", "UTC")),
            "lag": pa.array(lag, pa.int64()),
        }
    )


def _as_of(history: pa.Table) -> dict[tuple, dict[str, tuple[list[int], list[tuple[int, int, bool]]]]]:
    """Per partition key and group: the states' timestamps in ascending order (a null one first:
    it counts as before every timestamp) and, at each, the state of the highest log position among
    the states up to there: (valid_from_offset, committed_offset, deleted)."""
    by: dict[tuple, dict[str, list[tuple[int, int, int, bool]]]] = defaultdict(lambda: defaultdict(list))
    cols = history.select(HISTORY_COLUMNS).to_pydict()
    for c, t, p, g, position, ts, committed, deleted in zip(*cols.values(), strict=True):
        by[(c, t, p)][g].append((-(1 << 63) if ts is None else ts, position, committed, deleted))
    out: dict[tuple, dict[str, tuple[list[int], list[tuple[int, int, bool]]]]] = {}
    for key, groups in by.items():
        out[key] = {}
        for g, states in groups.items():
            states.sort()
            times, best, top = [], [], None
            for ts, position, committed, deleted in states:
                if top is None or position > top[0]:
                    top = (position, committed, deleted)
                times.append(ts)
                best.append(top)
            out[key][g] = (times, best)
    return out


def lag_history_pairs(history: pa.Table, observations: pa.Table) -> int:
    """How many rows :func:`lag_history_arrow` makes: observations x groups of their partition."""
    groups: dict[tuple, set[str]] = defaultdict(set)
    for c, t, p, g in zip(*history.select([*PARTITION_KEY, "group_id"]).to_pydict().values(), strict=True):
        groups[(c, t, p)].add(g)
    instants = set(zip(*observations.select([*PARTITION_KEY, "observed_at"]).to_pydict().values(), strict=True))
    return sum(len(groups.get(k[:3], ())) for k in instants)


def lag_history_arrow(history: pa.Table, observations: pa.Table) -> pa.Table:
    """:func:`lag_history` on the driver, for small inputs: the same rule, the state of the highest
    log position among those that took effect at or before the observation's time."""
    states = _as_of(history)
    obs = observations.select(OBSERVATION_COLUMNS)
    millis = pc.cast(obs.column("observed_at").cast(pa.timestamp("us", "UTC")), pa.int64()).to_pylist()
    ends: dict[tuple, tuple[int, Any]] = {}  # one observation per instant: the larger end, as in lag_history
    for c, t, p, at, end, us in zip(*obs.to_pydict().values(), millis, strict=True):
        if (c, t, p, us) not in ends or end > ends[(c, t, p, us)][0]:
            ends[(c, t, p, us)] = (end, at)
    out: dict[str, list[Any]] = {name: [] for name in (*KEYS["lag_history"], "end_offset", "committed_offset", "lag")}
    for (c, t, p, us), (end, at) in ends.items():
        ms = us // 1000  # as Spark's unix_millis: whole milliseconds, rounded down
        for g, (times, best) in states.get((c, t, p), {}).items():
            i = bisect.bisect_right(times, ms)
            state = best[i - 1] if i else None
            committed = None if state is None or state[2] else state[1]
            for name, value in zip(
                out,
                (c, g, t, p, at, end, committed, None if committed is None else end - committed),
                strict=True,
            ):
                out[name].append(value)
    return pa.table(out)


def _build_locally(
    spark: SparkSession, tables: Tables, todo: list[str], inputs: dict[str, dict[str, Any]], result: LagResult
) -> bool:
    """The lag tables computed and written on the driver when their inputs and rows are few
    (:data:`LOCAL_LAG_ROWS`); False, nothing written, when they are not or delta-rs cannot."""
    if lake.remote(spark):
        return False
    sizes = [lake.row_count(tables.path(layer, t)) for layer, t in INPUTS]
    if any(n is None for n in sizes) or sum(n or 0 for n in sizes) > LOCAL_LAG_ROWS:
        return False
    observations = lake.read_arrow(spark, tables.path("bronze", "end_offsets"), OBSERVATION_COLUMNS)
    offsets = lake.read_arrow(spark, tables.path("gold", "current_offsets"), OFFSET_COLUMNS)
    history = lake.read_arrow(spark, tables.path("gold", "offset_history"), HISTORY_COLUMNS)
    if observations is None or offsets is None or history is None:
        return False
    if "lag_history" in todo and lag_history_pairs(history, observations) > LOCAL_LAG_ROWS:
        return False
    build = {
        "current_lag": lambda: current_lag_arrow(offsets, observations),
        "lag_history": lambda: lag_history_arrow(history, observations),
    }
    for table in todo:
        with result.steps(table):
            # one commit carrying the input versions its rows are of: a run with the same inputs skips it
            if not lake.write_arrow(build[table](), tables.path("gold", table), "true", {INPUTS_KEY: inputs[table]}):
                return False
            result.written.append(table)
    return True


def _fetch_admin(
    spark: SparkSession, tables: Tables, run_id: str, sources: dict[str, KafkaSource], result: LagResult
) -> None:
    """End offsets now, for the partitions the live offsets of each admin source's cluster reference."""
    offsets = lake.read(spark, tables.path("gold", "current_offsets"))
    for name, source in sources.items():
        parts: list[tuple[str, int]] = []
        if offsets is not None:
            live = offsets.where((F.col("cluster") == source.cluster) & ~F.col("deleted"))
            parts = sorted((r["topic"], r["partition"]) for r in live.select("topic", "partition").distinct().collect())
        observations, unknown = fetch_admin(spark, source, parts)
        result.admin_observations += len(observations)
        result.admin_inserted += write(spark, tables, observations, name, run_id)
        result.unknown_partitions += [f"{source.cluster}/{u}" for u in unknown]
        for u in unknown:  # counted in gold's summary line
            log.debug("lag: %s: no end offset for %s (lag unknown)", name, u)


def build_lag(
    spark: SparkSession, tables: Tables, run_id: str, admin_sources: dict[str, KafkaSource] | None = None
) -> LagResult:
    result = LagResult()
    if admin_sources:
        with result.steps("fetch end offsets"):
            _fetch_admin(spark, tables, run_id, admin_sources, result)
    observed = lake.any_rows(spark, tables.path("bronze", "end_offsets"), "true")
    if not observed and not admin_sources:
        # no end offset configured or ever observed: nothing to know lag from, so no lag tables to
        # keep in step with current_offsets (a job without lag inputs pays nothing for lag)
        result.skipped = True
        return result
    tables.ensure("bronze", "end_offsets")
    for table in KEYS:
        tables.ensure("gold", table)
    versions = {f"{layer}.{t}": lake.version(spark, tables.path(layer, t)) for layer, t in INPUTS}
    # what each table's rows follow from: without observations lag_history is empty whatever gold holds
    inputs = {
        "current_lag": {k: versions[k] for k in ("bronze.end_offsets", "gold.current_offsets")},
        "lag_history": {k: versions[k] for k in ("bronze.end_offsets", "gold.offset_history")} if observed else {},
    }
    todo = [t for t in KEYS if (lake.latest_metadata(spark, tables.path("gold", t)) or {}).get(INPUTS_KEY) != inputs[t]]
    if not todo:
        result.skipped = True  # no input moved since the tables were computed: nothing to do
        return result
    # every input exists: ensured here, or by run_gold before its replay
    if _build_locally(spark, tables, todo, inputs, result):
        return result
    todo = [t for t in todo if t not in result.written]  # delta-rs wrote some before it refused one
    observations = spark.read.format("delta").load(tables.path("bronze", "end_offsets"))
    offsets = spark.read.format("delta").load(tables.path("gold", "current_offsets"))
    history = spark.read.format("delta").load(tables.path("gold", "offset_history"))
    build = {
        "current_lag": lambda: current_lag(offsets, observations),
        "lag_history": lambda: lag_history(history, observations),
    }
    for table in todo:
        with result.steps(table):
            columns = [c.name for c in tables.spec("gold", table).columns]
            # one commit carrying the input versions its rows are of: a run with the same inputs skips it
            with lake.commit_metadata(spark, {INPUTS_KEY: inputs[table]}):
                lake.replace_where(build[table]().select(*columns), tables.path("gold", table), "true")
            result.written.append(table)
    return result
