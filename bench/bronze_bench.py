"""Bronze ingest benchmark: records/s from segment files into bronze.offsets_records.

    python bench/bronze_bench.py --records 1000000 [--master local[*]] [--driver-memory 4g]

Generates (once, cached under var/bench/) a log of the generator's realistic mix, ingests it
into a fresh lakehouse (first run: every record inserted), then ingests it again (the
idempotent no-op re-run), and prints both wall times and records/s as a Markdown table and
one JSON line. Spark session start-up is excluded and reported separately. Exits 1 when the
first run did not insert every generated record once or the re-run inserted anything.
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

from bench.common import generated, session  # noqa: E402
from pipelines.bronze.ingest import ingest_segments  # noqa: E402
from pipelines.runtime.config import SegmentsSource  # noqa: E402
from pipelines.runtime.tables import Tables  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--driver-memory", default="4g", help="spark.driver.memory (jobs.yaml's default is 4g)")
    args = parser.parse_args()
    logs = generated(args.records, args.seed)
    size = sum(p.stat().st_size for p in logs.rglob("*.log"))
    root = REPO / "var" / "bench" / "bronze-lakehouse"
    shutil.rmtree(root, ignore_errors=True)
    spark, startup = session(args.master, args.driver_memory)
    tables = Tables(spark, str(root))
    source = SegmentsSource(kind="segments", cluster="bench", paths=[str(logs)])
    rows = []
    for label in ("first run (all inserted)", "re-run (no-op)"):
        t = time.perf_counter()
        res = ingest_segments(spark, tables, "bench", source, label, "/")
        secs = time.perf_counter() - t
        rows.append(
            {
                "run": label,
                "records_read": res.rows_read,
                "inserted": res.rows_inserted,
                "seconds": round(secs, 1),
                "records_per_s": round(res.rows_read / secs),
            }
        )
    cores = os.cpu_count()
    print(
        f"\n{args.records} generated records, {size / 2**20:.1f} MiB, master {args.master} on {cores} cores, "
        f"driver memory {args.driver_memory}, Spark {spark.version}, start-up {startup:.0f} s\n"
    )
    print("| run | records read | inserted | seconds | records/s |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['run']} | {r['records_read']} | {r['inserted']} | {r['seconds']} | {r['records_per_s']:,} |")
    doc = {"benchmark": "bronze", "records": args.records, "master": args.master, "cores": cores, "rows": rows}
    print(json.dumps(doc | {"driver_memory": args.driver_memory, "mib": round(size / 2**20, 1)}))
    # a benchmark of a wrong result measures nothing: every written record once, then nothing
    written = json.loads((logs / "generator-manifest.json").read_text())["records"]
    first, again = rows
    if not (first["records_read"] == first["inserted"] == again["records_read"] == written and again["inserted"] == 0):
        sys.exit(f"wrong result: the generator wrote {written} records; runs: {rows}")


if __name__ == "__main__":
    main()
