"""A small run is read, decoded, replayed and written on the driver (bronze ``LOCAL_READ_BYTES``,
silver ``LOCAL_DECODE_ROWS``, gold ``LOCAL_REPLAY_ROWS``, delta-rs commits up to
``lake.LOCAL_WRITE_ROWS``), a large one in Spark's tasks: the same log, taken each way (a first run
over the first segments of every offsets partition, then an increment with the rest: silver's
snapshot and its change data feed, gold's first replay and its resumption of every partition),
gives the same bronze, silver and gold tables, row for row. Most tests' logs are small, so this is
where the Spark paths are proven on every CI run (gold's replaces written by its tasks too)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipelines.bronze import ingest as bronze_ingest
from pipelines.bronze.ingest import ingest_segments
from pipelines.generate import generate
from pipelines.gold import build as gold_build
from pipelines.gold.build import GOLD_TABLES, run_gold
from pipelines.runtime import lake
from pipelines.runtime.config import SegmentsSource
from pipelines.runtime.tables import Tables
from pipelines.silver import frames as silver_frames
from pipelines.silver import ingest as silver_ingest
from pipelines.silver.contract import DATA_TABLES
from pipelines.silver.ingest import run_silver

pytestmark = pytest.mark.spark

# when and by which run a row was written, not what it holds
RUN_COLUMNS = {"run_id", "ingested_at", "committed_at"}


def build(
    spark, root: Path, logs: Path, silver: list[Path] | None = None, keep: list[Path] | None = None
) -> tuple[Tables, list[str], list[int], list[str]]:
    """Bronze, silver and gold over the first segments of each partition (their number chosen
    below), then over the whole log;
    the silver modes, the Spark jobs bronze and silver ran in each step, and where gold replayed.
    ``keep``: where to copy each step's bronze and silver; ``silver``: such copies, which gold then
    reads instead of running bronze and silver itself (a build that differs from another only in
    gold)."""
    tables = Tables(spark, str(root))
    modes, jobs, replays = [], [], []
    tracker = spark.sparkContext.statusTracker()
    # partition 0's first segment, every other's all but its last: they stop at far apart offsets,
    # and past Kafka 4.0's era, so a file of a silver table partitioned by cluster alone (the new
    # protocol's records) spans offsets above some partition's last one
    first = [
        seg
        for i, d in enumerate(sorted(logs.glob("__consumer_offsets-*")))
        for seg in (sorted(d.glob("*.log"))[:1] if i == 0 else sorted(d.glob("*.log"))[:-1])
    ]
    for step, paths in enumerate((first, [logs])):
        spark.sparkContext.setJobGroup(f"small-runs-{root.name}-{step}", "test_small_runs")
        if silver is not None:
            for layer in ("bronze", "silver"):
                shutil.rmtree(root / layer, ignore_errors=True)
                shutil.copytree(silver[step] / layer, root / layer)
        else:
            src = SegmentsSource(kind="segments", cluster="c", paths=[str(p) for p in paths])
            ingest_segments(spark, tables, "s", src, f"b{step}", "/")
            modes.append(run_silver(spark, tables, f"s{step}").mode)
            jobs.append(len(tracker.getJobIdsForGroup(f"small-runs-{root.name}-{step}")))
        if keep is not None:
            for layer in ("bronze", "silver"):
                shutil.copytree(root / layer, keep[step] / layer)
        gold = run_gold(spark, tables, f"g{step}")
        replays.append(gold.replayed_on)
        # the increment resumes every partition: gold's commits replace the partitions' rows
        assert (gold.partitions_recomputed, gold.partitions_incremental) == ((3, 0) if step == 0 else (0, 3))
    return tables, modes, jobs, replays


def rows(spark, tables: Tables, layer: str, table: str) -> list[str]:
    """The table's rows, read by delta-rs (one reader for every way of writing them; Spark reading
    what delta-rs writes is tests/spark/test_lake_write_arrow.py's), without the run columns."""
    got = lake.read_arrow(spark, tables.path(layer, table))
    assert got is not None, (layer, table)
    got = got.drop_columns([c for c in got.column_names if c in RUN_COLUMNS])
    return sorted(repr(tuple(r.values())) for r in got.to_pylist())


def test_the_driver_and_spark_paths_write_the_same_tables(spark, tmp_path, monkeypatch) -> None:
    generated = generate(tmp_path / "logs", 4000, seed=17, partitions=3, segment_bytes=16 * 1024)
    logs = generated.out
    steps = [tmp_path / "step-0", tmp_path / "step-1"]
    read: list[set[str]] = []  # per gold run, the silver files its replay read (names)
    listed = gold_build._tasks

    def tasks(*args, **kwargs):
        out = listed(*args, **kwargs)
        read.append({uri.rsplit("/", 1)[1] for t in out[0] for uris in t.silver.values() for uri in uris})
        return out

    monkeypatch.setattr(gold_build, "_tasks", tasks)
    local, local_modes, local_jobs, local_replays = build(spark, tmp_path / "driver", logs, keep=steps)
    # the increment read none of the files the first run consumed (every row of them applied),
    # though those of the tables partitioned by cluster alone span every partition's offsets
    first = {p.name for p in (steps[0] / "silver").rglob("*.parquet")}
    assert first & read[0] and read[1] and not first & read[1], (len(first), read)
    # gold replayed on the driver, its commits written by Spark (rows beyond one delta-rs commit),
    # on the same silver; from here on, the replay's output comes in blobs of 4 KiB (a partition's
    # tables in many)
    monkeypatch.setattr(lake, "LOCAL_WRITE_ROWS", -1)
    monkeypatch.setattr(gold_build, "BLOB_BYTES", 4096)
    mixed, _, _, mixed_replays = build(spark, tmp_path / "mixed", logs, silver=steps)
    monkeypatch.setattr(bronze_ingest, "LOCAL_READ_BYTES", -1)  # every read in Spark's tasks
    monkeypatch.setattr(silver_ingest, "LOCAL_DECODE_ROWS", -1)  # every decode in Spark's tasks
    monkeypatch.setattr(gold_build, "LOCAL_REPLAY_ROWS", -1)  # every replay in Spark's tasks
    from_files = []  # the snapshot's decode: its tasks read bronze's files themselves

    def decode_files(*args, **kwargs):
        from_files.append(silver_frames.decode_files(*args, **kwargs))
        return from_files[-1]

    monkeypatch.setattr(silver_ingest, "decode_files", decode_files)
    replaced = []  # gold's replaces written by its tasks: rows, or None where Spark wrote instead
    replace_from_tasks = lake.replace_from_tasks

    def replace(*args, **kwargs):
        replaced.append(replace_from_tasks(*args, **kwargs))
        return replaced[-1]

    monkeypatch.setattr(lake, "replace_from_tasks", replace)
    tasks, task_modes, task_jobs, task_replays = build(spark, tmp_path / "tasks", logs)
    assert len(from_files) == 1 and from_files[0] is not None
    # a table the increment changed in every partition: its files held only rows it replaced, and
    # its tasks wrote the replace; one it changed in some (partition 0 took most of the increment):
    # Spark rewrote the files, which hold every partition's rows
    assert replaced and any(r is not None for r in replaced) and None in replaced, replaced

    assert local_modes == task_modes == ["snapshot", "incremental"]
    assert local_replays == mixed_replays == ["driver", "driver"] and task_replays == ["spark", "spark"]
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
    compared = 0
    for table in GOLD_TABLES:
        got = rows(spark, local, "gold", table)
        assert got == rows(spark, mixed, "gold", table) == rows(spark, tasks, "gold", table), table
        compared += bool(got)
    assert compared >= 4, compared  # offsets, groups, members, history, generations, ...
