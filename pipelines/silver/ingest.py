"""Silver: bronze rows decoded into typed Delta tables, incrementally and idempotently.

One run (docs/silver.md):

1. **Select** the bronze rows not yet decoded: the Delta change data feed of
   ``bronze.offsets_records`` from the version after silver's watermark (the last completed
   ``silver.progress`` row) to the current version. Without a watermark (first run), or when the
   feed cannot serve the range (switched on later, files vacuumed), the whole bronze snapshot of
   the current version instead — correct, only slower, because the writes are then keyed MERGEs.
2. **Decode** each row once (``mapInArrow`` over :func:`pipelines.silver.decode.decode_batches`)
   into a wide row, persisted, then **split** into the tables.
3. **Intent**: a ``started`` progress row, before any table is written.
4. **Write** each table keyed on the log position (cluster, offsets_partition, record_offset
   [, member_index]): appended when the previous run completed and the rows come from the feed
   (none of them can be in silver yet), else — after a killed run, in snapshot mode — with an
   insert-only MERGE that skips what is already there. Killed writers leave only unreferenced
   files or complete commits.
5. **Derive** ``topic_ids`` (only grows), topic names next to topic ids, and
   ``version_inventory`` (recomputed for the touched partitions, written where it differs).
6. **Watermark**: the completed progress row with the bronze version, written last. A run killed
   before it leaves the intent row; the next run re-processes the same bronze rows with MERGEs.

``--full-refresh`` writes a ``refresh_pending`` progress row, rebuilds every table from the
bronze snapshot with overwrites, then writes the watermark; a killed refresh is completed by the
next run, whatever its flags. One silver run at a time per lakehouse.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

import pyarrow.compute as pc
from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException

from pipelines.runtime import faults, lake
from pipelines.silver.contract import BRONZE, DATA_TABLES, SilverResult
from pipelines.silver.decode import INPUT_COLUMNS, DecodePlan, build_plan
from pipelines.silver.frames import LOCAL_DECODE_ROWS, Decoded, decode_arrow, decode_files, decode_frame
from pipelines.silver.inventory import add_to_inventory, replace_inventory, update_inventory
from pipelines.silver.progress import finish, progress_state, write_progress
from pipelines.silver.topics import named_rows_in, resolve_topic_names, update_topic_ids
from pipelines.silver.write import insert_tables, refresh_tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.runtime.tables import Tables

log = logging.getLogger("offsets_lakehouse")
CDF = "delta.enableChangeDataFeed"
# what reading the change data feed raises when it cannot serve the range
FEED_ERRORS = (AnalysisException, Py4JJavaError)


def _ensure_bronze_cdf(spark: SparkSession, tables: Tables, result: SilverResult) -> bool:
    """True when bronze already had the change data feed on; else switch it on (one metadata commit)."""
    path = tables.path(*BRONZE)
    if str(lake.properties(spark, path).get(CDF, "false")).lower() == "true":
        return True
    lake.set_property(spark, path, CDF, "true")
    result.notes.append("enabled the change data feed on bronze.offsets_records (this run reads the snapshot)")
    return False


def _decode_changes(spark: SparkSession, path: str, watermark: int, latest: int, plan: DecodePlan) -> Decoded:
    """Decode the rows bronze's commits after ``watermark`` inserted (its change data feed): on the
    driver when they are few (bronze is insert-only, so they are the rows its log counts at
    ``latest`` less those at ``watermark``), else in Spark tasks."""
    before, now = lake.row_count(path, watermark), lake.row_count(path, latest)
    if before is not None and now is not None and now - before <= LOCAL_DECODE_ROWS:
        changes = lake.changes_arrow(spark, path, watermark + 1, latest, INPUT_COLUMNS)
        return decode_arrow(spark, changes.filter(pc.equal(changes["_change_type"], "insert")), plan)
    inserts = lake.changes(spark, path, watermark + 1, latest).where("_change_type = 'insert'")
    return decode_frame(inserts, plan)


def _decode_snapshot(spark: SparkSession, path: str, latest: int, plan: DecodePlan) -> Decoded:
    """Decode every row of bronze at ``latest``: on the driver when they are few, else in Spark tasks."""
    rows = lake.row_count(path, latest)
    if rows is not None and rows <= LOCAL_DECODE_ROWS:
        snapshot = lake.read_arrow(spark, path, INPUT_COLUMNS, at=latest)
        if snapshot is not None:
            return decode_arrow(spark, snapshot, plan)
    decoded = decode_files(spark, path, latest, plan)
    return decoded if decoded is not None else decode_frame(lake.read_at(spark, path, latest), plan)


# -- the stage -------------------------------------------------------------------------------------
def run_silver(spark: SparkSession, tables: Tables, run_id: str, full_refresh: bool = False) -> SilverResult:
    """Decode what bronze holds and silver does not yet; see the module docstring."""
    bronze_path = tables.path(*BRONZE)
    latest = lake.version(spark, bronze_path)
    if latest is None:
        return SilverResult("no_bronze", notes=["no bronze table yet: run the bronze stage first"])
    last, done = progress_state(spark, tables)
    pending = done is not None and done["mode"] == "refresh_pending"
    watermark = None if done is None or pending else done["bronze_version"]
    killed = last is not None and last["mode"] == "started"  # a run died after its intent row
    if pending and not full_refresh:
        log.info("silver: the last full refresh did not finish; completing it")
    outdated = tables.outdated("silver")
    if outdated:
        log.warning("silver: %s laid out by an older version; rebuilding silver from bronze", ", ".join(outdated))
    full = full_refresh or pending or bool(outdated)
    plan = build_plan()
    result = SilverResult("full_refresh" if full else "incremental", watermark, latest)
    recorded = json.loads((done or {}).get("summary") or "{}")
    if not full and watermark is not None and watermark >= latest:
        result.mode = "up_to_date"
        if lake.version(spark, tables.path("silver", "topic_ids")) != recorded.get("topic_ids_version"):
            # a killed run or redecode learnt topic ids after the last watermark: finish its work
            result.topic_names_resolved = resolve_topic_names(spark, tables)
            finish(spark, tables, run_id, result, plan, latest)
        return result

    decoded: Decoded | None = None
    from_feed = False
    if not full and watermark is not None:
        try:
            with result.steps("read and decode"):
                decoded = _decode_changes(spark, bronze_path, watermark, latest, plan)
            from_feed = True
        except FEED_ERRORS as exc:  # feed switched on later, files vacuumed: read the snapshot
            log.warning("silver: change data feed unavailable for bronze %d..%d: %s", watermark + 1, latest, exc)
            decoded = None
            if not _ensure_bronze_cdf(spark, tables, result):
                latest = lake.version(spark, bronze_path)  # switching it on was a bronze commit (no rows)
                result.bronze_version = latest
    if decoded is None:
        if not full:
            result.mode = "snapshot"
        with result.steps("read and decode"):
            decoded = _decode_snapshot(spark, bronze_path, latest, plan)
    try:
        counts = decoded.counts
        result.bronze_rows = counts["_rows"]
        result.rows = {t: counts[t] for t in DATA_TABLES}
        result.quarantined = counts["quarantine"]
        faults.point("silver.after_decode")
        if full:
            pending_summary = {"decoder_version": plan.decoder_version}
            write_progress(spark, tables, run_id, "refresh_pending", None, 0, pending_summary)
            for table in outdated:  # after the pending row: a run killed now completes the refresh
                spark.sql(f"DROP TABLE IF EXISTS {tables.name('silver', table)}")
                lake.drop(spark, tables.path("silver", table))
            with result.steps("topic ids"):
                update_topic_ids(spark, tables, decoded, overwrite=True)
            with result.steps("write tables"):
                refresh_tables(spark, tables, decoded, result)
            faults.point("silver.before_derived")
            with result.steps("inventory"):  # the census of the whole snapshot, made while decoding it
                replace_inventory(spark, tables, decoded.inventory)
        else:
            # the intent row: a run killed from here on makes the next run MERGE instead of append
            write_progress(spark, tables, run_id, "started", latest, result.bronze_rows, {"from": watermark})
            # appending is exactly inserting when the rows cannot be in silver yet: they come from
            # bronze commits after a completed watermark, and no run has written since
            append = result.mode == "incremental" and not killed
            pairs = counts["_pairs"]
            ids_before = lake.version(spark, tables.path("silver", "topic_ids"))
            with result.steps("topic ids"):
                learnt = update_topic_ids(spark, tables, decoded) if counts["_topic_carriers"] else set()
            with result.steps("write tables"):
                insert_tables(spark, tables, decoded, pairs, result, counts["_topic_ids_to_resolve"] > 0, append)
            faults.point("silver.before_derived")
            # rows written before this run may name topics learnt since: by a killed run (all
            # clusters), or by this one (the clusters that learnt ids and hold such rows)
            with result.steps("topic names"):
                if ids_before != recorded.get("topic_ids_version"):
                    result.topic_names_resolved = resolve_topic_names(spark, tables)
                elif learnt and named_rows_in(spark, tables, learnt):
                    result.topic_names_resolved = resolve_topic_names(spark, tables, learnt)
            with result.steps("inventory"):
                if append and from_feed:  # rows silver never counted: add them to their partitions' census
                    add_to_inventory(spark, tables, decoded.inventory, pairs, latest)
                elif last is None:  # the first run decoded all of bronze, and nothing was quarantined before
                    replace_inventory(spark, tables, decoded.inventory)
                else:
                    changed = True if sum(result.inserted.values()) else None
                    update_inventory(spark, tables, latest, pairs, changed=changed)
    finally:
        decoded.unpersist()
    faults.point("silver.before_watermark")
    with result.steps("watermark"):
        finish(spark, tables, run_id, result, plan, latest)
    return result
