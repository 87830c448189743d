"""Every expectation of every suite catches data that violates it, with the right counts.

Tiny DataFrames built by hand go through the suites' frame builders and Great Expectations
(one GX validation per suite, several violations each). Expected counts are worked out from the
rows below, not taken from a run; group placements are Java's String.hashCode by hand
("g" = 103, "a" = 97, "b" = 98, ...).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

import pytest

from pipelines.quality import frames
from pipelines.quality.stage import evaluate_suite, params_of
from pipelines.quality.suites import load_suites
from pipelines.runtime.config import QualitySettings
from pipelines.truth import TruthSnapshot

NOW = 1_700_000_000_000
MIN = 60_000
PARAMS = params_of(QualitySettings())  # skew 10 min, pending 15 min


@pytest.fixture(scope="module")
def suites():
    return load_suites()


def run(suites, name: str, frame, **kw):
    outcomes, to_q = evaluate_suite(suites[name], frame, PARAMS, "rules-test", **kw)
    return {o.expectation: o for o in outcomes}, to_q


def counts(outcomes) -> dict[str, tuple[bool | None, int | None]]:
    return {n: (o.success, o.unexpected_count) for n, o in outcomes.items()}


def ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


def test_bronze_rules(spark, suites) -> None:
    schema = (
        "cluster string, partition int, offset bigint, source_uri string, batch_position bigint, "
        "control boolean, key binary"
    )
    k = b"\x00\x01"
    rows = [
        ("c1", 0, 0, "f0", 0, False, k),
        ("c1", 0, 1, "f0", 10, False, k),
        ("c1", 0, 2, "f0", 20, False, k),
        ("c1", 0, 2, "f1", 0, False, k),  # the position of the row above, again
        ("c1", 0, 6, "f0", 30, False, None),  # a data record without key; offsets 3-5 missing
        ("c1", 0, 5, "f0", 40, True, None),  # control record (no key: fine) after offset 6 in the file
        ("c1", 1, 10, "f2", 0, False, k),
        ("c1", 1, None, "f2", 10, False, k),  # no offset
        (None, 1, 11, "f2", 20, False, k),  # no cluster
        ("c1", None, 12, "f3", 0, False, k),  # no partition
    ]
    frame = frames.Frame(frames.bronze_offsets_records(spark.createDataFrame(rows, schema)))
    out, _ = run(suites, "bronze.offsets_records", frame)
    assert counts(out) == {
        "cluster_not_null": (False, 1),
        "partition_not_null": (False, 1),
        "offset_not_null": (False, 1),
        "position_unique": (False, 2),
        "key_on_data_records": (False, 1),
        "offsets_increasing_in_file": (False, 1),
        "offset_gaps": (True, None),
    }
    # (c1, 0) by offset: 0 1 2 2 5 6 -> offsets 3 and 4 missing; (c1, 1): 10 and a row without
    # offset; (null, 1): 11; (c1, null): 12 -> none
    assert out["offset_gaps"].observed_value == 2
    assert out["key_on_data_records"].element_count == 10


def test_silver_offset_commits_rules(spark, suites) -> None:
    schema = (
        "cluster string, offsets_partition int, record_offset bigint, group_id string, "
        "committed_offset bigint, commit_timestamp bigint"
    )
    ok = NOW - 5 * MIN
    rows = [
        ("c1", 3, 0, "g", 5, ok),  # "g" -> 103 % 50 = 3
        ("c1", 3, 1, "g", -2, ok),  # offset below -1
        ("c1", 3, 2, "g", -1, ok),  # -1 is Kafka's "no offset": fine
        ("c1", 47, 3, "a", 0, ok),  # "a" -> 97 % 50 = 47
        ("c1", 5, 4, "g", 7, ok),  # wrong offsets partition
        ("c1", 0, 5, "", 7, ok),  # empty group id: valid for commits ("" hashes to 0)
        ("c1", 3, 6, "g", 8, NOW + 11 * MIN),  # 11 minutes ahead of the clock: beyond the 10 allowed
        ("c1", 3, 7, "g", 9, NOW + 9 * MIN),  # within the skew
        ("c2", 9, 0, "g", 1, ok),  # c2's partition count is unknown
        ("c1", 3, 8, None, 1, ok),  # no group id
    ]
    commits = spark.createDataFrame(rows, schema)
    frame = frames.silver_offset_commits(commits, {"c1": 50, "c2": None}, NOW)
    out, _ = run(suites, "silver.offset_commits", frame)
    assert counts(out) == {
        "committed_offset_at_least_minus_one": (False, 1),
        "group_id_not_null": (False, 1),
        "commit_timestamp_not_in_future": (False, 1),
        "offsets_partition_matches_group": (False, 1),
    }
    rule = out["offsets_partition_matches_group"]
    assert rule.details["notes"] == {"evaluated_clusters": ["c1"], "not_evaluated_clusters": ["c2"]}
    assert rule.details["missing_count"] == 2  # not judged: the c2 row, and the row without group

    groups = spark.createDataFrame(
        [
            ("c1", 3, 0, "g", 1),
            ("c1", 0, 1, "", 0),  # an empty group id in a group record
            ("c1", 4, 2, "g", 2),  # wrong offsets partition
            ("c1", 3, 3, "g", -1),  # negative generation
        ],
        "cluster string, offsets_partition int, record_offset bigint, group_id string, generation int",
    )
    out, _ = run(suites, "silver.group_metadata", frames.with_partition_rule(groups, {"c1": 50}))
    assert counts(out) == {
        "group_id_not_empty": (False, 1),
        "generation_not_negative": (False, 1),
        "offsets_partition_matches_group": (False, 1),
    }

    # no count known at all: reported as not evaluated, never as passed (GX is not even asked)
    frame = frames.silver_offset_commits(commits, {}, NOW)
    suite = suites["silver.offset_commits"]
    only = dataclasses.replace(suite, expectations=(suite.expectation("offsets_partition_matches_group"),))
    outcomes, _ = evaluate_suite(only, frame, PARAMS, "rules-test")
    assert [(o.evaluated, o.success, o.action) for o in outcomes] == [(False, None, "not_evaluated")]
    assert "offsets_partitions unknown" in outcomes[0].details["reason"]


def test_silver_markers_and_quarantine_rules(spark, suites) -> None:
    markers = spark.createDataFrame(
        [
            ("c1", 0, 10, "COMMIT", 7, 0),
            ("c1", 0, 11, "ABORT", 7, 3),
            ("c1", 0, 12, "LEADER_CHANGE", 7, 0),
            ("c1", 0, 13, "COMMIT", -1, 0),
            ("c1", 0, 14, "COMMIT", 8, -1),
        ],
        "cluster string, offsets_partition int, record_offset bigint, control_type string, producer_id bigint, "
        "coordinator_epoch int",
    )
    out, _ = run(suites, "silver.transaction_markers", frames.Frame(markers))
    assert counts(out) == {
        "control_type_commit_or_abort": (False, 1),
        "marker_has_producer": (False, 1),
        "coordinator_epoch_not_negative": (False, 1),
    }

    bronze = spark.createDataFrame(
        [("c1", 0, i, bytes([0, 1, i]), bytes([0, 3, i])) for i in range(4)],
        "cluster string, partition int, offset bigint, key binary, value binary",
    )
    quarantine = spark.createDataFrame(
        [
            ("c1", 0, 1, "invalid_varint", bytes([0, 1, 1]), bytes([0, 3, 1])),  # undecodable, bytes kept
            ("c1", 0, 2, "quality:x.y", bytes([9]), bytes([0, 3, 2])),  # moved by a rule, key bytes lost
        ],
        "cluster string, offsets_partition int, record_offset bigint, reason string, raw_key binary, raw_value binary",
    )
    out, _ = run(suites, "silver.quarantine", frames.Frame(frames.silver_quarantine(bronze, quarantine)))
    assert counts(out) == {"undecodable_rate_zero": (False, 1), "quarantine_keeps_raw_bytes": (False, 1)}
    assert out["undecodable_rate_zero"].unexpected_percent == 25.0  # 1 of 4 records
    assert out["undecodable_rate_zero"].action == "warned"  # the suite's default for this rule


def test_gold_rules(spark, suites) -> None:
    offsets = spark.createDataFrame(
        [
            ("c1", 0, "g", "t", 0, 5, 100, False),
            ("c1", 0, "g", "t", 0, 6, 101, False),  # the same key twice
            ("c1", 0, "g", "t", 1, 5, None, False),  # live without a source position
            ("c1", 0, "g", "t", 2, 5, None, True),  # soft-deleted: no position by design
        ],
        "cluster string, offsets_partition int, group_id string, topic string, partition int, "
        "committed_offset bigint, record_offset bigint, deleted boolean",
    )
    out, _ = run(suites, "gold.current_offsets", frames.Frame(frames.gold_current_offsets(offsets)))
    assert counts(out) == {"key_unique": (False, 2), "live_row_has_source_position": (False, 1)}
    assert all(o.action == "failed" for o in out.values())

    bronze = spark.createDataFrame(
        [("c1", 0, ts(NOW)), ("c1", 0, ts(NOW - 60 * MIN)), ("c1", 1, ts(NOW - 100 * MIN))],
        "cluster string, partition int, timestamp timestamp",
    )
    pending = spark.createDataFrame(
        [
            ("c1", 0, 7, "g", "t", 0, 10, NOW - 20 * MIN),  # 20 min old in log time: hanging
            ("c1", 0, 7, "g", "t", 0, 11, NOW - 5 * MIN),  # same key again; 5 min: fine
            ("c1", 1, 8, "g", "t", 1, None, NOW - 110 * MIN),  # 10 min behind partition 1's clock; no position
        ],
        "cluster string, offsets_partition int, producer_id bigint, group_id string, topic string, partition int, "
        "record_offset bigint, record_timestamp bigint",
    )
    out, _ = run(suites, "gold.pending_transactions", frames.Frame(frames.gold_pending_transactions(pending, bronze)))
    assert counts(out) == {
        "key_unique": (False, 2),
        "pending_has_source_position": (False, 1),
        "transaction_resolved_within_max_age": (False, 1),
    }
    assert out["transaction_resolved_within_max_age"].action == "warned"


def test_lag_rules(spark, suites) -> None:
    current = spark.createDataFrame(
        [
            ("c1", "g", "t", 0, 5, 9, 4),  # fine
            ("c1", "g", "t", 0, 5, 9, 4),  # the same key twice
            ("c1", "g", "t", 1, 5, 9, 3),  # not end - committed
            ("c1", "g", "t", 2, 5, None, 0),  # end unknown but lag zero: must be null
            ("c1", "g", "t", 3, 5, 9, None),  # end known, lag missing
            ("c1", "g", "t", 4, 5, 2, -3),  # observation older than the commit: kept, warns
            ("c1", "g", "t", 5, 5, None, None),  # unknown: fine
        ],
        "cluster string, group_id string, topic string, partition int, committed_offset bigint, "
        "end_offset bigint, lag bigint",
    )
    out, _ = run(suites, "gold.current_lag", frames.Frame(frames.gold_lag(current)))
    assert counts(out) == {
        "key_unique": (False, 2),
        "lag_is_end_minus_committed": (False, 3),
        "lag_null_iff_end_offset_unknown": (False, 2),
        "lag_not_negative": (False, 1),
    }
    assert out["lag_not_negative"].action == "warned" and out["key_unique"].action == "failed"
    at = ts(NOW)
    history = spark.createDataFrame(
        [
            ("c1", "g", "t", 0, at, 9, 5, 4),  # fine
            ("c1", "g", "t", 0, at, 9, 5, 4),  # the same observation and group twice
            ("c1", "g", "t", 1, at, 9, None, None),  # no offset then: fine
            ("c1", "g", "t", 2, at, 9, None, 9),  # no offset then, yet a lag
            ("c1", "g", "t", 3, at, None, 5, None),  # an observation without end offset
        ],
        "cluster string, group_id string, topic string, partition int, observed_at timestamp, "
        "end_offset bigint, committed_offset bigint, lag bigint",
    )
    out, _ = run(suites, "gold.lag_history", frames.Frame(frames.gold_lag(history)))
    assert counts(out) == {
        "key_unique": (False, 2),
        "end_offset_known": (False, 1),
        "lag_is_end_minus_committed": (False, 1),
        "lag_not_negative": (True, 0),
    }


def test_reconciliation_and_truth_rules(spark, suites) -> None:
    bronze = spark.createDataFrame(
        [("c1", 0, i) for i in range(3)] + [("c1", 1, i) for i in range(2)],
        "cluster string, partition int, offset bigint",
    )
    key = "cluster string, offsets_partition int, record_offset bigint"
    silver = [
        spark.createDataFrame([("c1", 0, 0), ("c1", 0, 1), ("c1", 1, 0)], key),  # e.g. offset_commits
        spark.createDataFrame([("c1", 0, 2), ("c2", 0, 0)], key),  # e.g. quarantine
    ]
    frame = frames.Frame(frames.gold_reconciliation(bronze, silver))
    out, _ = run(suites, "gold.reconciliation", frame)
    # (c1, 0): 3 = 3; (c1, 1): 1 of 2 records in silver; (c2, 0): a silver record bronze lacks
    assert counts(out) == {"silver_records_equal_bronze_records": (False, 2)}
    assert out["silver_records_equal_bronze_records"].element_count == 3

    # 2 offsets partitions: "b" 98, "d" 100, "f" 102, "h" 104 -> 0; "a" 97 -> 1
    truth = TruthSnapshot(
        cluster="c1",
        captured_at="2026-11-23T00:00:00Z",
        offsets_topic_end_offsets={0: 100, 1: 50},
        groups=[
            {"group_id": g, "offsets": [{"topic": "t", "partition": 0, "offset": o}]}
            for g, o in (("b", 10), ("d", 20), ("h", 7), ("a", 5))
        ]
        + [{"group_id": "gone", "exists": False}],
    )
    live = spark.createDataFrame(
        [
            ("c1", 0, "b", "t", 0, 10, False),  # agrees
            ("c1", 0, "d", "t", 0, 21, False),  # differs
            ("c1", 0, "f", "t", 0, 3, False),  # not in the truth
            ("c1", 0, "x", "t", 0, 3, True),  # soft-deleted: not live, not compared
            ("c1", 1, "a", "t", 0, 999, False),  # gold is past the snapshot in partition 1: not compared
            ("c2", 0, "b", "t", 0, 1, False),  # another cluster
        ],
        "cluster string, offsets_partition int, group_id string, topic string, partition int, "
        "committed_offset bigint, deleted boolean",
    )
    progress = spark.createDataFrame(
        [("c1", 0, 99), ("c1", 1, 60)], "cluster string, offsets_partition int, applied_offset bigint"
    )
    frame = frames.gold_truth_snapshot(live, progress, truth)
    out, _ = run(suites, "gold.truth_snapshot", frame, requirements={"truth_snapshot"})
    # compared: b (agrees), d (differs), h (missing from gold), f (missing from the truth)
    assert counts(out) == {"live_offsets_agree_with_truth": (False, 3)}
    assert out["live_offsets_agree_with_truth"].element_count == 4
    assert out["live_offsets_agree_with_truth"].details["notes"] == {"not_compared_partitions_gold_ahead": [1]}
