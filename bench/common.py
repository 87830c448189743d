"""What the benchmark scripts share: the cached generated log, the Spark session, the result table."""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def generated(records: int, seed: int, prefix: str = "codec", segment_bytes: int | None = None) -> Path:
    """The generator's log of ``records`` records, generated once and cached under var/bench/."""
    from pipelines.generate import generate

    out = REPO / "var" / "bench" / f"{prefix}-{records}-s{seed}"
    if not (out / "generator-manifest.json").exists():
        t = time.perf_counter()
        extra = {} if segment_bytes is None else {"segment_bytes": segment_bytes}
        generate(out, records, seed=seed, overwrite=True, **extra)
        print(f"generated {records} records in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return out


def session(master: str, driver_memory: str):
    """A Spark session for a benchmark and its start-up time in seconds (never counted)."""
    from pipelines.runtime.config import SparkSettings
    from pipelines.runtime.spark import build_session

    t = time.perf_counter()
    conf = {"spark.ui.enabled": "false", "spark.driver.memory": driver_memory}
    spark = build_session(SparkSettings(master=master, conf=conf))
    return spark, time.perf_counter() - t


def print_rows(rows: list[dict], records_header: str = "records", rate_header: str = "per s") -> None:
    """The measured rows as a Markdown table (records/s where both numbers are there)."""
    for r in rows:
        r["records_per_s"] = round(r["records"] / r["seconds"]) if r["seconds"] and r["records"] else None
    print(f"| run | {records_header} | seconds | {rate_header} |")
    print("|---|---:|---:|---:|")
    for r in rows:
        rate = f"{r['records_per_s']:,}" if r["records_per_s"] else "-"
        print(f"| {r['run']} | {r['records']} | {r['seconds']} | {rate} |")
