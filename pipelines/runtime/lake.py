"""Lakehouse I/O: the one place that reads, writes and inspects Delta tables by path.

Every layer goes through these functions, so a change in how the lakehouse is read or written
(partition pruning, write modes, commit metadata) is one change. Tables are path-based
(``<root>/<layer>/<table>``, see :mod:`pipelines.runtime.tables`); the SQL helpers build the
predicates that let Delta skip the files of other clusters and offsets partitions.

Two writers: delta-spark, and delta-rs on the driver for small commits (:func:`write_arrow`), where
a Spark write's fixed cost (about a second: jobs to list the snapshot, write and commit) dwarfs
the rows. Both write the same protocol; readers cannot tell them apart.

Creating and registering a table (its declared columns, partitioning and properties) is
:class:`pipelines.runtime.tables.Tables`' job; the writers here expect the table to exist, except
:func:`append` and :func:`replace_where`, which create an undeclared one as Delta would.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from delta.tables import DeltaTable
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType
from pyspark.util import inheritable_thread_target

from pipelines.errors import UnsupportedTable
from pipelines.runtime import taskwrite
from pipelines.runtime.files import data_file_uri, normalise, plain_types
from pipelines.runtime.storage import delta_rs_options

__all__ = [
    "LOCAL_WRITE_ROWS",
    "METADATA_CONF",
    "DataFile",
    "any_rows",
    "append",
    "append_counted",
    "append_from_tasks",
    "changes",
    "changes_arrow",
    "commit_empty",
    "commit_info",
    "commit_metadata",
    "conflict",
    "data_files",
    "drop",
    "exists",
    "first_then_parallel",
    "in_parallel",
    "insert_new",
    "key_condition",
    "last_commit",
    "latest_metadata",
    "merge",
    "offset_ranges_predicate",
    "parallel_map",
    "partition_columns",
    "partitions_predicate",
    "properties",
    "read",
    "read_arrow",
    "read_at",
    "replace_from_tasks",
    "replace_if_changed",
    "replace_partitions",
    "replace_where",
    "retry_conflicts",
    "rows_beyond_where",
    "session_conf",
    "set_property",
    "spark_frame",
    "sql_in_list",
    "sql_str",
    "tagged_commits",
    "version",
    "write_arrow",
    "write_rows",
]

T = TypeVar("T")
R = TypeVar("R")
log = logging.getLogger("offsets_lakehouse")

METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
SKIP_EMPTY_CONF = "spark.databricks.delta.skipRecordingEmptyCommits"
REPLACE_WHERE_CHECK_CONF = "spark.databricks.delta.replaceWhere.constraintCheck.enabled"
# a layer writes a commit of at most this many rows from the driver (:func:`write_arrow`), larger
# ones with Spark, whose tasks write in parallel and spare the driver holding the rows. delta-rs
# appended 463k rows of 7 columns in 0.16 s; Spark's writes of silver's three tables of 263k-463k
# rows at 10M records took 5-15 s each on 2 cores (2 tasks, each reading its share of the whole
# decode checkpoint): the bytes below are the real bound
LOCAL_WRITE_ROWS = 2_000_000
# ... and of at most this many bytes (as Arrow IPC): rows are not a bound on size (at 30M records,
# 200k rows of group metadata held 1 GiB of members, past Spark's spark.driver.maxResultSize)
LOCAL_WRITE_BYTES = 128 << 20
# where silver's and gold's checkpoints of Arrow IPC blobs are kept: on the executors' disks, out of
# the heap (the operating system's page cache keeps them in memory while it has room). In the heap
# (MEMORY_AND_DISK, Spark's default) a 30M-record build's blobs filled the storage share of a 4 GiB
# driver beside its writes: 721.8 / 748.7 s that way, 700.4 s this way; at 10M within noise
# (docs/performance.md)
CHECKPOINT_LEVEL = StorageLevel.DISK_ONLY


# -- SQL text ------------------------------------------------------------------------------------------
def sql_str(text: str) -> str:
    """A SQL string literal (backslashes and quotes escaped: cluster names and paths are user input)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_in_list(values: Iterable[Any]) -> str:
    """The inside of an ``IN (...)``: strings quoted, numbers as integers, sorted (same input,
    same text: predicates compare equal in tests and plans)."""
    return ", ".join(sql_str(v) if isinstance(v, str) else str(int(v)) for v in sorted(values))


def partitions_predicate(pairs: Iterable[tuple[str, int]], prefix: str = "", column: str = "offsets_partition") -> str:
    """SQL predicate selecting exactly these (cluster, partition) pairs (``false`` for none).

    Written as one ``cluster = c AND column IN (...)`` term per cluster because Delta prunes
    files by partition values only on such simple comparisons."""
    by_cluster: dict[str, list[int]] = {}
    for cluster, part in pairs:
        by_cluster.setdefault(cluster, []).append(part)
    if not by_cluster:
        return "false"
    return " OR ".join(
        f"({prefix}cluster = {sql_str(c)} AND {prefix}{column} IN ({sql_in_list(ps)}))"
        for c, ps in sorted(by_cluster.items())
    )


def offset_ranges_predicate(
    spans: Mapping[tuple[str, int], Iterable[tuple[int, int]]],
    prefix: str = "",
    partition_column: str = "partition",
    offset_column: str = "offset",
) -> str:
    """SQL predicate selecting the rows of these (cluster, partition) pairs whose offset lies in one
    of the pair's ``[first, last]`` spans (``false`` for none).

    A conjunction of :func:`partitions_predicate` (which Delta prunes files by) and the spans per
    pair. Delta's data skipping compares the spans with each file's offset minimum and maximum,
    but cannot pair them with the partition: over several partitions it keeps the files meeting
    any partition's span (:func:`data_files`' statistics answer that question precisely)."""
    terms = []
    for (cluster, part), ranges in sorted(spans.items()):
        between = " OR ".join(f"{prefix}{offset_column} BETWEEN {int(lo)} AND {int(hi)}" for lo, hi in sorted(ranges))
        if between:
            terms.append(
                f"({prefix}cluster = {sql_str(cluster)} AND {prefix}{partition_column} = {int(part)} AND ({between}))"
            )
    if not terms:
        return "false"
    pairs = partitions_predicate(
        [pair for pair, ranges in spans.items() if list(ranges)], prefix=prefix, column=partition_column
    )
    return f"({pairs}) AND ({' OR '.join(terms)})"


def key_condition(key: Iterable[str], op: str = "=", left: str = "t", right: str = "s") -> str:
    """``t.k1 = s.k1 AND t.k2 = s.k2``: a MERGE or join condition on key columns."""
    return " AND ".join(f"{left}.{k} {op} {right}.{k}" for k in key)


# -- reading and inspecting ------------------------------------------------------------------------------
def remote(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect client (a running ``serve``'s session, runtime/served.py):
    it has no JVM here, so the Delta log is read with delta-rs instead."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def exists(spark: SparkSession, path: str) -> bool:
    """Whether a Delta table is at ``path`` (a directory without ``_delta_log`` is not one): asked
    of delta-rs (a listing, milliseconds; Spark's answer loads the table, and its first one in a
    process tens of times longer), of Spark when delta-rs cannot tell."""
    from deltalake import DeltaTable as RsTable

    uri = normalise(path)
    tables = getattr(_PINNED, "tables", None)
    if tables is not None and uri in tables:
        return tables[uri] is not None
    try:
        return bool(RsTable.is_deltatable(uri, storage_options=delta_rs_options(uri)))
    except Exception as exc:
        if remote(spark):
            raise
        log.debug("delta-rs cannot tell whether %s is a table (%s): Spark does", path, exc)
    return DeltaTable.isDeltaTable(spark, path)


def read(spark: SparkSession, path: str, where: str | None = None) -> DataFrame | None:
    """The table's current snapshot (filtered by ``where``), or None when there is no table yet."""
    if not exists(spark, path):
        return None
    df = spark.read.format("delta").load(path)
    return df if where is None else df.where(where)


def last_commit(spark: SparkSession, path: str) -> Any:
    """The table's latest commit: a row of ``DESCRIBE HISTORY`` (version, operation, metrics)."""
    return DeltaTable.forPath(spark, path).history(1).collect()[0]


def _snapshot(spark: SparkSession, path: str) -> Any:
    """The table's latest snapshot, from the Delta log in Spark's JVM: a listing of ``_delta_log``
    (milliseconds), where ``DESCRIBE HISTORY`` or ``DESCRIBE DETAIL`` run a query (~0.7 s)."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)  # type: ignore[attr-defined]
    none = jvm.scala.Option.empty()
    return log.update(False, none, none)


def any_rows(spark: SparkSession, path: str, where: str = "true") -> bool:
    """Whether the table at ``path`` has a row matching ``where`` (False when there is no table):
    with a partition and file-statistics predicate, Delta answers it from the few files it keeps;
    without one (``true``), its log's file statistics answer it (no Spark job)."""
    if where == "true":
        return any(f.rows is None or f.rows > 0 for f in data_files(spark, {"t": path}, ())["t"])
    df = read(spark, path, where)
    return df is not None and not df.isEmpty()


@dataclass(frozen=True)
class DataFile:
    """A data file of a table's current version, from its Delta log: where it is, its partition
    values (as the log writes them: strings, None for null) and its statistics for the columns
    asked for (None where the writer kept none)."""

    uri: str
    partition: tuple[str | None, ...]
    rows: int | None
    minimum: dict[str, Any]
    maximum: dict[str, Any]
    nulls: dict[str, int | None]


def data_files(
    spark: SparkSession,
    paths: Mapping[str, str],
    partition_columns: Sequence[str],
    stats: Sequence[str] = (),
    versions: Mapping[str, int | None] | None = None,
) -> dict[str, list[DataFile]]:
    """The data files of each table (name -> path; a name without a table maps to ``[]``) at its
    current version, or at ``versions[name]`` where given: what a reader outside Spark (a Python
    task reading its partition's files with pyarrow, :mod:`pipelines.runtime.files`) must read to
    see exactly that version.

    Read from the Delta log by delta-rs (``deltalake``), in the driver and without a Spark job:
    the file list of a table Spark has not touched in this process costs Spark a state
    reconstruction (two jobs, about a second each on 2 cores), delta-rs milliseconds. A table
    delta-rs cannot list (a protocol feature it lacks) is listed by Spark instead, from the
    snapshot. Refuses a table with deletion vectors (:class:`~pipelines.errors.UnsupportedTable`):
    its files hold rows the version deleted, which a Parquet reader would see. This project never
    enables them; a table someone altered must be switched back."""
    out: dict[str, list[DataFile]] = {}
    fallback: dict[str, str] = {}
    for name, path in paths.items():
        at = (versions or {}).get(name)
        try:
            listed = _files_by_delta_rs(path, partition_columns, stats, at)
        except UnsupportedTable:
            raise
        except Exception as exc:
            log.debug("delta-rs cannot list %s (%s): Spark lists it", path, exc)
            fallback[name] = path
            continue
        out[name] = listed
    if fallback:
        out |= _files_by_spark(spark, fallback, partition_columns, stats)
    return out


def _files_by_delta_rs(
    path: str, partition_columns: Sequence[str], stats: Sequence[str], version: int | None
) -> list[DataFile]:
    from deltalake import DeltaTable  # local: only the driver lists files
    from deltalake.exceptions import TableNotFoundError

    uri = normalise(path)
    try:
        table = DeltaTable(uri, version=version, storage_options=delta_rs_options(uri))
    except TableNotFoundError:
        return []
    features = set(table.protocol().reader_features or ())
    if features - {"timestampNtz", "vacuumProtocolCheck", "v2Checkpoint"}:
        # e.g. deletion vectors (delta-rs's add actions do not show them) or column mapping:
        # Spark lists the files, and refuses deletion vectors file by file
        raise ValueError(f"reader features {sorted(features)}")
    adds = pa.table(table.get_add_actions(flatten=True))

    def column(name: str) -> list[Any]:
        return adds.column(name).to_pylist() if name in adds.column_names else [None] * adds.num_rows

    parts = [[None if v is None else str(v) for v in column(f"partition.{c}")] for c in partition_columns]
    rows = column("num_records")
    low = {c: column(f"min.{c}") for c in stats}
    high = {c: column(f"max.{c}") for c in stats}
    nulls = {c: column(f"null_count.{c}") for c in stats}
    root = path.rstrip("/")
    return [
        DataFile(
            uri=data_file_uri(root, rel),
            partition=tuple(p[i] for p in parts),
            rows=rows[i],
            minimum={c: low[c][i] for c in stats},
            maximum={c: high[c][i] for c in stats},
            nulls={c: nulls[c][i] for c in stats},
        )
        for i, rel in enumerate(adds.column("path").to_pylist())
    ]


def files_at(path: str, version: int) -> set[str] | None:
    """The URIs of the data files of the Delta table at ``path`` as of ``version``, listed by
    delta-rs; None when it cannot list exactly that version (its log entries cleaned up, a feature
    it lacks): unlike :func:`data_files`, no fallback to Spark's current snapshot, which would
    answer for another version."""
    try:
        return {f.uri for f in _files_by_delta_rs(path, (), (), version)}
    except Exception as exc:
        log.debug("delta-rs cannot list %s at version %s (%s)", path, version, exc)
        return None


def _files_by_spark(
    spark: SparkSession, paths: Mapping[str, str], partition_columns: Sequence[str], stats: Sequence[str]
) -> dict[str, list[DataFile]]:
    """:func:`data_files` from Spark's snapshots (current versions), in one job."""
    out: dict[str, list[DataFile]] = {name: [] for name in paths}
    frames = []
    for name, path in paths.items():
        if not exists(spark, path):
            continue
        files = DataFrame(_snapshot(spark, path).allFiles().toDF(), spark)
        dv = F.col("deletionVector").isNotNull() if "deletionVector" in files.columns else F.lit(False)
        frames.append(
            files.select(
                F.lit(name).alias("_table"),
                F.lit(path.rstrip("/")).alias("_root"),
                "path",
                *[F.col("partitionValues").getItem(c).alias(f"_p{i}") for i, c in enumerate(partition_columns)],
                "stats",
                dv.alias("_dv"),
            )
        )
    if not frames:
        return out
    union = frames[0]
    for f in frames[1:]:
        union = union.unionByName(f)
    n = len(partition_columns)
    for r in union.collect():
        if r["_dv"]:
            raise UnsupportedTable(
                f"{r['_root']} has deletion vectors, which this version does not read: "
                "set TBLPROPERTIES ('delta.enableDeletionVectors' = false) and run REORG TABLE ... APPLY (PURGE)"
            )
        st = json.loads(r["stats"]) if r["stats"] else {}
        low, high, nulls = st.get("minValues", {}), st.get("maxValues", {}), st.get("nullCount", {})
        out[r["_table"]].append(
            DataFile(
                uri=data_file_uri(r["_root"], r["path"]),
                partition=tuple(r[f"_p{i}"] for i in range(n)),
                rows=st.get("numRecords"),
                minimum={c: low.get(c) for c in stats},
                maximum={c: high.get(c) for c in stats},
                nulls={c: nulls.get(c) for c in stats},
            )
        )
    return out


def read_arrow(
    spark: SparkSession, path: str, columns: Sequence[str] | None = None, at: int | None = None
) -> pa.Table | None:
    """A small table (or its ``columns``) as Arrow on the driver, at its current version or at
    ``at``; None when there is no table. Read by delta-rs without a Spark job (a table Spark has
    not touched in this process costs a state reconstruction, about a second on 2 cores); Spark
    reads what delta-rs cannot. For control tables and plans, never for a table's bulk."""
    try:
        from deltalake.exceptions import TableNotFoundError

        try:
            table = _rs_table(path, at)
        except TableNotFoundError:
            return None
        if table.protocol().reader_features:
            raise ValueError(f"reader features {table.protocol().reader_features}")
        out = table.to_pyarrow_table(columns=list(columns) if columns is not None else None)
        return _plain_strings(out)
    except Exception as exc:
        log.debug("delta-rs cannot read %s (%s): Spark reads it", path, exc)
    df = read(spark, path) if at is None else (read_at(spark, path, at) if exists(spark, path) else None)
    if df is None:
        return None
    return df.select(*columns).toArrow() if columns is not None else df.toArrow()


def readable_by_driver(path: str) -> bool:
    """Whether delta-rs reads the table at ``path`` on the driver: it opens its log, and the table
    needs no reader feature it may not honour (deletion vectors, column mapping). False when
    there is no table."""
    try:
        table = _rs_table_or_none(path)
    except Exception as exc:
        log.debug("delta-rs cannot open %s (%s)", path, exc)
        return False
    return table is not None and not table.protocol().reader_features


def spark_frame(spark: SparkSession, rows: pa.Table, schema: str | StructType | None = None) -> DataFrame:
    """``rows`` (held on the driver) as a Spark DataFrame, a local relation (``schema``: Spark's
    columns, when given). An empty table keeps its schema: pyspark cannot build a frame from
    columns without chunks, as delta-rs returns an empty read. Batches without rows are dropped:
    Spark 4.1's reader of the Arrow stream ``createDataFrame`` sends takes one for the stream's end,
    and every row after it was lost without an error (a table of ten rows, none, then twenty gave
    a frame of ten; tests/spark/test_lake_write_arrow.py)."""
    if not rows.num_rows:
        rows = rows.schema.empty_table()
    elif any(not b.num_rows for b in rows.to_batches()):
        rows = rows.combine_chunks()  # whole arrays: pyspark refuses some sliced ones (lists with nulls)
    return spark.createDataFrame(rows) if schema is None else spark.createDataFrame(rows, schema)


def read_arrow_where(path: str, columns: Sequence[str], where: Any) -> pa.Table:
    """The table's rows matching ``where`` (a pyarrow dataset expression: files whose statistics
    or partition values rule it out are not read), in ``columns``, read by delta-rs; empty when
    there is no table. Raises when delta-rs cannot read the table (the caller asks Spark)."""
    table = _rs_table_or_none(path)
    if table is None:
        return pa.table({c: pa.array([], pa.null()) for c in columns})
    if table.protocol().reader_features:
        raise ValueError(f"reader features {table.protocol().reader_features}")
    return _plain_strings(table.to_pyarrow_dataset().to_table(columns=list(columns), filter=where))


def changes_arrow(spark: SparkSession, path: str, start: int, end: int, columns: Sequence[str]) -> pa.Table:
    """The change data feed of versions start..end (:func:`changes`) in ``columns`` (and
    ``_change_type``) as Arrow on the driver: read by delta-rs without a Spark job, by Spark when
    delta-rs cannot; a range the feed cannot serve raises Spark's error."""
    try:
        table = _rs_table(path, end)
        if table.protocol().reader_features:
            raise ValueError(f"reader features {table.protocol().reader_features}")
        # every column, then the wanted ones: delta-rs parses a projection as SQL, where names
        # such as bronze's `offset` and `partition` are keywords
        reader = table.load_cdf(starting_version=start, ending_version=end)
        return _plain_strings(pa.table(reader.read_all()).select([*columns, "_change_type"]))
    except Exception as exc:
        log.debug("delta-rs cannot read the change data feed of %s (%s): Spark reads it", path, exc)
    return changes(spark, path, start, end).select(*columns, "_change_type").toArrow()


def add_actions(path: str, version: int | None = None) -> pa.Table | None:
    """The table's live files (at ``version``, default the latest) with their partition values and
    statistics (delta-rs, ``get_add_actions(flatten=True)``: ``partition.<column>``,
    ``num_records``, ...); None when there is no table or delta-rs cannot read it."""
    try:
        table = _rs_table_or_none(path, version)
        return None if table is None else pa.table(table.get_add_actions(flatten=True))
    except Exception as exc:
        log.debug("delta-rs cannot list the files of %s (%s)", path, exc)
        return None


def _counted_files(path: str, version: int | None) -> pa.Table | None:
    """The table's live files at ``version`` (default: the latest) with their row counts
    (``num_records``, :func:`add_actions`); None when the counts cannot be exact: no table, a log
    delta-rs cannot read, deletion vectors (their rows are counted in the file's), a file without
    its count."""
    try:
        table = _rs_table(path, version)
        if "deletionVectors" in (table.protocol().reader_features or []):
            return None
        actions = pa.table(table.get_add_actions(flatten=True))
    except Exception as exc:
        log.debug("delta-rs cannot count the rows of %s (%s)", path, exc)
        return None
    if "num_records" not in actions.column_names or actions["num_records"].null_count:
        return None
    return actions


def rows_per_partition(path: str, columns: Sequence[str], version: int | None = None) -> pa.Table | None:
    """Rows per value of the partition ``columns`` (``columns`` and ``records``), summed from the
    file statistics in the table's Delta log at ``version`` (default: the latest) without reading
    a data file; None when they cannot be exact (:func:`_counted_files`) or the table is not
    partitioned by ``columns``."""
    actions = _counted_files(path, version)
    keys = [f"partition.{c}" for c in columns]
    if actions is None or not all(k in actions.column_names for k in keys):
        return None
    counts = actions.select([*keys, "num_records"]).group_by(keys).aggregate([("num_records", "sum")])
    return counts.rename_columns([*columns, "records"])


def ranges_per_partition(path: str, partition: Sequence[str], columns: Sequence[str]) -> pa.Table | None:
    """Per value of the partition columns: ``records`` and the lowest and highest value of each
    of ``columns`` (``min_<c>``, ``max_<c>``), from the file statistics in the table's Delta log
    (latest version) without reading a data file. For number and timestamp columns (Delta cuts
    strings' statistics short; timestamps' it keeps to the millisecond). None when they cannot be
    exact (:func:`_counted_files`) or a file with rows has no bounds (statistics not collected for
    the column, or only nulls in it)."""
    actions = _counted_files(path, None)
    keys = [f"partition.{c}" for c in partition]
    bounds = [f"{side}.{c}" for side in ("min", "max") for c in columns]
    if actions is None or not all(k in actions.column_names for k in [*keys, *bounds]):
        return None
    actions = actions.filter(pc.greater(actions["num_records"], 0))
    if any(actions[b].null_count for b in bounds):
        return None
    # "min.offset" is aggregated by "min" and named "min.offset_min" by group_by
    out = actions.group_by(keys).aggregate([("num_records", "sum"), *((b, b[:3]) for b in bounds)])
    names = {
        "num_records_sum": "records",
        **{f"{b}_{b[:3]}": b.replace(".", "_", 1) for b in bounds},
        **{k: k.removeprefix("partition.") for k in keys},
    }
    return out.rename_columns([names[n] for n in out.column_names])


def row_count(path: str, version: int | None = None) -> int | None:
    """The table's rows (at ``version``, default the latest), from the file statistics in its Delta
    log; None when they cannot be exact (:func:`_counted_files`)."""
    actions = _counted_files(path, version)
    return None if actions is None else int(pc.sum(actions["num_records"]).as_py() or 0)


def row_counts(paths: Sequence[str]) -> list[int | None]:
    """:func:`row_count` of each table, four at once (each reads a Delta log: a listing and a few
    objects on a store); delta-rs only, so no Spark thread state to carry (a serve's Spark Connect
    client has none)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(row_count, paths))


def open_tables(paths: Iterable[str]) -> dict[str, Any]:
    """The delta-rs tables at ``paths`` as they are now (None where there is no table), opened four
    at once (an open reads the log: a listing and a few objects on a store), keyed by their
    normalised URIs, for :func:`pinned`. Raises what delta-rs raises for a table it cannot open."""

    def one(path: str) -> Any:
        return _rs_table_or_none(path)

    uris = [normalise(p) for p in paths]
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(uris, pool.map(one, uris), strict=True))


_PINNED = threading.local()


@contextmanager
def pinned(tables: Mapping[str, Any]) -> Iterator[None]:
    """In this thread, the driver's reads of a table in ``tables`` (:func:`open_tables`) at its
    latest version read that snapshot, and do not open the log again: a validation reads every
    table several times (its rows, counts, statistics), each read an open of the log, and reads
    the versions it records as validated. Only reads: nothing that writes opens a table this way,
    and a thread that did not enter is not affected."""
    previous = getattr(_PINNED, "tables", None)
    _PINNED.tables = tables
    try:
        yield
    finally:
        _PINNED.tables = previous


def _rs_table(path: str, version: int | None = None) -> Any:
    """The delta-rs table at ``path`` (at ``version``), with the storage options of its store (a
    pinned snapshot, :func:`pinned`, for the latest version)."""
    from deltalake import DeltaTable  # local: only the driver reads logs this way

    uri = normalise(path)
    tables = getattr(_PINNED, "tables", None)
    if version is None and tables is not None and uri in tables:
        if tables[uri] is None:
            from deltalake.exceptions import TableNotFoundError

            raise TableNotFoundError(f"no Delta table at {uri}")
        return tables[uri]
    return DeltaTable(uri, version=version, storage_options=delta_rs_options(uri))


def _rs_table_or_none(path: str, version: int | None = None) -> Any:
    """:func:`_rs_table`, or None when there is no table at ``path``."""
    from deltalake.exceptions import TableNotFoundError

    try:
        return _rs_table(path, version)
    except TableNotFoundError:
        return None


def _plain_strings(table: pa.Table) -> pa.Table:
    """delta-rs returns string and binary views; the rest of the pipeline (and Spark) speaks plain
    strings and binaries."""
    schema = plain_types(table.schema)
    return table if schema.equals(table.schema) else table.cast(schema)


def version(spark: SparkSession, path: str) -> int | None:
    """The table's latest version, or None when there is no table yet (:func:`identity`)."""
    return identity(spark, path)[0]


def identity(spark: SparkSession, path: str) -> tuple[int | None, str | None]:
    """The table's latest version and its id (the Delta log's ``metaData.id``: a table dropped and
    created again at the same path has a new one, and versions that restart from 0); (None, None)
    when there is no table yet. Read from the Delta log by delta-rs (32 tables in 0.07 s; Spark
    brings each snapshot up to date first, 0.1-0.5 s a table a run has just written), by Spark
    when delta-rs cannot."""
    from deltalake.exceptions import TableNotFoundError

    try:
        table = _rs_table(path)
        return int(table.version()), str(table.metadata().id)
    except TableNotFoundError:
        return None, None
    except Exception as exc:
        if remote(spark):
            raise
        log.debug("delta-rs cannot read the version of %s (%s): Spark reads it", path, exc)
    if not exists(spark, path):
        return None, None
    snapshot = _snapshot(spark, path)
    return int(snapshot.version()), str(snapshot.metadata().id())


def properties(spark: SparkSession, path: str) -> dict[str, str]:
    """The table's properties (``TBLPROPERTIES``), from its Delta log."""
    conf = _snapshot(spark, path).metadata().configuration()
    jvm = spark._jvm  # type: ignore[attr-defined]
    return dict(jvm.scala.jdk.javaapi.CollectionConverters.asJava(conf))


def partition_columns(spark: SparkSession, path: str) -> list[str] | None:
    """The table's partition columns, from its Delta log (delta-rs: no Spark state); None when
    there is no table."""
    try:
        from deltalake.exceptions import TableNotFoundError

        try:
            return list(_rs_table(path).metadata().partition_columns)
        except TableNotFoundError:
            return None
    except Exception as exc:  # Spark answers what delta-rs cannot
        log.debug("delta-rs cannot read %s (%s): Spark reads it", path, exc)
    if not exists(spark, path):
        return None
    cols = _snapshot(spark, path).metadata().partitionColumns()
    jvm = spark._jvm  # type: ignore[attr-defined]
    return list(jvm.scala.jdk.javaapi.CollectionConverters.asJava(cols))


@dataclass(frozen=True)
class Layout:
    """What a table's Delta log declares: its properties and its top-level columns."""

    properties: dict[str, str]
    columns: frozenset[str]


def arrow_schema(path: str, version: int | None = None) -> pa.Schema | None:
    """The table's columns (at ``version``) as Arrow types, partition columns included, read from
    its Delta log by delta-rs; None when there is no table or delta-rs cannot read it."""
    try:
        table = _rs_table_or_none(path, version)
    except Exception as exc:
        log.debug("delta-rs cannot read the schema of %s (%s)", path, exc)
        return None
    return None if table is None else plain_types(pa.schema(table.schema().to_arrow()))


def layout(path: str) -> Layout | None:
    """The table's properties and columns, read from its Delta log by delta-rs (milliseconds; Spark
    loads a snapshot, 0.2-0.5 s); None when there is no table. Raises when delta-rs cannot read it."""
    table = _rs_table_or_none(path)
    if table is None:
        return None
    meta = table.metadata()
    return Layout(dict(meta.configuration), frozenset(f.name for f in table.schema().fields))


def create(
    path: str, schema: StructType, partitioned_by: Sequence[str], comment: str, props: Mapping[str, str]
) -> bool:
    """Create the Delta table at ``path`` (commit 0: schema with its NOT NULLs and column comments,
    partitioning, description, properties) from the driver by delta-rs, in milliseconds where
    Spark's ``CREATE TABLE`` takes 0.3-0.8 s. True when the table is there afterwards (created by
    this call or by a concurrent writer); False when delta-rs cannot create it (Spark does)."""
    from deltalake import DeltaTable as RsTable
    from deltalake import Schema as RsSchema

    uri = normalise(path)
    try:
        RsTable.create(
            uri,
            RsSchema.from_json(schema.json()),
            mode="ignore",  # a concurrent creator won: its table is the table
            partition_by=list(partitioned_by) or None,
            description=comment or None,
            configuration=dict(props),
            storage_options=delta_rs_options(uri, writing=True),
        )
    except Exception as exc:  # another creator's commit 0 landed first, or delta-rs cannot
        log.debug("delta-rs did not create %s (%s)", path, exc)
    try:
        return _rs_table_or_none(path) is not None
    except Exception as exc:
        log.debug("delta-rs cannot read %s (%s)", path, exc)
        return False


def clear_failed_create(spark: SparkSession, path: str) -> bool:
    """Remove what a process killed while creating the table at ``path`` left behind: a directory
    holding only hidden files (the temporary file of commit 0) and empty directories. Delta
    refuses to create a table over a non-empty location, and nothing there was committed, so no
    reader saw it. Anything else at ``path`` is kept (the create then fails and says why)."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    target = jvm.org.apache.hadoop.fs.Path(path)
    fs = target.getFileSystem(spark._jsc.hadoopConfiguration())  # type: ignore[attr-defined]
    if not fs.exists(target):
        return False
    files = fs.listFiles(target, True)
    while files.hasNext():
        if not files.next().getPath().getName().startswith("."):
            return False
    fs.delete(target, True)
    return True


def drop(spark: SparkSession, path: str) -> None:
    """Delete the table at ``path``, data and log: for derived tables only (gold is rebuilt from
    silver, silver from bronze), never for bronze."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    target = jvm.org.apache.hadoop.fs.Path(path)
    target.getFileSystem(spark._jsc.hadoopConfiguration()).delete(target, True)  # type: ignore[attr-defined]
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


def commit_info(spark: SparkSession, path: str, at: int) -> dict[str, Any]:
    """The ``commitInfo`` of version ``at`` (its ``userMetadata`` included), read from the
    commit file: one small file, where the table history is a query over the whole log."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    file = jvm.org.apache.hadoop.fs.Path(f"{path.rstrip('/')}/_delta_log/{at:020d}.json")
    fs = file.getFileSystem(spark._jsc.hadoopConfiguration())  # type: ignore[attr-defined]
    reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(fs.open(file), "UTF-8"))
    try:
        while (line := reader.readLine()) is not None:
            action = json.loads(line)
            if "commitInfo" in action:
                return action["commitInfo"]
    finally:
        reader.close()
    return {}


def latest_metadata(spark: SparkSession, path: str) -> dict[str, Any] | None:
    """The JSON object a writer attached (:func:`commit_metadata`) to the table's latest commit;
    None when there is no table, or the latest commit carries none."""
    at = version(spark, path)
    if at is None:
        return None
    try:
        meta = json.loads(commit_info(spark, path, at).get("userMetadata") or "null")
    except ValueError:
        return None
    return meta if isinstance(meta, dict) else None


def read_at(spark: SparkSession, path: str, at: int) -> DataFrame:
    """The table as of version ``at``."""
    return spark.read.format("delta").option("versionAsOf", at).load(path)


def changes(spark: SparkSession, path: str, start: int, end: int) -> DataFrame:
    """The table's change data feed over versions start..end (``_change_type``: insert, delete,
    update_preimage, update_postimage). Errors (feed off at some version, files vacuumed)
    surface when the frame is first used."""
    return (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", start)
        .option("endingVersion", end)
        .load(path)
    )


def set_property(spark: SparkSession, path: str, name: str, value: str) -> None:
    """Set one table property (one metadata commit)."""
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({sql_str(name)} = {sql_str(value)})")


def tagged_commits(spark: SparkSession, path: str) -> Iterator[tuple[int, Any, dict[str, Any]]]:
    """(version, timestamp, metadata) of the commits made under :func:`commit_metadata`, newest
    first; commits whose metadata is not a JSON object are skipped. Nothing when there is no table.
    Lazy: a caller that stops at the first match reads no more of the history than it needs."""
    if remote(spark):
        yield from _rs_tagged_commits(path)
        return
    if not exists(spark, path):
        return
    history = DeltaTable.forPath(spark, path).history().where("userMetadata IS NOT NULL")
    rows = history.select("version", "timestamp", "userMetadata").orderBy("version", ascending=False)
    for row in rows.toLocalIterator():
        try:
            meta = json.loads(row["userMetadata"])
        except ValueError:
            continue
        if isinstance(meta, dict):
            yield int(row["version"]), row["timestamp"], meta


def _rs_tagged_commits(path: str) -> Iterator[tuple[int, Any, dict[str, Any]]]:
    """:func:`tagged_commits` by delta-rs (no JVM: a Spark Connect client)."""
    table = _rs_table_or_none(path)
    for commit in table.history() if table is not None else ():  # newest first
        try:
            meta = json.loads(commit.get("userMetadata") or "null")
        except ValueError:
            continue
        if isinstance(meta, dict):
            at = datetime.fromtimestamp(commit["timestamp"] / 1000, timezone.utc).replace(tzinfo=None)
            yield int(commit["version"]), at, meta


# -- concurrent writers --------------------------------------------------------------------------------------
# What Delta (and delta-rs) raise when another writer committed to the same table first in a way
# that breaks this transaction's reads (optimistic concurrency): the transaction changed nothing,
# and done again it sees the other commit. Also the race of two writers creating one table.
CONFLICTS = (
    "DELTA_CONCURRENT_APPEND",
    "DELTA_CONCURRENT_DELETE_READ",
    "DELTA_CONCURRENT_DELETE_DELETE",
    "DELTA_CONCURRENT_TRANSACTION",
    "DELTA_CONCURRENT_WRITE",
    "DELTA_METADATA_CHANGED",
    "DELTA_PROTOCOL_CHANGED",
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentTransactionException",
    "MetadataChangedException",
    "ProtocolChangedException",
    "CommitFailedError",  # delta-rs, after its own retries
    # two writers creating one table: the loser finds the winner's table, or its log being made
    "DELTA_TABLE_ALREADY_EXISTS",
    "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION",
)
# an object store's passing failure, as delta-rs reports it (its writes make no request retries:
# storage.delta_rs_options): done again like a conflict, the stage being safe to re-do from its start
TRANSIENT = ("non-2xx status code: 500", "non-2xx status code: 503")


def conflict(exc: BaseException) -> str | None:
    """The name of the concurrent-modification conflict ``exc`` reports (see :data:`CONFLICTS`), or
    None when it is any other error."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 10:
        text = f"{type(current).__name__}: {current}"
        for name in CONFLICTS:
            if name in text:
                return name
        for status in TRANSIENT:
            if status in text:
                return f"the store answered {status.rsplit(' ', 1)[1]}"
        current, seen = current.__cause__ or current.__context__, seen + 1
    return None


CONFLICT_ATTEMPTS = 6


def retry_conflicts(
    what: str,
    work: Callable[[], Any],
    attempts: int = CONFLICT_ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
    retried: Callable[[str], None] | None = None,
) -> Any:
    """``work()``, done again (at most ``attempts`` times in all, after a growing, jittered pause)
    while it fails with a concurrent-modification :func:`conflict`; any other error, or the last
    conflict, is raised. For work that is idempotent as a whole — a stage of a job, which a killed
    run re-does from its start — so that jobs sharing tables absorb each other's commits instead
    of failing. ``retried`` is told the conflict's name before each new attempt."""
    for attempt in range(1, attempts + 1):
        try:
            return work()
        except Exception as exc:
            name = conflict(exc)
            if name is None or attempt == attempts:
                raise
            pause = min(30.0, 2.0 ** (attempt - 1)) * (0.5 + random.random())
            log.warning(
                "%s: another writer committed first, or the store failed for a moment (%s); "
                "doing it again in %.1f s (attempt %d of %d)",
                what,
                name,
                pause,
                attempt + 1,
                attempts,
            )
            if retried is not None:
                retried(name)
            sleep(pause)
    raise AssertionError("unreachable")


# -- writing -----------------------------------------------------------------------------------------------
def append(frame: DataFrame, path: str) -> None:
    """Append ``frame``'s rows (one commit): for rows the caller knows are new."""
    frame.write.format("delta").mode("append").save(path)


def append_from_tasks(
    spark: SparkSession,
    frame: DataFrame,
    path: str,
    rows_of: Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch | pa.Table]],
) -> int | None:
    """Append the rows ``rows_of`` makes of ``frame``'s Arrow batches, written as Parquet by
    ``frame``'s tasks and committed by the driver (:mod:`pipelines.runtime.taskwrite`): for the
    large tables Python tasks produce, whose Spark write converts every row to the JVM's and back.
    Returns the rows written; None, and nothing written, when the tasks must not write the table
    (the caller then writes with :func:`append`). Inside :func:`commit_metadata`, the commit carries
    its metadata."""
    ours, metadata = _inherited_metadata(spark)
    return taskwrite.append(frame, path, rows_of, metadata) if ours else None


def replace_from_tasks(
    spark: SparkSession,
    frame: DataFrame,
    path: str,
    rows_of: Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch | pa.Table]],
    removes: Callable[[taskwrite.Existing], bool | None],
    stats: Sequence[str] = (),
) -> int | None:
    """:func:`append_from_tasks` that also removes, in the same commit, the table's files
    ``removes`` says the new rows replace whole (:func:`taskwrite.replace`): a replace without
    Spark's writer, when it is file-aligned. None, and nothing written, otherwise (the caller then
    writes with :func:`replace_where`)."""
    ours, metadata = _inherited_metadata(spark)
    return taskwrite.replace(frame, path, rows_of, removes, stats, metadata) if ours else None


def _inherited_metadata(spark: SparkSession) -> tuple[bool, dict[str, Any] | None]:
    """The commit metadata :func:`commit_metadata` set for Spark's writer, and whether a commit
    by delta-rs can carry it (False: not ours, and only Spark's writer carries it as it is)."""
    if inherited := spark.conf.get(METADATA_CONF, None):
        try:
            return True, json.loads(inherited)
        except ValueError:
            return False, None
    return True, None


def append_counted(spark: SparkSession, path: str, frame: DataFrame) -> int:
    """:func:`append`, returning the rows written (the commit's ``numOutputRows``; no commit and 0
    when there is nothing to write). The metrics come from the commit file, not a history query."""
    before = version(spark, path)
    append(frame, path)
    after = version(spark, path)
    if after is None or after == before:
        return 0
    return int((commit_info(spark, path, after).get("operationMetrics") or {}).get("numOutputRows", 0))


def insert_new(
    spark: SparkSession,
    path: str,
    frame: DataFrame,
    key: Iterable[str],
    partitions: Iterable[tuple[str, int]] | None = None,
    partition_column: str = "offsets_partition",
    target_where: str | None = None,
) -> int:
    """Insert-only MERGE on ``key``: rows whose key is already in the table are skipped, so the
    same input written twice is written once. ``partitions`` restricts the target side to those
    (cluster, partition) pairs, so Delta reads only their files; ``target_where`` (a predicate on
    target columns prefixed ``t.``, e.g. :func:`offset_ranges_predicate`) restricts it further.
    The caller guarantees no row of ``frame`` has its key outside the restriction. Returns the
    rows inserted (a MERGE inserting nothing writes no table version)."""
    cond = key_condition(key)
    pairs = list(partitions or ())
    if pairs:
        cond += f" AND ({partitions_predicate(pairs, prefix='t.', column=partition_column)})"
    if target_where is not None:
        cond += f" AND ({target_where})"
    metrics = DeltaTable.forPath(spark, path).alias("t").merge(frame.alias("s"), cond).whenNotMatchedInsertAll()
    return int(metrics.execute().collect()[0]["num_inserted_rows"])


def merge(
    spark: SparkSession,
    path: str,
    source: DataFrame,
    key: Iterable[str],
    *,
    delete: bool | str = False,
    update: dict[str, str] | None = None,
    update_if: str | None = None,
    insert: bool = False,
) -> Any:
    """One MERGE of ``source`` (alias ``s``) into the table at ``path`` (alias ``t``) on ``key``:
    matched rows deleted (``delete``: True, or a condition), else updated (``update``: column ->
    expression, when ``update_if`` holds), unmatched source rows inserted (``insert``). Returns
    the operation's metrics row (``num_deleted_rows``, ``num_updated_rows``, ...)."""
    builder = DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), key_condition(key))
    if delete:
        builder = builder.whenMatchedDelete(condition=None if delete is True else delete)
    if update:
        builder = builder.whenMatchedUpdate(condition=update_if, set=update)
    if insert:
        builder = builder.whenNotMatchedInsertAll()
    return builder.execute().collect()[0]


def replace_where(frame: DataFrame, path: str, where: str | None = None) -> None:
    """Overwrite the rows matching ``where`` by ``frame``'s in one commit (``replaceWhere``;
    ``None`` or ``"true"``: the whole table). Delta refuses rows of ``frame`` outside ``where``,
    unless written inside :func:`rows_beyond_where`. On partition columns only, the rows replaced
    are dropped by file, without reading them."""
    writer = frame.write.format("delta").mode("overwrite")
    if where is not None and where != "true":
        writer = writer.option("replaceWhere", where)
    writer.save(path)


def write_arrow(rows: pa.Table, path: str, where: str | None = None, metadata: dict[str, Any] | None = None) -> bool:
    """Append ``rows`` to the existing Delta table at ``path`` (``where`` None), or replace its rows
    matching ``where`` by them (``"true"``: all its rows), in one commit written from the driver by
    delta-rs (``deltalake``), without Spark; ``metadata`` as in :func:`commit_metadata`.

    For the few rows of an incremental run: a Spark write costs about a second whatever its size
    (jobs to list the snapshot, to write, to commit), delta-rs tens of milliseconds. Every row must
    match ``where`` (delta-rs checks it); ``rows`` are cast to the table's schema. On an object
    store it commits by conditional write, as Spark's log store does (runtime/storage.py), so the
    two coordinate. False, and nothing written, when delta-rs cannot write the table (a protocol
    feature it lacks): the caller writes it with Spark instead."""
    from deltalake import CommitProperties, write_deltalake  # local: only the driver writes this way
    from deltalake.exceptions import DeltaProtocolError

    table = taskwrite.open_for_writing(path)
    if table is None:
        return False
    try:
        schema = pa.schema(table.schema().to_arrow())
    except Exception as exc:  # a column delta-rs cannot give as Arrow: Spark writes it
        log.debug("delta-rs cannot write %s (%s): Spark writes it", path, exc)
        return False
    rows = rows.select(schema.names).cast(schema)
    meta = None if metadata is None else {"userMetadata": json.dumps(metadata, sort_keys=True)}
    try:
        write_deltalake(
            table,
            rows,
            mode="append" if where is None else "overwrite",
            predicate=None if where in (None, "true") else where,
            commit_properties=CommitProperties(custom_metadata=meta),
        )
    except DeltaProtocolError as exc:  # refused before it committed anything
        log.debug("delta-rs refuses to write %s (%s): Spark writes it", path, exc)
        return False
    return True


def write_rows(
    spark: SparkSession,
    rows: pa.Table,
    path: str,
    schema: StructType,
    where: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> None:
    """Write rows the driver holds (a control table's few rows) in one commit: appended (``where``
    None) or replacing the rows matching ``where`` (``"true"``: all), with ``metadata`` as in
    :func:`commit_metadata`. By delta-rs (:func:`write_arrow`) when it can, else by Spark
    (``schema``: the table's columns). Inside :func:`commit_metadata`, its metadata is the default:
    the commit carries it whichever writer makes it."""
    local = rows.num_rows <= LOCAL_WRITE_ROWS
    if metadata is None and (inherited := spark.conf.get(METADATA_CONF, None)):
        try:
            metadata = json.loads(inherited)
        except ValueError:  # not ours: only Spark's writer carries it as it is
            local = False
    if local and write_arrow(rows, path, where, metadata):
        return
    names = schema.fieldNames()
    frame = spark.createDataFrame([tuple(r[c] for c in names) for r in rows.select(names).to_pylist()], schema)
    with commit_metadata(spark, metadata):
        if where is None:
            append(frame, path)
        else:
            replace_where(frame, path, where)


@contextmanager
def session_conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """Set the session's SQL setting ``key`` to ``value`` for the code inside, then put back what
    was there (unset when nothing was)."""
    previous = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)


def rows_beyond_where(spark: SparkSession) -> contextlib.AbstractContextManager[None]:
    """Let :func:`replace_where` inside add rows outside its ``where`` (Delta's check that every
    row matches it, off for the session meanwhile): one commit that replaces some rows and adds
    others, e.g. an interval table's open intervals replaced and its newly closed ones added. The
    caller knows which rows it writes; nothing else may write in the session meanwhile."""
    return session_conf(spark, REPLACE_WHERE_CHECK_CONF, "false")


def replace_partitions(
    rows: DataFrame, path: str, pairs: Iterable[tuple[str, int]], partition_column: str = "offsets_partition"
) -> None:
    """Replace the rows of these (cluster, partition) pairs by ``rows``' in one commit
    (``replaceWhere``): for a set recomputed whole, cheaper than a MERGE of the table against
    itself, and rows no longer produced go with it."""
    where = partitions_predicate(pairs, column=partition_column)
    replace_where(rows.where(where), path, where)


def replace_if_changed(
    spark: SparkSession,
    path: str,
    fresh: DataFrame,
    where: str,
    key: Iterable[str],
    columns: Iterable[str],
    changed: bool | None = None,
) -> tuple[bool, bool]:
    """Make the rows of the table at ``path`` matching ``where`` equal ``fresh`` (which all match it).

    Writes (one ``replaceWhere`` overwrite) only when something differs, so an unchanged
    recomputation adds no table version; ``changed=True`` (the caller knows: a new table, a
    rebuild) writes without comparing. ``key`` identifies a row, ``columns`` are those compared.
    Returns (rows changed, keys added or removed)."""
    if changed:
        replace_where(fresh, path, where)
        return True, True
    key = list(key)
    fresh = fresh.persist()
    try:
        existing = spark.read.format("delta").load(path).where(where)
        on = F.expr(key_condition(key, "<=>", "s", "t"))
        s = fresh.withColumn("_present", F.lit(True)).alias("s")
        joined = s.join(existing.withColumn("_present", F.lit(True)).alias("t"), on, "full_outer")
        same = key_condition(columns, "<=>", "s", "t")
        row = joined.agg(
            F.count(F.when(F.expr(f"NOT ({same})"), 1)).alias("changed"),
            F.count(F.when(F.expr("t._present IS NULL OR s._present IS NULL"), 1)).alias("keys"),  # one side only
        ).collect()[0]
        if row["changed"]:
            replace_where(fresh, path, where)
        return row["changed"] > 0, row["keys"] > 0
    finally:
        fresh.unpersist()


def in_parallel(writes: Iterable[Callable[[], None]], threads: int = 4) -> None:
    """Run independent writes (to different tables) at once: a Delta commit spends much of its
    time waiting on the driver (listing, the log, the checksum), which other writes can use.
    Threads inherit the caller's Spark job group and properties; the first error is raised."""
    parallel_map(lambda write: write(), list(writes), threads)


def parallel_map(fn: Callable[[T], R], items: Sequence[T], threads: int = 4) -> list[R]:
    """``fn`` of every item, at most ``threads`` at once, results in the items' order: for work
    whose Spark jobs are small and mostly wait (scheduling, the Delta log), which other threads'
    jobs can use. Threads inherit the caller's Spark job group and properties; the first error
    (in the items' order) is raised after every call has ended."""
    if len(items) <= 1 or threads <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
        # wrapped once per call: pyspark copies the caller's local properties when it wraps, and
        # every thread running one wrapper shares that copy, so concurrent queries would overwrite
        # (and remove) each other's execution ids in it (Spark then fails to parse a null id)
        futures = [pool.submit(inheritable_thread_target(fn), item) for item in items]
    return [f.result() for f in futures]


def first_then_parallel(tables: Sequence[str], write: Callable[[str], None], after_first: Callable[[], None]) -> None:
    """``write`` each table: the first alone, then ``after_first`` (a fault point: a run killed
    there has committed exactly one table), then the rest at once (:func:`in_parallel`)."""
    for table in tables[:1]:
        write(table)
        after_first()
    in_parallel([lambda t=t: write(t) for t in tables[1:]])


@contextmanager
def commit_metadata(spark: SparkSession, metadata: dict[str, Any] | None) -> Iterator[None]:
    """Attach ``metadata`` as JSON (``userMetadata`` in the table history) to the commits made
    inside: positions committed in the same Delta commit as the rows they describe (read back
    with :func:`tagged_commits`)."""
    if metadata is None:
        yield
        return
    with session_conf(spark, METADATA_CONF, json.dumps(metadata, sort_keys=True)):
        yield


def commit_empty(spark: SparkSession, path: str, schema: StructType, metadata: dict[str, Any] | None) -> None:
    """A commit without rows that carries ``metadata``. Delta skips commits that change nothing
    unless told otherwise; a source whose read range held no new rows still has to record that
    it moved forward."""
    with commit_metadata(spark, metadata), session_conf(spark, SKIP_EMPTY_CONF, "false"):
        append(spark.createDataFrame([], schema), path)
