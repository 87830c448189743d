"""The quality stage in a real run: one job over generated data (bronze, silver, gold, with the
suites at their checkpoints and a truth snapshot made from the generator's expected state); then
the policies on that lakehouse. Clean data passes every suite; the one thing flagged is the
generator's deliberately hanging transaction (left open for weeks of log time), which warns.
Counts and ages come from the files and the generator's expected state, not from the run.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from pipelines.generate import generate
from pipelines.quality.stage import run_quality
from pipelines.quality.suites import Suites, load_suites
from pipelines.runner import Context, run_job
from pipelines.runtime.config import QualitySettings
from tests.support.quality import log_counts, records_by_position

MIN = 60_000

# The rules the generated log fails on purpose, each with why (every other rule must pass).
INTENDED = {
    # Workload.close_open_transactions(leave_open=1): one transaction stays open to the end of the
    # log, weeks of log time after it began (a hanging transaction for analysts to find)
    ("gold.pending_transactions", "transaction_resolved_within_max_age"),
}


@pytest.fixture(scope="module")
def lakehouse(spark, tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("quality")
    gen = base / "gen"
    # two segment files: few Spark tasks. Seed 34: the transaction the generator leaves open starts
    # ~8 days of log time before the end (on seed 33 it now starts 5 minutes before the end, since
    # the share/streams writes changed the draws, and the rule no longer fires)
    generate(gen, 1200, seed=34, partitions=2)
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
  gen: {{kind: segments, cluster: gen, paths: ["{gen}"], offsets_partitions: 2}}
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
    assert set(out) >= INTENDED
    for key, o in out.items():
        if key in INTENDED:
            assert o.evaluated and not o.success, (key, "the generator fails this rule on purpose")
            continue
        assert o.evaluated and o.success, (key, o)
    hanging = ("gold.pending_transactions", "transaction_resolved_within_max_age")

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
        assert out[(suite, "offsets_partition_matches_group")].element_count > 0  # judged: N = 2 is known

    # gaps: offsets missing inside each partition's range, counted from the files
    by_partition = defaultdict(set)
    for cluster, part, offset in gen_records:
        by_partition[(cluster, part)].add(offset)
    gaps = sum(max(s) - min(s) + 1 - len(s) for s in by_partition.values())
    assert out[("bronze.offsets_records", "offset_gaps")].observed_value == gaps
    assert out[("bronze.offsets_records", "position_unique")].element_count == len(gen_records)
    truth = out[("gold.truth_snapshot", "live_offsets_agree_with_truth")]
    assert truth.element_count == len(state["offsets"])
    check_new_suites_saw_the_log(out, gen_records, state)

    # results persisted, one row per expectation, and the run's Data Docs
    spark = ctx.spark
    rows = spark.read.format("delta").load(ctx.tables.path("quality", "results"))
    assert rows.where(f"run_id = '{report.run_id}'").count() == len(out)
    index = Path(ctx.root) / "quality" / "data_docs" / report.run_id / "index.html"
    assert index.exists() and (index.parent.parent / "latest").resolve() == index.parent.resolve()
    assert "gold.truth_snapshot" in index.read_text()


def check_new_suites_saw_the_log(out: dict, records: dict[tuple[str, int, int], dict], state: dict) -> None:
    """What the suites of silver's and gold's other tables judged, counted from the files and the
    expected state: each passed on the rows it should have seen, not on an empty table."""
    log = log_counts(records)
    assert out[("silver.group_members", "members_match_their_record")].element_count == log.member_rows
    assert out[("silver.tombstones", "tombstone_names_its_key")].element_count == log.tombstones
    assert out[("silver.tombstones", "offsets_partition_matches_group")].element_count == log.tombstones
    assert out[("silver.version_inventory", "census_counts_every_bronze_record")].element_count == len(log.census)
    assert out[("gold.group_generations", "generations_chain")].element_count == log.generations
    members = sum(len(g["members"]) for g in state["consumer_groups"])
    assert out[("gold.consumer_group_members", "member_in_live_consumer_group")].element_count == members
    live = out[("gold.current_groups", "one_live_row_per_group_id")]
    assert live.element_count - live.details["missing_count"] == len(state["groups"])  # judged: live rows
    assert out[("gold.partition_progress", "applied_within_silver")].element_count == len(log.partitions)
    assert out[("silver.topic_ids", "topic_id_is_a_uuid")].element_count > 0
    # every live key has one open interval; the log commits each many times
    assert out[("gold.offset_history", "intervals_chain")].element_count > 2 * len(state["offsets"])
    assert min(log.member_rows, log.tombstones, log.generations, members, len(state["groups"])) > 0


def test_unchanged_tables_are_not_validated_again(lakehouse) -> None:
    """A run whose suites would read exactly what an earlier run validated (same versions of the
    tables they read, expectations and settings) reports that run's outcomes instead of validating
    again (a no-op run costs no validation); a changed table they read, or another policy, is
    validated again."""
    from pipelines.runtime import lake

    ctx, _, _, _ = lakehouse
    spark, tables = ctx.spark, ctx.tables
    rules = Suites({"silver.group_metadata": load_suites()["silver.group_metadata"]})
    results = tables.path("quality", "results")
    first = run_quality(spark, tables, "memo-1", QualitySettings(), layers=("silver",), suites=rules)
    assert any(o.evaluated for o in first.outcomes) and not first.notes
    version = lake.version(spark, results)
    again = run_quality(spark, tables, "memo-2", QualitySettings(), layers=("silver",), suites=rules)
    assert again.notes == ["nothing changed since quality run memo-1 validated these tables: its outcomes stand"]
    key = ("suite", "expectation", "action", "unexpected_count", "element_count")
    assert [tuple(getattr(o, k) for k in key) for o in again.outcomes] == [
        tuple(getattr(o, k) for k in key) for o in first.outcomes
    ]
    assert lake.version(spark, results) == version, "a skipped validation writes no results"
    # a table no suite of these reads (gold's, as a run's gold stage commits after its silver
    # checkpoint) changed: still nothing to validate
    gold = tables.path("gold", "current_offsets")
    spark.sql(f"ALTER TABLE delta.`{gold}` SET TBLPROPERTIES ('offsets_lakehouse.test' = 'touched')")
    after_gold = run_quality(spark, tables, "memo-2b", QualitySettings(), layers=("silver",), suites=rules)
    assert after_gold.notes == again.notes and lake.version(spark, results) == version
    warn = run_quality(spark, tables, "memo-3", QualitySettings(policy="warn"), layers=("silver",), suites=rules)
    assert not warn.notes and lake.version(spark, results) == version + 1
    # a table the suites read changed (one more commit, even without new rows): validated again
    path = tables.path("silver", "group_metadata")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('offsets_lakehouse.test' = 'touched')")
    changed = run_quality(spark, tables, "memo-4", QualitySettings(policy="warn"), layers=("silver",), suites=rules)
    assert not changed.notes and lake.version(spark, results) == version + 2


def test_policies_warn_fail_and_quarantine(lakehouse) -> None:
    ctx, _, _, _ = lakehouse
    spark, tables = ctx.spark, ctx.tables
    commits = tables.path("silver", "offset_commits")
    bronze = tables.path("bronze", "offsets_records")
    quarantine = tables.path("silver", "quarantine")
    victim = spark.sql(
        f"SELECT offsets_partition, record_offset FROM delta.`{commits}` WHERE cluster = 'gen' "
        "ORDER BY offsets_partition, record_offset LIMIT 3"
    ).collect()
    (p1, o1), (p2, o2), (p3, o3) = (tuple(r) for r in victim)
    where = "WHERE cluster = 'gen' AND offsets_partition = {} AND record_offset = {}"
    spark.sql(f"UPDATE delta.`{commits}` SET committed_offset = -5 {where.format(p1, o1)}")
    spark.sql(
        f"UPDATE delta.`{commits}` SET commit_timestamp = unix_millis(current_timestamp()) + 3600000 "
        + where.format(p2, o2)
    )
    # a bronze key blanked by hand: the silver row that decoded from it is a bronze rule's offender
    spark.sql(f"UPDATE delta.`{bronze}` SET key = NULL WHERE cluster = 'gen' AND partition = {p3} AND offset = {o3}")
    suites = load_suites()
    commit_rules = Suites({"silver.offset_commits": suites["silver.offset_commits"]})
    negative = "silver.offset_commits.committed_offset_at_least_minus_one"
    future = "silver.offset_commits.commit_timestamp_not_in_future"
    no_key = "bronze.offsets_records.key_on_data_records"

    # warn: reported, nothing moves; fail: the run fails (the runner then stops there with
    # quality_failed, exit code 3: tests/unit/test_quality_runner.py); both in the results table
    settings = QualitySettings(overrides={negative: "warn"})
    run = run_quality(spark, tables, "policy-warn-fail", settings, layers=("silver",), suites=commit_rules)
    got = {(o.expectation, o.unexpected_count, o.action) for o in run.outcomes if o.evaluated and not o.success}
    assert got == {
        ("committed_offset_at_least_minus_one", 1, "warned"),
        ("commit_timestamp_not_in_future", 1, "failed"),
    }
    assert run.failed and run.to_json()["failed"] == [future] and run.quarantined == 0
    rows = spark.read.format("delta").load(tables.path("quality", "results")).where("run_id = 'policy-warn-fail'")
    assert {(r["expectation"], r["action"]) for r in rows.collect() if r["evaluated"] and not r["success"]} == {
        ("committed_offset_at_least_minus_one", "warned"),
        ("commit_timestamp_not_in_future", "failed"),
    }

    # quarantine, by a silver rule and by a bronze rule (bronze is not rewritten: the record's
    # silver row moves), in one move; the future timestamp only warns this time
    settings = QualitySettings(overrides={negative: "quarantine", no_key: "quarantine", future: "warn"})
    both = Suites({**commit_rules.suites, "bronze.offsets_records": suites["bronze.offsets_records"]})
    run = run_quality(spark, tables, "policy-quarantine", settings, layers=("bronze", "silver"), suites=both)
    got = {(o.expectation, o.quarantined_rows, o.action) for o in run.outcomes if o.evaluated and not o.success}
    assert got == {
        ("committed_offset_at_least_minus_one", 1, "quarantined"),
        ("key_on_data_records", 1, "quarantined"),
        ("commit_timestamp_not_in_future", None, "warned"),
    }
    assert run.quarantined == 2 and not run.failed
    moved = spark.sql(
        f"SELECT q.offsets_partition, q.record_offset, q.reason, q.raw_key <=> b.key, q.raw_value <=> b.value "
        f"FROM delta.`{quarantine}` q JOIN delta.`{bronze}` b ON b.cluster = q.cluster "
        f"AND b.partition = q.offsets_partition AND b.offset = q.record_offset WHERE q.cluster = 'gen'"
    ).collect()
    assert sorted(tuple(r) for r in moved) == sorted(
        [(p1, o1, f"quality:{negative}", True, True), (p3, o3, f"quality:{no_key}", True, True)]
    )
    left = spark.sql(
        f"SELECT count(*) FROM delta.`{commits}` {where.format(p1, o1)} OR ({where.format(p3, o3)[6:]})"
    ).collect()[0][0]
    assert left == 0

    # redecode (after an upgrade) leaves them: they decode fine, a rule put them there
    from pipelines.silver.redecode import redecode_quarantine

    assert redecode_quarantine(spark, tables, "redecode").released == 0
    assert spark.sql(f"SELECT count(*) FROM delta.`{quarantine}` WHERE cluster = 'gen'").collect()[0][0] == 2

    # nothing lost: silver still reconciles with bronze, quarantine keeps the bytes
    recon = Suites(
        {"gold.reconciliation": suites["gold.reconciliation"], "silver.quarantine": suites["silver.quarantine"]}
    )
    after = run_quality(spark, tables, "policy-recon", QualitySettings(), layers=("silver", "gold"), suites=recon)
    assert all(x.success for x in after.outcomes), [(x.expectation, x.unexpected_count) for x in after.outcomes]
