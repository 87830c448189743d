"""Decoding on Spark: bronze-shaped rows to wide decoded rows (one per record), and the rows of each table."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from pipelines.silver.contract import KEY, MEMBER_TABLE, RECORD_TABLES
from pipelines.silver.decode import ENVELOPE_COLUMNS, INPUT_COLUMNS, MEMBERS, DecodePlan, decode_batches

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from pipelines.runtime.tables import Tables


# -- decoding on Spark ---------------------------------------------------------------------------------
def wide_schema(plan: DecodePlan):
    return from_arrow_schema(plan.schema)


def decode_frame(rows: DataFrame, plan: DecodePlan) -> DataFrame:
    """Bronze-shaped rows -> wide decoded rows (one per input row), decoded in Spark tasks."""
    present = [c for c in INPUT_COLUMNS if c in rows.columns]
    return rows.select(*present).mapInArrow(functools.partial(decode_batches, plan=plan), wide_schema(plan))


def table_frame(wide: DataFrame, tables: Tables, table: str) -> DataFrame:
    """The rows of one silver table from the wide decoded rows, in the declared column order."""
    columns = [c.name for c in tables.spec("silver", table).columns]
    if table == MEMBER_TABLE:
        exploded = wide.where(F.col("group_metadata").isNotNull()).select(
            *ENVELOPE_COLUMNS, F.explode(f"group_metadata.{MEMBERS}").alias("_m")
        )
        return exploded.select(*ENVELOPE_COLUMNS, "_m.*").select(*columns)
    return wide.where(F.col(table).isNotNull()).select(*ENVELOPE_COLUMNS, f"{table}.*").select(*columns)


def decoded_counts(wide: DataFrame) -> dict[str, Any]:
    """Rows per table, topic-id counters and the touched (cluster, offsets_partition) pairs: one job."""
    aggs = [F.count(F.col(t)).alias(t) for t in RECORD_TABLES]
    aggs.append(F.coalesce(F.sum(F.size(f"group_metadata.{MEMBERS}")), F.lit(0)).alias(MEMBER_TABLE))
    aggs.append(F.count(F.lit(1)).alias("_rows"))
    # records that carry topic id -> name pairs, and records with topic ids to resolve
    carriers = [
        "offset_commits.topic_id",
        "consumer_group_partition_metadata",
        "share_group_records.partition_metadata",
        "share_group_records.state_partition_metadata",
        "streams_group_records.partition_metadata",
    ]
    aggs.append(sum((F.count(F.col(c)) for c in carriers), F.lit(0)).alias("_topic_carriers"))
    resolvable = ["consumer_group_target_assignment_member", "consumer_group_current_member_assignment"]
    resolvable += ["share_group_records.target_assignment_member", "share_group_records.current_member_assignment"]
    aggs.append(sum((F.count(F.col(c)) for c in resolvable), F.lit(0)).alias("_topic_ids_to_resolve"))
    rows = wide.groupBy(*KEY[:2]).agg(*aggs).collect()
    totals: dict[str, Any] = {k: 0 for k in (*RECORD_TABLES, MEMBER_TABLE, "_rows", "_topic_carriers")}
    totals["_topic_ids_to_resolve"] = 0
    for r in rows:
        for k, v in r.asDict().items():
            if k not in KEY[:2]:
                totals[k] += int(v or 0)
    totals["_pairs"] = sorted((r["cluster"], r["offsets_partition"]) for r in rows)
    return totals
