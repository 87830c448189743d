"""Skew and cardinality, small (issue 31; the full size is bench/skew_bench.py in the long tier).

A skewed generated log — one offsets partition with at least 80 % of the records and 30,000 live
keys, one classic group of 500 members whose GroupMetadata assigns 10,000 partitions — goes
through bronze, silver and gold the way a scheduler runs it (the runner, the repository's Spark
settings over the tier's session), first without its last 15 % and then with it (an incremental
run). Gold replays the hot partition in buckets (pipelines/gold/buckets.py; the bucket size is
lowered here so that 50,000 records make several) in both runs, the second resuming each bucket's
rows from what the first run's buckets wrote, and must end equal to the generator's expected state:
the first run in one task that reads the partition once for all its buckets, the second in a task
per bucket (as a partition over ``buckets.READ_ONCE_ROWS`` is replayed).
Silver must hold every member and assignment of the big group's records, and gold's current
members view the group's last record. The benchmark's memory sampler runs beside it (its numbers
are not judged here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.common import gold_differences, split_log
from bench.pipeline_bench import JOB, write_jobs
from bench.skew_bench import Sampler, describe_log
from pipelines.generate import Skew, generate

pytestmark = pytest.mark.spark

HOT = 3
SKEW = Skew(partition=HOT, keys=30_000, members=500, assigned=10_000)


@pytest.fixture()
def session_conf_restored(spark):
    """jobs.yaml's settings land on the shared session: put it back as it was."""
    before = dict(spark.conf.getAll)
    yield spark
    for key, value in spark.conf.getAll.items():
        if before.get(key) != value and spark.conf.isModifiable(key):
            if key in before:
                spark.conf.set(key, before[key])
            else:
                spark.conf.unset(key)


def test_skewed_log_through_gold(session_conf_restored, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.gold import buckets
    from pipelines.runner import Context, run_job

    logs = tmp_path / "logs"
    generate(logs, 50_000, seed=4, partitions=4, segment_bytes=1024 * 1024, skew=SKEW)
    facts = describe_log(logs, HOT)
    assert facts["hot_share"] >= 0.8 and facts["hot_live_keys"] >= SKEW.keys, facts
    assert facts["largest_classic_group"]["members"] == 500, facts
    assert facts["largest_classic_group"]["assigned_partitions"] == 10_000, facts

    monkeypatch.setattr(buckets, "ROWS_PER_BUCKET", 10_000)  # the driver plans the buckets
    split = split_log(logs, tmp_path / "source", 15)
    write_jobs(tmp_path / "jobs.yaml", tmp_path / "lakehouse", split.source, ["bronze", "silver", "gold"],
               {"spark.sql.shuffle.partitions": "2"})  # fmt: skip
    ctx = Context(tmp_path / "jobs.yaml")
    spark = ctx.spark
    sampler = Sampler(spark, interval=0.5)
    bucketed = []
    with sampler.running():
        for run in ("initial", "increment"):
            if run == "increment":
                split.grow()
                monkeypatch.setattr(buckets, "READ_ONCE_ROWS", 0)  # a task per bucket
            report = run_job(ctx, JOB, stages=["bronze", "silver", "gold"])
            assert report.status == "ok", json.dumps(report.to_json(), default=str)
            [gold] = [d for s in report.stages if s.stage == "gold" for d in s.details]
            bucketed.append(gold["bucketed"])
            assert gold["partitions_incremental" if run == "increment" else "partitions_recomputed"] >= 1
        peaks = sampler.take()
    assert all(s.get(f"bench/{HOT}", 0) >= 3 for s in bucketed), bucketed  # both runs replay it in buckets
    assert peaks["driver_rss"] > 0 and peaks["jvm_rss"] > 0 and peaks["heap_used"] > 0, peaks

    assert gold_differences(spark, ctx.tables, logs / "expected-state.json") == []

    # silver: every member of every record of the big group, with its assignment
    big = facts["largest_classic_group"]["group"]
    members = spark.read.format("delta").load(ctx.tables.path("silver", "group_members")).where(f"group_id = '{big}'")
    per_record = {
        r["record_offset"]: (r["members"], r["assigned"])
        for r in members.groupBy("record_offset")
        .agg({"member_id": "count", "assigned_partitions": "collect_list"})
        .withColumnRenamed("count(member_id)", "members")
        .selectExpr("record_offset", "members", "aggregate(flatten(transform(`collect_list(assigned_partitions)`, "
                    "x -> transform(x, a -> size(a.partitions)))), 0, (s, n) -> s + n) AS assigned")
        .collect()
    }  # fmt: skip
    assert len(per_record) == 3 and set(per_record.values()) == {(500, 10_000)}, per_record
    ctx.tables.register_existing(["gold"])  # the view by name (a job registers nothing)
    current = spark.sql(
        f"SELECT count(*) AS members, sum(aggregate(assigned_partitions, 0, (s, a) -> s + size(a.partitions))) AS "
        f"assigned, count(DISTINCT member_id) AS ids FROM gold.current_group_members WHERE group_id = '{big}'"
    ).collect()[0]
    assert (current["members"], current["assigned"], current["ids"]) == (500, 10_000, 500)
