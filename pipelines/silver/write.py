"""Writing the silver tables: keyed inserts and full-refresh overwrites."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pipelines.runtime import faults, lake
from pipelines.silver.contract import DATA_TABLES, KEY, MEMBER_KEY, MEMBER_TABLE, SilverResult
from pipelines.silver.frames import table_frame
from pipelines.silver.store import table_exists
from pipelines.silver.topics import topic_names, with_topic_names

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.runtime.tables import Tables


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
            if crash and written == 1 and table_exists(spark, tables, table):
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


def refresh_tables(spark: SparkSession, tables: Tables, wide: DataFrame, result: SilverResult) -> None:
    names = topic_names(spark, tables).persist()
    first = True
    try:
        for table in DATA_TABLES:
            exists = table_exists(spark, tables, table)
            if not result.rows.get(table) and not exists:
                continue  # tables appear with their first row
            frame = with_topic_names(table_frame(wide, tables, table), table, names)
            overwrite_table(tables, table, frame)
            result.inserted[table] = result.rows.get(table, 0)
            if first:
                faults.point("silver.refresh_after_first_table")
                first = False
    finally:
        names.unpersist()
