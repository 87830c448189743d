"""Every fault point of bronze's and gold's ``run``, and ``redecode``'s (pipelines/runtime/faults.py),
hit by a real ``offsets-lakehouse`` process; silver's ``run`` points are in
test_fault_points_silver.py (two modules, so that both xdist workers share the points).

Each ``run`` case starts from the same lakehouse (a first run of the job on the first segment of
each partition), lets a separate ``offsets-lakehouse run j`` process (its own JVM) die at one named
point of the next, incremental run (``os._exit``: nothing after the point happens, like a kill),
re-runs the job in this process and requires EVERY table of bronze, silver and gold to hold what an
uninterrupted run gives -- not only ``current_offsets``. Only the columns that name the run or the
wall-clock time of the run that wrote a row are left out of the comparison.
``silver.redecode_before_quarantine`` dies in ``redecode`` over quarantine rows that an older
decoder would have left. The template and the uninterrupted run are shared with the other module
(tests/e2e/fault_cases.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipelines.runtime import faults, lake
from pipelines.runtime.tables import Tables
from tests.e2e.fault_cases import (
    BRONZE_GOLD_POINTS,
    REDECODE_POINT,
    SILVER_POINTS,
    STAGES,
    Template,
    Uninterrupted,
    assert_rerun_completes_it,
    assert_same,
    contents,
    killed_runs,
)
from tests.e2e.jobrun import jobs_file, run

POINTS = BRONZE_GOLD_POINTS


def test_the_two_modules_hit_every_point_once() -> None:
    assert len(POINTS) == 5 and len(SILVER_POINTS) == 6  # bronze 3, gold 2, silver 6 (+ redecode)
    assert not set(POINTS) & set(SILVER_POINTS)
    assert {*POINTS, *SILVER_POINTS, REDECODE_POINT} == set(faults.POINTS)


@pytest.fixture(scope="module")
def dead_runs(
    fault_template: Template, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, tuple[Path, Future[int]]]]:
    with killed_runs(POINTS, fault_template, tmp_path_factory) as runs:
        yield runs


@pytest.mark.parametrize("point", POINTS)
def test_killed_at_point_then_rerun(spark, dead_runs, uninterrupted: Uninterrupted, point: str) -> None:
    config, dead = dead_runs[point]
    assert_rerun_completes_it(point, config, dead, uninterrupted.rows)


def test_redecode_killed_then_rerun(
    spark, fault_template: Template, uninterrupted: Uninterrupted, tmp_path: Path
) -> None:
    """Offset commits an older decoder could not read sit in quarantine (and not in their table);
    `redecode` dies after inserting them into offset_commits, before removing them from the
    quarantine; the next `redecode` must leave silver exactly as a decoder that always read them."""
    shutil.copytree(uninterrupted.lakehouse, tmp_path / "lakehouse")
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
    config = jobs_file(tmp_path, fault_template.full, STAGES)
    code = run(config, REDECODE_POINT, command="redecode")
    assert code == faults.EXIT_CODE, f"redecode did not reach {REDECODE_POINT}"
    run_here_redecode(config)
    actual = contents(tmp_path / "lakehouse")
    silver = {t: r for t, r in actual.items() if t.startswith("silver.")}
    expected = uninterrupted.rows
    assert_same(silver, {t: r for t, r in expected.items() if t.startswith("silver.")})


def run_here_redecode(config: Path) -> None:
    from pipelines.runner import Context, redecode_job

    spark = SparkSession.getActiveSession()
    assert spark is not None
    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    report = redecode_job(Context(config), "j")
    assert report.status == "ok", report.to_json()
