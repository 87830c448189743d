"""The quality stage in a real run, and the real segment files through the suites.

One job over generated data (bronze, silver, gold, with the suites at their checkpoints and a
truth snapshot made from the generator's expected state); then the policies on that lakehouse.
Clean data passes every suite; the one thing flagged is the generator's deliberately hanging
transaction (left open for weeks of log time), which warns. Counts and ages come from the files
and the generator's expected state, not from the run.

The 268 real files go through the bronze and silver suites and the reconciliation without a
Delta pipeline (the spark tier already runs them through bronze and silver in
test_silver_real.py; doing it again here would cost minutes): bronze-shaped rows read from the
files, decoded by silver's Spark decoder, split into silver's tables.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from pipelines.codec.segments import discover
from pipelines.generate import generate
from pipelines.inspect import iter_record_json
from pipelines.quality.stage import run_quality
from pipelines.quality.suites import Suites, load_suites
from pipelines.runner import Context, run_job
from pipelines.runtime.config import QualitySettings

MIN = 60_000


def records_by_position(root: Path, cluster_of) -> dict[tuple[str, int, int], dict]:
    out = {}
    for seg in discover([root]):
        for line in iter_record_json([seg]):
            out[(cluster_of(seg), seg.partition, line["offset"])] = line
    return out


@pytest.fixture(scope="module")
def lakehouse(spark, tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("quality")
    gen = base / "gen"
    generate(gen, 1200, seed=33, partitions=4, segment_bytes=24 * 1024)
    state = json.loads((gen / "expected-state.json").read_text())
    # the broker's view at the end of the generated log: the expected state, as a truth snapshot
    groups = defaultdict(list)
    for o in state["offsets"]:
        groups[o["group"]].append({"topic": o["topic"], "partition": o["partition"], "offset": o["offset"]})
    truth = {
        "cluster": "gen",
        "captured_at": "2026-11-23T00:00:00Z",
        "offsets_topic_end_offsets": {p: o + 1 for p, o in state["applied_offsets"].items()},
        "groups": [{"group_id": g, "offsets": offs} for g, offs in sorted(groups.items())],
    }
    (base / "truth.json").write_text(json.dumps(truth))
    (base / "jobs.yaml").write_text(
        f"""
lakehouse: {{root: {base / "lakehouse"}}}
sources:
  gen: {{kind: segments, cluster: gen, paths: ["{gen}"], offsets_partitions: 4}}
jobs:
  all:
    sources: [gen]
    quality: {{truth_snapshot: truth.json}}
"""
    )
    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    ctx = Context(base / "jobs.yaml")
    ctx._spark = spark
    report = run_job(ctx, "all")
    return ctx, report, gen, state


def outcomes_of(report) -> dict[tuple[str, str], object]:
    return {(o.suite, o.expectation): o for o in report.quality_outcomes}


def test_clean_generated_data_passes_every_suite(lakehouse) -> None:
    ctx, report, gen, state = lakehouse
    assert report.status == "ok", report.to_json()
    # quality ran after silver (bronze and silver suites) and after gold (gold suites)
    stages = [(s.stage, s.details[0].get("after") if s.stage == "quality" else None) for s in report.stages]
    assert stages == [("bronze", None), ("silver", None), ("quality", "silver"), ("gold", None), ("quality", "gold")]
    out = outcomes_of(report)
    assert {s for s, _ in out} == set(load_suites().suites)
    hanging = ("gold.pending_transactions", "transaction_resolved_within_max_age")
    for key, o in out.items():
        if key == hanging:
            continue
        assert o.evaluated and o.success, (key, o)

    # the hanging transaction: pending rows older than 15 minutes of their partition's log time
    gen_records = records_by_position(gen, lambda seg: "gen")
    log_now = defaultdict(int)
    for (_, part, _), line in gen_records.items():
        if line["timestamp"] is not None:
            log_now[part] = max(log_now[part], line["timestamp"])
    old = [p for p in state["pending_transactions"] if log_now[p["offsets_partition"]] - p["timestamp"] > 15 * MIN]
    assert old, "the generator leaves one transaction open"
    o = out[hanging]
    assert (o.success, o.unexpected_count, o.action) == (False, len(old), "warned")
    assert o.element_count == len(state["pending_transactions"])

    for suite in ("silver.offset_commits", "silver.group_metadata"):
        assert out[(suite, "offsets_partition_matches_group")].element_count > 0  # judged: N = 4 is known

    # gaps: offsets missing inside each partition's range, counted from the files
    by_partition = defaultdict(set)
    for cluster, part, offset in gen_records:
        by_partition[(cluster, part)].add(offset)
    gaps = sum(max(s) - min(s) + 1 - len(s) for s in by_partition.values())
    assert out[("bronze.offsets_records", "offset_gaps")].observed_value == gaps
    assert out[("bronze.offsets_records", "position_unique")].element_count == len(gen_records)
    truth = out[("gold.truth_snapshot", "live_offsets_agree_with_truth")]
    assert truth.element_count == len(state["offsets"])

    # results persisted, one row per expectation, and the run's Data Docs
    spark = ctx.spark
    rows = spark.read.format("delta").load(ctx.tables.path("quality", "results"))
    assert rows.where(f"run_id = '{report.run_id}'").count() == len(out)
    index = Path(ctx.root) / "quality" / "data_docs" / report.run_id / "index.html"
    assert index.exists() and (index.parent.parent / "latest").resolve() == index.parent.resolve()
    assert "gold.truth_snapshot" in index.read_text()


def test_policies_quarantine_warn_and_fail(lakehouse) -> None:
    ctx, _, _, _ = lakehouse
    spark, tables = ctx.spark, ctx.tables
    commits = tables.path("silver", "offset_commits")
    victim = spark.sql(
        f"SELECT offsets_partition, record_offset FROM delta.`{commits}` WHERE cluster = 'gen' "
        "ORDER BY offsets_partition, record_offset LIMIT 2"
    ).collect()
    (p1, o1), (p2, o2) = (tuple(r) for r in victim)
    spark.sql(
        f"UPDATE delta.`{commits}` SET committed_offset = -5 WHERE cluster = 'gen' AND record_offset = {o1} "
        f"AND offsets_partition = {p1}"
    )
    suites = load_suites()
    only = Suites({"silver.offset_commits": suites["silver.offset_commits"]})
    rule = "silver.offset_commits.committed_offset_at_least_minus_one"

    # warn: reported, nothing moves, the run goes on
    warn = run_quality(spark, tables, "policy-warn", QualitySettings(policy="warn"), layers=("silver",), suites=only)
    o = {x.expectation: x for x in warn.outcomes}["committed_offset_at_least_minus_one"]
    assert (o.success, o.unexpected_count, o.action, warn.failed) == (False, 1, "warned", False)

    # quarantine: the record moves to silver.quarantine with bronze's bytes; reconciliation holds
    settings = QualitySettings(overrides={rule: "quarantine"})
    q = run_quality(spark, tables, "policy-quarantine", settings, layers=("silver",), suites=only)
    o = {x.expectation: x for x in q.outcomes}["committed_offset_at_least_minus_one"]
    assert (o.action, o.quarantined_rows, q.quarantined, q.failed) == ("quarantined", 1, 1, False)
    quarantine = tables.path("silver", "quarantine")
    moved = spark.sql(
        f"SELECT q.reason, q.raw_key = b.key AS k, q.raw_value = b.value AS v FROM delta.`{quarantine}` q "
        f"JOIN delta.`{tables.path('bronze', 'offsets_records')}` b ON b.cluster = q.cluster "
        f"AND b.partition = q.offsets_partition AND b.offset = q.record_offset WHERE q.cluster = 'gen'"
    ).collect()
    assert [tuple(r) for r in moved] == [(f"quality:{rule}", True, True)]
    left = spark.sql(f"SELECT count(*) FROM delta.`{commits}` WHERE committed_offset < -1").collect()[0][0]
    assert left == 0
    recon = Suites(
        {"gold.reconciliation": suites["gold.reconciliation"], "silver.quarantine": suites["silver.quarantine"]}
    )
    after = run_quality(spark, tables, "policy-recon", QualitySettings(), layers=("silver", "gold"), suites=recon)
    assert all(x.success for x in after.outcomes), [(x.expectation, x.unexpected_count) for x in after.outcomes]

    # fail: the rule fails the run (the runner stops there with quality_failed, exit code 3:
    # tests/unit/test_quality_runner.py); its result row says so
    spark.sql(
        f"UPDATE delta.`{commits}` SET commit_timestamp = unix_millis(current_timestamp()) + 3600000 "
        f"WHERE cluster = 'gen' AND record_offset = {o2} AND offsets_partition = {p2}"
    )
    failed = run_quality(spark, tables, "policy-fail", QualitySettings(), layers=("silver",), suites=only)
    assert failed.failed and failed.to_json()["failed"] == ["silver.offset_commits.commit_timestamp_not_in_future"]
    rows = spark.read.format("delta").load(tables.path("quality", "results")).where("run_id = 'policy-fail'")
    assert {(r["expectation"], r["action"]) for r in rows.collect() if r["evaluated"] and not r["success"]} == {
        ("commit_timestamp_not_in_future", "failed")
    }
