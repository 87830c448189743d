"""The broker's own ``__consumer_offsets`` files after every scenario: our decoder reads every record,
agrees with Kafka's DumpLogSegments record by record, and the reference replay rebuilds each
scenario's truth snapshot from the log up to the snapshot's position."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from pipelines.reference.replay import replay_paths
from tests.support.dumplog import (
    REPO,
    canonical_from_kafka,
    canonical_from_ours,
    compare_detailed,
    parse_dump,
    run_dump_log_segments,
)


@pytest.fixture(scope="module")
def records(broker_files: Path) -> list[dict]:
    cmd = [sys.executable, "-m", "pipelines.cli.main", "inspect", "--records", str(broker_files)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, encoding="utf-8")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_every_record_decodes(records):
    assert len(records) > 1000
    bad = [r for r in records if r["status"] != "ok"]
    assert bad == []
    types = Counter(r["record_type"] for r in records if not r["control"])
    # offset commits, classic groups, the consumer-group protocol (3, 5-8; 4 is no longer written
    # since 4.1), its regex subscriptions (16), share groups (10-15) and streams groups (17, 19-23;
    # 18 was never released)
    assert {1, 2, 3, 5, 6, 7, 8, 16, 10, 11, 12, 13, 14, 15, 17, 19, 20, 21, 22, 23} <= set(types), types
    # a deleted KIP-848 group still gets a type-4 tombstone (the coordinator clears what older
    # brokers wrote): no type-4 value is written
    values = Counter(r["record_type"] for r in records if not r["control"] and not r["tombstone"])
    assert 4 not in values and 18 not in types, values
    markers = Counter(r["control_type"] for r in records if r["control"])
    assert markers["COMMIT"] >= 2 and markers["ABORT"] >= 1, markers


def test_matches_kafka_dump_log_segments(broker_files, records):
    files = sorted(broker_files.rglob("*.log"))
    kafka = parse_dump(run_dump_log_segments(files))
    res = compare_detailed([canonical_from_kafka(r) for r in kafka], [canonical_from_ours(r) for r in records])
    assert not res.differences, res.summary()
    assert res.kafka_records == res.our_records == len(records)


def test_a_segment_rolled(harness, broker_files):
    r = harness.result("bulk_roll")
    part = broker_files / f"__consumer_offsets-{r.facts['offsets_partition']}"
    assert len(list(part.glob("*.log"))) >= 2, sorted(p.name for p in part.iterdir())


def _offset_records(records, group):
    return [r for r in records if r["record_type"] in (0, 1) and r["key"]["group"] == group]


def test_unchanged_commits_are_written_again(harness, records):
    topic = harness.result("classic_lifecycle").facts["topic"]
    values = Counter(
        (r["key"]["partition"], r["value"]["offset"])
        for r in _offset_records(records, "classic-lifecycle")
        if r["key"]["topic"] == topic and not r["tombstone"]
    )
    assert values[(0, 5)] >= 4 and values[(1, 6)] >= 4, values


def test_standalone_group_deletion_tombstones(harness, records):
    """Kafka 4.x's coordinator deletes an assign()-only group with offset tombstones AND a group
    metadata tombstone (the pre-4.0 coordinator wrote only the offset tombstones)."""
    r = harness.result("delete_and_recreate")
    standalone, topic = r.facts["standalone"], r.facts["topic"]
    tomb = [x for x in _offset_records(records, standalone) if x["tombstone"]]
    assert sorted((x["key"]["topic"], x["key"]["partition"]) for x in tomb) == [(topic, 0), (topic, 2)]
    group_tombs = [x for x in records if x["record_type"] == 2 and x["key"]["group"] == standalone]
    assert [x["tombstone"] for x in group_tombs] == [True]
    # written in one batch with the offset tombstones: gold infers the cause "group_deletion" from that
    assert {x["batch_position"] for x in tomb} == {group_tombs[0]["batch_position"]}


def test_aborted_offset_is_in_the_log_but_not_applied(harness, records):
    harness.result("transactional_commits")
    txn = [x for x in _offset_records(records, "txn-offsets") if x["transactional"]]
    assert sorted(x["value"]["offset"] for x in txn) == [10, 20, 30]


@pytest.mark.parametrize(
    "scenario",
    [
        "classic_lifecycle",
        "offset_reset",
        "delete_and_recreate",
        "transactional_commits",
        "offset_expiry",
        "new_protocol",
        "topic_recreated",
        "explicit_offset_delete",
        "share_group",
        "streams_group",
        "bulk_roll",
        "group_listing",
    ],
)
def test_reference_replay_rebuilds_every_snapshot(harness, broker_files, scenario):
    """The replay of the broker's log up to each snapshot's position gives the offsets
    listConsumerGroupOffsets returned at that moment (spec section 12 against Kafka itself), the
    groups listGroups lists, the generation, assignor and members (with their assignments) of
    classic groups snapshot while their members were alive, and streams groups' epochs and members."""
    r = harness.result(scenario)
    live = 0
    for label, snap in r.snapshots.items():
        state = replay_paths([str(broker_files)], stop_at=snap.offsets_topic_end_offsets).snapshot()
        ours = {
            (o["group"], o["topic"], o["partition"]): (o["offset"], o["metadata"])
            for o in state["offsets"]
            if o["group"] in r.groups
        }
        in_snapshot = {g.group_id for g in snap.groups}
        ours = {k: v for k, v in ours.items() if k[0] in in_snapshot}
        truth = {k: (v.offset, v.metadata) for k, v in snap.committed().items() if k[0] in r.groups}
        assert ours == truth, f"{scenario}/{label}"
        # the groups Kafka lists (offsets-only groups included): type, state, protocol type (share
        # and streams groups in the state their members' records give, issue 14)
        listed = {
            g["group"]: (g["type"], g["state"], g["protocol_type"])
            for g in state["groups"]
            if g["group"] in in_snapshot
        }
        kafka = {
            g.group_id: (g.type, g.state, g.protocol_type)
            for g in snap.groups
            if g.exists and g.type in ("classic", "consumer", "share", "streams") and not g.awaiting_cleanup()
        }
        assert listed == kafka, f"{scenario}/{label}"
        classic = {g["group"]: g for g in state["classic_groups"]}
        for g in snap.groups:
            if not (g.exists and g.type == "classic" and "generation" in g.observed_by_clients):
                continue
            c = classic[g.group_id]
            assert (c["generation"], c["protocol_type"], c["protocol"]) == (
                g.generation,
                g.protocol_type,
                g.partition_assignor,
            ), f"{scenario}/{label}"
            ours_members = {
                m["member_id"]: (m["client_id"], m["client_host"], m["group_instance_id"], _parts(m))
                for m in c["members"]
            }
            described = {
                m.member_id: (m.client_id, m.host, m.group_instance_id, {(a.topic, a.partition) for a in m.assignment})
                for m in g.members
            }
            assert ours_members == described, f"{scenario}/{label}"
            live += 1
        streams = {g["group"]: g for g in state["streams_groups"]}
        for g in snap.groups:
            if g.exists and g.type == "streams":
                s = streams[g.group_id]
                assert (s["epoch"], s["assignment_epoch"]) == (g.group_epoch, g.target_assignment_epoch)
                assert sorted(m["member_id"] for m in s["members"]) == [m.member_id for m in g.members]
                live += 1
    # every snapshot of these scenarios is of a group with live members (or a streams group)
    want = {"classic_lifecycle": 5, "delete_and_recreate": 1, "streams_group": 4}.get(scenario, live)
    assert live == want, f"{scenario}: {live} snapshots of live groups compared, {want} expected"


def _parts(member: dict) -> set[tuple[str, int]]:
    return {(t, p) for t, ps in member["assigned_partitions"].items() for p in ps}
