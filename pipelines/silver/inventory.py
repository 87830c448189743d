"""silver.version_inventory: a census of record kinds, types, versions and status per partition."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import functions as F

from pipelines.runtime import lake
from pipelines.runtime.ddl import arrow_type
from pipelines.runtime.lake import partitions_predicate
from pipelines.silver.contract import BRONZE, KEY
from pipelines.silver.store import read_table, table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.runtime.tables import Tables


INVENTORY_KEY = ("cluster", "offsets_partition", "record_kind", "record_type", "value_version", "status")


def int16_sql(column: str) -> str:
    """SQL: the leading big-endian int16 of a binary column, null when it has fewer than 2 bytes."""
    u = f"cast(conv(hex(substring({column}, 1, 2)), 16, 10) as int)"
    return f"CASE WHEN length({column}) >= 2 THEN (CASE WHEN {u} >= 32768 THEN {u} - 65536 ELSE {u} END) END"


def census(bronze: DataFrame, quarantined: DataFrame | None) -> DataFrame:
    """Per (cluster, offsets partition, kind, type, version, status) of bronze-shaped rows: counts
    and first/last seen. Type and version are the leading int16 of key and value, as every
    decoder reads them; ``quarantined`` holds the keys (cluster, offsets_partition, record_offset)
    of the rows that are quarantined. A census of the log, independent of the typed tables."""
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
    if quarantined is None:
        records = records.withColumn("status", F.lit("decoded"))
    else:
        flagged = quarantined.select(*KEY, F.lit("quarantined").alias("_status"))
        records = records.join(flagged, list(KEY), "left").withColumn(
            "status", F.coalesce(F.col("_status"), F.lit("decoded"))
        )
    return records.groupBy(*INVENTORY_KEY).agg(
        F.count(F.lit(1)).alias("records"),
        F.min("record_offset").alias("first_offset"),
        F.max("record_offset").alias("last_offset"),
        F.min("timestamp").alias("first_timestamp"),
        F.max("timestamp").alias("last_timestamp"),
    )


def inventory_frame(spark: SparkSession, tables: Tables, bronze_version: int, pairs: list[tuple[str, int]] | None):
    """The inventory of the bronze rows silver has processed (up to ``bronze_version``), with the
    status from silver.quarantine."""
    bronze = lake.read_at(spark, tables.path(*BRONZE), bronze_version)
    if pairs is not None:
        bronze = bronze.where(partitions_predicate(pairs, column="partition"))
    quarantine = read_table(spark, tables, "quarantine")
    if quarantine is not None and pairs is not None:
        quarantine = quarantine.where(partitions_predicate(pairs))
    columns = [c.name for c in tables.spec("silver", "version_inventory").columns]
    return census(bronze, quarantine).select(*columns)


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
    if where == "true":
        changed = True  # a new table, or a rebuild of every partition: nothing to compare with
    lake.replace_if_changed(
        spark, tables.path("silver", "version_inventory"), fresh, where, INVENTORY_KEY, columns, changed
    )


def replace_inventory(spark: SparkSession, tables: Tables, fresh: pa.Table) -> None:
    """The inventory is ``fresh``, the census of every record silver processed (a first run, a full
    refresh: the run decoded the whole bronze snapshot, so its census is the inventory)."""
    tables.ensure("silver", "version_inventory")
    schema = tables.spec("silver", "version_inventory").struct()
    lake.write_rows(spark, fresh, tables.path("silver", "version_inventory"), schema, "true")


def add_to_inventory(
    spark: SparkSession,
    tables: Tables,
    fresh: pa.Table,
    pairs: list[tuple[str, int]],
    bronze_version: int,
) -> None:
    """Count rows silver has never counted (an appending run's rows; ``fresh``: their census, made
    while they were decoded) into the inventory: the stored counts plus theirs, first and last seen
    widened. The inventory is small (a row per partition, record type, version and status): it is
    combined and rewritten whole on the driver, one commit. Work follows the new rows and the
    inventory's size, not the log's."""
    if not pairs:
        return
    stored = lake.read_arrow(spark, tables.path("silver", "version_inventory"))
    if stored is None:
        update_inventory(spark, tables, bronze_version, pairs)
        return
    spec = tables.spec("silver", "version_inventory")
    schema = pa.schema([pa.field(c.name, arrow_type(c.type)) for c in spec.columns])
    replace_inventory(spark, tables, combine_census([stored, fresh], schema))


def combine_census(parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """Census rows of several parts as one census: counts added, first and last seen widened."""
    if not parts:
        return schema.empty_table()
    rows = pa.concat_tables([p.select(schema.names).cast(schema) for p in parts])
    grouped = rows.group_by(list(INVENTORY_KEY), use_threads=False).aggregate(
        [(column, how) for column, how in CENSUS_AGGREGATES.items()]
    )
    cols = [grouped.column(n if n in INVENTORY_KEY else f"{n}_{CENSUS_AGGREGATES[n]}").cast(schema.field(n).type)
            for n in schema.names]  # fmt: skip
    return pa.Table.from_arrays(cols, schema=schema)


CENSUS_AGGREGATES = {
    "records": "sum",
    "first_offset": "min",
    "last_offset": "max",
    "first_timestamp": "min",
    "last_timestamp": "max",
}
