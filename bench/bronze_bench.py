"""Bronze ingest benchmark: records/s from segment files into bronze.offsets_records.

    python bench/bronze_bench.py --records 1000000 [--increment-percent 1] [--master local[*]] [--driver-memory 4g]

Generates (once, cached under var/bench/) a log of the generator's realistic mix, ingests it
into a fresh lakehouse (first run: every record inserted), then ingests it again (the
idempotent no-op re-run). Then the increment scenario (skipped with ``--increment-percent 0``):
a second lakehouse gets the log as its broker had it a little earlier (bench/common.py
``split_log``: the last ``--increment-percent`` % of each partition held back), the held-back
bytes are appended to the active segments and the later segments roll in (``Split.grow``), and
that increment is ingested, then nothing new again. Prints wall times and records/s as a
Markdown table, the load average, and one JSON line. Spark session start-up is excluded and
reported separately. Exits 1 when a run did not insert what it should: every generated record
once, the increment's records once, nothing on a no-op.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import generated, session, split_log  # noqa: E402
from pipelines.bronze.ingest import ingest_segments  # noqa: E402
from pipelines.runtime.config import SegmentsSource  # noqa: E402
from pipelines.runtime.tables import Tables  # noqa: E402


def load_average() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def timed(spark: Any, tables: Tables, source: SegmentsSource, label: str) -> dict[str, Any]:
    """One ``ingest_segments`` call: wall seconds, records read and inserted, load when it started."""
    load = load_average()
    t = time.perf_counter()
    res = ingest_segments(spark, tables, "bench", source, label, "/")
    secs = time.perf_counter() - t
    return {
        "run": label,
        "records_read": res.rows_read,
        "inserted": res.rows_inserted,
        "seconds": round(secs, 1),
        "records_per_s": round(res.rows_read / secs),
        "load": load,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--increment-percent", type=float, default=1.0, help="0: no increment scenario")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--driver-memory", default="4g", help="spark.driver.memory (jobs.yaml's default is 4g)")
    args = parser.parse_args()
    logs = generated(args.records, args.seed)
    size = sum(p.stat().st_size for p in logs.rglob("*.log"))
    work = REPO / "var" / "bench"
    root = work / "bronze-lakehouse"
    shutil.rmtree(root, ignore_errors=True)
    spark, startup = session(args.master, args.driver_memory)
    source = SegmentsSource(kind="segments", cluster="bench", paths=[str(logs)])
    tables = Tables(spark, str(root))
    rows = [timed(spark, tables, source, label) for label in ("first run (all inserted)", "re-run (no-op)")]
    split = None
    if args.increment_percent > 0:
        split = split_log(logs, work / "bronze-split-source", args.increment_percent)
        inc_root = work / "bronze-split-lakehouse"
        shutil.rmtree(inc_root, ignore_errors=True)
        inc_tables = Tables(spark, str(inc_root))
        inc_source = SegmentsSource(kind="segments", cluster="bench", paths=[str(split.source)])
        rows.append(timed(spark, inc_tables, inc_source, "base (log before the increment)"))
        split.grow()
        rows.append(timed(spark, inc_tables, inc_source, f"increment ({split.percent:.1f} % of the records)"))
        rows.append(timed(spark, inc_tables, inc_source, "no-op after the increment"))
    cores = os.cpu_count()
    print(
        f"\n{args.records} generated records, {size / 2**20:.1f} MiB, master {args.master} on {cores} cores, "
        f"driver memory {args.driver_memory}, Spark {spark.version}, start-up {startup:.0f} s\n"
    )
    print("| run | records read | inserted | seconds | records/s | load (1/5/15 min) |")
    print("|---|---:|---:|---:|---:|---|")
    for r in rows:
        load = " ".join(f"{x:.2f}" for x in r["load"])
        print(
            f"| {r['run']} | {r['records_read']} | {r['inserted']} | {r['seconds']} | {r['records_per_s']:,} | {load} |"
        )
    doc = {"benchmark": "bronze", "records": args.records, "master": args.master, "cores": cores, "rows": rows}
    if split is not None:
        doc["increment"] = {"records": split.held_back, "percent": round(split.percent, 2)}
    print(json.dumps(doc | {"driver_memory": args.driver_memory, "mib": round(size / 2**20, 1)}))
    # a benchmark of a wrong result measures nothing: every written record once, then nothing
    written = json.loads((logs / "generator-manifest.json").read_text())["records"]
    first, again = rows[:2]
    wrong = not (first["records_read"] == first["inserted"] == written and again["inserted"] == 0)
    if split is not None:
        base, increment, noop = rows[2:]
        wrong |= not (base["inserted"] == written - split.held_back and increment["inserted"] == split.held_back)
        wrong |= noop["inserted"] != 0
    if wrong:
        sys.exit(f"wrong result: the generator wrote {written} records; runs: {rows}")


if __name__ == "__main__":
    main()
