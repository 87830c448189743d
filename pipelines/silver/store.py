"""Silver's tables in the lakehouse, and the Delta operations silver needs that
:mod:`pipelines.runtime.lake` does not offer yet: a MERGE on a key that deletes or updates
matched rows (and inserts the others); reading a table at a version or the rows its change data
feed inserted; setting a table property. Internal to silver (not in the package's ``__all__``);
the operations take paths, not silver's tables, so that they can move into ``runtime/lake.py``
unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from delta.tables import DeltaTable

from pipelines.runtime import lake
from pipelines.runtime.lake import key_condition, sql_str

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.runtime.tables import Tables


# -- silver's tables -------------------------------------------------------------------------------
def read_table(spark: SparkSession, tables: Tables, table: str) -> DataFrame | None:
    """A silver table, or None when it does not exist yet (tables appear with their first row)."""
    return lake.read(spark, tables.path("silver", table))


def table_exists(spark: SparkSession, tables: Tables, table: str) -> bool:
    return lake.exists(spark, tables.path("silver", table))


# -- Delta operations lake.py does not have (yet) ------------------------------------------------------
def merge_on_key(
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
    merge = DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), key_condition(key))
    if delete:
        merge = merge.whenMatchedDelete(condition=None if delete is True else delete)
    if update:
        merge = merge.whenMatchedUpdate(condition=update_if, set=update)
    if insert:
        merge = merge.whenNotMatchedInsertAll()
    return merge.execute().collect()[0]


def read_at(spark: SparkSession, path: str, version: int) -> DataFrame:
    """The table as of ``version``."""
    return spark.read.format("delta").option("versionAsOf", version).load(path)


def read_inserts(spark: SparkSession, path: str, start: int, end: int) -> DataFrame:
    """Rows inserted into the table in versions start..end, from its change data feed (the
    feed's errors surface on first use)."""
    return (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", start)
        .option("endingVersion", end)
        .load(path)
        .where("_change_type = 'insert'")
    )


def set_table_property(spark: SparkSession, path: str, name: str, value: str) -> None:
    """One metadata commit."""
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({sql_str(name)} = {sql_str(value)})")
