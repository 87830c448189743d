"""Gold built from the broker's own files (bronze -> silver -> gold) equals what the broker's Admin
API reports at the same log position: listConsumerGroupOffsets for every group, and the groups
of describeConsumerGroups (type, classic generation where a client observed it, group epoch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.bronze.ingest import ingest_segments
from pipelines.gold.build import run_gold
from pipelines.runtime.config import SegmentsSource
from pipelines.silver.ingest import run_silver


@pytest.fixture(scope="module")
def gold_lake(spark, evidence, tmp_path_factory):
    """bronze -> silver -> gold of the broker's files, once for this module."""
    from pipelines.runtime.tables import Tables

    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    tables = Tables(spark, str(tmp_path_factory.mktemp("gold-truth") / "lakehouse"))
    src = SegmentsSource(kind="segments", cluster="harness", paths=[str(evidence.logs)])
    ingest_segments(spark, tables, "files", src, "b1", "/")
    run_silver(spark, tables, "s1")
    run_gold(spark, tables, "g1")
    return tables


def test_gold_equals_the_brokers_truth(spark, gold_lake, evidence, harness):
    tables = gold_lake
    snap = evidence.snapshot
    offsets = spark.read.format("delta").load(tables.path("gold", "current_offsets")).where("NOT deleted").collect()
    ours = {(r["group_id"], r["topic"], r["partition"]): (r["committed_offset"], r["metadata"]) for r in offsets}
    truth = {k: (v.offset, v.metadata) for k, v in snap.committed().items()}
    assert truth, "the scenarios left committed offsets behind"
    assert ours == truth

    groups = spark.read.format("delta").load(tables.path("gold", "current_groups")).where("NOT deleted").collect()
    by_id = {(r["group_id"], r["protocol"]): r for r in groups}
    compared = 0
    for g in snap.groups:
        if not g.exists or g.type not in ("classic", "consumer"):
            continue
        row = by_id.get((g.group_id, g.type))
        assert row is not None, f"{g.group_id} ({g.type}) is missing from gold.current_groups"
        if g.type == "consumer":
            assert row["generation"] == g.group_epoch, g.group_id
        elif row["exists_because"] == "metadata":
            assert row["member_count"] == len(g.members), g.group_id
            if g.generation is not None:
                assert row["generation"] == g.generation, g.group_id
        compared += 1
    # the harness expires empty groups after 1 minute, so how many scenario groups still exist at
    # the evidence depends on the machine's speed; a few always do (the last scenarios')
    assert compared >= 2
    # groups deleted in the scenarios are not live in gold (the broker no longer lists them)
    listed = {g.group_id for g in snap.groups if g.exists}
    assert "standalone-assign" not in listed and "standalone-assign" not in {k[0] for k in by_id}


def test_gold_lists_the_groups_kafka_lists(spark, gold_lake, evidence, harness):
    """gold.live_groups equals listGroups at the evidence — offsets-only (simple) groups and groups
    whose members all left included — by group id, type, state and protocol type."""
    snap = evidence.snapshot
    kafka = {
        (g.group_id, g.type): (g.state, g.protocol_type)
        for g in snap.groups
        if g.exists and g.type in ("classic", "consumer") and not g.awaiting_cleanup()
    }
    gold_lake.register_existing()  # another test of this module may have pointed the names elsewhere
    live = spark.table(gold_lake.name("gold", "live_groups")).where("protocol IN ('classic', 'consumer')").collect()
    ours = {(r["group_id"], r["protocol"]): (r["state"], r["protocol_type"]) for r in live}
    assert ours == kafka
    because = {(r["group_id"], r["protocol"]): r["exists_because"] for r in live}
    simple = [k for k, v in because.items() if v == "offsets"]
    # the listing scenario runs last, so its groups are still there at the evidence
    facts = harness.result("group_listing").facts
    assert (facts["simple"], "classic") in simple
    for group in facts["members_left"]:
        assert any(k[0] == group and ours[k][0] == "Empty" for k in ours), group
    assert len(kafka) >= 3 and simple, (len(kafka), simple)


def truncated_copy(logs: Path, ends: dict[int, int], dest: Path) -> Path:
    """The broker's files as they were when a snapshot was taken: every batch at or after the
    snapshot's log end offset cut away (compaction is held off in the harness, so the files
    before that point are what the broker had)."""
    from pipelines.codec.segments import discover, iter_segment

    for seg in discover([logs]):
        end = ends.get(seg.partition)
        cut = None
        if end is not None:
            for batch, _ in iter_segment(seg):
                if batch is not None and batch.last_offset >= end:
                    cut = batch.position
                    break
        out = dest / seg.path.parent.name / seg.path.name
        out.parent.mkdir(parents=True, exist_ok=True)
        data = seg.path.read_bytes()
        out.write_bytes(data if cut is None else data[:cut])
    return dest


def test_gold_members_equal_the_brokers_description(spark, evidence, harness, tmp_path):
    """KIP-848 members (member id, client id, host, assigned partitions) and group epochs in gold,
    from the broker's files cut at the new_protocol scenario's final snapshot, while its members
    were alive, equal describeConsumerGroups at that moment."""
    from pipelines.runtime.tables import Tables

    snap = harness.result("new_protocol").snapshots["final"]
    logs = truncated_copy(evidence.logs, snap.offsets_topic_end_offsets, tmp_path / "logs")
    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    tables = Tables(spark, str(tmp_path / "lakehouse"))
    src = SegmentsSource(kind="segments", cluster="harness", paths=[str(logs)])
    ingest_segments(spark, tables, "files", src, "b1", "/")
    run_silver(spark, tables, "s1")
    run_gold(spark, tables, "g1")

    # Intended difference: KIP-848 records carry topic ids; Kafka 4.x no longer writes the records
    # that name them (type 4) and librdkafka commits by name, so gold has the ids and names only
    # where the log pairs them. The broker's own id -> name map stands in for the name here.
    names = topic_names(harness.harness.admin, ["np-t", "np-rx-a", "np-rx-b"])

    def parts(assignment) -> set[tuple[str, int]]:
        return {(a["topic"] or names.get(a["topic_id"]), p) for a in assignment or [] for p in a["partitions"]}

    wanted = {g.group_id for g in snap.groups if g.exists and g.type == "consumer"}
    rows = spark.read.format("delta").load(tables.path("gold", "consumer_group_members")).collect()
    got = {
        (r["group_id"], r["member_id"]): (r["client_id"], r["client_host"], parts(r["assigned_partitions"]))
        for r in rows
        if r["group_id"] in wanted
    }
    want = {
        (g.group_id, m.member_id): (m.client_id, m.host, {(a.topic, a.partition) for a in m.assignment})
        for g in snap.groups
        if g.group_id in wanted
        for m in g.members
    }
    assert len(want) >= 4, "np-consumer (2), np-regex and np-migrated have live members"
    assert got == want
    epochs = {
        r["group_id"]: r["generation"]
        for r in spark.read.format("delta").load(tables.path("gold", "current_groups")).collect()
        if r["protocol"] == "consumer" and not r["deleted"]
    }
    assert {g: epochs.get(g) for g in wanted} == {
        g.group_id: g.group_epoch for g in snap.groups if g.group_id in wanted
    }


def topic_names(admin, topics: list[str]) -> dict[str, str]:
    """{topic id in Kafka's string form (URL-safe base64, no padding): name}, from the broker."""
    import base64

    from confluent_kafka import TopicCollection

    out = {}
    for name, fut in admin.describe_topics(TopicCollection(topics)).items():
        u = fut.result(30).topic_id
        raw = b"".join(
            (bits & (2**64 - 1)).to_bytes(8, "big")
            for bits in (u.get_most_significant_bits(), u.get_least_significant_bits())
        )
        out[base64.urlsafe_b64encode(raw).decode().rstrip("=")] = name
    return out
