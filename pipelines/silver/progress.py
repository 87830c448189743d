"""silver.progress: the intent and watermark rows, where silver stands, and the status report."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import functions as F

from pipelines.runtime import lake
from pipelines.silver.contract import BRONZE, SilverResult
from pipelines.silver.store import read_table, table_exists

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.runtime.tables import Tables
    from pipelines.silver.decode import DecodePlan

COMPLETED = ("incremental", "snapshot", "full_refresh", "redecode", "up_to_date")


def progress_state(spark: SparkSession, tables: Tables) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(latest progress row, latest row that is not a ``started`` intent), read on the driver."""
    progress = lake.read_arrow(spark, tables.path("silver", "progress"))
    if progress is None or not progress.num_rows:
        return None, None
    rows = sorted(progress.to_pylist(), key=lambda r: r["committed_at"])
    done = [r for r in rows if r["mode"] != "started"]
    return rows[-1], (done[-1] if done else None)


def last_progress(spark: SparkSession, tables: Tables) -> dict[str, Any] | None:
    """The latest completed (or refresh_pending) progress row: where silver stands."""
    return progress_state(spark, tables)[1]


def write_progress(
    spark: SparkSession, tables: Tables, run_id: str, mode: str, bronze_version: int | None, rows: int, summary: dict
) -> None:
    if not table_exists(spark, tables, "progress"):
        tables.ensure("silver", "progress")
    row = {
        "run_id": run_id,
        "mode": mode,
        "bronze_version": bronze_version,
        "bronze_rows": rows,
        "decoder_version": summary.get("decoder_version", ""),
        "committed_at": datetime.now(timezone.utc),
        "summary": json.dumps(summary, sort_keys=True, default=str),
    }
    spec = tables.spec("silver", "progress")
    lake.write_rows(spark, pa.Table.from_pylist([row], spec.arrow()), tables.path("silver", "progress"), spec.struct())


def finish(
    spark: SparkSession, tables: Tables, run_id: str, result: SilverResult, plan: DecodePlan, bronze_version: int
) -> None:
    """The watermark, written last: bronze version done, and the topic_ids version it saw."""
    summary = result.to_json() | {
        "decoder_version": plan.decoder_version,
        "topic_ids_version": lake.version(spark, tables.path("silver", "topic_ids")),
    }
    write_progress(spark, tables, run_id, result.mode, bronze_version, result.bronze_rows, summary)


# -- status ------------------------------------------------------------------------------------------
def silver_status(spark: SparkSession, tables: Tables) -> dict[str, Any] | None:
    """For ``offsets-lakehouse status``: the watermark against bronze, the last run, the quarantine."""
    last, done = progress_state(spark, tables)
    if last is None:
        return None
    bronze = lake.version(spark, tables.path(*BRONZE))
    quarantine = read_table(spark, tables, "quarantine")
    reasons = {}
    if quarantine is not None:
        reasons = {r["reason"]: r["n"] for r in quarantine.groupBy("reason").agg(F.count("*").alias("n")).collect()}
    return {
        "watermark": None if done is None else done["bronze_version"],
        "bronze_version": bronze,
        "last_run": last["run_id"],
        "last_mode": last["mode"],
        "last_at": last["committed_at"],
        "killed": last["mode"] == "started",
        "quarantined": reasons,
    }
