"""Re-decoding the quarantine after an upgrade: rows this decoder reads move into their tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from pipelines.runtime import faults, lake
from pipelines.runtime.lake import key_condition
from pipelines.silver.contract import DATA_TABLES, KEY, QUALITY_REASON, SilverResult
from pipelines.silver.decode import QUARANTINE_BRONZE, build_plan
from pipelines.silver.frames import decode_frame
from pipelines.silver.inventory import update_inventory
from pipelines.silver.progress import finish, last_progress
from pipelines.silver.store import read_table
from pipelines.silver.topics import resolve_topic_names, topic_names, update_topic_ids, with_topic_names
from pipelines.silver.write import merge_insert

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.runtime.tables import Tables


# -- quarantine re-decoding -------------------------------------------------------------------------
def redecode_quarantine(spark: SparkSession, tables: Tables, run_id: str) -> SilverResult:
    """Decode every quarantine row again; move the ones this decoder reads into their tables.

    Tables first, quarantine second: a run killed in between leaves a record in both, and the
    next ``redecode`` finishes the move (the inserts are keyed, so nothing is duplicated).
    Rows still undecodable keep their place with this decoder's reason and version.
    """
    result = SilverResult("redecode")
    quarantine = read_table(spark, tables, "quarantine")
    if quarantine is not None:
        # records a quality rule moved there decode fine: they stay (pipelines/silver/quarantine.py)
        quarantine = quarantine.where(~F.col("reason").startswith(QUALITY_REASON))
    progress = last_progress(spark, tables)
    if quarantine is None or progress is None or progress["bronze_version"] is None:
        result.notes.append("nothing quarantined (or silver never completed a run)")
        return result
    result.bronze_version = progress["bronze_version"]
    rows = quarantine.select(*[F.col(col).alias(src) for col, src in QUARANTINE_BRONZE])
    plan = build_plan()
    decoded = decode_frame(rows, plan)
    changed = False
    try:
        counts = decoded.counts
        result.bronze_rows = counts["_rows"]
        if not result.bronze_rows:
            return result
        result.rows = {t: counts[t] for t in DATA_TABLES if t != "quarantine"}
        result.quarantined = counts["quarantine"]
        result.released = result.bronze_rows - result.quarantined
        pairs = counts["_pairs"]
        learnt = update_topic_ids(spark, tables, decoded) if counts["_topic_carriers"] else set()
        names = topic_names(spark, tables)
        for table in DATA_TABLES:
            if table != "quarantine" and result.rows.get(table):
                frame = with_topic_names(decoded.table(tables, table), table, names)
                result.inserted[table] = merge_insert(spark, tables, table, frame, pairs)
        faults.point("silver.redecode_before_quarantine")
        still = decoded.table(tables, "quarantine")
        decided = decoded.released_keys(tables)
        source = decided.join(still, list(KEY), "left")
        columns = [c.name for c in tables.spec("silver", "quarantine").columns]
        differs = " OR ".join(f"NOT (t.{c} <=> s.{c})" for c in columns if c not in KEY)
        on = F.expr(key_condition(KEY))
        changes = source.alias("s").join(quarantine.alias("t"), on).where(f"s._released OR {differs}")
        changed = bool(changes.limit(1).count())
        if changed:
            lake.merge(
                spark,
                tables.path("silver", "quarantine"),
                source,
                KEY,
                delete="s._released",
                update={c: f"s.{c}" for c in columns},
                update_if=f"NOT s._released AND ({differs})",
            )
        if learnt:
            result.topic_names_resolved = resolve_topic_names(spark, tables, learnt)
        update_inventory(spark, tables, result.bronze_version, pairs)
    finally:
        decoded.unpersist()
    if changed or sum(result.inserted.values()):
        finish(spark, tables, run_id, result, plan, result.bronze_version)
    return result
