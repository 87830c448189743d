"""Incremental quality (pipelines/quality/incremental.py) on a real job: a generated log ingested in
two parts, the second run's quality validating what changed. Every outcome of an incremental run
is compared, rule by rule, with a full validation of the same tables (``quality --full``); then
rows that break a rule are appended the way a faulty writer would, once where only the new rows
carry the violation, once where only old and new rows together do (a uniqueness rule).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from bench.common import quality_differences, split_log
from pipelines.generate import generate
from pipelines.quality import incremental, results, stage
from pipelines.quality.frames import Inputs, load_frame, sources
from pipelines.quality.suites import load_suites
from pipelines.runner import Context, quality_job, run_job
from pipelines.runtime import lake

JOB = "inc"


@pytest.fixture(scope="module")
def increment(spark, tmp_path_factory: pytest.TempPathFactory):
    """The job's first run on the base, then its run on the grown log: (context, the second run's report)."""
    base = tmp_path_factory.mktemp("quality-incremental")
    generate(base / "logs", 2000, seed=7, partitions=4, segment_bytes=16 * 1024)
    split = split_log(base / "logs", base / "source", 10)
    assert split.held_back > 0
    (base / "jobs.yaml").write_text(
        f"""
lakehouse: {{root: {base / "lakehouse"}}}
gold: {{soft_delete_retention_days: null}}
sources:
  gen: {{kind: segments, cluster: gen, paths: ["{split.source}"], offsets_partitions: 4}}
jobs:
  {JOB}:
    sources: [gen]
    stages: [bronze, silver, gold, quality]
    # every verdict recorded, none stops the run: the tests break rules on purpose
    quality: {{policy: warn, incremental_min_rows: 0}}
"""
    )
    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    ctx = Context(base / "jobs.yaml")
    ctx._spark = spark
    first = run_job(ctx, JOB)
    assert first.status == "ok", first.to_json()
    split.grow()
    second = run_job(ctx, JOB)
    assert second.status == "ok", second.to_json()
    return ctx, second


def _validated(report) -> dict[str, int]:
    out: dict[str, int] = {}
    for ran in report.stages:
        if ran.stage == "quality":
            for way, n in ran.details[0]["validated"].items():
                out[way] = out.get(way, 0) + n
    return out


def _how(outcomes, suite: str) -> set[str]:
    return {(o.details.get("validated") or {}).get("how", "full") for o in outcomes if o.suite == suite}


def _equal_to_full(ctx: Context, outcomes) -> int:
    full = quality_job(ctx, JOB, full=True).quality_outcomes
    compared, differences = quality_differences(outcomes, full)
    assert not differences, differences
    return compared


def test_increment_equals_a_full_validation(increment) -> None:
    ctx, report = increment
    validated = _validated(report)
    # the increment's silver appends are validated on their rows; gold's rewritten tables in full
    assert validated.get("incremental", 0) >= 4, validated
    assert validated.get("full", 0) >= 1, validated
    for suite in ("silver.offset_commits", "silver.group_metadata", "silver.tombstones"):
        assert _how(report.quality_outcomes, suite) == {"incremental"}, suite
    rules = sum(len(s.expectations) for s in load_suites())
    assert _equal_to_full(ctx, report.quality_outcomes) == rules


def test_frames_built_by_spark_validate_an_increment_as_the_driver_s_do(increment, spark, monkeypatch) -> None:
    """The bronze and silver suites' frames built by Spark (as past quality.local_max_rows; then
    collected for GX's pandas engine, whose Spark twin test_quality_rules.py holds equal), the gold
    suites' on the driver meanwhile: an increment validated that way, its inserted rows read by
    Spark, equals a full validation, and builds on the memo of a validation on the driver."""
    ctx, _ = increment
    _quality(ctx)  # the memo, by frames built on the driver
    driver_only = stage.fits_driver
    monkeypatch.setattr(stage, "fits_driver", lambda *a: a[2].startswith("gold.") and driver_only(*a))
    path = ctx.tables.path("silver", "offset_commits")
    commits = spark.read.format("delta").load(path)
    last = commits.agg(F.max("record_offset")).first()[0]
    commits.limit(1).withColumn("record_offset", F.lit(last + 500).cast("bigint")).write.format("delta").mode(
        "append"
    ).save(path)
    spark_frames = []
    monkeypatch.setattr(stage, "load_frame", _spying(stage.load_frame, spark_frames))
    outcomes = _quality(ctx)
    assert _how(outcomes, "silver.offset_commits") == {"incremental"}
    assert "silver.offset_commits" in spark_frames and not {s for s in spark_frames if s.startswith("gold.")}
    _equal_to_full(ctx, outcomes)


def _spying(load_frame, spark_frames: list[str]):
    """``load_frame`` noting the suites whose frames Spark builds."""

    def spy(name, *args, **kwargs):
        local = kwargs.get("local", args[4] if len(args) > 4 else False)
        if not local:
            spark_frames.append(name)
        return load_frame(name, *args, **kwargs)

    return spy


def test_inserted_rows_read_on_the_driver_equal_spark_s_read(increment, spark, monkeypatch) -> None:
    """A few inserted rows are read by delta-rs and handed to Spark: the same rows, with the same
    column names and types, as Spark's own read of the change data feed (which larger changes and
    a Spark Connect session get)."""
    ctx, _ = increment
    path = ctx.tables.path("silver", "offset_commits")
    end = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").agg(F.max("version")).first()[0]
    assert end >= 1
    changes = incremental.Changes(pa.table({}), 1, True, {"silver.offset_commits": (1, end)})

    def rows(df) -> tuple[list[tuple[str, str]], list]:
        return sorted(df.dtypes), sorted(df.select(*sorted(df.columns)).collect())

    local = rows(incremental.inserted_reader(spark, ctx.tables, changes)("silver", "offset_commits"))
    arrow = incremental.inserted_reader(spark, ctx.tables, changes, local=True)("silver", "offset_commits")
    assert isinstance(arrow, pa.Table)  # for a frame built on the driver
    monkeypatch.setattr(incremental, "SMALL_TABLE_ROWS", 0)
    by_spark = rows(incremental.inserted_reader(spark, ctx.tables, changes)("silver", "offset_commits"))
    assert local[1], "no inserted rows to compare"
    assert local == by_spark == rows(lake.spark_frame(spark, arrow))


def test_group_reads_on_the_driver_equal_spark_s(increment, spark) -> None:
    """The rows of the changed groups, now and at the earlier versions, read for a frame built on
    the driver equal Spark's read of them."""
    ctx, _ = increment
    path = ctx.tables.path("bronze", "offsets_records")
    end = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").agg(F.max("version")).first()[0]
    scope = incremental.SCOPES["bronze.offsets_records"]
    groups = pa.table({"cluster": ["gen", "gen"], "partition": pa.array([1, 3], pa.int32())})
    changes = incremental.Changes(groups, 2, False, {"bronze.offsets_records": (1, end)})
    plan = incremental.Plan(incremental.INCREMENTAL, "the test", changes, scope)
    names = ("bronze.offsets_records",)
    columns = ("cluster", "partition", "offset", "source_uri", "key")
    for at in (None, {"bronze.offsets_records": 1}):
        by_spark = incremental.group_reader(spark, ctx.tables, plan, names, at)("bronze", "offsets_records")
        arrow = incremental.group_reader(spark, ctx.tables, plan, names, at, local=True)(
            "bronze", "offsets_records", columns
        )
        assert arrow.column_names == list(columns)
        expected = sorted(by_spark.select(*columns).collect())
        assert expected and {r["partition"] for r in expected} == {1, 3}
        assert sorted(lake.spark_frame(spark, arrow).collect()) == expected


def test_results_read_on_the_driver_equal_spark_s_read(increment, spark, monkeypatch) -> None:
    """quality.results read by delta-rs (files whose run id statistics rule the run out unread)
    equals Spark's read, for every run and for the latest."""
    ctx, _ = increment
    path = ctx.tables.path("quality", "results")
    runs = sorted(r.run_id for r in spark.read.format("delta").load(path).select("run_id").distinct().collect())
    assert len(runs) >= 2  # the job's two runs at least
    local = {run: results.read_results(spark, ctx.tables, run) for run in [*runs, None]}
    assert all(outcomes for _, outcomes in local.values())

    def refuse(*_args):
        raise ValueError("delta-rs refused (the test)")

    monkeypatch.setattr(results, "_rows_by_delta_rs", refuse)
    assert {run: results.read_results(spark, ctx.tables, run) for run in [*runs, None]} == local


def _quality(ctx: Context):
    report = quality_job(ctx, JOB)
    return report.quality_outcomes


def test_a_violation_only_new_rows_carry_is_caught(increment, spark) -> None:
    """A commit appended with committed offset -7: only the new row breaks the rule."""
    ctx, _ = increment
    path = ctx.tables.path("silver", "offset_commits")
    commits = spark.read.format("delta").load(path)
    last = commits.agg(F.max("record_offset")).first()[0]
    bad = (
        commits.limit(1)
        .withColumn("record_offset", F.lit(last + 1000).cast("bigint"))
        .withColumn("committed_offset", F.lit(-7).cast("bigint"))
    )
    bad.write.format("delta").mode("append").save(path)
    outcomes = _quality(ctx)
    rule = next(o for o in outcomes if o.expectation == "committed_offset_at_least_minus_one")
    assert rule.details["validated"]["how"] == "incremental", rule.details
    assert (rule.success, rule.unexpected_count, rule.action) == (False, 1, "warned")
    assert rule.element_count == commits.count()  # every commit counted, the new one included
    _equal_to_full(ctx, outcomes)


def test_a_uniqueness_violation_of_old_and_new_rows_is_caught(increment, spark) -> None:
    """A bronze row appended again at a position bronze already holds: each row alone is fine,
    the two together break position_unique (both rows are unexpected)."""
    ctx, _ = increment
    path = ctx.tables.path("bronze", "offsets_records")
    bronze = spark.read.format("delta").load(path)
    again = bronze.where(F.col("partition") == 1).orderBy("offset").limit(1)
    again.withColumn("source_uri", F.lit("file:///replayed/00000000000000000000.log")).write.format("delta").mode(
        "append"
    ).save(path)
    outcomes = _quality(ctx)
    rule = next(o for o in outcomes if o.suite == "bronze.offsets_records" and o.expectation == "position_unique")
    # one offsets partition of four changed: its rows validated as they were and as they are
    assert rule.details["validated"]["how"] == "incremental", rule.details
    assert (rule.success, rule.unexpected_count) == (False, 2)
    _equal_to_full(ctx, outcomes)


def test_sources_name_every_table_a_frame_reads(increment, spark) -> None:
    """A suite whose tables did not change keeps its outcomes: frames.SOURCES must name every
    table its frame reads (here: every read the frame makes through its reader, on Spark and on
    the driver)."""
    ctx, _ = increment
    for suite, local in ((s, local) for s in load_suites() for local in (False, True)):
        read: list[str] = []

        def reader(layer: str, table: str, columns=None, read=read, local=local):
            read.append(f"{layer}.{table}")
            path = ctx.tables.path(layer, table)
            if not _exists(ctx, layer, table):
                return None
            return lake.read_arrow(spark, path, columns) if local else spark.read.format("delta").load(path)

        load_frame(suite.frame, spark, ctx.tables, Inputs(0, {"gen": 4}), reader, local)
        assert set(read) <= set(sources(suite.frame)), (suite.name, local, read)


def _exists(ctx: Context, layer: str, table: str) -> bool:
    return Path(ctx.tables.path(layer, table), "_delta_log").is_dir()


def test_full_refresh_validates_in_full(increment) -> None:
    """After a full refresh every table is new: the checkpoint validates every suite in full."""
    ctx, _ = increment
    report = run_job(ctx, JOB, ["silver", "quality"], full_refresh=True)
    assert report.status == "ok", report.to_json()
    assert _validated(report) == {"full": len(load_suites().layer("silver"))}


def test_a_table_created_again_is_validated_in_full(increment, spark) -> None:
    """A table dropped and written again restarts its versions: when it is past the version the
    last validation saw, its change data feed from there would miss its first rows. Its new Delta
    id tells: the suites that read it are validated in full."""
    ctx, _ = increment
    _quality(ctx)  # the memo at the current versions
    path = ctx.tables.path("silver", "transaction_markers")
    rows = spark.read.format("delta").load(path).toPandas()
    old = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").agg(F.max("version")).first()[0]
    shutil.rmtree(path)
    again = spark.createDataFrame(rows)
    again.write.format("delta").option("delta.enableChangeDataFeed", "true").save(path)
    for _ in range(old + 1):  # past the version the memo holds, a marker (again) per commit
        again.limit(1).write.format("delta").mode("append").save(path)
    assert spark.sql(f"DESCRIBE HISTORY delta.`{path}`").agg(F.max("version")).first()[0] > old
    outcomes = _quality(ctx)
    # neither kept (its version is no longer the one validated) nor built on the earlier outcomes
    assert _how(outcomes, "silver.transaction_markers") == {"full"}
    _equal_to_full(ctx, outcomes)
