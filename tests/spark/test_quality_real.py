"""All 268 real segment files through every bronze, silver and gold suite.

The tier's shared lakehouse of the files (tests/spark/real_lakehouse.py: bronze, silver and gold
as 69 clusters, one per source directory, built once per run), then every suite on the tables the
way the quality stage reads them (its frames, built on the driver as the stage builds them for
tables this size, its GX engine; without writing quality.results or
Data Docs). What each suite judged is counted from the files with ``inspect``, not from the
lakehouse. The files' partition counts are unknown (no offsets_partitions), so the partition
rules are not evaluated; there is no truth snapshot; and the files hold no transactions, no
KIP-848 records and no end offsets, so the tables of those are empty here (checked, not assumed).
The one rule the files fail is a warning about their own bytes, named below with its count.
"""

from __future__ import annotations

import pytest

from pipelines.codec.primitives import ZERO_UUID
from pipelines.quality.frames import Inputs, fits_driver, load_frame
from pipelines.quality.results import Outcome
from pipelines.quality.stage import SUITES_AT_ONCE, evaluate_suite, params_of
from pipelines.quality.suites import load_suites
from pipelines.runtime import lake
from pipelines.runtime.config import QualitySettings
from pipelines.runtime.tables import Tables
from tests.spark.real_lakehouse import RealLakehouse
from tests.support.quality import LogCounts, log_counts, records_by_position

MARKER_RULES = ("control_type_commit_or_abort", "marker_has_producer", "coordinator_epoch_not_negative")
TOPIC_ID_RULES = ("key_unique", "one_name_per_topic_id", "topic_id_is_a_uuid", "topic_name_is_legal")
# rules that cannot be judged on these files, and why
NOT_EVALUATED = {
    ("silver.offset_commits", "offsets_partition_matches_group"): "offsets_partitions unknown",
    ("silver.group_metadata", "offsets_partition_matches_group"): "offsets_partitions unknown",
    ("silver.tombstones", "offsets_partition_matches_group"): "offsets_partitions unknown",
    ("gold.truth_snapshot", "live_offsets_agree_with_truth"): "no truth snapshot",
    # the files hold no control records and no record pairing a topic id with a name (asserted
    # below), so silver has neither table
    **{("silver.transaction_markers", rule): "no silver.transaction_markers table" for rule in MARKER_RULES},
    **{("silver.topic_ids", rule): "no silver.topic_ids table" for rule in TOPIC_ID_RULES},
}
# gold tables of what the files do not hold (asserted against the files below)
EMPTY_HERE = {"gold.pending_transactions", "gold.consumer_group_members", "gold.current_lag", "gold.lag_history"}


@pytest.fixture(scope="module")
def real(spark, real_dir, real_lakehouse: RealLakehouse) -> tuple[Tables, LogCounts]:
    records = records_by_position(real_dir, lambda seg: seg.path.relative_to(real_dir).parts[0])
    assert len(records) == 40520  # log positions (two segments of one directory repeat 6 records)
    return real_lakehouse.register(spark), log_counts(records)


def validate(spark, tables: Tables, layers: tuple[str, ...]) -> dict[tuple[str, str], Outcome]:
    """Every suite of ``layers`` on the lakehouse, as the quality stage evaluates it."""
    settings = QualitySettings()
    params = params_of(settings)
    inputs = Inputs(now_ms=1_800_000_000_000, partitions={})  # 2027: after every commit in the files
    suites = [suite for layer in layers for suite in load_suites().layer(layer)]

    def one(suite) -> list[Outcome]:
        local = fits_driver(spark, tables, suite.frame, settings.local_max_rows)  # the stage's choice
        frame = load_frame(suite.frame, spark, tables, inputs, local=local)
        return evaluate_suite(suite, frame, params, "real-files", local_max_rows=settings.local_max_rows)[0]

    # a few suites at once, as the quality stage runs them (their Spark jobs are small and wait)
    done = lake.parallel_map(one, suites, SUITES_AT_ONCE)
    return {(o.suite, o.expectation): o for outcomes in done for o in outcomes}


def check_all_pass(results: dict[tuple[str, str], Outcome], warned: dict[tuple[str, str], int]) -> None:
    """Every rule passes, but those not evaluated here and the ``warned`` ones (rule -> the
    unexpected count worked out from the files)."""
    for key, o in results.items():
        if key in NOT_EVALUATED:
            assert (o.evaluated, o.success, o.action) == (False, None, "not_evaluated"), key
            assert NOT_EVALUATED[key] in o.details["reason"], (key, o.details)
        elif key in warned:
            assert (o.evaluated, o.success, o.action, o.unexpected_count) == (True, False, "warned", warned[key]), o
        else:
            assert o.evaluated and o.success, (key, o)


def test_real_files_pass_the_bronze_and_silver_suites(spark, real) -> None:
    tables, log = real
    results = validate(spark, tables, ("bronze", "silver"))
    assert {s for s, _ in results} == {s.name for layer in ("bronze", "silver") for s in load_suites().layer(layer)}
    # what the files hold that a rule flags on purpose: 8 members of one application's group whose
    # client (segmentio/kafka-go) writes consumer-protocol subscription version 1 without the
    # owned partitions that version carries; the broker keeps such bytes as they are, so does silver
    assert log.undecoded_consumer_members == 8
    undecoded = ("silver.group_members", "consumer_protocol_decoded")
    check_all_pass(results, {undecoded: log.undecoded_consumer_members})
    assert results[undecoded].element_count - results[undecoded].details["missing_count"] == log.consumer_members
    assert results[("bronze.offsets_records", "position_unique")].element_count == log.records
    assert results[("silver.quarantine", "undecodable_rate_zero")].element_count == log.records
    assert results[("silver.group_members", "members_match_their_record")].element_count == log.member_rows
    assert results[("silver.tombstones", "tombstone_names_its_key")].element_count == log.tombstones
    census = results[("silver.version_inventory", "census_counts_every_bronze_record")]
    assert census.element_count == len(log.census)  # every record decoded: one status per key
    # no topic ids in the files: their offset commits of value version 4 carry the zero UUID (the
    # clients committed by name), and no record of the other types that carry ids (3-23) is there
    assert log.types == {1, 2} and log.commit_topic_ids == {ZERO_UUID}
    assert not {k for k in log.census if k[2] == "control"}
    assert min(log.member_rows, log.tombstones) > 0


def test_real_files_pass_the_gold_suites(spark, real) -> None:
    """Gold of the files' silver: every gold suite, reconciliation included."""
    tables, log = real
    results = validate(spark, tables, ("gold",))
    assert {s for s, _ in results} == {s.name for s in load_suites().layer("gold")}
    # two Kafka Connect groups of one cluster start again at generation 1 without a tombstone
    # (Kafka skips it when a JoinGroup recreates the group first; counted from the files)
    assert log.generation_drops == 2
    check_all_pass(results, {("gold.group_generations", "generation_rises_at_rebalance"): log.generation_drops})
    assert results[("gold.reconciliation", "silver_records_equal_bronze_records")].element_count == len(log.partitions)
    assert results[("gold.partition_progress", "applied_within_silver")].element_count == len(log.partitions)
    assert results[("gold.group_generations", "generations_chain")].element_count == log.generations
    groups = results[("gold.current_groups", "key_unique")]
    history = results[("gold.offset_history", "intervals_chain")]
    assert min(groups.element_count, history.element_count, log.generations) > 0
    # what the files do not hold leaves those tables empty: no transactional batches, no KIP-848
    # records (types 3-8), no end offsets (the files are the offsets topic only)
    assert log.transactional == 0 and not log.types & set(range(3, 9))
    for (suite, _), o in results.items():
        if suite in EMPTY_HERE:
            assert o.element_count == 0, (suite, o)
