"""Silver decode benchmark: records/s from bronze rows into the silver tables.

    python bench/silver_bench.py --records 1000000 [--master local[*]] [--driver-memory 4g] [--compare]

Uses the generator's realistic mix (cached under var/bench/, shared with the other benchmarks)
and reports, as a Markdown table and one JSON line:

* ``decode (pure, 1 core)``: :func:`pipelines.silver.decode.decode_batch` on Arrow batches of
  bronze rows in this process — the per-core cost of decoding plus building the Arrow output;
  reading the segment files is not counted (capped at the first 1M records);
* ``silver first run``: the silver stage on a fresh lakehouse whose bronze holds every record
  (bronze ingest is timed separately and not counted): decode in Spark tasks, split into the
  tables, write them, topic ids, version inventory, watermark;
* ``silver re-run``: the no-op re-run (nothing new in bronze);
* with ``--compare``: decode-only Spark jobs (decode every bronze row, count the result) with
  ``mapInArrow`` (what silver uses), an Arrow-optimised Python UDF returning the same struct, and
  an Arrow Python UDTF — the measurement behind the choice (docs/silver.md).

Spark session start-up is excluded. Exits 1 when silver does not reconcile with bronze: decoded +
quarantined + control rows must equal the generated records, nothing quarantined.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import generated, print_rows, session  # noqa: E402
from pipelines.bronze.ingest import ingest_segments  # noqa: E402
from pipelines.runtime.config import SegmentsSource  # noqa: E402
from pipelines.runtime.tables import Tables  # noqa: E402
from pipelines.silver.decode import RECORD_TABLES, build_plan, decode_batch, decode_one  # noqa: E402
from pipelines.silver.frames import decode_frame  # noqa: E402
from pipelines.silver.ingest import run_silver  # noqa: E402
from pipelines.silver.local import BRONZE_ARROW, bronze_rows  # noqa: E402

PURE_CAP = 1_000_000


def pure_decode(logs: Path) -> dict:
    """Single-process decode_batch throughput over batches of 10,000 bronze rows."""
    import pyarrow as pa

    plan = build_plan()
    decoded = seconds = 0.0
    chunk: list[dict] = []

    def flush() -> None:
        nonlocal decoded, seconds
        batch = pa.RecordBatch.from_pylist(chunk, schema=BRONZE_ARROW)
        t = time.perf_counter()
        out = decode_batch(batch, plan)
        seconds += time.perf_counter() - t
        decoded += sum(b.num_rows for b in out)
        chunk.clear()

    for row in bronze_rows([logs], "bench"):
        chunk.append(row)
        if len(chunk) == 10_000:
            flush()
            if decoded >= PURE_CAP:
                break
    if chunk:
        flush()
    return {"run": "decode (pure, 1 core)", "records": int(decoded), "seconds": round(seconds, 1)}


def compare(spark, tables: Tables) -> list[dict]:
    """Decode every bronze row three ways in Spark; count the results (forces the whole decode)."""
    from pyspark.sql.functions import udf, udtf
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import StructType

    plan = build_plan()
    version = plan.decoder_version
    bronze = spark.read.format("delta").load(tables.path("bronze", "offsets_records"))
    payload_type = StructType([f for f in from_arrow_schema(plan.schema).fields if f.name in RECORD_TABLES])

    def one(key, value, control):
        table, row = decode_one(key, value, control, version)
        return {table: row}

    arrow_udf = udf(one, payload_type, useArrow=True)

    @udtf(returnType=payload_type, useArrow=True)
    class Decode:
        def eval(self, key, value, control):
            table, row = decode_one(key, value, control, version)
            yield tuple(row if t == table else None for t in RECORD_TABLES)

    spark.udtf.register("silver_decode_bench", Decode)
    bronze.createOrReplaceTempView("_bench_bronze")
    jobs = {
        "mapInArrow": lambda: decode_frame(bronze, plan).counts["_rows"],
        "Arrow Python UDF": lambda: bronze.select(arrow_udf("key", "value", "control").alias("d")),
        "Arrow Python UDTF": lambda: spark.sql(
            "SELECT d.* FROM _bench_bronze, LATERAL silver_decode_bench(key, value, control) d"
        ),
    }
    out = []
    for name, frame in jobs.items():
        t = time.perf_counter()
        got = frame()
        n = got if isinstance(got, int) else got.count()
        out.append({"run": f"decode only: {name}", "records": n, "seconds": round(time.perf_counter() - t, 1)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--driver-memory", default="4g", help="spark.driver.memory (jobs.yaml's default is 4g)")
    parser.add_argument("--compare", action="store_true", help="also time mapInArrow against a UDF and a UDTF")
    parser.add_argument("--reuse-bronze", action="store_true", help="keep var/bench/silver-lakehouse's bronze")
    args = parser.parse_args()
    logs = generated(args.records, args.seed)
    written = json.loads((logs / "generator-manifest.json").read_text())["records"]
    rows = [pure_decode(logs)]

    root = REPO / "var" / "bench" / "silver-lakehouse"
    if not args.reuse_bronze:
        shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(root / "silver", ignore_errors=True)
    spark, startup = session(args.master, args.driver_memory)
    tables = Tables(spark, str(root))
    bronze_secs = None
    if not args.reuse_bronze or not (root / "bronze").exists():
        t = time.perf_counter()
        ingest_segments(
            spark, tables, "bench", SegmentsSource(kind="segments", cluster="bench", paths=[str(logs)]), "b", "/"
        )
        bronze_secs = round(time.perf_counter() - t, 1)
    results = {}
    for label in ("silver first run", "silver re-run (no-op)"):
        t = time.perf_counter()
        res = run_silver(spark, tables, label)
        results[label] = res
        rows.append({"run": label, "records": res.bronze_rows, "seconds": round(time.perf_counter() - t, 1)})
    if args.compare:
        rows += compare(spark, tables)
    cores = os.cpu_count()
    print(
        f"\n{written} generated records, master {args.master} on {cores} cores, driver memory {args.driver_memory}, "
        f"Spark {spark.version}; start-up {startup:.0f} s, bronze ingest {bronze_secs} s (not counted)\n"
    )
    print_rows(rows, rate_header="records/s")
    first = results["silver first run"]
    print(
        json.dumps(
            {
                "benchmark": "silver",
                "records": written,
                "master": args.master,
                "cores": cores,
                "rows": rows,
                "rows_per_table": first.rows,
                "bronze_seconds": bronze_secs,
            }
        )
    )
    # a benchmark of a wrong result measures nothing: every record once in exactly one table
    decoded = sum(n for t, n in first.rows.items() if t != "group_members")
    if not (first.bronze_rows == decoded == written and first.quarantined == 0):
        sys.exit(f"wrong result: generated {written}, silver {first.to_json()}")
    if results["silver re-run (no-op)"].bronze_rows != 0:
        sys.exit("the re-run decoded rows again")


if __name__ == "__main__":
    main()
