"""``offsets-lakehouse status``: bronze watermarks summed up per cluster by default, per partition
with --partitions (docs/cli.md), both against the segment files' own census (``inspect``, not
Spark), on the spark tier's shared lakehouse (two clusters, tests/spark/shared_lakehouse.py)."""

from __future__ import annotations

import json
from functools import reduce
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyspark.sql import functions as F

from pipelines.cli.main import cli
from pipelines.codec.segments import discover
from pipelines.inspect import inspect_segment
from tests.spark.shared_lakehouse import CLUSTERS, SharedLakehouse


def file_census(logs: Path) -> dict[int, dict[str, int]]:
    """Per partition, from the files: records and the first and last record offset."""
    out: dict[int, dict[str, int]] = {}
    for seg in discover([logs]):
        r = inspect_segment(seg)
        if not r.records:
            continue
        p = out.setdefault(seg.partition, {"records": 0, "first_offset": r.first_offset, "last_offset": r.last_offset})
        p["records"] += r.records
        p["first_offset"] = min(p["first_offset"], r.first_offset)
        p["last_offset"] = max(p["last_offset"], r.last_offset)
    return out


def status_json(config: Path, *extra: str) -> dict:
    out = CliRunner().invoke(cli, ["status", "-c", str(config), "--json", *extra], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def read_only_config(shared_lakehouse: SharedLakehouse, tmp_path: Path) -> Path:
    """A jobs.yaml on the shared lakehouse, which these tests only read."""
    config = tmp_path / "jobs.yaml"
    config.write_text(
        f"lakehouse: {{root: {shared_lakehouse.root}}}\n"
        "spark: {master: 'local[2]'}\n"
        f"sources: {{c1: {{kind: segments, cluster: c1, paths: [{shared_lakehouse.logs('c1')}]}}}}\n"
        "jobs: {j: {sources: [c1], stages: [bronze]}}\n"
    )
    return config


def test_watermarks_per_cluster_and_per_partition(spark, shared_lakehouse: SharedLakehouse, tmp_path: Path) -> None:
    logs = {cluster: shared_lakehouse.logs(cluster) for cluster in CLUSTERS}
    config = read_only_config(shared_lakehouse, tmp_path)
    summary = status_json(config)
    detailed = status_json(config, "--partitions")

    assert "partitions" not in summary, "per-partition rows only with --partitions"
    expected_parts = []
    expected_summary = []
    for cluster in sorted(logs):
        files = file_census(logs[cluster])
        # the partitions the generator wrote records to (c1's partition 3 stays empty: it must
        # not show up), and several per cluster
        manifest = json.loads((logs[cluster] / "generator-manifest.json").read_text())
        written = {int(p) for p, n in manifest["records_per_partition"].items() if n}
        assert len(manifest["records_per_partition"]) == CLUSTERS[cluster].partitions
        assert sorted(files) == sorted(written) and len(files) >= 2, (cluster, sorted(files))
        expected_parts += [{"cluster": cluster, "partition": p, **files[p]} for p in sorted(files)]
        expected_summary.append(
            {
                "cluster": cluster,
                "partitions": len(files),
                "records": sum(f["records"] for f in files.values()),
                "first_offset": min(f["first_offset"] for f in files.values()),
                "last_offset": max(f["last_offset"] for f in files.values()),
            }
        )
    got_parts = [
        {k: r[k] for k in ("cluster", "partition", "records", "first_offset", "last_offset")}
        for r in detailed["partitions"]
    ]
    assert got_parts == expected_parts
    for doc in (summary, detailed):
        got = [{k: v for k, v in r.items() if k != "last_ingested"} for r in doc["watermarks"]]
        assert got == expected_summary
        assert all(r["last_ingested"] for r in doc["watermarks"])
        assert doc["kafka_positions"] == [], "no Kafka source ran"
    # the summary's last ingestion is the latest of its partitions'
    for row in summary["watermarks"]:
        parts = [r["last_ingested"] for r in detailed["partitions"] if r["cluster"] == row["cluster"]]
        assert row["last_ingested"] == max(parts)


def test_table_rows_equal_spark_s_counts(
    spark, shared_lakehouse: SharedLakehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows per table come from each Delta log's file statistics; a table whose log cannot say
    (here: bronze's records, made to answer None) is counted by Spark. Both equal Spark's count."""
    from pipelines.runtime import lake

    config = read_only_config(shared_lakehouse, tmp_path)
    bronze = f"{shared_lakehouse.root}/bronze/offsets_records"
    row_count = lake.row_count
    asked: list[str] = []

    def from_log(path: str, version: int | None = None) -> int | None:
        asked.append(path)
        return None if path == bronze else row_count(path, version)

    monkeypatch.setattr(lake, "row_count", from_log)
    tables = status_json(config)["tables"]
    assert len(tables) > 20 and bronze in asked and len(asked) == len(tables)
    # Spark's counts of every table in one job (a job per table took most of this test's minute)
    counts = reduce(
        lambda a, b: a.unionAll(b),
        [
            spark.read.format("delta").load(t["location"]).select(F.lit(t["table"]).alias("t"), F.count("*").alias("n"))
            for t in tables
        ],
    ).collect()
    assert {t["table"]: t["rows"] for t in tables} == {r["t"]: r["n"] for r in counts}
    assert {t["table"]: t["rows"] for t in tables}["bronze.offsets_records"] > 0


def test_watermarks_from_the_log_equal_a_scan_of_bronze(
    spark, shared_lakehouse: SharedLakehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Watermarks come from the file statistics in bronze's Delta log; where those cannot be exact
    bronze is scanned instead. Both give the same rows, the last ingestion included (to the
    millisecond: Delta keeps timestamp statistics so)."""
    from pipelines.runtime import lake

    config = read_only_config(shared_lakehouse, tmp_path)
    from_log = status_json(config, "--partitions")
    asked: list[str] = []

    def unknown(path: str, *args, **kwargs) -> None:
        asked.append(path)
        return None

    monkeypatch.setattr(lake, "ranges_per_partition", unknown)
    scanned = status_json(config, "--partitions")
    assert asked == [f"{shared_lakehouse.root}/bronze/offsets_records"]
    assert len(from_log["partitions"]) >= 4
    assert scanned["partitions"] == from_log["partitions"]
    assert scanned["watermarks"] == from_log["watermarks"]
