"""Silver's tables in the lakehouse: read one, or tell whether it exists yet (tables appear with
their first row). Every Delta operation itself is :mod:`pipelines.runtime.lake`'s."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines.runtime import lake

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.runtime.tables import Tables


def read_table(spark: SparkSession, tables: Tables, table: str) -> DataFrame | None:
    """A silver table, or None when it does not exist yet."""
    return lake.read(spark, tables.path("silver", table))


def table_exists(spark: SparkSession, tables: Tables, table: str) -> bool:
    return lake.exists(spark, tables.path("silver", table))
