"""The Python work of silver's and gold's Spark tasks, timed in one process on a built lakehouse.

    python bench/pipeline_bench.py --records 10000000 --workdir /work/wd10      # builds and keeps one
    python bench/task_bench.py replay /work/wd10/lakehouse --partitions 0-7 [--no-gc] [--profile]
    python bench/task_bench.py decode /work/wd10/lakehouse --partitions 0-9 [--no-gc]

``replay``: a full replay of each offsets partition as gold's tasks run it (the task body of
:func:`pipelines.gold.build._replay_function`, on the driver through ``_replay_on_driver``, its
files listed from the Delta logs as a full refresh lists them; buckets as the build makes them, or
``--rows-per-bucket``). ``decode``: silver's decode of each partition's largest bronze file
(:func:`pipelines.silver.frames.decode_bronze_files`, what a decoding task runs). One line per
partition: its rows, wall and CPU seconds, and µs per row; then the sum of all but the first
(which warms the imports and caches).

Without Spark's scheduling, checkpoints and the second core, this shows how the tasks' own cost
grows with a partition (10M against 30M) and what a change to them buys; ``--no-gc`` turns Python's
cyclic garbage collector off for the whole process, ``--profile`` prints cProfile's top functions.
Numbers in docs/performance.md (twenty-second part).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bench.common import session  # noqa: E402


def _partitions(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out += range(int(low), int(high or low) + 1)
    return out


def replay_cases(root: str, partitions: list[int], rows_per_bucket: int | None):
    """Per partition: (label, rows, a function that replays it)."""
    from pyspark.sql import SparkSession

    from pipelines.gold import buckets, build
    from pipelines.gold.engine import DEFAULT_RETENTION_MS
    from pipelines.gold.plan import make_plan
    from pipelines.runtime.tables import Tables

    if rows_per_bucket:
        buckets.ROWS_PER_BUCKET = rows_per_bucket
    # the plan and the file lists only: no Spark job runs (a test's running session will do)
    spark = SparkSession.getActiveSession() or session("local[1]", "2g")[0]
    tables = Tables(spark, root)
    tasks, _, _ = build._tasks(spark, tables, make_plan(spark, tables, True))
    schemas = build.replay_schemas(tables)
    for p in partitions:
        mine = [t for t in tasks if t.pair[1] == p]
        if not mine:
            continue
        replay = build._replay_function("bench", DEFAULT_RETENTION_MS, None, *schemas, build.Held())
        label = f"partition {p} ({mine[0].buckets} bucket{'s' if mine[0].buckets > 1 else ''})"
        yield label, sum(t.weight for t in mine), lambda m=mine, r=replay: build._replay_on_driver(r, m)


def decode_cases(root: str, partitions: list[int]):
    from pipelines.silver.decode import INPUT_COLUMNS, build_plan
    from pipelines.silver.frames import decode_bronze_files
    from pipelines.silver.local import BRONZE_ARROW

    plan = build_plan()
    schema = pa.schema([f for f in BRONZE_ARROW if f.name in INPUT_COLUMNS])
    base = Path(root) / "bronze" / "offsets_records"
    for p in partitions:
        files = sorted(base.glob(f"cluster=*/partition={p}/*.parquet"), key=lambda f: f.stat().st_size)
        if not files:
            continue
        largest = files[-1]
        task = json.dumps([[str(largest), largest.parent.parent.name.split("=", 1)[1], str(p)]])
        batch = pa.RecordBatch.from_pydict({"files": [task]})
        rows = pq.ParquetFile(largest).metadata.num_rows
        yield f"partition {p}", rows, lambda b=batch: list(decode_bronze_files(iter([b]), plan, schema))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("work", choices=("replay", "decode"))
    ap.add_argument(
        "lakehouse", help="a lakehouse the pipeline built (bench/pipeline_bench.py --workdir DIR: DIR/lakehouse)"
    )
    ap.add_argument("--partitions", default="0-7", help="offsets partitions, e.g. 0-7 or 1,3,5")
    ap.add_argument("--rows-per-bucket", type=int, help="replay: pipelines.gold.buckets.ROWS_PER_BUCKET for this run")
    ap.add_argument("--no-gc", action="store_true", help="Python's cyclic garbage collector off for the whole process")
    ap.add_argument("--profile", action="store_true", help="cProfile's top functions over every partition")
    args = ap.parse_args(argv)
    if not (Path(args.lakehouse) / "bronze").is_dir():
        ap.error(f"{args.lakehouse}: not a lakehouse (no bronze/ under it)")
    parts = _partitions(args.partitions)
    cases = (replay_cases(args.lakehouse, parts, args.rows_per_bucket) if args.work == "replay"
             else decode_cases(args.lakehouse, parts))  # fmt: skip
    if args.no_gc:
        gc.disable()
    profile = cProfile.Profile() if args.profile else None
    timed: list[tuple[int, float]] = []
    for label, rows, run in cases:
        wall, cpu = time.perf_counter(), time.process_time()
        if profile:
            profile.enable()
        run()
        if profile:
            profile.disable()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        timed.append((rows, wall))
        print(
            f"{label}: {rows:,} rows, wall {wall:.2f} s, cpu {cpu:.2f} s, {1e6 * wall / max(rows, 1):.2f} µs/row",
            flush=True,
        )
    if len(timed) > 1:
        rows, wall = sum(r for r, _ in timed[1:]), sum(w for _, w in timed[1:])
        print(f"all but the first: {rows:,} rows, wall {wall:.2f} s, {1e6 * wall / max(rows, 1):.2f} µs/row")
    if profile:
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    if not timed:
        print(f"no records in offsets partitions {args.partitions} of {args.lakehouse}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
