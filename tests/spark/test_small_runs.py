"""A small run is read, decoded and written on the driver (bronze ``LOCAL_READ_BYTES``, silver
``LOCAL_DECODE_ROWS``), a large one in Spark's tasks: the same log, taken both ways (a first run
over one offsets partition, then an increment with the rest: silver's snapshot and its change data
feed), gives the same bronze and silver tables, row for row. Most tests' logs are small, so this is
where the Spark paths of bronze's read and silver's decode are proven on every CI run."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.bronze import ingest as bronze_ingest
from pipelines.bronze.ingest import ingest_segments
from pipelines.generate import generate
from pipelines.runtime.config import SegmentsSource
from pipelines.runtime.tables import Tables
from pipelines.silver import ingest as silver_ingest
from pipelines.silver.contract import DATA_TABLES
from pipelines.silver.ingest import run_silver

pytestmark = pytest.mark.spark

# when and by which run a row was written, not what it holds
RUN_COLUMNS = {"run_id", "ingested_at", "committed_at"}


def build(spark, root: Path, logs: Path) -> tuple[Tables, list[str], list[int]]:
    """Bronze and silver over partition 0, then over the whole log; the silver modes and the
    Spark jobs each step ran."""
    tables = Tables(spark, str(root))
    modes, jobs = [], []
    tracker = spark.sparkContext.statusTracker()
    for step, paths in enumerate(([logs / "__consumer_offsets-0"], [logs])):
        spark.sparkContext.setJobGroup(f"small-runs-{root.name}-{step}", "test_small_runs")
        src = SegmentsSource(kind="segments", cluster="c", paths=[str(p) for p in paths])
        ingest_segments(spark, tables, "s", src, f"b{step}", "/")
        modes.append(run_silver(spark, tables, f"s{step}").mode)
        jobs.append(len(tracker.getJobIdsForGroup(f"small-runs-{root.name}-{step}")))
    return tables, modes, jobs


def rows(spark, tables: Tables, layer: str, table: str) -> list[str]:
    path = tables.path(layer, table)
    df = spark.read.format("delta").load(path)
    return sorted(repr(tuple(r)) for r in df.select(*[c for c in df.columns if c not in RUN_COLUMNS]).collect())


def test_the_driver_and_spark_paths_write_the_same_tables(spark, tmp_path, monkeypatch) -> None:
    generated = generate(tmp_path / "logs", 4000, seed=17, partitions=3, segment_bytes=16 * 1024)
    logs = generated.out
    local, local_modes, local_jobs = build(spark, tmp_path / "driver", logs)
    monkeypatch.setattr(bronze_ingest, "LOCAL_READ_BYTES", -1)  # every read in Spark's tasks
    monkeypatch.setattr(silver_ingest, "LOCAL_DECODE_ROWS", -1)  # every decode in Spark's tasks
    tasks, task_modes, task_jobs = build(spark, tmp_path / "tasks", logs)

    assert local_modes == task_modes == ["snapshot", "incremental"]
    # the driver path ran no Spark job in bronze and silver; the task path did
    assert local_jobs == [0, 0] and min(task_jobs) > 0, (local_jobs, task_jobs)
    bronze = rows(spark, local, "bronze", "offsets_records")
    assert len(bronze) == generated.records
    assert bronze == rows(spark, tasks, "bronze", "offsets_records")
    compared = 0
    for table in (*DATA_TABLES, "topic_ids", "version_inventory"):
        if not Path(local.path("silver", table)).exists():
            assert not Path(tasks.path("silver", table)).exists(), table
            continue
        got = rows(spark, local, "silver", table)
        assert got == rows(spark, tasks, "silver", table), table
        compared += bool(got)
    assert compared >= 6, compared  # commits, group metadata and members, tombstones, markers, ...
