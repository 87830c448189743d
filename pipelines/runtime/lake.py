"""Lakehouse I/O: the one place that reads, writes and inspects Delta tables by path.

Every layer goes through these functions, so a change in how the lakehouse is read or written
(partition pruning, write modes, commit metadata) is one change. Tables are path-based
(``<root>/<layer>/<table>``, see :mod:`pipelines.runtime.tables`); the SQL helpers build the
predicates that let Delta skip the files of other clusters and offsets partitions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "commit_metadata",
    "exists",
    "insert_new",
    "last_commit",
    "partitions_predicate",
    "read",
    "replace_partitions",
    "sql_in_list",
    "sql_str",
    "version",
]


# -- SQL text ------------------------------------------------------------------------------------------
def sql_str(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_in_list(values: Iterable[Any]) -> str:
    """The inside of an ``IN (...)``: strings quoted, numbers as integers, sorted."""
    return ", ".join(sql_str(v) if isinstance(v, str) else str(int(v)) for v in sorted(values))


def partitions_predicate(pairs: Iterable[tuple[str, int]], prefix: str = "", column: str = "offsets_partition") -> str:
    """SQL predicate selecting exactly these (cluster, partition) pairs (``false`` for none)."""
    by_cluster: dict[str, list[int]] = {}
    for cluster, part in pairs:
        by_cluster.setdefault(cluster, []).append(part)
    if not by_cluster:
        return "false"
    return " OR ".join(
        f"({prefix}cluster = {sql_str(c)} AND {prefix}{column} IN ({sql_in_list(ps)}))"
        for c, ps in sorted(by_cluster.items())
    )


# -- reading and inspecting ------------------------------------------------------------------------------
def exists(spark: SparkSession, path: str) -> bool:
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


def version(spark: SparkSession, path: str) -> int | None:
    """The table's latest version, or None when there is no table yet."""
    return int(last_commit(spark, path)["version"]) if exists(spark, path) else None


# -- writing -----------------------------------------------------------------------------------------------
def insert_new(
    spark: SparkSession,
    path: str,
    frame: DataFrame,
    key: Iterable[str],
    partitions: Iterable[tuple[str, int]] | None = None,
    partition_column: str = "offsets_partition",
) -> int:
    """Insert-only MERGE on ``key``: rows whose key is already in the table are skipped, so the
    same input written twice is written once. ``partitions`` restricts the target side to those
    (cluster, partition) pairs, so Delta reads only their files. Returns the rows inserted."""
    cond = " AND ".join(f"t.{k} = s.{k}" for k in key)
    pairs = list(partitions or ())
    if pairs:
        cond += f" AND ({partitions_predicate(pairs, prefix='t.', column=partition_column)})"
    metrics = DeltaTable.forPath(spark, path).alias("t").merge(frame.alias("s"), cond).whenNotMatchedInsertAll()
    return int(metrics.execute().collect()[0]["num_inserted_rows"])


def replace_partitions(
    rows: DataFrame, path: str, pairs: Iterable[tuple[str, int]], partition_column: str = "offsets_partition"
) -> None:
    """Replace the rows of these (cluster, partition) pairs by ``rows``' in one commit
    (``replaceWhere``): for a set recomputed whole, cheaper than a MERGE of the table against
    itself, and rows no longer produced go with it."""
    where = partitions_predicate(pairs, column=partition_column)
    rows.where(where).write.format("delta").mode("overwrite").option("replaceWhere", where).save(path)


@contextmanager
def commit_metadata(spark: SparkSession, metadata: dict[str, Any] | None) -> Iterator[None]:
    """Attach ``metadata`` as JSON (``userMetadata`` in the table history) to the commits made
    inside: positions committed in the same Delta commit as the rows they describe."""
    if metadata is None:
        yield
        return
    key = "spark.databricks.delta.commitInfo.userMetadata"
    previous = spark.conf.get(key, None)
    spark.conf.set(key, json.dumps(metadata, sort_keys=True))
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)
