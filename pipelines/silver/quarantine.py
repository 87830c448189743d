"""Quarantine by a quality rule: offending records move from silver's typed tables into
silver.quarantine, with reason ``quality:<suite>.<expectation>`` and the raw bytes from bronze.

Nothing is lost and silver still reconciles with bronze (decoded + quarantined + control =
bronze records): a record leaves its typed table only after it is in quarantine. Bronze is never
rewritten: for a bronze rule, the record's silver rows are what moves. One Delta transaction per
table: one insert-only MERGE into quarantine, then one delete MERGE per typed table holding any
of the records. A run killed between the two leaves a record in both; every quality run on
silver first deletes from the typed tables whatever quarantine holds for a quality reason
(:func:`settle_quarantine`), so the next run finishes the move. ``redecode`` leaves quality rows alone.
Silver owns these writes; quality only finds the offenders (pipelines/quality/quarantine.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from pipelines.runtime import lake
from pipelines.silver.contract import BRONZE, KEY, QUALITY_REASON, TYPED_TABLES
from pipelines.silver.decode import QUARANTINE_BRONZE
from pipelines.silver.inventory import int16_sql, update_inventory
from pipelines.silver.progress import last_progress
from pipelines.silver.store import read_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.runtime.tables import Tables


@dataclass
class Offenders:
    """The rows one rule found, as silver keys (plus group_id when the frame has it)."""

    reason: str  # quality:<suite>.<expectation>
    detail: str
    decoder_version: str
    keys: DataFrame  # cluster, offsets_partition, record_offset, group_id


def quarantine_rows(spark: SparkSession, tables: Tables, offenders: list[Offenders]) -> DataFrame:
    """silver.quarantine rows for the offenders, with raw bytes and envelope from bronze."""
    keyed = [
        o.keys.select(
            *KEY,
            "group_id",
            F.lit(o.reason).alias("reason"),
            F.lit(o.detail).alias("error_detail"),
            F.lit(o.decoder_version).alias("decoder_version"),
        )
        for o in offenders
    ]
    union = reduce(lambda a, b: a.unionByName(b), keyed)
    # one row per record: the first rule (by reason) that caught it
    first = union.groupBy(*KEY).agg(
        F.min(F.struct("reason", "error_detail", "decoder_version", "group_id")).alias("_r")
    )
    bronze = lake.read(spark, tables.path(*BRONZE))
    b = bronze.select(
        *[F.col(src).alias(col) for col, src in QUARANTINE_BRONZE],
        F.expr(f"CASE WHEN NOT control THEN {int16_sql('key')} END").alias("record_type"),
        F.expr(f"CASE WHEN NOT control THEN {int16_sql('value')} END").alias("value_version"),
    )
    rows = first.join(b, list(KEY)).select(
        *b.columns,
        F.col("_r.group_id").alias("group_id"),
        F.col("_r.reason").alias("reason"),
        F.lit("record").alias("error_part"),
        F.lit(0).alias("error_position"),
        F.col("_r.error_detail").alias("error_detail"),
        F.col("_r.decoder_version").alias("decoder_version"),
    )
    columns = [c.name for c in tables.spec("silver", "quarantine").columns]
    return rows.select(*columns)


def move_to_quarantine(spark: SparkSession, tables: Tables, offenders: list[Offenders]) -> int:
    """Insert the offenders into silver.quarantine (records already there keep their row), then
    delete them from the typed tables. Returns the records newly quarantined."""
    if not offenders:
        return 0
    rows = quarantine_rows(spark, tables, offenders)
    path = tables.path("silver", "quarantine")
    if not lake.exists(spark, path):
        tables.ensure("silver", "quarantine")
    inserted = lake.insert_new(spark, path, rows, KEY)
    settle_quarantine(spark, tables)
    return inserted


def settle_quarantine(spark: SparkSession, tables: Tables) -> dict[str, int]:
    """Delete from the typed tables every record silver.quarantine holds for a quality reason
    (one MERGE per table that has any); then the inventory of the touched partitions. Returns
    rows deleted per table."""
    quarantine = read_table(spark, tables, "quarantine")
    if quarantine is None:
        return {}
    held = quarantine.where(F.col("reason").startswith(QUALITY_REASON)).select(*KEY).persist()
    deleted: dict[str, int] = {}
    try:
        if not held.limit(1).count():
            return {}
        for table in TYPED_TABLES:
            typed = read_table(spark, tables, table)
            if typed is None or not typed.join(held, list(KEY), "left_semi").limit(1).count():
                continue
            metrics = lake.merge(spark, tables.path("silver", table), held, KEY, delete=True)
            deleted[table] = int(metrics["num_deleted_rows"])
        if deleted:
            _inventory(spark, tables, held)
    finally:
        held.unpersist()
    return deleted


def _inventory(spark: SparkSession, tables: Tables, held: DataFrame) -> None:
    progress = last_progress(spark, tables)
    if progress is None or progress["bronze_version"] is None:
        return
    pairs = sorted({(r[0], r[1]) for r in held.select("cluster", "offsets_partition").distinct().collect()})
    update_inventory(spark, tables, progress["bronze_version"], pairs)
