"""Writing the silver tables: keyed inserts and full-refresh overwrites."""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

from pipelines.runtime import blobs as ipc_blobs
from pipelines.runtime import faults, lake
from pipelines.silver.contract import DATA_TABLES, KEY, MEMBER_KEY, MEMBER_TABLE, SilverResult
from pipelines.silver.store import table_exists
from pipelines.silver.topics import (
    fill_topic_names_arrow,
    named_arrays,
    resolved_columns,
    topic_name_map,
    topic_names,
    with_topic_names,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.runtime.tables import Tables
    from pipelines.silver.frames import Decoded


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
    exists = table_exists(spark, tables, table)
    if not exists or append:
        if not exists:
            tables.ensure("silver", table)
        lake.append(frame, path)
        return rows if rows is not None else int(lake.last_commit(spark, path)["operationMetrics"]["numOutputRows"])
    key = MEMBER_KEY if table == MEMBER_TABLE else KEY
    return lake.insert_new(spark, path, frame, key, pairs)  # pairs: Delta skips other partitions' files


def overwrite_table(tables: Tables, table: str, frame: DataFrame) -> None:
    tables.ensure("silver", table)
    lake.replace_where(frame, tables.path("silver", table))


def insert_tables(
    spark: SparkSession,
    tables: Tables,
    decoded: Decoded,
    pairs: list[tuple[str, int]],
    result: SilverResult,
    resolve: bool,
    append: bool,
) -> None:
    """Insert each table's rows of the decoded batch: the first table alone (a fault point follows
    it), then the others at once — independent tables, independent commits."""
    todo = [t for t in DATA_TABLES if result.rows.get(t)]
    names_map = topic_name_map(spark, tables) if resolve else {}
    frames: list[DataFrame] = []  # topic_names as a Spark frame, made once if a Spark write needs it

    def spark_names() -> DataFrame:
        if not frames:
            frames.append(topic_names(spark, tables).persist())
        return frames[0]

    # few rows that cannot be in the table (new ones, or a table that does not exist yet: what
    # merge_insert appends): appended from the driver, without a Spark job, their topic names
    # filled in Arrow, their blobs collected together
    local = {
        t
        for t in todo
        if result.rows[t] <= lake.LOCAL_WRITE_ROWS
        and decoded.sizes.get(t, 0) <= lake.LOCAL_WRITE_BYTES
        and (append or not table_exists(spark, tables, t))
    }
    decoded.prefetch(sorted(local))

    def insert(table: str) -> None:
        rows = result.rows[table]
        named = resolve and bool(resolved_columns(table))
        if table in local:
            tables.ensure("silver", table)
            batch = decoded.arrow(table)
            if named:
                batch = fill_topic_names_arrow(batch, named_arrays(table), names_map)
            if lake.write_arrow(batch, tables.path("silver", table)):
                result.inserted[table] = rows
                return
        blobs = decoded.tasks(table)
        if blobs is not None and (append or not table_exists(spark, tables, table)):
            # many rows that cannot be in the table: the tasks unpacking them write its files
            tables.ensure("silver", table)
            fill = functools.partial(fill_topic_names_arrow, arrays=named_arrays(table), names=names_map)
            rows_of = functools.partial(ipc_blobs.unpacked, fill=fill if named else None)
            written = lake.append_from_tasks(spark, blobs, tables.path("silver", table), rows_of)
            if written is not None:
                result.inserted[table] = written
                return
        frame = decoded.table(tables, table)
        if named:
            frame = with_topic_names(frame, table, spark_names())
        result.inserted[table] = merge_insert(spark, tables, table, frame, pairs, rows, append)

    def after_first() -> None:
        faults.point("silver.after_first_table")
        if len(todo) > 1 and os.environ.get("OFFSETS_FAULT") == "silver.after_write_before_commit":
            second = todo[1]
            if table_exists(spark, tables, second):
                # what a writer killed mid-MERGE leaves behind: data files that no commit references
                frame = decoded.table(tables, second)
                frame.write.mode("append").partitionBy("cluster", "offsets_partition").parquet(
                    tables.path("silver", second)
                )
                faults.point("silver.after_write_before_commit")

    try:
        lake.first_then_parallel(todo, insert, after_first)
    finally:
        for frame in frames:
            frame.unpersist()


def refresh_tables(spark: SparkSession, tables: Tables, decoded: Decoded, result: SilverResult) -> None:
    """Overwrite every table (those with rows, and those that exist: they may have to become
    empty) from the decoded snapshot: the first alone (a fault point follows it), then the rest."""
    names = topic_names(spark, tables).persist()
    todo = [t for t in DATA_TABLES if result.rows.get(t) or table_exists(spark, tables, t)]

    def refresh(table: str) -> None:
        overwrite_table(tables, table, with_topic_names(decoded.table(tables, table), table, names))
        result.inserted[table] = result.rows.get(table, 0)

    try:
        lake.first_then_parallel(todo, refresh, lambda: faults.point("silver.refresh_after_first_table"))
    finally:
        names.unpersist()
