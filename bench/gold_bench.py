"""Gold benchmark: the replay + MERGE time of gold, and an incremental run adding ~1% new records.

    python bench/gold_bench.py --records 1000000 [--master local[*]] [--driver-memory 4g]

The generator's realistic mix (256 KiB segments, cached under var/bench/) is split into a base
and a ~1% increment: whole last segments of as many offsets partitions as it takes to hold back
1% of the bytes (new data arrives in some partitions, not spread evenly). Then, on a fresh
lakehouse:

* ``bronze``/``silver`` of the base (reported, not the point here);
* ``gold first run``: every partition replayed from its start and MERGEd into empty tables;
* ``gold re-run (no-op)``: nothing new;
* ``increment``: bronze, silver and gold of the held-back 1%, each timed — the steady state of a
  scheduled job.

Reports a Markdown table and one JSON line. Exits 1 when gold does not equal the generator's
expected state (a benchmark of a wrong result measures nothing).
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
from pipelines.gold.build import run_gold  # noqa: E402
from pipelines.runtime.config import SegmentsSource  # noqa: E402
from pipelines.runtime.tables import Tables  # noqa: E402
from pipelines.silver.ingest import run_silver  # noqa: E402


def split(logs: Path, out: Path, share: float) -> tuple[Path, Path, int]:
    """Hard-link ``logs`` into ``out/base`` and ``out/increment``: the last segment of partitions,
    largest first, go to the increment until it holds ``share`` of the bytes."""
    shutil.rmtree(out, ignore_errors=True)
    base, inc = out / "base", out / "increment"
    parts = sorted(logs.glob("__consumer_offsets-*"))
    total = sum(f.stat().st_size for p in parts for f in p.glob("*.log"))
    held: set[Path] = set()
    size = 0
    for p in sorted(parts, key=lambda p: -max((f.stat().st_size for f in p.glob("*.log")), default=0)):
        segs = sorted(p.glob("*.log"))
        if size >= share * total or len(segs) < 2:
            continue
        held.add(segs[-1])
        size += segs[-1].stat().st_size
    if not held:
        sys.exit(f"{logs}: no offsets partition has two segments to hold one back; generate more --records")
    for p in parts:
        for f in sorted(p.glob("*.log")):
            dest = (inc if f in held else base) / p.name / f.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.link(f, dest)
    return base, inc, size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--share", type=float, default=0.01, help="share of the bytes held back as the increment")
    args = parser.parse_args()
    logs = generated(args.records, args.seed, "gold", segment_bytes=256 * 1024)
    written = json.loads((logs / "generator-manifest.json").read_text())["records"]
    base, inc, inc_bytes = split(logs, REPO / "var" / "bench" / "gold-split", args.share)

    root = REPO / "var" / "bench" / "gold-lakehouse"
    shutil.rmtree(root, ignore_errors=True)
    spark, startup = session(args.master, args.driver_memory)
    tables = Tables(spark, str(root))
    rows: list[dict] = []

    def timed(label: str, fn, count) -> object:
        t = time.perf_counter()
        res = fn()
        rows.append({"run": label, "records": count(res), "seconds": round(time.perf_counter() - t, 1)})
        print(f"{label}: {rows[-1]['seconds']} s", file=sys.stderr)
        return res

    def bronze(path: Path, run: str):
        src = SegmentsSource(kind="segments", cluster="bench", paths=[str(path)])
        return ingest_segments(spark, tables, "bench", src, run, "/")

    timed("bronze (base)", lambda: bronze(base, "b1"), lambda r: r.rows_inserted)
    timed("silver (base)", lambda: run_silver(spark, tables, "s1"), lambda r: r.bronze_rows)
    first = timed("gold first run", lambda: run_gold(spark, tables, "g1"), lambda r: r.events)
    timed("gold re-run (no-op)", lambda: run_gold(spark, tables, "g2"), lambda r: r.events)
    timed("increment: bronze", lambda: bronze(inc, "b3"), lambda r: r.rows_inserted)
    timed("increment: silver", lambda: run_silver(spark, tables, "s3"), lambda r: r.bronze_rows)
    last = timed("increment: gold", lambda: run_gold(spark, tables, "g3"), lambda r: r.events)
    cores = os.cpu_count()
    print(
        f"\n{written} generated records ({inc_bytes / 2**20:.1f} MiB held back as the increment), master "
        f"{args.master} on {cores} cores, driver memory {args.driver_memory}, Spark {spark.version}; "
        f"start-up {startup:.0f} s\n"
    )
    print_rows(rows, "records (rows or events)")
    print(
        json.dumps(
            {
                "benchmark": "gold",
                "records": written,
                "master": args.master,
                "cores": cores,
                "rows": rows,
                "first": first.to_json(),  # type: ignore[attr-defined]
                "increment": last.to_json(),  # type: ignore[attr-defined]
            }
        )
    )
    exp = json.loads((logs / "expected-state.json").read_text())
    live = spark.read.format("delta").load(tables.path("gold", "current_offsets")).where("NOT deleted")
    got = {(r["group_id"], r["topic"], r["partition"]): r["committed_offset"] for r in live.collect()}
    want = {(o["group"], o["topic"], o["partition"]): o["offset"] for o in exp["offsets"]}
    if got != want:
        sys.exit(f"wrong result: gold has {len(got)} live offsets, expected {len(want)} (or different values)")


if __name__ == "__main__":
    main()
