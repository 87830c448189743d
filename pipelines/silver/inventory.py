"""silver.version_inventory: a census of record kinds, types, versions and status per partition."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from pipelines.runtime import lake
from pipelines.runtime.lake import partitions_predicate
from pipelines.silver.contract import BRONZE, KEY
from pipelines.silver.store import read_at, read_table, table_exists

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.runtime.tables import Tables


# -- version inventory ---------------------------------------------------------------------------------
def int16_sql(column: str) -> str:
    """SQL: the leading big-endian int16 of a binary column, null when it has fewer than 2 bytes."""
    u = f"cast(conv(hex(substring({column}, 1, 2)), 16, 10) as int)"
    return f"CASE WHEN length({column}) >= 2 THEN (CASE WHEN {u} >= 32768 THEN {u} - 65536 ELSE {u} END) END"


def inventory_frame(spark: SparkSession, tables: Tables, bronze_version: int, pairs: list[tuple[str, int]] | None):
    """Per (cluster, offsets partition, kind, type, version, status): counts and first/last seen.

    Counted from the bronze rows silver has processed (up to ``bronze_version``) — type and
    version are the leading int16 of key and value, as every decoder reads them — with the
    status from silver.quarantine. A census of the log, independent of the typed tables.
    """
    bronze = read_at(spark, tables.path(*BRONZE), bronze_version)
    if pairs is not None:
        bronze = bronze.where(partitions_predicate(pairs, column="partition"))
    records = bronze.select(
        "cluster",
        F.col("partition").alias("offsets_partition"),
        F.col("offset").alias("record_offset"),
        "timestamp",
        F.expr("CASE WHEN control THEN 'control' WHEN value IS NULL THEN 'tombstone' ELSE 'data' END").alias(
            "record_kind"
        ),
        F.expr(f"CASE WHEN NOT control THEN {int16_sql('key')} END").alias("record_type"),
        F.expr(f"CASE WHEN NOT control THEN {int16_sql('value')} END").alias("value_version"),
    )
    quarantine = read_table(spark, tables, "quarantine")
    if quarantine is None:
        records = records.withColumn("status", F.lit("decoded"))
    else:
        if pairs is not None:
            quarantine = quarantine.where(partitions_predicate(pairs))
        flagged = quarantine.select(*KEY, F.lit("quarantined").alias("_status"))
        records = records.join(flagged, list(KEY), "left").withColumn(
            "status", F.coalesce(F.col("_status"), F.lit("decoded"))
        )
    return (
        records.groupBy("cluster", "offsets_partition", "record_kind", "record_type", "value_version", "status")
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.min("record_offset").alias("first_offset"),
            F.max("record_offset").alias("last_offset"),
            F.min("timestamp").alias("first_timestamp"),
            F.max("timestamp").alias("last_timestamp"),
        )
        .select(*[c.name for c in tables.spec("silver", "version_inventory").columns])
    )


INVENTORY_KEY = ("cluster", "offsets_partition", "record_kind", "record_type", "value_version", "status")


def update_inventory(
    spark: SparkSession,
    tables: Tables,
    bronze_version: int,
    pairs: list[tuple[str, int]] | None,
    changed: bool | None = None,
) -> None:
    """Recompute the inventory of the touched partitions; write only what differs (None: all, overwrite)."""
    if pairs == []:
        return
    fresh = inventory_frame(spark, tables, bronze_version, pairs)
    where = "true" if pairs is None else partitions_predicate(pairs)
    if not table_exists(spark, tables, "version_inventory"):
        tables.ensure("silver", "version_inventory")
        where = "true"
    columns = [c.name for c in tables.spec("silver", "version_inventory").columns]
    lake.replace_if_changed(
        spark, tables.path("silver", "version_inventory"), fresh, where, INVENTORY_KEY, columns, changed
    )
