"""Every expectation of every suite catches data that violates it, with the right counts.

Tiny DataFrames built by hand go through the suites' frame builders and Great Expectations
(one GX validation per suite, several violations each). Expected counts are worked out from the
rows below, not taken from a run; group placements are Java's String.hashCode by hand
("g" = 103, "a" = 97, "b" = 98, ...). Every test runs on both of GX's engines the stage uses
(pipelines/quality/engine.py) — Spark, and pandas for frames collected to the driver — and on the
frames local_frames.py builds on the driver from the same rows.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any

import pytest
from pyspark.sql import DataFrame

from pipelines.quality import frames, local_frames
from pipelines.quality.engine import engine
from pipelines.quality.stage import evaluate_suite, params_of
from pipelines.quality.suites import load_suites
from pipelines.runtime.config import QualitySettings
from pipelines.truth import TruthSnapshot

NOW = 1_700_000_000_000
MIN = 60_000
PARAMS = params_of(QualitySettings())  # skew 10 min, pending 15 min


# (frame builders, quality.local_max_rows): Spark's frames validated on Spark (0) or collected to
# pandas (the default bound), and local_frames' twins built on the driver from the same rows
ENGINES = {
    "spark": ("spark", 0),
    "pandas": ("spark", QualitySettings().local_max_rows),
    "local": ("local", QualitySettings().local_max_rows),
}
_engine: dict[str, Any] = {"builders": "spark", "local_max_rows": 0}


@pytest.fixture(scope="module", params=sorted(ENGINES), autouse=True)
def gx_engine(request) -> str:
    _engine["builders"], _engine["local_max_rows"] = ENGINES[request.param]
    return request.param


class _Builders:
    """frames' builders on Spark DataFrames, or (the "local" engine) local_frames' twins of the same
    name on the same rows as Arrow tables."""

    def __getattr__(self, name: str):
        def call(*args, **kw):
            if _engine["builders"] == "spark":
                return getattr(frames, name)(*args, **kw)
            return getattr(local_frames, name)(*(self.rows(a) for a in args), **kw)

        return call

    def rows(self, value):
        """A DataFrame (or a list of them) as the engine's builders take it."""
        if _engine["builders"] == "spark":
            return value
        if isinstance(value, list):
            return [self.rows(v) for v in value]
        return value.toArrow() if isinstance(value, DataFrame) else value


build = _Builders()


@pytest.fixture(scope="module")
def suites():
    return load_suites()


def evaluate(suite, frame, *args, **kw):
    return evaluate_suite(suite, frame, PARAMS, "rules-test", *args, local_max_rows=_engine["local_max_rows"], **kw)


def run(suites, name: str, frame, **kw):
    outcomes, to_q = evaluate(suites[name], frame, **kw)
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
    frame = frames.Frame(build.bronze_offsets_records(spark.createDataFrame(rows, schema)))
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
    frame = build.silver_offset_commits(commits, {"c1": 50, "c2": None}, NOW)
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
    out, _ = run(suites, "silver.group_metadata", build.with_partition_rule(groups, {"c1": 50}))
    assert counts(out) == {
        "group_id_not_empty": (False, 1),
        "generation_not_negative": (False, 1),
        "offsets_partition_matches_group": (False, 1),
    }

    # no count known at all: reported as not evaluated, never as passed (GX is not even asked)
    frame = build.silver_offset_commits(commits, {}, NOW)
    suite = suites["silver.offset_commits"]
    only = dataclasses.replace(suite, expectations=(suite.expectation("offsets_partition_matches_group"),))
    outcomes, _ = evaluate(only, frame)
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
    out, _ = run(suites, "silver.transaction_markers", frames.Frame(build.rows(markers)))
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
    out, _ = run(suites, "silver.quarantine", frames.Frame(build.silver_quarantine(bronze, quarantine)))
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
    out, _ = run(suites, "gold.current_offsets", frames.Frame(build.gold_current_offsets(offsets)))
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
    out, _ = run(suites, "gold.pending_transactions", frames.Frame(build.gold_pending_transactions(pending, bronze)))
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
    out, _ = run(suites, "gold.current_lag", frames.Frame(build.gold_lag(current)))
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
    out, _ = run(suites, "gold.lag_history", frames.Frame(build.gold_lag(history)))
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
    bronze_counts = build.records_per_partition(bronze, "partition")
    frame = frames.Frame(build.gold_reconciliation(bronze_counts, [build.records_per_partition(t) for t in silver]))
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
    frame = build.gold_truth_snapshot(live, progress, truth)
    out, _ = run(suites, "gold.truth_snapshot", frame, requirements={"truth_snapshot"})
    # compared: b (agrees), d (differs), h (missing from gold), f (missing from the truth)
    assert counts(out) == {"live_offsets_agree_with_truth": (False, 3)}
    assert out["live_offsets_agree_with_truth"].element_count == 4
    assert out["live_offsets_agree_with_truth"].details["notes"] == {"not_compared_partitions_gold_ahead": [1]}


def test_silver_group_members_rules(spark, suites) -> None:
    groups = spark.createDataFrame(
        [
            ("c1", 0, 10, "g", 2),  # members 0 and 1: complete
            ("c1", 0, 11, "g", 2),  # only member 0: one missing
            ("c1", 0, 12, "g", 1),  # member 0 twice
            ("c1", 0, 13, "g", 0),  # an Empty group: no member rows, none expected
            ("c1", 0, 14, "g", 1),  # its one member is missing
            ("c1", 0, 16, "g", 2),  # members 0 and 2: index 1 missing, 2 out of range
        ],
        "cluster string, offsets_partition int, record_offset bigint, group_id string, member_count int",
    )
    members = spark.createDataFrame(
        [
            ("c1", 0, 10, 0, "g", "m-0", "consumer", None),
            ("c1", 0, 10, 1, "g", "", "consumer", None),  # no member id
            ("c1", 0, 11, 0, "g", "m-0", "consumer", "truncated_bytes at 3"),  # protocol bytes undecoded
            ("c1", 0, 12, 0, "g", "m-0", "connect", None),
            ("c1", 0, 12, 0, "g", "m-0", "connect", None),
            ("c1", 0, 15, 0, "g", "m-0", "consumer", None),  # no group record at 15
            ("c1", 0, 16, 0, "g", "m-0", "consumer", None),
            ("c1", 0, 16, 2, "g", "m-2", "consumer", None),
        ],
        "cluster string, offsets_partition int, record_offset bigint, member_index int, group_id string, "
        "member_id string, protocol_type string, protocol_error string",
    )
    out, _ = run(suites, "silver.group_members", frames.Frame(build.silver_group_members(members, groups)))
    # rows: 8 members + the records at 13 and 14 without member rows; broken records: 11 (1 row),
    # 12 (2), 14 (1), 15 (1), 16 (2)
    assert counts(out) == {
        "members_match_their_record": (False, 7),
        "member_id_not_empty": (False, 1),
        "consumer_protocol_decoded": (False, 1),
    }
    assert out["members_match_their_record"].element_count == 10
    assert out["consumer_protocol_decoded"].action == "warned"
    # judged only for members of protocol type consumer: 6 of the 10 rows (not the two connect
    # members, nor the two records without member rows)
    assert out["consumer_protocol_decoded"].details["missing_count"] == 4


def test_silver_tombstones_rules(spark, suites) -> None:
    tombstones = spark.createDataFrame(
        [
            ("c1", 3, 0, 1, "g", "t", 0, None, None),  # an offset tombstone ("g" -> 103 % 50 = 3)
            ("c1", 3, 1, 1, "g", None, 0, None, None),  # no topic
            ("c1", 3, 2, 0, "g", "t", -1, None, None),  # no valid partition
            ("c1", 3, 3, 5, "g", None, None, "m", None),  # a member tombstone
            ("c1", 3, 4, 8, "g", None, None, None, None),  # a member tombstone without member
            ("c1", 3, 5, 16, "g", None, None, None, "t.*"),  # a regex tombstone
            ("c1", 3, 6, 16, "g", None, None, None, None),  # without its regex
            ("c1", 3, 7, 2, "g", None, None, None, None),  # a group tombstone: the group id is its key
            ("c1", 4, 8, 2, "g", None, None, None, None),  # in the wrong offsets partition
        ],
        "cluster string, offsets_partition int, record_offset bigint, record_type int, group_id string, "
        "topic string, partition int, member_id string, regular_expression string",
    )
    out, _ = run(suites, "silver.tombstones", build.silver_tombstones(tombstones, {"c1": 50}))
    assert counts(out) == {"tombstone_names_its_key": (False, 4), "offsets_partition_matches_group": (False, 1)}


def test_silver_version_inventory_rules(spark, suites) -> None:
    bronze = spark.createDataFrame([("c1", 0)] * 6 + [("c1", 1)] * 3 + [("c1", 2)] * 2, "cluster string, partition int")
    inventory = spark.createDataFrame(
        [
            ("c1", 0, "data", 1, 3, "decoded", 4, 0, 5),
            ("c1", 0, "tombstone", 1, None, "decoded", 2, 4, 5),  # partition 0: 4 + 2 = bronze's 6
            ("c1", 1, "data", 2, 3, "decoded", 3, 10, 11),  # 3 records on 2 offsets
            ("c1", 1, "data", 2, 3, "decoded", 1, 12, 12),  # the key above again; partition 1: 4 != 3
            ("c1", 3, "control", None, None, "decoded", 1, 9, 8),  # first after last; not in bronze
        ],
        "cluster string, offsets_partition int, record_kind string, record_type int, value_version int, "
        "status string, records bigint, first_offset bigint, last_offset bigint",
    )
    frame = frames.Frame(build.silver_version_inventory(inventory, build.records_per_partition(bronze, "partition")))
    out, _ = run(suites, "silver.version_inventory", frame)
    # census: partition 1's two rows, partition 3's row, and one row for bronze's partition 2,
    # which the inventory lacks
    assert counts(out) == {
        "key_unique": (False, 2),
        "records_fit_their_offsets": (False, 2),
        "census_counts_every_bronze_record": (False, 4),
    }
    assert out["census_counts_every_bronze_record"].element_count == 6


def test_silver_topic_ids_rules(spark, suites) -> None:
    uuid = "Mj7b3x1aQO2Fq0h9Yw_-kA"  # 16 bytes as Kafka prints them
    other = "AAAAAAAAAAAAAAAAAAAAAQ"
    rows = [
        ("c1", uuid, "orders"),
        ("c1", uuid, "orders"),  # the pair twice
        ("c1", other, "payments"),
        ("c1", other, "payments-v2"),  # one id, two names
        ("c1", "AAAAAAAAAAAAAAAAAAAAAA", "zero"),  # the all-zero UUID: no topic id
        ("c1", "Mj7b3x1aQO2Fq0h9Yw_-kB", "b"),  # 22 characters that are not 16 bytes
        ("c1", "short", "s"),
        ("c2", uuid, ".."),  # not a legal topic name
        ("c2", other, "a b"),  # nor this one
        ("c2", "x3Kq-7w0TnSb2Ah9Yw_-kQ", "x" * 250),  # 250 characters: one too many
        ("c2", "y3Kq-7w0TnSb2Ah9Yw_-kg", "ok.name_-1"),
    ]
    df = spark.createDataFrame(rows, "cluster string, topic_id string, topic_name string")
    out, _ = run(suites, "silver.topic_ids", frames.Frame(build.silver_topic_ids(df)))
    assert counts(out) == {
        "key_unique": (False, 2),
        "one_name_per_topic_id": (False, 2),
        "topic_id_is_a_uuid": (False, 3),
        "topic_name_is_legal": (False, 3),
    }
    assert out["one_name_per_topic_id"].action == "warned"
    assert {o.action for n, o in out.items() if n != "one_name_per_topic_id"} == {"failed"}
    samples = out["topic_id_is_a_uuid"].details["partial_unexpected_list"]
    assert sorted(samples) == sorted(["AAAAAAAAAAAAAAAAAAAAAA", "Mj7b3x1aQO2Fq0h9Yw_-kB", "short"])


def test_samples_are_asked_for_only_when_a_rule_fails(spark, suites, monkeypatch, gx_engine) -> None:
    """A first pass asks GX for counts only (no sample query per rule); a suite with a failing rule
    is validated again with samples, and only that validation stays for the Data Docs (made by
    the engine this module's run is for)."""
    from pipelines.quality import engine as gx_engine_module

    formats = []
    real_run = gx_engine_module.Engine._run

    def spy(self, definition, suite, data, params, run_id, result_format):
        formats.append(result_format["partial_unexpected_count"])
        return real_run(self, definition, suite, data, params, run_id, result_format)

    monkeypatch.setattr(gx_engine_module.Engine, "_run", spy)
    store = engine().context.validation_results_store
    good = ("c1", "Mj7b3x1aQO2Fq0h9Yw_-kA", "orders")
    for rows, passes in (([good], True), ([good, ("c1", "short", "s")], False)):
        formats.clear()
        stored = set(store.list_keys())
        df = spark.createDataFrame(rows, "cluster string, topic_id string, topic_name string")
        out, _ = run(suites, "silver.topic_ids", frames.Frame(build.silver_topic_ids(df)))
        assert formats == ([0] if passes else [0, 10])
        (key,) = set(store.list_keys()) - stored
        source = store.get(key).meta["active_batch_definition"]["datasource_name"]
        local = gx_engine_module.LOCAL_DATASOURCE
        assert source == {"spark": gx_engine_module.DATASOURCE, "pandas": local, "local": local}[gx_engine]
        samples = out["topic_id_is_a_uuid"].details["partial_unexpected_list"]
        assert samples == ([] if passes else ["short"])


def test_gold_current_groups_rules(spark, suites) -> None:
    groups = spark.createDataFrame(
        [
            ("c1", 0, "a", "classic", "consumer", 3, None, "metadata", 10, 12, False, None),
            ("c1", 0, "a", "consumer", "consumer", 5, 4, "metadata", 20, 22, False, None),  # "a" live twice
            ("c1", 0, "b", "classic", "", None, None, "offsets", None, 30, False, None),  # offsets-only
            ("c1", 0, "c", "classic", "consumer", None, None, "offsets", None, 31, False, None),  # not as listed
            ("c1", 0, "d", "consumer", "consumer", 2, 3, "metadata", 40, 41, False, None),  # assignment ahead
            ("c1", 0, "e", "classic", "consumer", 1, None, "metadata", None, 50, False, None),  # no record
            ("c1", 0, "f", "classic", None, None, None, "metadata", None, 60, True, "group_deletion"),
            ("c1", 1, "f", "classic", None, None, None, "metadata", None, 62, True, "converted"),  # key again
            ("c1", 0, "g", "classic", None, None, None, "offsets", None, 61, True, None),  # deleted, no cause
            ("c1", 0, "h", "classic", "consumer", 1, None, "metadata", 70, 71, False, "expiry"),  # live, a cause
            ("c1", 0, "i", "classic", "consumer", -1, None, "metadata", 80, 80, False, None),  # generation < 0
            ("c1", 0, "j", "streams", "streams", 1, None, "unknown", 90, 90, False, None),  # no known reason
        ],
        "cluster string, offsets_partition int, group_id string, protocol string, protocol_type string, "
        "generation int, assignment_epoch int, exists_because string, record_offset bigint, state_offset bigint, "
        "deleted boolean, delete_cause string",
    )
    out, _ = run(suites, "gold.current_groups", frames.Frame(build.gold_current_groups(groups)))
    assert counts(out) == {
        "key_unique": (False, 2),
        "one_live_row_per_group_id": (False, 2),
        "delete_cause_iff_deleted": (False, 2),
        "live_group_exists_for_its_reason": (False, 3),
        "assignment_epoch_not_ahead_of_group_epoch": (False, 1),
        "generation_not_negative": (False, 1),
    }
    # judged on live rows only: 9 of 12
    assert out["live_group_exists_for_its_reason"].details["missing_count"] == 3


def test_gold_offset_history_rules(spark, suites) -> None:
    # per key (its topic partition): valid_from_offset, valid_to_offset, valid_from_timestamp,
    # valid_to_timestamp, deleted, record_offset, deleted_offset
    intervals = [
        (0, 10, 20, 100, 200, False, 9, None),
        (0, 20, 30, 200, 300, True, None, 20),
        (0, 30, None, 300, None, False, 31, None),  # its commit lies after its start
        (1, 10, 15, 100, 150, False, 10, None),  # a gap: the next starts at 20
        (1, 20, None, 200, None, False, 20, None),  # open, but not the latest
        (1, 25, None, 250, None, False, 25, None),
        (2, 10, 20, 100, 200, False, 10, None),  # closed, nothing after it: no current state
        (3, 10, 20, 500, 400, False, 10, None),  # log time runs back
        (3, 20, None, 400, None, False, 20, None),
        (4, 10, 20, 100, 199, False, 10, None),  # ends at 199 ms, the next starts at 200
        (4, 20, None, 200, None, False, 20, None),
        (5, 10, 20, 100, 200, False, 10, None),
        (5, 10, 20, 100, 200, False, 10, None),  # the interval above twice
        (5, 20, None, 200, None, False, 20, None),
        (6, 10, 20, None, None, False, 10, None),  # no log time (magic 0): fine
        (6, 20, None, None, None, False, 20, None),
    ]
    rows = [("c1", 0, "g", "t", *i) for i in intervals]
    history = spark.createDataFrame(
        rows,
        "cluster string, offsets_partition int, group_id string, topic string, partition int, "
        "valid_from_offset bigint, valid_to_offset bigint, valid_from_timestamp bigint, valid_to_timestamp bigint, "
        "deleted boolean, record_offset bigint, deleted_offset bigint",
    )
    out, _ = run(suites, "gold.offset_history", frames.Frame(build.gold_offset_history(history)))
    assert counts(out) == {
        "one_open_interval_per_key": (False, 2),  # partition 1's interval at 20, partition 2's only one
        "intervals_chain": (False, 4),  # partition 1 at 10 and 20, partition 4 at 10, one of partition 5's
        "interval_time_ordered": (False, 1),  # partition 3 at 10
        "interval_has_source_event": (False, 1),  # partition 0 at 30
    }
    assert out["intervals_chain"].element_count == 16
    assert out["interval_time_ordered"].action == "warned"
    # latest intervals have no next one to chain to: 7 keys
    assert out["intervals_chain"].details["missing_count"] == 7


def test_gold_group_generations_rules(spark, suites) -> None:
    rows = [
        # (group, generation, started, ended, end reason, records, last record)
        ("a", 1, 10, 20, "next_generation", 2, 15),
        ("a", 2, 20, 30, "group_deleted", 1, 20),
        ("a", 1, 40, None, None, 1, 40),  # recreated after the deletion: back to 1, fine
        ("b", 5, 10, 20, "next_generation", 1, 10),  # the next generation is lower
        ("b", 3, 20, 25, "next_generation", 1, 20),  # the latest, closed by a generation that is not there
        ("c", 1, 10, None, None, 1, 10),  # open but not the latest
        ("c", 2, 15, 18, "group_deleted", 1, 15),  # the latest, closed by the group's deletion: fine
        ("d", 1, 10, 19, "next_generation", 1, 10),  # ends at 19, the next starts at 20
        ("d", 2, 20, None, None, 1, 20),
        ("e", 1, 10, None, None, 0, 10),  # no records
        ("f", 1, 10, 20, "group_deleted", 3, 25),  # its last record after its end
        ("h", 1, 10, None, None, 5, 12),  # 5 records on 3 offsets
        ("i", 1, 10, 20, "expired", 1, 10),  # an end reason gold does not write
    ]
    generations = spark.createDataFrame(
        [("c1", 0, *r) for r in rows],
        "cluster string, offsets_partition int, group_id string, generation int, started_offset bigint, "
        "ended_offset bigint, end_reason string, records bigint, last_record_offset bigint",
    )
    out, _ = run(suites, "gold.group_generations", frames.Frame(build.gold_group_generations(generations)))
    assert counts(out) == {
        "one_open_generation_per_group": (False, 3),  # b at 20, c at 10, i
        "generations_chain": (False, 3),  # b at 20, d at 10, i
        "generation_rises_at_rebalance": (False, 1),  # b at 10
        "records_within_generation": (False, 3),  # e, f, h
    }
    assert out["generation_rises_at_rebalance"].action == "warned"
    # judged where a rebalance ended a generation and the next one is there: a, b and d at 10
    assert out["generation_rises_at_rebalance"].details["missing_count"] == 13 - 3


def test_gold_consumer_group_members_rules(spark, suites) -> None:
    groups = spark.createDataFrame(
        [("c1", "a", "consumer", 5, False), ("c1", "b", "consumer", 3, True), ("c1", "c", "classic", 2, False)],
        "cluster string, group_id string, protocol string, generation int, deleted boolean",
    )
    t1, t2 = "Mj7b3x1aQO2Fq0h9Yw_-kA", "AAAAAAAAAAAAAAAAAAAAAQ"

    def parts(*tps: tuple[str, list[int]]) -> list[tuple]:
        return [(t, None, ps, None) for t, ps in tps]

    members = spark.createDataFrame(
        [
            ("c1", 0, "a", "m1", 5, 0, parts((t1, [0, 1])), []),
            ("c1", 0, "a", "m1", 5, 0, parts((t1, [0, 1])), []),  # the member twice
            ("c1", 0, "a", "m2", 6, 0, parts((t1, [4])), []),  # epoch ahead of the group's 5
            ("c1", 0, "a", "m3", -2, 1, parts((t1, [2])), parts((t1, [2, 3]))),  # t1-2 owned and revoked
            ("c1", 0, "a", "m4", 4, 9, parts((t1, [3])), parts((t2, [3]))),  # unknown state; other topic
            ("c1", 0, "b", "m1", 1, 0, [], []),  # its group was deleted
            ("c1", 0, "c", "m1", 1, 0, [], []),  # its group is a classic group
            ("c1", 0, "a", "m5", None, None, None, None),  # member metadata only: nothing to compare
        ],
        "cluster string, offsets_partition int, group_id string, member_id string, member_epoch int, state tinyint, "
        "assigned_partitions array<struct<topic_id:string,topic:string,partitions:array<int>,"
        "assignment_epochs:array<int>>>, partitions_pending_revocation array<struct<topic_id:string,topic:string,"
        "partitions:array<int>,assignment_epochs:array<int>>>",
    )
    frame = frames.Frame(build.gold_consumer_group_members(members, groups))
    out, _ = run(suites, "gold.consumer_group_members", frame)
    assert counts(out) == {
        "key_unique": (False, 2),
        "member_in_live_consumer_group": (False, 2),
        "member_epoch_not_ahead_of_group_epoch": (False, 1),
        "assigned_and_revoking_disjoint": (False, 1),
        "member_state_known": (False, 1),
    }
    assert out["member_state_known"].action == "warned"


def test_gold_partition_progress_rules(spark, suites) -> None:
    inventory = spark.createDataFrame(
        [("c1", 0, 50), ("c1", 0, 99), ("c1", 1, 10)], "cluster string, offsets_partition int, last_offset bigint"
    )
    progress = spark.createDataFrame(
        [
            ("c1", 0, 99, 40, None),  # fine: silver's last record of partition 0 is at 99
            ("c1", 0, 99, 40, None),  # the partition twice
            ("c1", 1, 12, 5, None),  # applied beyond silver's last record (10)
            ("c1", 2, None, 0, None),  # nothing applied yet: fine
            ("c1", 3, 5, 7, "run-x"),  # in flight; 7 events at or below offset 5; silver holds none
            ("c1", 4, None, 3, None),  # events without an applied offset
        ],
        "cluster string, offsets_partition int, applied_offset bigint, events_applied bigint, in_flight_run string",
    )
    out, _ = run(suites, "gold.partition_progress", frames.Frame(build.gold_partition_progress(progress, inventory)))
    assert counts(out) == {
        "key_unique": (False, 2),
        "no_partition_in_flight": (False, 1),
        "events_fit_applied_offset": (False, 2),
        "applied_within_silver": (False, 2),
    }
