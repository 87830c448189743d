"""Bronze from the live broker (Spark's Kafka source, read_committed) equals bronze from the same
broker's segment files, restricted to what a read_committed consumer can see: no control records,
nothing from aborted transactions. Compared on (partition, offset, key, value)."""

from __future__ import annotations

import contextlib
from collections import Counter
from types import SimpleNamespace

import pytest

from pipelines.bronze.ingest import ingest_segments
from pipelines.bronze.kafka_source import KafkaUnavailable, ingest_kafka, partition_ends
from pipelines.runtime.config import KafkaSource, SegmentsSource
from pipelines.status import collect_status


def committed_view(rows: list) -> set[tuple]:
    """What read_committed returns, derived from the raw log independently of the broker: drop
    control records and the data records of transactions that ended with an ABORT marker."""
    by_part: dict[int, list] = {}
    for r in rows:
        by_part.setdefault(r["partition"], []).append(r)
    out = set()
    for part, recs in by_part.items():
        pending: dict[int, list] = {}
        for r in sorted(recs, key=lambda r: r["offset"]):
            if r["control"]:
                ctype = int.from_bytes(bytes(r["key"])[2:4], "big")  # control key: version, type
                kept = pending.pop(r["producer_id"], [])
                if ctype == 1:  # COMMIT
                    out.update(kept)
                continue
            t = (part, r["offset"], bytes(r["key"]), None if r["value"] is None else bytes(r["value"]))
            if r["transactional"]:
                pending.setdefault(r["producer_id"], []).append(t)
            else:
                out.add(t)
    return out


def live_source(harness, **kw) -> KafkaSource:
    return KafkaSource(kind="kafka", cluster="harness", bootstrap_servers=harness.broker.bootstrap, **kw)


def test_live_source_equals_segment_files(spark, tables, harness, broker_files):
    seg = SegmentsSource(kind="segments", cluster="files", paths=[str(broker_files)])
    ingest_segments(spark, tables, "files", seg, "run-files", str(broker_files))
    first = ingest_kafka(spark, tables, "live", live_source(harness), "run-live-1")
    assert first.rows_inserted == first.rows_read > 1000

    bronze = spark.read.format("delta").load(tables.path("bronze", "offsets_records"))
    files = bronze.where("cluster = 'files'").collect()
    ends = {}
    for r in files:
        ends[r["partition"]] = max(ends.get(r["partition"], -1), r["offset"])
    expected = committed_view(files)
    live = {
        (r["partition"], r["offset"], bytes(r["key"]), None if r["value"] is None else bytes(r["value"]))
        for r in bronze.where("cluster = 'harness'").collect()
        # the broker kept running after the copy (expiry may have written more): compare the copy's range
        if r["offset"] <= ends.get(r["partition"], -1)
    }
    assert live == expected
    aborted_or_control = {(r["partition"], r["offset"]) for r in files} - {(t[0], t[1]) for t in expected}
    assert aborted_or_control, "the scenarios wrote markers and an aborted commit: the filter must remove some"

    # positions: the end offsets stored with the data; a second run reads nothing new from them
    live_rows = bronze.where("cluster = 'harness' AND source_kind = 'kafka'")
    assert live_rows.where("resolved_by_broker AND producer_id IS NULL AND NOT control").count() == live_rows.count()
    second = ingest_kafka(spark, tables, "live", live_source(harness), "run-live-2")
    # the broker keeps writing (expiry tombstones), so the second run may find new records, but it
    # starts at the stored end offsets: everything it reads is new, nothing is read twice
    assert second.conflicts == 0 and second.rows_inserted == second.rows_read
    first_end = {int(p): o for p, o in first.positions.items()}
    assert all(o >= first_end[int(p)] for p, o in second.positions.items())
    reread = (
        spark.read.format("delta")
        .load(tables.path("bronze", "offsets_records"))
        .where("run_id = 'run-live-2'")
        .collect()
    )
    assert all(r["offset"] >= first_end[r["partition"]] for r in reread)


def test_unreachable_broker_is_one_clear_error(spark, tables):
    src = KafkaSource(kind="kafka", cluster="gone", bootstrap_servers="127.0.0.1:1")
    with pytest.raises(KafkaUnavailable, match=r"Kafka at 127\.0\.0\.1:1: no bootstrap server accepts a connection"):
        partition_ends(spark, src)


def test_open_transaction_holds_ingestion_and_status_shows_it(spark, tables, harness):
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    from pipelines.bronze.kafka_source import last_runs
    from pipelines.codec.partitioner import partition_for

    h = harness.harness
    h.create_topic("hanging-t", 1)
    member = Consumer({"bootstrap.servers": h.bootstrap, "group.id": "hanging", "enable.auto.commit": False})
    member.assign([TopicPartition("hanging-t", 0)])
    p = Producer(
        {"bootstrap.servers": h.bootstrap, "transactional.id": "hanging-producer", "transaction.timeout.ms": 120000}
    )
    p.init_transactions(30)
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition("hanging-t", 0, 7)], member.consumer_group_metadata(), 30)
    n = int(harness.broker.settings()["offsets.topic.num.partitions"])
    part = partition_for("hanging", n)
    try:
        result = ingest_kafka(spark, tables, "live", live_source(harness), "run-hanging-1")
        assert any(f"partitions {part} (stable" in note or f", {part} (stable" in note for note in result.notes)
        held = {r["partition"]: r for r in last_runs(spark, tables)}
        assert held[part]["held_back"] >= 1
        assert held[part]["position"] < held[part]["high_watermark"]
        # `status` with the bronze table there: the held-back partition at the broker's last stable
        # offset (the open transaction pins it), and a note naming it
        ends = partition_ends(spark, live_source(harness))[part]
        doc = collect_status(SimpleNamespace(spark=spark, tables=tables, root=tables.root), partitions=True)
        assert tables.name("bronze", "offsets_records") in {t["table"] for t in doc["tables"]}
        shown = {r["partition"]: r for r in doc["kafka_positions"] if r["cluster"] == "harness"}
        assert shown[part]["position"] == ends["last_stable"] < ends["high_watermark"]
        assert shown[part]["held_back"] >= 1
        assert {p for p, r in shown.items() if r["held_back"]} == {p for p, r in held.items() if r["held_back"]}
        assert any(f"partition {part}: ingestion held at the last stable offset" in n for n in doc["notes"])
        # watermarks: per partition as counted from bronze's rows here; per cluster, their sums
        rows = spark.read.format("delta").load(tables.path("bronze", "offsets_records")).collect()
        counts = Counter(r["partition"] for r in rows if r["cluster"] == "harness")
        assert {r["partition"]: r["records"] for r in doc["partitions"] if r["cluster"] == "harness"} == counts
        (cluster,) = [w for w in doc["watermarks"] if w["cluster"] == "harness"]
        assert (cluster["partitions"], cluster["records"]) == (len(counts), sum(counts.values()))
    finally:
        with contextlib.suppress(KafkaException):  # already aborted by the coordinator's timeout
            p.abort_transaction(30)
        member.close()
    # the coordinator writes the ABORT marker after EndTxn returns: wait until the LSO moved
    h.wait(
        lambda: (e := partition_ends(spark, live_source(harness))[part])["last_stable"] == e["high_watermark"],
        "the ABORT marker to release the last stable offset",
        timeout=60,
        every=0.5,
    )
    second = ingest_kafka(spark, tables, "live", live_source(harness), "run-hanging-2")
    row = {r["partition"]: r for r in last_runs(spark, tables)}[part]
    assert row["held_back"] == 0, (row, second.notes, partition_ends(spark, live_source(harness))[part])


def test_live_truth_snapshot_equals_the_harness_snapshot(spark, harness):
    """``quality.truth_snapshot: live`` fetches committed offsets through Kafka's Admin API in
    Spark's JVM; they equal what the harness's own Admin client (tools/kafka/Truth.java) reports
    at the same offsets-topic position."""
    from pipelines.bronze.kafka_truth import fetch_truth

    h = harness.harness
    # offsets of their own: the harness expires empty groups' offsets after a minute
    h.create_topic("truth-live-t", 2)
    h.alter_offsets("truth-live", {("truth-live-t", 0): 5, ("truth-live-t", 1): 7}, metadata="m")
    for _ in range(10):
        ours = fetch_truth(spark, live_source(harness))
        theirs = h.snapshot([])
        if ours.offsets_topic_end_offsets == theirs.offsets_topic_end_offsets:
            break
    else:
        pytest.fail("the offsets topic kept moving between the two snapshots")
    mine = {k: (o.offset, o.metadata) for k, o in ours.committed().items()}
    assert mine[("truth-live", "truth-live-t", 1)] == (7, "m\x00")  # librdkafka sends metadata with a NUL
    # the live snapshot lists groups with listConsumerGroups (the 3.9 Admin client in Spark's JVM):
    # classic and consumer groups only; the harness's snapshot also has streams groups' offsets
    listed = {g.group_id for g in theirs.groups if g.type in ("classic", "consumer")}
    assert mine == {k: (o.offset, o.metadata) for k, o in theirs.committed().items() if k[0] in listed}
