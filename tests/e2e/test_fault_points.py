"""Every fault point of pipelines/runtime/faults.py, hit by a real ``offsets-lakehouse`` process.

Each case starts from the same lakehouse (a first run of the job on the first segment of each
partition), lets a separate ``offsets-lakehouse run j`` process (its own JVM) die at one named point
of the next, incremental run (``os._exit``: nothing after the point happens, like a kill), re-runs
the job in this process and requires EVERY table of bronze, silver and gold to hold what an
uninterrupted run gives -- not only ``current_offsets``. Only the columns that name the run or the
wall-clock time of the run that wrote a row are left out of the comparison.
``silver.refresh_after_first_table`` dies in a ``run --full-refresh``; ``silver.redecode_before_quarantine``
in ``redecode`` over quarantine rows that an older decoder would have left.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import deltalake
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipelines.generate import generate
from pipelines.runtime import faults, lake
from pipelines.runtime.tables import Tables
from tests.e2e.jobrun import jobs_file, run, run_here

STAGES = ["bronze", "silver", "gold"]
# columns that record which run wrote a row, or when (wall clock); everything else is compared
RUN_COLUMNS = {"run_id", "updated_run_id", "ingested_at", "detected_at", "logged_at", "in_flight_run", "recomputed"}
# the logs of runs, not data: bronze.runs (stages), silver.progress (watermarks per run)
RUN_LOGS = {("bronze", "runs"), ("silver", "progress")}
RUN_POINTS = sorted(p for p in faults.POINTS if p != "silver.redecode_before_quarantine")


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The full log, and a copy of its first segment per partition (the lakehouse's first run)."""
    base = tmp_path_factory.mktemp("faults")
    full = base / "logs"
    generate(full, 3000, seed=5, partitions=3, segment_bytes=16 * 1024)
    early = base / "early"
    for part in full.glob("__consumer_offsets-*"):
        (early / part.name).mkdir(parents=True)
        first = sorted(part.glob("*.log"))[0]
        shutil.copy(first, early / part.name / first.name)
    return full, early


@pytest.fixture(scope="module")
def template(logs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A lakehouse after the first run (all stages, first segments only)."""
    root = tmp_path_factory.mktemp("template")
    run_here(jobs_file(root, logs[1], STAGES))
    return root / "lakehouse"


def start_from(template: Path, tmp_path: Path, logs: Path) -> Path:
    shutil.copytree(template, tmp_path / "lakehouse")
    return jobs_file(tmp_path, logs, STAGES)


def contents(lakehouse: Path) -> dict[str, list[str]]:
    """Every row of every bronze, silver and gold table, without run ids and run times. Read with
    delta-rs: a Spark scan per table would cost more than the runs under test."""
    out = {}
    for layer in ("bronze", "silver", "gold"):
        for table in sorted(p for p in (lakehouse / layer).iterdir() if (p / "_delta_log").is_dir()):
            if (layer, table.name) in RUN_LOGS:
                continue
            data = deltalake.DeltaTable(str(table)).to_pyarrow_table()
            data = data.drop_columns([c for c in data.column_names if c in RUN_COLUMNS])
            out[f"{layer}.{table.name}"] = sorted(json.dumps(r, default=str, sort_keys=True) for r in data.to_pylist())
    return out


@pytest.fixture(scope="module")
def clean(spark, logs: tuple[Path, Path], template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same incremental run, uninterrupted."""
    root = tmp_path_factory.mktemp("clean")
    run_here(start_from(template, root, logs[0]))
    return root / "lakehouse"


@pytest.fixture(scope="module")
def expected(spark, clean: Path, logs: tuple[Path, Path]) -> dict[str, list[str]]:
    rows = contents(clean)
    # the comparison covers every layer, and the run read the whole log
    assert {"bronze.offsets_records", "silver.offset_commits", "gold.current_offsets", "gold.offset_history"} <= set(
        rows
    )
    exp = json.loads((logs[0] / "expected-state.json").read_text())
    live = {
        (r["group_id"], r["topic"], r["partition"], r["committed_offset"])
        for r in map(json.loads, rows["gold.current_offsets"])
        if not r["deleted"]
    }
    assert live == {(o["group"], o["topic"], o["partition"], o["offset"]) for o in exp["offsets"]}
    return rows


def assert_same(actual: dict[str, list[str]], expected: dict[str, list[str]]) -> None:
    # an empty table and one not created yet hold the same: no rows
    actual, expected = ({t: r for t, r in d.items() if r} for d in (actual, expected))
    assert sorted(actual) == sorted(expected)
    differ = {t: (len(actual[t]), len(expected[t])) for t in expected if actual[t] != expected[t]}
    assert not differ, f"tables that differ from an uninterrupted run (rows killed+re-run, clean): {differ}"


@pytest.fixture(scope="module")
def dead_runs(logs, template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple]]:
    """Every point's run, each in its own copy of the template, dying at its point: started two at
    a time in the background as soon as the template exists, so that their JVMs overlap this
    process's own runs (the uninterrupted one, the re-runs) instead of waiting for them."""
    pool = ThreadPoolExecutor(2)
    runs = {}
    for point in RUN_POINTS:
        config = start_from(template, tmp_path_factory.mktemp(point.replace(".", "-")), logs[0])
        extra = ["--full-refresh"] if point.startswith("silver.refresh") else []
        runs[point] = (config, pool.submit(run, config, point, None, 0.0, *extra))
    yield runs
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("point", RUN_POINTS)
def test_killed_at_point_then_rerun(spark, dead_runs, expected, point: str) -> None:
    config, dead = dead_runs[point]
    assert dead.result(timeout=1200) == faults.EXIT_CODE, f"the run did not reach {point}"
    run_here(config)
    lakehouse = config.parent / "lakehouse"
    assert_same(contents(lakehouse), expected)
    if point.startswith("gold."):
        # the dead run had marked its partitions in flight: the re-run recomputed them from the start
        progress = deltalake.DeltaTable(str(lakehouse / "gold" / "partition_progress")).to_pyarrow_table()
        progress = progress.to_pylist()
        assert progress and all(p["in_flight_run"] is None and p["recomputed"] for p in progress)


def test_redecode_killed_then_rerun(spark, logs, clean: Path, expected, tmp_path: Path) -> None:
    """Offset commits an older decoder could not read sit in quarantine (and not in their table);
    `redecode` dies after inserting them into offset_commits, before removing them from the
    quarantine; the next `redecode` must leave silver exactly as a decoder that always read them."""
    shutil.copytree(clean, tmp_path / "lakehouse")
    tables = Tables(spark, str(tmp_path / "lakehouse"))
    commits = lake.read(spark, tables.path("silver", "offset_commits"))
    moved = commits.where("offsets_partition = 0").orderBy("record_offset").limit(25).select("record_offset").collect()
    offsets = [r["record_offset"] for r in moved]
    assert len(offsets) == 25
    bronze = lake.read(spark, tables.path("bronze", "offsets_records"))
    stale = bronze.where(F.col("partition") == 0).where(F.col("offset").isin(offsets))
    tables.ensure("silver", "quarantine")  # an uninterrupted run of this log quarantines nothing
    quarantine = lake.read(spark, tables.path("silver", "quarantine"))
    rows = stale.select(
        "cluster",
        F.col("partition").alias("offsets_partition"),
        F.col("offset").alias("record_offset"),
        "timestamp",
        "producer_id",
        "producer_epoch",
        "transactional",
        F.col("base_offset").alias("batch_base_offset"),
        "control",
        F.lit(1).alias("record_type"),
        F.expr("conv(hex(substring(value, 1, 2)), 16, 10)").cast("int").alias("value_version"),
        F.lit(None).cast("string").alias("group_id"),
        F.lit("unknown_version").alias("reason"),
        F.lit("value").alias("error_part"),
        F.lit(0).alias("error_position"),
        F.lit("an older decoder").alias("error_detail"),
        F.col("key").alias("raw_key"),
        F.col("value").alias("raw_value"),
        F.lit("silver1-old").alias("decoder_version"),
        "source_uri",
        "batch_position",
    )
    assert rows.count() == 25
    lake.append(rows.select(*quarantine.columns), tables.path("silver", "quarantine"))
    from delta.tables import DeltaTable

    DeltaTable.forPath(spark, tables.path("silver", "offset_commits")).delete(
        F.col("offsets_partition").eqNullSafe(0) & F.col("record_offset").isin(offsets)
    )
    config = jobs_file(tmp_path, logs[0], STAGES)
    point = "silver.redecode_before_quarantine"
    assert run(config, point, command="redecode") == faults.EXIT_CODE, f"redecode did not reach {point}"
    run_here_redecode(config)
    actual = contents(tmp_path / "lakehouse")
    silver = {t: r for t, r in actual.items() if t.startswith("silver.")}
    assert_same(silver, {t: r for t, r in expected.items() if t.startswith("silver.")})


def run_here_redecode(config: Path) -> None:
    from pipelines.runner import Context, redecode_job

    spark = SparkSession.getActiveSession()
    assert spark is not None
    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    report = redecode_job(Context(config), "j")
    assert report.status == "ok", report.to_json()
