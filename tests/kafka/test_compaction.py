"""Kafka's own log cleaner does not change gold: gold built from a compacted copy of the offsets
topic equals gold built from the full log it was compacted from.

A second, small broker (one offsets partition, no offset expiry) runs a few scenarios with
compaction held off, its files are copied, then compaction is switched on for
``__consumer_offsets`` and the real cleaner compacts the rolled segments (superseded commits,
aborted transactional records). Nothing writes to the topic in between, so both copies describe
the same state.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.bronze.ingest import ingest_segments
from pipelines.gold.build import run_gold
from pipelines.runtime.config import SegmentsSource
from pipelines.runtime.tables import Tables
from pipelines.silver.ingest import run_silver
from tests.harness.broker import KafkaBroker
from tests.harness.scenarios import Harness, bulk_roll, delete_and_recreate, offset_reset, transactional_commits

TOPIC = "__consumer_offsets"


def cleaned_up_to(broker: KafkaBroker) -> int:
    """The log cleaner's checkpoint for partition 0 (0 when it has not cleaned it yet)."""
    path = broker.log_dir / "cleaner-offset-checkpoint"
    if not path.exists():
        return 0
    for line in path.read_text().splitlines()[2:]:
        topic, part, offset = line.split()
        if topic == TOPIC and part == "0":
            return int(offset)
    return 0


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    work = tmp_path_factory.mktemp("compaction")
    overrides = {
        "offsets.topic.num.partitions": "1",
        "offsets.retention.minutes": "10080",  # no expiry tombstones between the two copies
        "log.cleaner.backoff.ms": "500",
    }
    broker = KafkaBroker(work / "broker", overrides=overrides).start()
    try:
        h = Harness(broker, cluster="compaction")
        for scenario in (transactional_commits, delete_and_recreate, offset_reset):
            scenario(h)
        bulk_roll(h, target_bytes=2_300_000)  # two rolled 1 MiB segments for the cleaner
        h.close_all()
        full = broker.copy_offsets_topic(work / "full")
        resource = ConfigResource(
            ResourceType.TOPIC,
            TOPIC,
            incremental_configs=[
                ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET),
                ConfigEntry("min.cleanable.dirty.ratio", "0.01", incremental_operation=AlterConfigOpType.SET),
            ],
        )
        for fut in h.admin.incremental_alter_configs([resource]).values():
            fut.result(30)
        h.wait(lambda: cleaned_up_to(broker) > 0, "the log cleaner to compact __consumer_offsets-0", timeout=120)
        compacted = broker.copy_offsets_topic(work / "compacted")
    finally:
        broker.stop()
    return full, compacted


def build(spark, root: Path, logs: Path) -> tuple[Tables, int]:
    for db in ("bronze", "silver", "gold", "quality"):  # names are per session: point them at this root
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    tables = Tables(spark, str(root))
    src = SegmentsSource(kind="segments", cluster="c", paths=[str(logs)])
    rows = ingest_segments(spark, tables, "files", src, "b", "/").rows_read
    run_silver(spark, tables, "s")
    run_gold(spark, tables, "g")
    return tables, rows


def state(spark, tables: Tables) -> dict:
    def rows(table: str, cols: list[str], where: str = "true") -> set:
        df = spark.read.format("delta").load(tables.path("gold", table)).where(where)
        return {tuple(r) for r in df.select(*cols).collect()}

    key = ["group_id", "topic", "partition"]
    # a soft-deleted row's last value before the deletion, and the inferred cause of the deletion,
    # come from records compaction may remove by design (the value record the tombstone
    # supersedes; the group tombstone a recreated group supersedes); the deletion itself must agree
    return {
        "live": rows("current_offsets", [*key, "committed_offset", "metadata"], "NOT deleted"),
        "deleted": rows("current_offsets", [*key, "deleted_offset"], "deleted"),
        "pending": rows("pending_transactions", ["producer_id", *key, "committed_offset"]),
        # a deleted offsets-only group existed through commits the cleaner removes (superseded
        # by their tombstones): compare its deletion like a deleted group's, not why it existed
        "groups": rows("current_groups", ["group_id", "protocol", "generation", "member_count", "deleted"]),
        "live_groups": rows("current_groups", ["group_id", "protocol", "exists_because"], "NOT deleted"),
    }


def test_gold_of_a_compacted_copy_equals_gold_of_the_full_log(spark, copies, tmp_path):
    full, compacted = copies
    full_tables, full_rows = build(spark, tmp_path / "full", full)
    compacted_tables, compacted_rows = build(spark, tmp_path / "compacted", compacted)
    # the cleaner really removed records (superseded commits), else this test proves nothing
    assert compacted_rows < full_rows * 0.8, (compacted_rows, full_rows)
    want = state(spark, full_tables)
    assert len(want["live"]) >= 50
    got = state(spark, compacted_tables)
    for part in want:
        missing, extra = sorted(want[part] - got[part]), sorted(got[part] - want[part])
        assert not missing and not extra, (part, [str(x)[:160] for x in missing[:5]], [str(x)[:160] for x in extra[:5]])
