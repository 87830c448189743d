"""Soak benchmark: a job run on a schedule over a log that keeps growing, each run a fresh process.

    python bench/soak_bench.py --records 1000000 --runs 40 [--maintain-every 12] [--json out.json]

What a team sees after weeks of ``*/5`` runs, in minutes: the generator's log (cached under
var/bench/) is fed as a broker rolls segments — the first run sees ``--first-percent`` of each
offsets partition's segments, every later run the next equal share — and each run appends one
end-offset observation per topic partition to a snapshot file the job reads (what
``end_offsets: {kind: admin}`` adds each run). Each run is ``offsets-lakehouse run soak --json``
in a new process, as cron and Airflow start it; with ``--maintain-every N`` the ``maintain``
command runs after every N-th run, as its own schedule would.

Per run: wall seconds, each stage's seconds and steps (from the run's own report), the new
records, data files and log entries per table, and bytes on disk. At the end: the median of the
stages' seconds over runs 2-6 and over the last five, their ratio, the growth per run fitted over
runs 2..N and its projection to a month of 5-minute runs (8,640), files per table after the first
and the last run. Exits 1 unless gold equals the generator's expected state after the last run,
and (``--max-ratio``) unless the ratio stays within it.

An observation's time is the log time of the newest record the run exposes; its end offset is that
of the generator's first snapshot at or after it (each is at or beyond every position a group had
reached by then, so no lag is negative).
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import generated  # noqa: E402
from pipelines.codec.segments import discover  # noqa: E402

JOB = "soak"
MONTH_OF_RUNS = 8_640  # 30 days of 5-minute runs
INDEX_SUFFIXES = (".index", ".timeindex")


# -- the growing log ----------------------------------------------------------------------------------
class Feed:
    """The generated log as a broker would have shown it at each run: whole segments appear, in
    offset order per partition (the active segment is the last one shown)."""

    def __init__(self, logs: Path, source: Path, runs: int, first_percent: float) -> None:
        self.logs, self.source, self.runs, self.first = logs, source, runs, first_percent / 100
        self.segments: dict[Path, list[Path]] = {}
        for seg in discover([logs]):
            self.segments.setdefault(seg.path.parent, []).append(seg.path)
        for paths in self.segments.values():
            paths.sort()
        for part in sorted(logs.glob("__consumer_offsets-*")):
            (source / part.name).mkdir(parents=True, exist_ok=True)
        self.shown: dict[Path, int] = dict.fromkeys(self.segments, 0)

    def share(self, run: int) -> float:
        return self.first + (1 - self.first) * run / self.runs if self.runs else 1.0

    def show(self, run: int) -> None:
        """Link the segments run ``run`` (0 = the first) sees; index files before the log, as a roll."""
        for part, paths in self.segments.items():
            want = min(len(paths), math.ceil(len(paths) * self.share(run)))
            for path in paths[self.shown[part] : want]:
                dest = self.source / part.name / path.name
                for suffix in (*INDEX_SUFFIXES, ".log"):
                    orig = path.with_suffix(suffix)
                    if orig.exists() and not dest.with_suffix(suffix).exists():
                        os.link(orig, dest.with_suffix(suffix))
            self.shown[part] = want

    def bounds(self) -> dict[int, int | None]:
        """Per offsets partition, the base offset of the first segment not shown yet (None: all shown)."""
        out: dict[int, int | None] = {}
        for part, paths in self.segments.items():
            number = int(part.name.rsplit("-", 1)[1])
            shown = self.shown[part]
            out[number] = int(paths[shown].stem) if shown < len(paths) else None
        return out


class Observer:
    """One end-offset observation per topic partition per run, appended to a snapshot file."""

    def __init__(self, logs: Path, out: Path) -> None:
        import gzip

        with gzip.open(logs / "generator-events.jsonl.gz", "rt") as f:
            self.events = [(e["partition"], e["last_offset"], e["ts"]) for e in map(json.loads, f)]
        snapshots: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for line in (logs / "end-offsets.jsonl").read_text().splitlines():
            r = json.loads(line)
            snapshots.setdefault((r["topic"], r["partition"]), []).append((r["observed_at"], r["end_offset"]))
        self.snapshots = {k: sorted(v) for k, v in snapshots.items()}
        self.out = out
        self.last_at = 0

    def observe(self, bounds: dict[int, int | None]) -> int:
        """Append the run's observations; returns how many."""
        shown = [ts for part, last, ts in self.events if bounds.get(part) is None or last < bounds[part]]
        at = max(max(shown, default=0), self.last_at + 1)
        self.last_at = at
        lines = []
        for (topic, partition), points in sorted(self.snapshots.items()):
            i = bisect.bisect_left(points, (at, -1))
            end = points[min(i, len(points) - 1)][1]
            lines.append(json.dumps({"topic": topic, "partition": partition, "end_offset": end, "observed_at": at}))
        with self.out.open("a") as f:
            f.write("\n".join(lines) + "\n")
        return len(lines)


# -- the job ------------------------------------------------------------------------------------------
def write_jobs(path: Path, lakehouse: Path, source: Path, ends: Path, quality: bool) -> None:
    """jobs.yaml of the soak: the repository's Spark settings, one segments source with the
    snapshot file, a job of bronze, silver, gold (and quality), and a maintenance job."""
    spark = dict(yaml.safe_load((REPO / "jobs.yaml").read_text()).get("spark") or {})
    spark["conf"] = {**(spark.get("conf") or {}), "spark.ui.enabled": "false"}
    stages = ["bronze", "silver", "gold", *(["quality"] if quality else [])]
    doc = {
        "lakehouse": {"root": str(lakehouse)},
        "spark": spark,
        # every soft delete kept, so that gold can be compared with the expected state in full
        "gold": {"soft_delete_retention_days": None},
        "sources": {
            "soak": {
                "kind": "segments",
                "cluster": "soak",
                "paths": [str(source)],
                "end_offsets": {"kind": "file", "paths": [str(ends)]},
            }
        },
        # rules warn: the generator's deliberately hanging transaction must not stop a run
        "jobs": {JOB: {"sources": ["soak"], "stages": stages, "quality": {"policy": "warn"}}},
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def cli(*args: str) -> tuple[float, dict[str, Any] | None, str]:
    """``offsets-lakehouse ARGS --json`` in a new process: wall seconds, its report, its stderr."""
    t = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.cli.main", *args, "--json"], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        sys.exit(f"{' '.join(args)} exited {done.returncode}")
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        report = None
    return wall, report, done.stderr


# -- what the lakehouse holds -------------------------------------------------------------------------
def table_dirs(root: Path) -> dict[str, Path]:
    return {f"{d.parent.name}.{d.name}": d for d in sorted(root.glob("*/*")) if (d / "_delta_log").is_dir()}


def footprint(root: Path) -> dict[str, Any]:
    """Per table: data files of its current version and entries in its log; bytes under the root."""
    from deltalake import DeltaTable

    files, entries = {}, {}
    for name, path in table_dirs(root).items():
        files[name] = len(DeltaTable(str(path)).file_uris())
        entries[name] = sum(1 for p in (path / "_delta_log").iterdir() if p.suffix in (".json", ".parquet"))
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    return {"files": files, "log_entries": entries, "bytes": size}


def stage_seconds(report: dict[str, Any]) -> dict[str, float]:
    """Seconds per stage of a run report; the quality stages after silver and after gold apart."""
    out: dict[str, float] = {}
    last_data = None
    for s in report["stages"]:
        name = s["stage"]
        if name == "quality":
            name = f"quality after {last_data}"
        else:
            last_data = name
        out[name] = round(out.get(name, 0.0) + s["seconds"], 2)
    return out


def steps_of(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each data stage's steps (gold's lag steps as ``lag: <step>``)."""
    out: dict[str, dict[str, float]] = {}
    for s in report["stages"]:
        if s["stage"] == "quality" or not s["details"]:
            continue
        steps: dict[str, float] = {}
        for d in s["details"]:
            for k, v in (d.get("steps") or {}).items():
                steps[k] = round(steps.get(k, 0.0) + v, 2)
            for k, v in ((d.get("lag") or {}).get("steps") or {}).items():
                steps[f"lag: {k}"] = round(v, 2)
        out[s["stage"]] = steps
    return out


def fit(values: list[float]) -> tuple[float, float]:
    """Least-squares line through (i, values[i]): (intercept, slope per run)."""
    n = len(values)
    if n < 2:
        return (values[0] if values else 0.0), 0.0
    mean_x, mean_y = (n - 1) / 2, statistics.fmean(values)
    sxx = sum((i - mean_x) ** 2 for i in range(n))
    slope = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values)) / sxx
    return mean_y - slope * mean_x, slope


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    sums = [r["stage_sum"] for r in runs]
    early = sums[1:6]
    late = sums[-5:]
    intercept, slope = fit(sums[1:])  # run 1 builds from empty: not the steady state
    first_files, last_files = runs[0]["footprint"]["files"], runs[-1]["footprint"]["files"]
    return {
        "median_runs_2_6": round(statistics.median(early), 2) if early else None,
        "median_last_5": round(statistics.median(late), 2) if late else None,
        "ratio": round(statistics.median(late) / statistics.median(early), 3) if early and late else None,
        "growth_per_run_s": round(slope, 4),
        "projected_run_8640_s": round(intercept + slope * (MONTH_OF_RUNS - 2), 1),
        "files_first": sum(first_files.values()),
        "files_last": sum(last_files.values()),
        "files_per_table_ratio_max": max(
            (last_files[t] / first_files[t] for t in last_files if first_files.get(t)), default=None
        ),
    }


def gold_is_expected(lakehouse: Path, logs: Path) -> list[str]:
    from bench.common import gold_differences, session
    from pipelines.runtime.tables import Tables

    spark, _ = session("local[2]", "4g")
    try:
        return gold_differences(spark, Tables(spark, str(lakehouse)), logs / "expected-state.json", cluster="soak")
    finally:
        spark.stop()


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True).stdout.strip()

    commit, dirty = git("rev-parse", "--short", "HEAD"), git("status", "--porcelain", "pipelines")
    return {
        "commit": commit + ("+dirty" if dirty else ""),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "load_at_start": load_average(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=40, help="runs after the first")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--segment-bytes", type=int, default=32 * 1024)
    ap.add_argument("--first-percent", type=float, default=40.0, help="share of each partition's segments run 1 sees")
    ap.add_argument("--no-quality", action="store_true", help="leave the quality stage out of the job")
    ap.add_argument("--maintain-every", type=int, default=0, help="run `maintain` after every N-th run (0: never)")
    ap.add_argument("--max-ratio", type=float, help="exit 1 when the last five runs' median exceeds runs 2-6's by more")
    ap.add_argument("--workdir", type=Path, required=True, help="where the source, snapshots and lakehouse live")
    ap.add_argument("--json", type=Path, help="write every number here")
    args = ap.parse_args(argv)

    logs = generated(args.records, args.seed, prefix="soak", segment_bytes=args.segment_bytes)
    work = args.workdir.resolve()
    if work.exists() and any(work.iterdir()):
        sys.exit(f"{work} is not empty")
    work.mkdir(parents=True, exist_ok=True)
    lakehouse, source, ends = work / "lakehouse", work / "source", work / "end-offsets.jsonl"
    config = work / "jobs.yaml"
    write_jobs(config, lakehouse, source, ends, not args.no_quality)
    feed, observer = Feed(logs, source, args.runs, args.first_percent), Observer(logs, ends)
    result: dict[str, Any] = {"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()}, "runs": []}
    print("| run | new records | wall s | stages s | bronze | silver | gold | lag | quality | files | MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for run in range(args.runs + 1):
        feed.show(run)
        observations = observer.observe(feed.bounds())
        wall, report, _ = cli("run", JOB, "-c", str(config))
        assert report is not None
        seconds = stage_seconds(report)
        steps = steps_of(report)
        bronze = next(s for s in report["stages"] if s["stage"] == "bronze")["details"][0]
        row: dict[str, Any] = {
            "run": run + 1,
            "new_records": bronze["rows_inserted"],
            "observations": observations,
            "wall_s": round(wall, 2),
            "stages_s": seconds,
            "stage_sum": round(sum(seconds.values()), 2),
            "steps": steps,
            "footprint": footprint(lakehouse),
        }
        if args.maintain_every and (run + 1) % args.maintain_every == 0:
            row["maintain_s"], row["maintain"], _ = cli("maintain", "-c", str(config))
            row["footprint_after_maintain"] = footprint(lakehouse)
        result["runs"].append(row)
        lag = steps.get("gold", {}).get("lag", 0.0)
        quality = sum(v for k, v in seconds.items() if k.startswith("quality"))
        print(
            f"| {row['run']} | {row['new_records']} | {row['wall_s']} | {row['stage_sum']} | "
            f"{seconds.get('bronze', 0)} | {seconds.get('silver', 0)} | {seconds.get('gold', 0)} | {lag} | "
            f"{round(quality, 2)} | {sum(row['footprint']['files'].values())} | "
            f"{row['footprint']['bytes'] / 1e6:.0f} |",
            flush=True,
        )
    result["summary"] = summary = summarise(result["runs"])
    result["machine"]["load_at_end"] = load_average()
    differences = gold_is_expected(lakehouse, logs)
    result["gold_differences"] = differences[:20]
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, default=str))
    if differences:
        print("gold differs from the expected state:", *differences[:20], sep="\n  ", file=sys.stderr)
        return 1
    if args.max_ratio is not None and summary["ratio"] is not None and summary["ratio"] > args.max_ratio:
        print(f"the last runs cost {summary['ratio']} x the early ones (bound {args.max_ratio})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
