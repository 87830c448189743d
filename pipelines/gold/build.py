"""Gold: the coordinator's state by an ordered replay per (cluster, offsets partition), on Spark.

One run (docs/gold.md):

1. **Plan** (:mod:`pipelines.gold.plan`): which partitions have new silver rows, from the change
   data feed of the silver tables gold reads since the versions the last run consumed; each is
   *incremental* (only events after its applied offset), or *full* (no progress yet, late data at
   or below the applied offset, rows silver rewrote or removed, a previous run that died between
   its writes, or ``--full-refresh``): replayed from its start. Nothing new: no job, no commit.
2. **Replay**, one Spark job without a shuffle: the driver lists, from the Delta log, the data
   files each partition needs — silver's files of the partition holding rows above its applied
   offset, and for an incremental partition the files of its persisted gold rows (the current
   tables, and the files of offset_history and group_generations that hold open intervals) — and
   each task reads its partitions' files with pyarrow, builds the events
   (:func:`pipelines.gold.events.partition_events`) and runs
   :class:`pipelines.gold.engine.PartitionReplay` on the groups its events touch (the other
   groups' rows pass through, :func:`pipelines.gold.engine.replay`), which returns the partition's
   complete current state, the history and generation intervals it closed, and the open ones.
3. **Write**, after marking the partitions in flight: one commit per table the run changed. A
   current table's rows of the processed partitions are replaced (``replaceWhere`` on cluster and
   offsets partition; partitions a run emptied with them); offset_history and group_generations
   are partitioned by ``is_current`` too, so the same commit adds the intervals a run closed and
   replaces only the open ones — a run's cost follows the current state, not the history. No
   MERGE. Tables are partitioned by cluster, not by offsets partition (a file per table, not per
   table and offsets partition), and a commit of few rows is written from the driver by delta-rs
   (:func:`pipelines.runtime.lake.write_arrow`), the closed intervals then a second commit.
4. **Progress** last, carrying the silver versions consumed. A run killed between its writes
   leaves the in-flight mark, and the next run recomputes those partitions from their start.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.gold.buckets import (
    ALL_BUCKETS,
    PartitionFacts,
    buckets_for,
    iter_parquet,
    keep_bucket,
    read_bucket,
    read_buckets,
    reads_once,
    split_buckets,
)
from pipelines.gold.engine import DEFAULT_RETENTION_MS, PartitionInput
from pipelines.gold.engine import replay as replay_partition
from pipelines.gold.events import SOURCE_TABLES, partition_events, read_schemas
from pipelines.gold.lag import LAG_TABLES, build_lag, drop_outdated_lag
from pipelines.gold.plan import PART, Pair, Plan, make_plan, progress_rows
from pipelines.runtime import blobs, faults, lake, taskwrite
from pipelines.runtime.files import read_parquet
from pipelines.runtime.lake import partitions_predicate
from pipelines.runtime.steps import Steps
from pipelines.runtime.tables import Tables
from pipelines.silver.topics import fill_topic_names, fill_topic_names_arrow, topic_name_map, topic_names

if TYPE_CHECKING:
    from pipelines.runtime.config import KafkaSource

__all__ = ["GOLD_TABLES", "GoldResult", "replay_schemas", "run_gold", "split_intervals", "with_partition"]

log = logging.getLogger("offsets_lakehouse")

# the tables the replay writes, each a struct column of its output (and of the state it reads)
CURRENT = ("current_offsets", "pending_transactions", "current_groups", "consumer_group_members",
           "share_group_members", "streams_group_members", "streams_group_topologies")  # fmt: skip
# interval tables: a run rewrites only a partition's open intervals -> (table, end column)
INTERVALS = {"offset_history": "valid_to_offset", "group_generations": "ended_offset"}
# their third partition column: true for open intervals (the end column null)
CURRENT_FLAG = "is_current"
GOLD_TABLES = (*CURRENT, *INTERVALS)
MEMBERS = "consumer_group_members"
# its assignments name topics by id; gold fills in the names silver.topic_ids knows when it writes
NAMED_ARRAYS = ("target_partitions", "assigned_partitions", "partitions_pending_revocation")
NAMED = {MEMBERS: NAMED_ARRAYS, "share_group_members": ("target_partitions", "assigned_partitions")}
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
    replayed_on: str = ""  # "driver" (a small run) or "spark"
    bucketed: dict[str, int] = field(default_factory=dict)  # "cluster/partition" -> buckets, large partitions
    lag: dict[str, Any] = field(default_factory=dict)  # pipelines/gold/lag.py's report
    steps: Steps = field(default_factory=lambda: Steps("gold"))  # wall time per step

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


# the replay's output: per processed partition, table and part (interval tables: closed, open), its
# rows as one Arrow IPC stream — a few rows per partition to keep, and each write reads only its own
# (a partition replayed in buckets, pipelines/gold/buckets.py: a row per bucket, ``bucket`` its index)
OUTPUT_DDL = (
    "cluster string, offsets_partition int, bucket int, table string, part string, rows bigint, changed boolean, "
    "bytes bigint, data binary"
)
PROGRESS_TABLE = "progress"
# bytes (in Arrow) per IPC blob of the replay's output, and per output batch (:func:`_output_batches`)
BLOB_BYTES = 8 << 20
# a run whose silver files to replay hold at most this many rows, and whose persisted state's
# files (an increment's) at most LOCAL_STATE_ROWS, is replayed on the driver, by the tasks' own
# body: a Spark job's fixed cost and checkpoint are most of a small run's replay, and an
# increment's untouched groups pass through in Arrow there, where Spark's tasks carry every row of
# the state through IPC blobs, a checkpoint and back (at 30M records 1.3M rows for 100k events)
LOCAL_REPLAY_ROWS = 250_000
LOCAL_STATE_ROWS = 4_000_000
# replay bins (Spark partitions) per core on a first run: small bins even out partitions' sizes
BINS_PER_CORE = 4
# the replay's output: a checkpointed DataFrame (Spark's tasks), or an Arrow table (the driver)
Output = DataFrame | pa.Table


class Held(dict):
    """A replay on the driver's output tables, by key: its output rows carry a key in the blob
    column, not an IPC stream of the rows. Spark's tasks must serialise their output; the
    driver's would serialise the whole state (every untouched group's rows) and read it back."""

    def put(self, rows: pa.Table) -> bytes:
        key = len(self)
        self[key] = rows
        return key.to_bytes(8, "little")

    def rows(self, blob: bytes) -> pa.Table:
        return self[int.from_bytes(blob, "little")]


ALL, CLOSED, OPEN = "all", "closed", "open"
TASK_DDL = "cluster string, offsets_partition int, bucket int, buckets int, applied bigint, files string"


@dataclass(frozen=True)
class ReplayTask:
    """What one partition's replay reads: its silver files per source table (rows above ``after``
    are replayed) and, when it resumes (``applied`` set), its persisted gold rows' files. A large
    partition is replayed in ``buckets`` tasks, this one taking the groups of bucket ``bucket``."""

    pair: Pair
    applied: int | None
    silver: dict[str, list[str]]
    gold: dict[str, list[str]]
    weight: int  # rows in its silver files (statistics): the size the tasks are balanced by
    bucket: int = 0
    buckets: int = 1

    def row(self) -> tuple[str, int, int, int, int | None, str]:
        files = json.dumps({"silver": self.silver, "gold": self.gold})
        return (*self.pair, self.bucket, self.buckets, self.applied, files)


def _tasks(spark: SparkSession, tables: Tables, plan: Plan) -> tuple[list[ReplayTask], int, int]:
    """The files each planned partition's replay reads, from the Delta logs, and the rows those
    files hold, silver's and gold's (each file counted once, as a replay on the driver reads it)."""
    paths = {("silver", t): tables.path("silver", t) for t in SOURCE_TABLES}
    if plan.incremental:
        paths |= {("gold", t): tables.path("gold", t) for t in GOLD_TABLES}
    # silver at the versions the plan consumes: a silver run committing meanwhile is the next run's
    versions = {f"silver.{t}": plan.versions.get(t) for t in SOURCE_TABLES}
    found = lake.data_files(spark, {f"{layer}.{t}": p for (layer, t), p in paths.items()}, (*PART, CURRENT_FLAG),
                            ("record_offset", "offsets_partition"), versions)  # fmt: skip
    seen = _consumed_files(tables, plan)
    by_pair: dict[tuple[str, str, str], list[lake.DataFile]] = {}
    wanted = {(c, str(p)) for c, p in plan.pairs}
    for name, files in found.items():
        for f in files:
            if f.partition[1] is not None:
                by_pair.setdefault((name, str(f.partition[0]), str(f.partition[1])), []).append(f)
                continue
            # a table partitioned by cluster alone: the file serves every offsets partition its
            # statistics span (its task keeps only its own partition's rows)
            low, high = f.minimum["offsets_partition"], f.maximum["offsets_partition"]
            for cluster, part in wanted:
                if cluster == str(f.partition[0]) and (low is None or low <= int(part) <= high):
                    by_pair.setdefault((name, cluster, part), []).append(f)
    out = []
    rows_of = {f.uri: f.rows or 0 for files in found.values() for f in files}
    read: set[str] = set()
    counted: dict[str, dict[int, int]] = {}  # gold files read for their rows per offsets partition
    for pair in plan.pairs:
        applied = plan.incremental_from.get(pair)
        after = -1 if applied is None else applied
        silver, gold, weight, size = {}, {}, 0, 0
        for table in SOURCE_TABLES:
            files = by_pair.get((f"silver.{table}", pair[0], str(pair[1])), [])
            # files whose statistics show no row above the applied offset are not read
            keep = [f for f in files if f.maximum["record_offset"] is None or f.maximum["record_offset"] > after]
            if applied is not None:  # resumed: what the last run's versions held it replayed
                keep = [f for f in keep if f.uri not in seen.get(table, ())]
            if keep:
                silver[table] = [f.uri for f in keep]
                weight += sum(f.rows or 0 for f in keep)
                size += sum((f.rows or 0) // _span(f) for f in keep)
        if applied is not None:
            for table in GOLD_TABLES:
                files = by_pair.get((f"gold.{table}", pair[0], str(pair[1])), [])
                if table in INTERVALS:  # only the files of open intervals
                    files = [f for f in files if str(f.partition[2]).lower() == "true"]
                if files:
                    gold[table] = [f.uri for f in files]
        # the partition's size: its rows to replay, and (resuming) the rows of its persisted state,
        # counted only where their files' rows (every partition's of the cluster) could need buckets
        uris = [uri for files in gold.values() for uri in files]
        if buckets_for(size + sum(rows_of[uri] for uri in uris)) > 1:
            missing = [uri for uri in dict.fromkeys(uris) if uri not in counted]
            counted.update(zip(missing, lake.parallel_map(_rows_per_partition, missing), strict=True))
            size += sum(counted[uri].get(pair[1], 0) for uri in uris)
        buckets = buckets_for(size)
        if buckets > 1 and reads_once(size):  # one task reads the partition once for every bucket
            out.append(ReplayTask(pair, applied, silver, gold, weight, ALL_BUCKETS, buckets))
        else:
            out += [ReplayTask(pair, applied, silver, gold, weight // buckets, i, buckets) for i in range(buckets)]
        read.update(uri for uris in (*silver.values(), *gold.values()) for uri in uris)
    gold_files = {uri for t in out for uris in t.gold.values() for uri in uris}
    return out, sum(rows_of[uri] for uri in read - gold_files), sum(rows_of[uri] for uri in gold_files)


def _consumed_files(tables: Tables, plan: Plan) -> dict[str, set[str]]:
    """Per silver table, the files of the version the last run consumed, when this run resumes
    partitions. None of them holds a row a resumed partition has not applied: that run replayed
    every row of those versions (a partition is resumed only when every row silver added since
    lies above its applied offset). A file of a table partitioned by cluster alone spans every
    offsets partition, so its statistics cannot rule it out: without this, an increment read the
    first run's files of those tables whole (at 10M records 515k rows for 100k new ones, and
    more with every run's history)."""
    if not plan.incremental or not plan.consumed:
        return {}
    wanted = [(t, v) for t in SOURCE_TABLES if (v := plan.consumed.get(t)) is not None]
    listed = lake.parallel_map(lambda tv: lake.files_at(tables.path("silver", tv[0]), tv[1]), wanted)
    return {t: uris for (t, _), uris in zip(wanted, listed, strict=True) if uris}


def _rows_per_partition(uri: str) -> dict[int, int]:
    """A gold file's rows per offsets partition, from its ``offsets_partition`` column. A gold file
    holds every offsets partition of its cluster, so its statistics cannot tell a skewed
    partition's share; and the events a partition applied before are no measure of its state: at
    30M records a partition had applied 600k events and held some 20k rows of state, and sizing by
    events split every partition into 3 buckets, each reading the cluster's whole state again (the
    0.33 % increment's replay: 47.9 s)."""
    column = read_parquet([uri], pa.schema([pa.field("offsets_partition", pa.int32())])).column("offsets_partition")
    return {v["values"]: v["counts"] for v in pc.value_counts(column).to_pylist()}


def _partitions_in(uri: str) -> set[int]:
    """The offsets partitions a gold file holds rows of."""
    return set(_rows_per_partition(uri))


def _span(f: lake.DataFile) -> int:
    """The offsets partitions a data file's statistics span (1 for a file of one partition)."""
    low, high = f.minimum.get("offsets_partition"), f.maximum.get("offsets_partition")
    return 1 if low is None or high is None else max(1, int(high) - int(low) + 1)


# runs per offsets partition in a gold file beyond which the file is sorted rather than sliced
MAX_RUNS_PER_PARTITION = 16


def partition_slices(rows: pa.Table, parts: pa.Array) -> tuple[pa.Table, dict[int, list[tuple[int, int]]]]:
    """A gold file's rows, and where the rows of each of ``parts`` lie in them: runs of
    consecutive rows (start, stop), each partition's rows a few zero-copy slices, where a sort of
    the file copied every row (at 30M records 1.3M rows of state per increment). A file's rows come
    in runs per partition, in partition order when the driver wrote them, in the order a task
    replayed them otherwise, interleaved in chunks by delta-rs's parallel writer; a file cut finer
    than :data:`MAX_RUNS_PER_PARTITION` runs per partition is sorted. A task replaying fewer than
    half of a file's rows copies its own and lets the rest go: a task of a many-core cluster must
    not hold every partition's state."""
    values = rows.column("offsets_partition").to_numpy()
    if not len(values):
        return rows, {}
    cuts = np.flatnonzero(values[1:] != values[:-1]) + 1
    if len(cuts) + 1 > MAX_RUNS_PER_PARTITION * len(np.unique(values)):
        order = np.argsort(values, kind="stable")
        rows, values = rows.take(order), values[order]
        cuts = np.flatnonzero(values[1:] != values[:-1]) + 1
    starts, stops = np.concatenate(([0], cuts)), np.concatenate((cuts, [len(values)]))
    wanted = set(parts.to_pylist())
    at: dict[int, list[tuple[int, int]]] = {}
    for p, a, b in zip(values[starts].tolist(), starts.tolist(), stops.tolist(), strict=True):
        if p in wanted:
            at.setdefault(p, []).append((a, b))
    kept = sum(b - a for runs in at.values() for a, b in runs)
    if kept < len(values) // 2:  # a task of many: keep its own rows, not the cluster's
        order_ = [np.arange(a, b) for p in sorted(at) for a, b in at[p]]
        rows = rows.take(np.concatenate(order_) if order_ else np.empty(0, np.int64))
        start, compact = 0, {}
        for p in sorted(at):
            n = sum(b - a for a, b in at[p])
            compact[p], start = [(start, start + n)], start + n
        at = compact
    return rows, at


def _task_frame(spark: SparkSession, tasks: list[ReplayTask]) -> DataFrame:
    """The tasks as a DataFrame whose Spark partitions are balanced bins of them (largest first
    into the lightest bin): the replay runs per Spark partition, no shuffle. Bins per core:
    ``BINS_PER_CORE``, or one where partitions resume from their persisted state: each bin reads
    the gold files of its cluster whole (they hold every offsets partition's rows), so more bins
    read the same state more often."""
    per_core = 1 if any(t.gold for t in tasks) else BINS_PER_CORE
    n = max(1, min(len(tasks), per_core * spark.sparkContext.defaultParallelism))
    bins: list[list[tuple]] = [[] for _ in range(n)]
    loads = [0] * n
    for task in sorted(tasks, key=lambda t: -t.weight):
        i = loads.index(min(loads))
        bins[i].append(task.row())
        loads[i] += task.weight + 1
    # each bin in partition order: the files its output is written to then hold a partition's rows
    # as one run, in order (the next increment's reads slice them, :func:`partition_slices`)
    bins = [sorted(b, key=lambda row: row[:3]) for b in bins]
    rdd = spark.sparkContext.parallelize(list(enumerate(bins)), n).flatMap(lambda kv: kv[1])
    return spark.createDataFrame(rdd, TASK_DDL)


def _replay_on_driver(replay: Callable, tasks: list[ReplayTask]) -> pa.Table:
    """The replay's output computed in this process, as one task that takes every partition: the
    same body Spark's tasks run (:func:`_replay_function`, made with a :class:`Held`), without a
    Spark job, and each gold file read once for all partitions."""
    names = [part.split()[0] for part in TASK_DDL.split(", ")]
    batch = pa.RecordBatch.from_pylist([dict(zip(names, t.row(), strict=True)) for t in tasks])
    return pa.Table.from_batches(list(replay(iter([batch]))))


def _replay_function(
    run_id: str,
    retention_ms: int,
    soft_delete_ms: int | None,
    sources: dict[str, pa.Schema],
    state: dict[str, pa.Schema],
    schemas: dict[str, pa.Schema],
    shared: frozenset[str] = frozenset(),
    held: Held | None = None,
):
    """The mapInArrow body run in Spark tasks: per task row (a partition), read its files, replay,
    and return its output as IPC blobs (:data:`OUTPUT_DDL`); run on the driver with ``held``, the
    output tables stay in it and the blobs are their keys. A file of a ``shared`` silver table
    (partitioned by cluster alone) is read once per task for all the partitions it replays: on an
    object store each read is requests, which a task replaying 7 partitions would make 7 times."""
    blob_bytes = BLOB_BYTES  # read here: the tasks get the driver's value with the closure

    def one(
        cluster: str,
        part: int,
        applied: int | None,
        files: dict[str, dict[str, list[str]]],
        cache: dict,
        bucket: int = 0,
        buckets: int = 1,
    ) -> Iterator[pa.RecordBatch]:
        after = -1 if applied is None else applied

        def silver(table: str) -> pa.Table | None:
            uris = files["silver"].get(table)
            if not uris:
                return None
            if table not in shared or len(cache["parts"]) < 2:
                return read_parquet(
                    uris, sources[table], ("record_offset", after), ("timestamp",), ("offsets_partition", part)
                )
            schema = sources[table]
            if "offsets_partition" not in schema.names:
                schema = schema.append(pa.field("offsets_partition", pa.int32()))
            for uri in uris:
                if ("silver", uri) not in cache:
                    rows = read_parquet([uri], schema, None, ("timestamp",))
                    cache[("silver", uri)] = rows.filter(pc.is_in(rows.column("offsets_partition"), cache["parts"]))
            rows = pa.concat_tables([cache[("silver", uri)] for uri in uris])
            mine = pc.and_(
                pc.equal(rows.column("offsets_partition"), part), pc.greater(rows.column("record_offset"), after)
            )
            return rows.filter(mine).select(sources[table].names)

        def persisted(table: str) -> pa.Table | None:
            uris = files["gold"].get(table)
            if not uris:
                return None
            # a gold file holds the rows of every offsets partition of its cluster: a task reads it
            # once for all the partitions it replays and keeps only theirs (``cache["parts"]``).
            # Cached by file: partitions get different sets of files (statistics), and a cache by
            # set read offset_history's files 72 times for 50 partitions at 30M records (2.5 s)
            schema = state[table].append(pa.field("offsets_partition", pa.int32()))
            for uri in uris:
                if ("gold", uri) not in cache:
                    rows = read_parquet([uri], schema)
                    if table in INTERVALS and rows.column(INTERVALS[table]).null_count < rows.num_rows:
                        rows = rows.filter(pc.is_null(rows.column(INTERVALS[table])))
                    cache[("gold", uri)] = partition_slices(rows, cache["parts"])
            mine = [
                rows.slice(a, b - a) for rows, at in (cache[("gold", uri)] for uri in uris) for a, b in at.get(part, ())
            ]
            if not mine:
                return state[table].empty_table()
            return pa.concat_tables(mine).select(state[table].names)

        def silver_chunks(table: str) -> Iterator[pa.Table]:
            uris = files["silver"].get(table) or []
            where = ("offsets_partition", part)
            return iter_parquet(uris, sources[table], ("record_offset", after), ("timestamp",), where)

        def persisted_chunks(table: str) -> Iterator[pa.Table] | None:
            """The partition's persisted rows (open intervals only, for an interval table), in
            chunks with ``offsets_partition``; None when the table has no file to read."""
            uris = files["gold"].get(table)
            if not uris:
                return None
            schema = state[table].append(pa.field("offsets_partition", pa.int32()))
            chunks = iter_parquet(uris, schema, equal=("offsets_partition", part))
            if table in INTERVALS:
                chunks = (c.filter(pc.is_null(c.column(INTERVALS[table]))) for c in chunks)
            return chunks

        def persisted_bucket(table: str) -> pa.Table | None:
            """A bucket's persisted rows, read in chunks keeping its own (no cache: a bucket's rows
            are its alone, and the files hold the whole partition's)."""
            chunks = persisted_chunks(table)
            rows = None if chunks is None else keep_bucket(chunks, buckets, bucket)
            return None if rows is None else rows.select(state[table].names)

        def persisted_whole(table: str) -> pa.Table | None:
            """The partition's persisted rows, read in chunks (for :func:`split_buckets`)."""
            parts = [c.select(state[table].names) for c in persisted_chunks(table) or () if c.num_rows]
            return pa.concat_tables(parts) if parts else None

        def bucket_facts(facts: PartitionFacts, events: pa.Table) -> dict[str, Any]:
            return {
                "batch_last": facts.batch_last(events),
                "partition_events": facts.events,
                "partition_last_offset": facts.last_offset,
                "partition_log_now": facts.log_now,
            }

        if buckets > 1 and bucket == ALL_BUCKETS:  # every bucket, the partition's files read once
            readers, facts = read_buckets(silver_chunks, buckets)
            whole = {t: split_buckets(persisted_whole(t), buckets) for t in state}
            for i, read in enumerate(readers):
                events = partition_events(read)
                state_of = functools.partial(lambda i, t: whole[t][i], i)
                yield from replayed(cluster, part, applied, events, state_of, bucket_facts(facts, events), i)
            return
        if buckets > 1:  # a bucket of a large partition: its groups' rows only (pipelines/gold/buckets.py)
            read, facts = read_bucket(silver_chunks, buckets, bucket)
            events = partition_events(read)
            yield from replayed(cluster, part, applied, events, persisted_bucket, bucket_facts(facts, events), bucket)
        else:
            yield from replayed(cluster, part, applied, partition_events(silver), persisted, {}, bucket)

    def replayed(
        cluster: str,
        part: int,
        applied: int | None,
        events: pa.Table,
        state_of: Callable[[str], pa.Table | None],
        extra: dict[str, Any],
        bucket: int,
    ) -> Iterator[pa.RecordBatch]:
        """One partition's (or bucket's) replay of ``events`` on its persisted rows ``state_of``,
        as output batches."""
        inp = PartitionInput(
            cluster,
            part,
            events,
            offsets=state_of("current_offsets"),
            pending=state_of("pending_transactions"),
            groups=state_of("current_groups"),
            history=state_of("offset_history"),
            generations=state_of("group_generations"),
            members=state_of(MEMBERS),
            share_members=state_of("share_group_members"),
            streams_members=state_of("streams_group_members"),
            topologies=state_of("streams_group_topologies"),
            applied_offset=applied,
            **extra,
        )
        out = replay_partition(inp, run_id, retention_ms, soft_delete_ms)
        full = applied is None
        parts: list[tuple[str, str, pa.Table, bool]] = []
        for table, schema in schemas.items():
            rows = with_partition(out.tables[table], cluster, part, table, schema)
            changed = full or out.changed.get(table, True)
            if table in INTERVALS:
                closed, open_ = split_intervals(rows, table)
                parts.append((table, CLOSED, closed, changed))
                parts.append((table, OPEN, open_, changed))
            else:
                parts.append((table, ALL, rows, changed))
        done = pa.table(
            {
                "applied_offset": pa.array([out.applied_offset], pa.int64()),
                "events": pa.array([out.events], pa.int64()),
                "log_now": pa.array([out.log_now], pa.int64()),
                "purged": pa.array([out.purged], pa.int64()),
            }
        )
        parts.append((PROGRESS_TABLE, ALL, done, True))
        return _output_batches(cluster, part, bucket, parts, blob_bytes, held)

    def run(batches):  # Iterator[pa.RecordBatch] -> Iterator[pa.RecordBatch]
        for batch in batches:
            tasks = batch.to_pylist()
            # the partitions whose rows the task's shared reads keep (a bucket reads its own)
            whole = sorted({t["offsets_partition"] for t in tasks if t["buckets"] == 1})
            cache: dict = {"parts": pa.array(whole, pa.int32())}
            for task in tasks:
                files = json.loads(task["files"])
                part = task["offsets_partition"]
                yield from one(task["cluster"], part, task["applied"], files, cache, task["bucket"], task["buckets"])

    return run


def _output_batches(
    cluster: str,
    part: int,
    bucket: int,
    parts: list[tuple[str, str, pa.Table, bool]],
    blob_bytes: int = BLOB_BYTES,
    held: Held | None = None,
) -> Iterator[pa.RecordBatch]:
    """One replayed partition (or bucket) as output rows (:data:`OUTPUT_DDL`): per (table, part),
    its rows in IPC blobs of about ``blob_bytes`` at most (one, maybe empty, when they are fewer;
    a single larger row alone), in batches of about that many bytes in all. Unbounded, one blob
    held a partition's whole history: the JVM copies a batch's blobs several times on its way into
    the checkpoint, and a 10M build with a 1.4 GiB heap (standing in for 30M with 4 GiB) died there
    (docs/performance.md)."""
    if held is not None:  # on the driver: nothing crosses to a JVM, the rows stay as they are
        yield _output_batch(cluster, part, bucket, parts, held)
        return
    pieces = []
    for table, name, rows, changed in parts:
        step = max(1, rows.num_rows * blob_bytes // max(rows.nbytes, 1))
        pieces += [(table, name, rows.slice(start, step), changed) for start in range(0, max(rows.num_rows, 1), step)]
    batch: list[tuple[str, str, pa.Table, bool]] = []
    held = 0
    for piece in pieces:
        size = piece[2].nbytes
        if batch and held + size > blob_bytes:
            yield _output_batch(cluster, part, bucket, batch)
            batch, held = [], 0
        batch.append(piece)
        held += size
    yield _output_batch(cluster, part, bucket, batch)


def _output_batch(
    cluster: str, part: int, bucket: int, pieces: list[tuple[str, str, pa.Table, bool]], held: Held | None = None
) -> pa.RecordBatch:
    n = len(pieces)
    # the progress rows always as IPC: the listing reads them (:func:`_progress_of`)
    inline = [held is None or p[0] == PROGRESS_TABLE for p in pieces]
    data = [blobs.ipc(p[2]) if ipc else held.put(p[2]) for p, ipc in zip(pieces, inline, strict=True)]
    # a held table's size only informs (the driver writes it whatever its bytes, :func:`_write`):
    # its buffers' total, not ``nbytes``, which walks every slice of the passed-through state rows
    sizes = [len(d) if ipc else p[2].get_total_buffer_size() for p, d, ipc in zip(pieces, data, inline, strict=True)]
    return pa.RecordBatch.from_pydict(
        {
            "cluster": pa.array([cluster] * n, pa.string()),
            "offsets_partition": pa.array([part] * n, pa.int32()),
            "bucket": pa.array([bucket] * n, pa.int32()),
            "table": pa.array([p[0] for p in pieces], pa.string()),
            "part": pa.array([p[1] for p in pieces], pa.string()),
            "rows": pa.array([p[2].num_rows for p in pieces], pa.int64()),
            # a recomputed partition is rewritten whole; else only the tables the run changed
            "changed": pa.array([p[3] for p in pieces], pa.bool_()),
            "bytes": pa.array(sizes, pa.int64()),
            "data": pa.array(data, pa.binary()),
        }
    )


def with_partition(rows: pa.Table, cluster: str, part: int, table: str, schema: pa.Schema) -> pa.Table:
    """A gold table's rows of one partition in its declared columns and types."""
    n = rows.num_rows
    cols = []
    for f in schema:
        if f.name == "cluster":
            cols.append(pa.repeat(pa.scalar(cluster, f.type), n))
        elif f.name == "offsets_partition":
            cols.append(pa.repeat(pa.scalar(part, f.type), n))
        elif f.name == CURRENT_FLAG:  # the interval is open: its end is null
            cols.append(pc.is_null(rows.column(INTERVALS[table])))
        else:
            col = rows.column(f.name)
            cols.append(col if col.type == f.type else col.cast(f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def split_intervals(rows: pa.Table, table: str) -> tuple[pa.Table, pa.Table]:
    """An interval table's rows: the closed intervals, and the open ones (the end column null)."""
    open_ = pc.is_null(rows.column(INTERVALS[table]))
    return rows.filter(pc.invert(open_)), rows.filter(open_)


def _rows(out: Output, columns: list[str], table: str | None = None) -> list[dict[str, Any]]:
    """``columns`` of the replay's output rows (those of ``table`` when given), on the driver."""
    if isinstance(out, pa.Table):
        if table is not None:
            out = out.filter(pc.equal(out.column("table"), table))
        return out.select(columns).to_pylist()
    if table is not None:
        out = out.where(F.col("table") == table)
    return blobs.collect(out, *columns).to_pylist()


def _listing(out: Output) -> list[dict[str, Any]]:
    """Per output blob, its table, part, partition, rows, changed flag and bytes, and the blob
    itself for the progress rows only (:func:`_progress_of`): one scan of the checkpoint for both."""
    columns = [*PART, "table", "part", "rows", "changed", "bytes"]
    if isinstance(out, pa.Table):
        progress = pc.equal(out.column("table"), PROGRESS_TABLE)
        data = pc.if_else(progress, out.column(blobs.DATA), pa.scalar(None, out.schema.field(blobs.DATA).type))
        return out.select(columns).append_column(blobs.DATA, data).to_pylist()
    data = F.when(F.col("table") == PROGRESS_TABLE, F.col(blobs.DATA)).alias(blobs.DATA)
    return blobs.collect(out.select(*columns, data), *columns, blobs.DATA).to_pylist()


def _progress_of(listing: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """Per processed partition: applied offset, events, log time, soft deletes purged. Each bucket
    of a partition reports the partition's applied offset, events and log time, and the soft
    deletes it purged itself."""
    done: dict[tuple[str, int], dict[str, Any]] = {}
    for r in (r for r in listing if r["table"] == PROGRESS_TABLE):
        [row] = blobs.table(r["data"]).to_pylist()
        pair = (r["cluster"], r["offsets_partition"])
        if pair in done:
            row["purged"] += done[pair]["purged"]
        done[pair] = row
    return done


@dataclass(frozen=True)
class TableWrite:
    """The one commit a run makes to a gold table: the rows of the replay's output that ``parts``
    selects (part -> partitions) replace the table's rows matching ``where``, or are appended
    when ``where`` is None (no partition they replace was ever written)."""

    parts: dict[str, list[Pair]]
    where: str | None
    # part -> partitions whose rows lie outside ``where``, added without replacing any: the closed
    # intervals of resumed partitions, and every row of a partition gold never wrote
    beyond: dict[str, list[Pair]] = field(default_factory=dict)
    # ``where`` as sets: every row of the ``whole`` partitions, the open intervals of the ``open`` ones
    whole: frozenset[Pair] = frozenset()
    open: frozenset[Pair] = frozenset()

    def removes(self, present: Callable[[str], set[int]]) -> Callable[[taskwrite.Existing], bool | None]:
        """Whether this commit replaces an existing file of the table whole (True), none of its
        rows (False), or some (None): what a replace written by tasks, which removes files and
        cannot rewrite them, needs to know (:func:`taskwrite.replace`). ``present(uri)``: the
        offsets partitions a file holds rows of, read from the file when its statistics cannot
        tell (a gold file holds every offsets partition of its cluster)."""

        def verdict(f: taskwrite.Existing) -> bool | None:
            cluster = f.partition_values.get("cluster")
            replaced = {p for c, p in self.whole if c == cluster}
            if f.partition_values.get(CURRENT_FLAG, "true") == "true":
                replaced |= {p for c, p in self.open if c == cluster}
            low, high = f.minimum.get("offsets_partition"), f.maximum.get("offsets_partition")
            if not replaced or (low is not None and high is not None and not any(low <= p <= high for p in replaced)):
                return False
            if low is not None and high is not None and set(range(low, high + 1)) <= replaced:
                return True  # every partition its statistics allow is replaced: no read
            held = present(f.uri)
            if held <= replaced:
                return True
            return False if not held & replaced else None

        return verdict


def table_writes(
    plan: Plan, changed: dict[tuple[str, str], list[Pair]], nonempty: dict[tuple[str, str], list[Pair]]
) -> dict[str, TableWrite]:
    """Per table that a run changed, its one commit. A current table replaces its rows of the
    partitions the run changed. An interval table adds the intervals a resumed partition closed
    and replaces only its open ones, which are a partition of their own (``is_current``), so
    history already written is never rewritten; a recomputed partition replaces all its rows.
    Only partitions gold wrote before (in ``plan.progress``, where a run marks them in flight
    before its first write) can have rows to replace: a first write is an append."""
    out: dict[str, TableWrite] = {}
    for table in GOLD_TABLES:
        written: list[str] = []  # predicates on the rows the commit replaces
        resumed: list[Pair] = []  # partitions whose open intervals it replaces
        full: list[Pair] = []  # partitions whose every row it replaces
        if table not in INTERVALS:
            pairs = changed.get((table, ALL), [])
            rows = set(nonempty.get((table, ALL), []))
            parts = {ALL: [p for p in pairs if p in rows]}
            if full := [p for p in pairs if p in plan.progress]:
                written.append(partitions_predicate(full))
        else:
            pairs = changed.get((table, OPEN), [])
            closed, open_ = set(nonempty.get((table, CLOSED), [])), set(nonempty.get((table, OPEN), []))
            parts = {CLOSED: [p for p in pairs if p in closed], OPEN: [p for p in pairs if p in open_]}
            before = [p for p in pairs if p in plan.progress]
            if resumed := [p for p in before if p in plan.incremental_from]:
                written.append(f"(({partitions_predicate(resumed)}) AND {CURRENT_FLAG} = true)")
            if full := [p for p in before if p not in plan.incremental_from]:
                written.append(partitions_predicate(full))
        if any(parts.values()) or written:
            where = " OR ".join(written) if written else None
            beyond: dict[str, list[Pair]] = {}
            if where is not None:
                for part, pairs in parts.items():
                    closed = part == CLOSED and table in INTERVALS
                    outside = [p for p in pairs if p not in plan.progress or (closed and p in plan.incremental_from)]
                    if outside:
                        beyond[part] = outside
            out[table] = TableWrite(parts, where, beyond, frozenset(full), frozenset(resumed))
    return out


def _write(
    spark: SparkSession,
    tables: Tables,
    out: Output,
    writes: dict[str, TableWrite],
    sizes: dict[tuple[str, str, Pair], int],
    volume: dict[tuple[str, str, Pair], int],
    schemas: dict[str, pa.Schema],
    held: Held | None = None,
) -> None:
    """Run the commits, one per table in ``writes``: the first alone (a fault point follows it),
    then the rest in parallel. ``sizes``, ``volume``: rows and blob bytes per (table, part,
    partition) of ``out``; ``held``: the tables of a replay on the driver, by blob."""
    load = held.rows if held is not None else blobs.table
    named = [t for t in writes if t in NAMED]
    names = topic_names(spark, tables).persist() if named and not isinstance(out, pa.Table) else None
    name_map = topic_name_map(spark, tables) if named else {}
    keys = {t: [(t, part, pair) for part, pairs in w.parts.items() for pair in pairs] for t, w in writes.items()}
    count = {t: sum(sizes.get(k, 0) for k in keys[t]) for t in writes}
    nbytes = {t: sum(volume.get(k, 0) for k in keys[t]) for t in writes}
    # the bytes bound keeps a checkpoint's blobs from being collected past what the driver takes;
    # a replay on the driver holds its output already (at 30M records 1.4M rows of state, past
    # 128 MiB: Spark wrote them, 15.4 s of a 23.7 s gold)
    local = [
        t
        for t in writes
        if count[t] <= lake.LOCAL_WRITE_ROWS and (held is not None or nbytes[t] <= lake.LOCAL_WRITE_BYTES)
    ]
    fetch = _Prefetch(out, writes, local, nbytes) if not isinstance(out, pa.Table) else None

    def write(table: str) -> None:
        w = writes[table]
        small = table in local
        path = tables.path("gold", table)
        fill = None
        if table in NAMED:
            fill = functools.partial(fill_topic_names_arrow, arrays=list(NAMED[table]), names=name_map)
        if isinstance(out, pa.Table):
            mine = _picked_arrow(out, table, w)
            local_rows = _rows(mine, [*PART, "part", blobs.DATA]) if small else None
            if local_rows is not None and _write_locally(path, schemas[table], local_rows, w, fill, load):
                return
            # too many rows for one delta-rs commit, or a table it cannot write: Spark writes them
            # through IPC: pyspark's conversion refuses arrays sliced out of larger ones (a held
            # table's rows: "Null bitmap with offsets slice not supported"), written out they are whole
            held_rows = [load(blob) for blob in mine.column(blobs.DATA).to_pylist() if blob]
            batches = [b for rows in held_rows for b in blobs.table(blobs.ipc(rows)).to_batches()]
            # no batch at all (a replace that clears partitions): Spark needs a chunk per column
            arrow = pa.Table.from_batches(batches, schemas[table]) if batches else schemas[table].empty_table()
            rows = lake.spark_frame(spark, fill(arrow) if fill is not None else arrow)
        else:
            picked = out.where((F.col("table") == table) & _picked(w))
            if small and fetch is not None and _write_locally(path, schemas[table], fetch.rows(table), w, fill, load):
                return
            # the tasks unpacking the rows write the table's files: an append, or a replace that
            # removes whole files (all offsets partitions of a file replaced: any increment that
            # touches every partition); else Spark's writer rewrites the files it replaces rows of
            rows_of = functools.partial(blobs.unpacked, fill=fill)
            frame = blobs.tasks(picked, count[table])
            if w.where is None:
                if lake.append_from_tasks(spark, frame, path, rows_of) is not None:
                    return
            else:
                removes = w.removes(_partitions_in)
                if lake.replace_from_tasks(spark, frame, path, rows_of, removes, ("offsets_partition",)) is not None:
                    return
            rows = blobs.frame(picked, tables.spec("gold", table).ddl_columns(), count[table])
            if table in NAMED and names is not None:
                rows = fill_topic_names(rows, list(NAMED[table]), names)
        if w.where is None:
            lake.append(rows, path)
        else:
            lake.replace_where(rows, path, w.where)

    try:
        # an interval table's commit adds closed intervals outside the open ones it replaces
        with lake.rows_beyond_where(spark):
            lake.first_then_parallel(list(writes), write, lambda: faults.point("gold.between_merges"))
    finally:
        if names is not None:
            names.unpersist()


class _Prefetch:
    """The output rows of the tables written from the driver, collected in as few scans of the
    replay's checkpoint as :data:`lake.LOCAL_WRITE_BYTES` allows: each scan reads every table's
    blobs to find its own (at 10M records 387 MiB, 2.3-3.7 s of task time on 2 cores, and a build
    made one per table; docs/performance.md). A scan runs when a write first asks for one of its tables."""

    def __init__(self, out: DataFrame, writes: dict[str, TableWrite], local: list[str], nbytes: dict[str, int]):
        self.out, self.writes = out, writes
        self.scans = blobs.scans({t: nbytes[t] for t in local}, lake.LOCAL_WRITE_BYTES)
        self.fetched: dict[str, list[dict[str, Any]]] = {}
        self.lock = threading.Lock()

    def rows(self, table: str) -> list[dict[str, Any]]:
        """The table's picked output rows (:func:`_picked`), with their blobs."""
        with self.lock:
            if table not in self.fetched:
                scan = self.scans.get(table, (table,))
                cond = F.lit(False)
                for t in scan:
                    cond = cond | ((F.col("table") == t) & _picked(self.writes[t]))
                got = _rows(self.out.where(cond), [*PART, "table", "part", blobs.DATA])
                for t in scan:
                    self.fetched[t] = []
                for r in got:
                    self.fetched[r.pop("table")].append(r)
            return self.fetched.pop(table)


def _picked(w: TableWrite):
    """The Spark condition on the replay's output rows a table's commit writes: every bucket's
    rows of a changed partition (``w.parts`` lists only changed partitions)."""
    cond = F.lit(False)
    for part, pairs in w.parts.items():
        if pairs:
            cond = cond | ((F.col("part") == part) & F.expr(partitions_predicate(pairs)))
    return cond


def _picked_arrow(out: pa.Table, table: str, w: TableWrite) -> pa.Table:
    """:func:`_picked` on the replay's output held on the driver."""
    keys = {(part, c, p) for part, pairs in w.parts.items() for c, p in pairs}
    mine = out.filter(pc.equal(out.column("table"), table))
    rows = zip(mine.column("part").to_pylist(), mine.column("cluster").to_pylist(),
               mine.column("offsets_partition").to_pylist(), strict=True)  # fmt: skip
    return mine.filter(pa.array([key in keys for key in rows], pa.bool_()))


def _write_locally(
    path: str,
    schema: pa.Schema,
    picked: list[dict[str, Any]],
    w: TableWrite,
    fill: Callable[[pa.Table], pa.Table] | None,
    load: Callable[[bytes], pa.Table] = blobs.table,
) -> bool:
    """A table's commit written from the driver (:func:`lake.write_arrow`): its few rows, the
    replay's output rows ``picked`` unpacked. delta-rs refuses rows outside the predicate it
    replaces, so the rows beyond it (``w.beyond``) follow in a second commit, an append; a run
    killed between the two left its partitions in flight, and the next run recomputes them.
    False when delta-rs cannot write the table (nothing written)."""
    inside: list[pa.Table] = []
    beyond: list[pa.Table] = []
    extra = {(part, pair) for part, pairs in w.beyond.items() for pair in pairs}
    # in partition order (a stable sort: a partition's buckets keep theirs): the next increment's
    # replay then finds each partition's rows in a few runs of the file (delta-rs's writer may
    # interleave its chunks), as slices, not by copying them all (:func:`partition_slices`)
    for r in sorted(picked, key=lambda r: (r["cluster"], r["offsets_partition"])):
        rows = load(r[blobs.DATA])
        rows = fill(rows) if fill is not None else rows
        (beyond if (r["part"], (r["cluster"], r["offsets_partition"])) in extra else inside).append(rows)
    if inside or w.where is not None:
        # no rows: the partitions replaced lost every row, and the replace clears them
        main = pa.concat_tables(inside) if inside else schema.empty_table()
        if not lake.write_arrow(main, path, w.where):
            return False
    if beyond:
        lake.write_arrow(pa.concat_tables(beyond), path)
    return True


def _refresh_names(spark: SparkSession, tables: Tables) -> bool:
    """silver learnt topic ids: fill the names into the member tables' assignments (every
    partition; small tables, rewritten only where a name changed). True when it wrote. Read,
    filled and written on the driver (delta-rs, Arrow) where a table's rows fit one driver
    commit: Spark's join, comparison and rewrite took 3 s on a warm JVM and 17 s on a cold one,
    in any increment that met a new topic id."""
    wrote = False
    names: dict[tuple[str, str], str] | None = None
    for table, arrays in NAMED.items():
        path = tables.path("gold", table)
        current = lake.read_arrow(spark, path)
        if current is not None and current.num_rows <= lake.LOCAL_WRITE_ROWS:
            names = topic_name_map(spark, tables) if names is None else names
            named = fill_topic_names_arrow(current, list(arrays), names)
            if named.equals(current):
                continue
            if lake.write_arrow(named, path, "true"):
                wrote = True
                continue
        rows = lake.read(spark, path)
        if rows is None:
            continue
        named = fill_topic_names(rows, list(arrays), topic_names(spark, tables))
        key = ("cluster", "offsets_partition", "group_id", "member_id")
        columns = [c.name for c in tables.spec("gold", table).columns if c.name != "updated_run_id"]
        wrote = lake.replace_if_changed(spark, path, named, "true", key, columns)[0] or wrote
    return wrote


def _rebuild_if_outdated(spark: SparkSession, tables: Tables) -> bool:
    """Gold tables an older version wrote with another partitioning cannot take this version's
    writes: gold is derived from silver, so it is dropped and rebuilt (a full refresh). True then."""
    outdated = [t for t in tables.outdated("gold") if t not in LAG_TABLES]  # lag.py rebuilds its own
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


def replay_schemas(
    tables: Tables,
) -> tuple[dict[str, pa.Schema], dict[str, pa.Schema], dict[str, pa.Schema], frozenset[str]]:
    """What the replay's tasks read and write, in :func:`_replay_function`'s order: silver's source
    tables' schemas, gold's state as read back (without the partition columns), gold's tables as
    written, and the silver tables partitioned by cluster alone (each file holds rows of many
    offsets partitions)."""
    schemas = {t: tables.spec("gold", t).arrow() for t in GOLD_TABLES}
    state = {t: pa.schema([f for f in schemas[t] if f.name not in (*PART, CURRENT_FLAG)]) for t in GOLD_TABLES}
    sources = read_schemas(tables.specs["silver"])
    shared = frozenset(t for t in SOURCE_TABLES if "offsets_partition" not in tables.spec("silver", t).partitioned_by)
    return sources, state, schemas, shared


def _replay(
    spark: SparkSession,
    tables: Tables,
    run_id: str,
    full_refresh: bool,
    retention_ms: int,
    soft_delete_retention_days: float | None,
) -> GoldResult:
    full_refresh = _rebuild_if_outdated(spark, tables) or full_refresh
    drop_outdated_lag(spark, tables)
    for table in tables.specs["gold"]:
        tables.ensure("gold", table)  # a first run creates them
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
    sources, state, schemas, shared = replay_schemas(tables)
    soft_ms = None if soft_delete_retention_days is None else int(soft_delete_retention_days * 86_400_000)
    with result.steps("list files"):
        tasks, silver_rows, state_rows = _tasks(spark, tables, plan)
    result.bucketed = {
        f"{t.pair[0]}/{t.pair[1]}": t.buckets for t in tasks if t.buckets > 1 and t.bucket in (0, ALL_BUCKETS)
    }
    if result.bucketed:
        spread = ", ".join(f"{k} in {n}" for k, n in result.bucketed.items())
        log.info("gold: %s replayed in buckets", spread)
    out: Output
    held: Held | None = None
    with result.steps("read events and replay"):
        # a small run, or an increment on a state the driver can hold: no Spark job
        if silver_rows <= LOCAL_REPLAY_ROWS and state_rows <= LOCAL_STATE_ROWS:
            result.replayed_on = "driver"
            held = Held()
            replay = _replay_function(run_id, retention_ms, soft_ms, sources, state, schemas, shared, held)
            out = _replay_on_driver(replay, tasks)
        else:
            result.replayed_on = "spark"
            # a checkpoint, not a cache: the replay read the gold tables it is about to write, and
            # Spark re-computes cached plans over a table written to (each write would replay
            # again, on the tables as the earlier writes left them)
            replay = _replay_function(run_id, retention_ms, soft_ms, sources, state, schemas, shared)
            out = (
                _task_frame(spark, tasks)
                .mapInArrow(replay, OUTPUT_DDL)
                .localCheckpoint(eager=True, storageLevel=lake.CHECKPOINT_LEVEL)
            )
    try:
        with result.steps("count"):
            listing = _listing(out)
            rows = {t: sum(r["rows"] for r in listing if r["table"] == t) for t in GOLD_TABLES}
            # per (table, part, partition), over its buckets: rows, and whether any bucket changed it
            # (then every bucket's rows are written: they replace the partition's rows together)
            sizes: dict[tuple[str, str, Pair], int] = {}
            volume: dict[tuple[str, str, Pair], int] = {}  # bytes of the blobs
            touched: dict[tuple[str, str, Pair], bool] = {}
            for r in listing:
                key = (r["table"], r["part"], (r["cluster"], r["offsets_partition"]))
                sizes[key] = sizes.get(key, 0) + r["rows"]
                volume[key] = volume.get(key, 0) + r["bytes"]
                touched[key] = touched.get(key, False) or r["changed"]
            changed: dict[tuple[str, str], list[Pair]] = {}
            nonempty: dict[tuple[str, str], list[Pair]] = {}
            for (table, part, pair), was in sorted(touched.items(), key=lambda kv: kv[0][2]):
                if was:
                    changed.setdefault((table, part), []).append(pair)
                    if sizes[(table, part, pair)]:
                        nonempty.setdefault((table, part), []).append(pair)
            done = _progress_of(listing)
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
            _write(spark, tables, out, table_writes(plan, changed, nonempty), sizes, volume, schemas, held)
        if plan.names_changed and plan.progress:  # a first run wrote every member row with today's names
            with result.steps("topic names"):
                _refresh_names(spark, tables)
        with result.steps("progress"):
            progress_rows(spark, tables, plan, done, run_id)
    finally:
        if not isinstance(out, pa.Table):
            out.unpersist()
    return result
