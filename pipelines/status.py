"""``offsets-lakehouse status``: what is in the lakehouse and how far each partition got."""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from pipelines.bronze.kafka_source import last_runs
from pipelines.quality.report import load_report
from pipelines.runtime import lake
from pipelines.silver.progress import silver_status

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from pipelines.runner import Context


def summarise_watermarks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-partition watermarks (cluster, partition, records, first/last offset, last ingested)
    summed up per cluster: partitions, records, the lowest first and highest last offset, the
    latest ingestion."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        c = out.setdefault(
            r["cluster"],
            {
                "cluster": r["cluster"],
                "partitions": 0,
                "records": 0,
                "first_offset": None,
                "last_offset": None,
                "last_ingested": None,
            },
        )
        c["partitions"] += 1
        c["records"] += r["records"]
        c["first_offset"] = (
            r["first_offset"] if c["first_offset"] is None else min(c["first_offset"], r["first_offset"])
        )
        c["last_offset"] = r["last_offset"] if c["last_offset"] is None else max(c["last_offset"], r["last_offset"])
        if r["last_ingested"] is not None:
            c["last_ingested"] = max(filter(None, (c["last_ingested"], r["last_ingested"])))
    return [out[k] for k in sorted(out)]


def bronze_watermarks(path: str, read: Callable[[], DataFrame]) -> list[dict[str, Any]]:
    """Per bronze partition: records, first and last offset, the last ingestion (to the
    millisecond), ordered by cluster and partition. From the file statistics in bronze's Delta log
    (bronze is partitioned by cluster and partition): a scan reads two columns of every row, so
    its cost grows with the whole history. The scan (``read``) where the statistics cannot be exact."""
    stats = lake.ranges_per_partition(path, ["cluster", "partition"], ["offset", "ingested_at"])
    if stats is not None:
        return [
            {
                "cluster": r["cluster"],
                "partition": r["partition"],
                "records": r["records"],
                "first_offset": r["min_offset"],
                "last_offset": r["max_offset"],
                # as Spark gives a timestamp to Python: the local time, without a zone
                "last_ingested": r["max_ingested_at"].astimezone().replace(tzinfo=None),
            }
            for r in stats.sort_by([("cluster", "ascending"), ("partition", "ascending")]).to_pylist()
        ]
    marks = (
        read()
        .groupBy("cluster", "partition")
        .agg(
            F.count("*").alias("records"),
            F.min("offset").alias("first_offset"),
            F.max("offset").alias("last_offset"),
            F.date_trunc("millisecond", F.max("ingested_at")).alias("last_ingested"),
        )
        .orderBy("cluster", "partition")
    )
    return [r.asDict() for r in marks.collect()]


def collect_status(ctx: Context, partitions: bool = False) -> dict[str, Any]:
    """Tables with row counts, bronze watermarks per cluster (and per partition with
    ``partitions``), the Kafka source's positions, silver's progress, the last quality run and the
    last runs, with notes on what needs attention."""
    tables = ctx.tables
    # a serve's session (a Spark Connect client here) has every table registered, and only reads;
    # a session of its own reads the tables by path: registering them costs a Delta snapshot each
    # (on an object store, 14 s of a 23 s status of a small lakehouse)
    remote = lake.remote(ctx.spark)
    every = [(layer, t) for layer in tables.specs for t in tables.specs[layer]]
    if remote:
        names = set(tables.registered())
    else:
        found = lake.parallel_map(lambda lt: lake.exists(ctx.spark, tables.path(*lt)), every)
        names = {tables.name(*lt) for lt, there in zip(every, found, strict=True) if there}

    def table(layer: str, name: str) -> DataFrame:
        return ctx.spark.table(tables.name(layer, name)) if remote else lake.read(ctx.spark, tables.path(layer, name))

    doc: dict[str, Any] = {"root": ctx.root, "tables": [], "watermarks": [], "runs": [], "notes": []}
    present = [(tables.name(*lt), tables.path(*lt), lt) for lt in every if tables.name(*lt) in names]
    if present:
        # from the file statistics in each Delta log (a snapshot per table through Spark took ~1 s
        # each on a fresh session: 39 s for a small lakehouse), also beside a serve: this process
        # found the serve in the root's files, so it reads the logs too; the tables whose logs it
        # cannot count in one query: one round trip to a serve, one job
        rows: dict[int, int | None] = dict(enumerate(lake.row_counts([p for _, p, _ in present])))
        counted = [(i, name, lt) for i, (name, _, lt) in enumerate(present) if rows[i] is None]
        if counted:
            parts = [table(*lt).select(F.lit(i).alias("i"), F.count("*").alias("n")) for i, _, lt in counted]
            counts = reduce(lambda a, b: a.unionAll(b), parts).collect()
            rows.update({r["i"]: r["n"] for r in counts})
        doc["tables"] = [{"table": n, "rows": rows[i], "location": p} for i, (n, p, _) in enumerate(present)]
    bronze = tables.name("bronze", "offsets_records")
    if bronze in names:
        rows = bronze_watermarks(tables.path("bronze", "offsets_records"), lambda: table("bronze", "offsets_records"))
        doc["watermarks"] = summarise_watermarks(rows)
        if partitions:
            doc["partitions"] = rows
    else:
        doc["notes"].append("no bronze table yet: run a job first (offsets-lakehouse run <job>)")
    # the Kafka source's positions are kept in bronze's commits: read whenever bronze exists
    doc["kafka_positions"] = last_runs(ctx.spark, tables)
    for row in doc["kafka_positions"]:
        if row["held_back"]:
            doc["notes"].append(
                f"cluster {row['cluster']} partition {row['partition']}: ingestion held at the last stable "
                f"offset {row['position']}, {row['held_back']} records behind the high watermark "
                "(an open transaction; see docs/bronze.md)"
            )
    doc["silver"] = silver_status(ctx.spark, tables)
    if doc["silver"] is not None:
        silver = doc["silver"]
        if silver["killed"]:
            doc["notes"].append("the last silver run did not finish: the next run re-processes its bronze rows")
        decoder = {r: n for r, n in silver["quarantined"].items() if not r.startswith("quality:")}
        rules = {r: n for r, n in silver["quarantined"].items() if r.startswith("quality:")}
        if decoder:
            listed = ", ".join(f"{n} {r}" for r, n in sorted(decoder.items()))
            doc["notes"].append(
                f"silver.quarantine holds records that did not decode ({listed}); after an upgrade: "
                "offsets-lakehouse redecode <job>"
            )
        if rules:
            listed = ", ".join(f"{n} {r}" for r, n in sorted(rules.items()))
            doc["notes"].append(f"silver.quarantine holds records moved by quality rules ({listed}; docs/quality.md)")
    if tables.name("quality", "results") in names:
        quality = load_report(ctx.spark, tables)
        doc["quality"] = quality
        bad = [p for p in quality["problems"] if p["action"] == "failed"]
        if bad:
            listed = ", ".join(f"{p['suite']}.{p['expectation']}" for p in bad)
            doc["notes"].append(f"quality run {quality['run_id']} failed: {listed} (offsets-lakehouse quality report)")
    runs = tables.name("bronze", "runs")
    if runs in names:
        doc["runs"] = [
            r.asDict()
            for r in table("bronze", "runs").drop("summary").orderBy(F.col("started_at").desc()).limit(10).collect()
        ]
    return doc
