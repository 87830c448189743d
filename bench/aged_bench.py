"""Aged-lakehouse benchmark: does an increment on a month-old lakehouse cost what it costs on a young one?

    python bench/aged_bench.py --records 200000 [--days 30] [--every-minutes 5] [--pairs 2] [--json out.json]

A young and an aged lakehouse with the same live keys, built without running thousands of jobs:
the generator's log (cached under var/bench/) is cut per offsets partition so that
``--increment-percent`` (0.1 %) of its records are held back; the job (bronze, silver, gold,
quality) runs on the rest with one end-offset observation per topic partition, at the newest
record's log time: that is the **young** lakehouse. The **aged** one is a copy with the
observations a month of ``*/5`` runs would have made — every topic partition every
``--every-minutes`` for ``--days`` before it (8,640 each by default), written into
``bronze.end_offsets`` as a run's admin fetch writes them — and gold's lag tables brought up to
date by a gold run (``gold.lag_history`` then holds a month of rows).

Then the same increment on each, alternating, ``--pairs`` times (each from a copy of the built
lakehouse): the held-back records appear as a broker writes them (active segments grown, new
segments rolled in), one more observation per topic partition arrives, and ``offsets-lakehouse
run`` runs in a fresh process. Reported: each run's stage seconds and steps, and the ratio of the
aged increment's stages to the young one's. Exits 1 unless gold equals the generator's expected
state after every increment, or (``--max-ratio``) when the median ratio exceeds it.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import shutil
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import generated, split_log  # noqa: E402
from bench.soak_bench import cli, footprint, load_average, machine, stage_seconds, steps_of, write_jobs  # noqa: E402

JOB = "soak"  # soak_bench's job and source, whose jobs.yaml this reuses


def frontier(logs: Path, source: Path) -> int:
    """The log time of the newest record the source holds (the generator's event log: each batch's
    partition, last offset and time; a source segment file's size bounds what it holds)."""
    from pipelines.codec.reader import Batch, iter_log
    from pipelines.codec.segments import discover

    last: dict[int, int] = {}
    for seg in discover([source]):
        part = int(seg.path.parent.name.rsplit("-", 1)[1])
        for b in iter_log(seg.path, verify_crc=False):
            if isinstance(b, Batch):
                last[part] = max(last.get(part, -1), b.last_offset)
    with gzip.open(logs / "generator-events.jsonl.gz", "rt") as f:
        times = [e["ts"] for e in map(json.loads, f) if e["last_offset"] <= last.get(e["partition"], -1)]
    return max(times)


class Ends:
    """End offsets per topic partition at any time: the generator's first snapshot at or after it."""

    def __init__(self, logs: Path) -> None:
        points: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for line in (logs / "end-offsets.jsonl").read_text().splitlines():
            r = json.loads(line)
            points.setdefault((r["topic"], r["partition"]), []).append((r["observed_at"], r["end_offset"]))
        self.points = {k: sorted(v) for k, v in points.items()}

    def at(self, ms: int) -> list[tuple[str, int, int]]:
        out = []
        for (topic, partition), points in sorted(self.points.items()):
            i = bisect.bisect_left(points, (ms, -1))
            out.append((topic, partition, points[min(i, len(points) - 1)][1]))
        return out


def append_observations(path: Path, ends: Ends, ms: int) -> int:
    rows = [{"topic": t, "partition": p, "end_offset": e, "observed_at": ms} for t, p, e in ends.at(ms)]
    with path.open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


def age(lakehouse: Path, ends: Ends, until_ms: int, days: float, every_minutes: float) -> int:
    """A month of observations before ``until_ms`` written into bronze.end_offsets, as the Admin
    API's fetches of that many runs would have: a run's observations per commit (batched by day)."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from pipelines.runtime.tables import load_specs

    schema = load_specs()["bronze"]["end_offsets"].arrow()
    table = DeltaTable(str(lakehouse / "bronze" / "end_offsets"))
    step = int(every_minutes * 60_000)
    count = int(days * 24 * 60 / every_minutes)
    instants = [until_ms - step * i for i in range(count, 0, -1)]
    per_day = max(1, int(24 * 60 / every_minutes))
    written = 0
    now = datetime.now(timezone.utc)
    for first in range(0, len(instants), per_day):
        cols: dict[str, list[Any]] = {f.name: [] for f in schema}
        for ms in instants[first : first + per_day]:
            at = datetime.fromtimestamp(ms / 1000, timezone.utc)
            for topic, partition, end in ends.at(ms):
                for name, value in zip(
                    schema.names,
                    ("soak", topic, partition, end, at, "admin:aged", "soak", "aged", now),
                    strict=True,
                ):
                    cols[name].append(value)
        write_deltalake(table, pa.table(cols, schema), mode="append")
        written += len(cols["cluster"])
    return written


def gold_equal(lakehouse: Path, logs: Path) -> list[str]:
    from bench.soak_bench import gold_is_expected

    return gold_is_expected(lakehouse, logs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--segment-bytes", type=int, default=256 * 1024)
    ap.add_argument("--increment-percent", type=float, default=0.1)
    ap.add_argument("--days", type=float, default=30)
    ap.add_argument("--every-minutes", type=float, default=5)
    ap.add_argument("--pairs", type=int, default=2, help="young/aged increments, alternating")
    ap.add_argument("--max-ratio", type=float, help="exit 1 when the aged increment's median ratio exceeds it")
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    logs = generated(args.records, args.seed, prefix="aged", segment_bytes=args.segment_bytes)
    work = args.workdir.resolve()
    if work.exists() and any(work.iterdir()):
        sys.exit(f"{work} is not empty")
    live = work / "live"  # the one path every run reads and writes: bronze remembers source files by path
    lakehouse, source, snapshots = live / "lakehouse", live / "source", live / "end-offsets.jsonl"
    live.mkdir(parents=True)
    config = work / "jobs.yaml"
    write_jobs(config, lakehouse, source, snapshots, quality=True)
    result: dict[str, Any] = {"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()}}
    ends = Ends(logs)

    t = time.perf_counter()
    split = split_log(logs, source, args.increment_percent)
    base_ms = frontier(logs, source)
    append_observations(snapshots, ends, base_ms)
    wall, report, _ = cli("run", JOB, "-c", str(config))
    result["young_build"] = {"wall_s": round(wall, 1), "stages_s": stage_seconds(report or {"stages": []})}
    shutil.copytree(live, work / "young", symlinks=True)
    observations = age(lakehouse, ends, base_ms, args.days, args.every_minutes)
    wall, report, _ = cli("run", JOB, "-c", str(config), "--stage", "gold")
    result["aged_build"] = {
        "observations": observations,
        "gold_wall_s": round(wall, 1),
        "lag": next(s for s in report["stages"] if s["stage"] == "gold")["details"][0]["lag"] if report else None,
        "footprint": footprint(lakehouse),
    }
    shutil.copytree(live, work / "aged", symlinks=True)
    result["build_s"] = round(time.perf_counter() - t, 1)
    print(f"built in {result['build_s']} s: {observations} observations aged", file=sys.stderr)

    increment_ms = frontier(logs, logs) + 1
    runs, failures = [], []
    for pair in range(args.pairs):
        for kind in ("young", "aged") if pair % 2 == 0 else ("aged", "young"):
            shutil.rmtree(live)
            shutil.copytree(work / kind, live, symlinks=True)
            split.grow()
            append_observations(snapshots, ends, increment_ms)
            wall, report, _ = cli("run", JOB, "-c", str(config))
            assert report is not None
            seconds = stage_seconds(report)
            row = {
                "pair": pair + 1,
                "kind": kind,
                "wall_s": round(wall, 2),
                "stages_s": seconds,
                "stage_sum": round(sum(seconds.values()), 2),
                "steps": steps_of(report),
                "load": load_average(),
            }
            differences = gold_equal(lakehouse, logs)
            if differences:
                failures.append(f"{kind} pair {pair + 1}: {differences[:5]}")
            runs.append(row)
            print(json.dumps({k: row[k] for k in ("pair", "kind", "wall_s", "stage_sum", "stages_s")}), flush=True)
    result["runs"] = runs
    ratios = []
    for pair in range(1, args.pairs + 1):
        by = {r["kind"]: r["stage_sum"] for r in runs if r["pair"] == pair}
        ratios.append(round(by["aged"] / by["young"], 3))
    result["ratios"] = ratios
    result["median_ratio"] = statistics.median(ratios)
    result["machine"]["load_at_end"] = load_average()
    print(json.dumps({"ratios": ratios, "median_ratio": result["median_ratio"]}))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, default=str))
    if failures:
        print("gold differs from the expected state:", *failures, sep="\n  ", file=sys.stderr)
        return 1
    if args.max_ratio is not None and result["median_ratio"] > args.max_ratio:
        print(f"the aged increment costs {result['median_ratio']} x the young one's", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
