"""Where a benchmark's Spark time went: the jobs of a Spark event log, slowest first.

Run a benchmark with ``--spark-conf spark.eventLog.enabled=true --spark-conf
spark.eventLog.dir=file:///tmp/events`` and pass the log it wrote::

    python bench/eventlog.py /tmp/events/eventlog_v2_local-1234 [--group silver] [--top 30]

One line per job (its job group, the call site that started it, its wall time), then its stages:
tasks, wall time, the tasks' summed run time and GC time, bytes read from input, cached blocks
and shuffles, and bytes spilled — what tells a scan from a sort from a spill.
"""

from __future__ import annotations

import argparse
import io
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import zstandard

MiB = 1 << 20
METRICS = ("run", "gc", "input", "shuffle_read", "shuffle_write", "spill", "output", "cached")


def _events(path: Path) -> list[dict[str, Any]]:
    """The events of a log file, or of a rolling log's directory (Spark 4: ``eventlog_v2_*`` with
    ``events_<n>_*`` files, zstd-compressed by default)."""
    files = sorted(path.glob("events_*"), key=lambda p: int(p.name.split("_")[1])) if path.is_dir() else [path]
    out = []
    for file in files:
        with file.open("rb") as raw:
            stream = zstandard.ZstdDecompressor().stream_reader(raw) if file.suffix == ".zstd" else raw
            out += [json.loads(line) for line in io.TextIOWrapper(stream, encoding="utf-8") if line.strip()]
    return out


def summarise(path: Path) -> list[dict[str, Any]]:
    """Per job: group, call site, seconds, and per stage the sums of its tasks' metrics."""
    jobs: dict[int, dict[str, Any]] = {}
    stage_job: dict[int, int] = {}
    stages: dict[int, dict[str, Any]] = defaultdict(lambda: defaultdict(float))
    for e in _events(path):
        kind = e.get("Event")
        if kind == "SparkListenerJobStart":
            props = e.get("Properties") or {}
            jobs[e["Job ID"]] = {
                "job": e["Job ID"],
                "group": props.get("spark.jobGroup.id", ""),
                "site": props.get("callSite.short") or props.get("spark.job.description", ""),
                "start": e["Submission Time"],
                "stages": e.get("Stage IDs", []),
            }
            for sid in e.get("Stage IDs", []):
                stage_job[sid] = e["Job ID"]
        elif kind == "SparkListenerJobEnd":
            jobs[e["Job ID"]]["end"] = e["Completion Time"]
        elif kind == "SparkListenerStageCompleted":
            info = e["Stage Info"]
            s = stages[info["Stage ID"]]
            s["name"] = info.get("Stage Name", "")
            s["tasks"] = info.get("Number of Tasks", 0)
            if info.get("Submission Time") and info.get("Completion Time"):
                s["wall"] = (info["Completion Time"] - info["Submission Time"]) / 1000
        elif kind == "SparkListenerTaskEnd":
            m = e.get("Task Metrics") or {}
            s = stages[e["Stage ID"]]
            s["run"] += m.get("Executor Run Time", 0) / 1000
            s["gc"] += m.get("JVM GC Time", 0) / 1000
            s["input"] += (m.get("Input Metrics") or {}).get("Bytes Read", 0)
            sr = m.get("Shuffle Read Metrics") or {}
            s["shuffle_read"] += sr.get("Remote Bytes Read", 0) + sr.get("Local Bytes Read", 0)
            s["shuffle_write"] += (m.get("Shuffle Write Metrics") or {}).get("Shuffle Bytes Written", 0)
            s["spill"] += m.get("Disk Bytes Spilled", 0)
            s["output"] += (m.get("Output Metrics") or {}).get("Bytes Written", 0)
            for block in m.get("Updated Blocks") or []:
                s["cached"] += (block.get("Status") or {}).get("Disk Size", 0)
    out = []
    for job in jobs.values():
        job["seconds"] = (job.get("end", job["start"]) - job["start"]) / 1000
        job["stage_rows"] = [
            {"id": sid, **dict.fromkeys(METRICS, 0.0), **stages[sid]} for sid in job["stages"] if sid in stages
        ]
        out.append(job)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--group", default="", help="only jobs whose job group contains this")
    ap.add_argument("--top", type=int, default=40, help="the slowest N jobs (0: all, in order)")
    args = ap.parse_args(argv)
    jobs = [j for j in summarise(args.log) if args.group in j["group"]]
    total = defaultdict(float)
    for j in jobs:
        total[j["group"]] += j["seconds"]
    for group, seconds in total.items():
        print(f"{group or '(no group)'}: {sum(1 for j in jobs if j['group'] == group)} jobs, {seconds:.1f} s")
    shown = sorted(jobs, key=lambda j: -j["seconds"])[: args.top] if args.top else jobs
    for j in shown:
        print(f"\njob {j['job']} [{j['group']}] {j['site']}: {j['seconds']:.1f} s")
        for s in j["stage_rows"]:
            print(
                f"  stage {s['id']} {str(s.get('name', ''))[:50]}: {int(s.get('tasks', 0))} tasks, "
                f"{s.get('wall', 0):.1f} s wall, run {s['run']:.1f} s, gc {s['gc']:.1f} s, "
                f"in {s['input'] / MiB:.0f} MiB, shuffle r/w {s['shuffle_read'] / MiB:.0f}/"
                f"{s['shuffle_write'] / MiB:.0f} MiB, cached {s['cached'] / MiB:.0f} MiB, "
                f"spill {s['spill'] / MiB:.0f} MiB, out {s['output'] / MiB:.0f} MiB"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
