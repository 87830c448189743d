"""Quality beside other jobs on one lakehouse (docs/operations.md, "Several jobs on one
lakehouse"): found with the long tier's rounds (tests/long/test_store_rounds.py), where a quality
run of the whole lakehouse runs while two clusters' jobs write it. Here each cause on its own,
deterministically:

* another job's bronze stage appended rows that silver has not decoded yet: the rules that hold
  silver to bronze read bronze as silver's watermark saw it, so they pass — and still catch a
  record silver really lost;
* a gold (or silver) stage is under way: its tables are half-written across tables (Delta
  isolates each table, not the set), so quality waits for that stage's lock — shown with no wait
  allowed, where it is refused naming the stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.errors import StageBusy
from pipelines.generate import generate
from pipelines.runner import Context, quality_job, run_job
from pipelines.runtime.lock import stage_lock
from tests.support.jvm import SHORT_RUN_YAML

pytestmark = pytest.mark.spark

HELD_TO_BRONZE = [
    ("silver.version_inventory", "census_counts_every_bronze_record"),
    ("gold.reconciliation", "silver_records_equal_bronze_records"),
]


def jobs_yaml(base: Path, wait_minutes: float = 60) -> Path:
    sources = "\n".join(
        f"  {c}: {{kind: segments, cluster: {c}, paths: [{base / c}], offsets_partitions: 3}}" for c in "ab"
    )
    path = base / f"jobs-{wait_minutes}.yaml"
    path.write_text(f"""
lakehouse: {{root: {base / "lakehouse"}, stage_wait_minutes: {wait_minutes}}}
spark:
  master: local[2]
  conf: {{spark.sql.shuffle.partitions: "2", spark.ui.enabled: "false", {SHORT_RUN_YAML}}}
sources:
{sources}
jobs:
  job-a: {{sources: [a], stages: [bronze, silver, gold]}}
  job-b: {{sources: [b], stages: [bronze, silver, gold]}}
""")
    return path


@pytest.fixture(scope="module")
def lakehouse(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Cluster a through gold; then cluster b's bronze stage only, as if its job were still running."""
    base = tmp_path_factory.mktemp("beside")
    for cluster, seed in (("a", 21), ("b", 22)):
        generate(base / cluster, 800, seed=seed, partitions=3, segment_bytes=16 * 1024)
    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    ctx = Context(jobs_yaml(base))
    assert run_job(ctx, "job-a").status == "ok"
    assert run_job(ctx, "job-b", ["bronze"]).status == "ok"
    return base


def outcomes(report) -> dict:
    return {(o.suite, o.expectation): o for o in report.quality_outcomes}


def test_rows_another_job_appended_to_bronze_are_not_missing_from_silver(spark, lakehouse: Path) -> None:
    report = quality_job(Context(jobs_yaml(lakehouse)), None)
    got = outcomes(report)
    for key in HELD_TO_BRONZE:
        assert got[key].evaluated and got[key].success, (key, got[key])
    assert report.status == "ok", [k for k, o in got.items() if o.evaluated and not o.success]


def test_a_record_silver_lost_is_still_caught(spark, lakehouse: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(lakehouse, copy, symlinks=True, ignore=shutil.ignore_patterns("jobs-*.yaml"))
    commits = copy / "lakehouse" / "silver" / "offset_commits"
    spark.sql(f"DELETE FROM delta.`{commits}` WHERE cluster = 'a' AND record_offset % 50 = 0")
    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    got = outcomes(quality_job(Context(jobs_yaml(copy)), None))
    lost = got[("gold.reconciliation", "silver_records_equal_bronze_records")]
    assert lost.evaluated and lost.success is False and lost.unexpected_count == 3, lost  # a's 3 partitions


def test_quality_waits_for_a_gold_stage_under_way(spark, lakehouse: Path) -> None:
    root = str(lakehouse / "lakehouse")
    busy = pytest.raises(StageBusy, match="the gold stage of another run is already running")
    with stage_lock(root, "gold", "a-run-in-its-gold-stage"), busy:
        quality_job(Context(jobs_yaml(lakehouse, wait_minutes=0.001)), None)
