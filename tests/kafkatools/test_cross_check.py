"""Cross-check ``offsets-lakehouse inspect --records`` against Kafka's own decoder (DumpLogSegments).

The canonicalisation/comparison helpers are unit-tested first on hand-written JSON lines that
follow docs/inspect-records.md, then the real-segments tree is compared record by record.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections import Counter

import pytest

from tests.kafkatools.conftest import real_segments_dir
from tests.support.dumplog import (
    EVERY,
    REPO,
    canonical_from_kafka,
    canonical_from_ours,
    compare,
    compare_detailed,
)

pytestmark = pytest.mark.kafkatools

F = "/seg/__consumer_offsets-3/00000000000000000000.log"
TS = 1700000000000


def _kafka(**kw):
    """A record as parse_dump returns it (defaults: non-transactional v2 batch at position 0)."""
    rec = dict(
        file=F,
        baseOffset=kw.get("offset", 0),
        lastOffset=kw.get("offset", 0),
        count=1,
        position=0,
        magic=2,
        compresscodec="none",
        size=100,
        crc=0,
        isvalid=True,
        batchTimestampType="CreateTime",
        maxTimestamp=TS,
        isTransactional=False,
        isControl=False,
        producerId=-1,
        producerEpoch=-1,
        partitionLeaderEpoch=0,
        baseSequence=-1,
        deleteHorizonMs=None,
        offset=0,
        timestamp=TS,
        timestamp_type="CreateTime",
        keySize=10,
        valueSize=10,
        sequence=-1,
        headerKeys=[],
        recordCrc=None,
        recordIsValid=None,
        control_type=None,
        control_type_id=None,
        coordinator_epoch=None,
        control_json=None,
        record_type=None,
        key=None,
        payload=None,
        tombstone=False,
        value_version=None,
        value=None,
        unknown_type=False,
        error=None,
    )
    rec.update(kw)
    return rec


def _ours(**kw):
    """A JSON line of inspect --records (docs/inspect-records.md)."""
    line = dict(
        file=F,
        partition=3,
        batch_position=0,
        offset=0,
        timestamp=TS,
        timestamp_type="CreateTime",
        magic=2,
        codec="none",
        transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        control=False,
        status="ok",
        record_type=None,
        record_type_name=None,
        key=None,
        tombstone=False,
        value_version=None,
        value=None,
        layout=None,
    )
    line.update(kw)
    return json.loads(json.dumps(line))


OC_KEY_K = {"group": "g", "topic": "t", "partition": 1}


def test_offset_commit_v1_defaults_and_names():
    k = _kafka(
        record_type=1,
        key=OC_KEY_K,
        value_version=1,
        value={"offset": 42, "metadata": "", "commitTimestamp": TS, "expireTimestamp": TS + 1},
    )
    o = _ours(
        record_type=1,
        record_type_name="OffsetCommit",
        key=OC_KEY_K,
        value_version=1,
        value={
            "offset": 42,
            "leader_epoch": -1,
            "metadata": "",
            "commit_timestamp": TS,
            "expire_timestamp": TS + 1,
            "topic_id": "AAAAAAAAAAAAAAAAAAAAAA",
        },
    )
    res = compare_detailed([canonical_from_kafka(k)], [canonical_from_ours(o)])
    assert res.unaccepted == []
    assert res.by_rule() == {"absent-field-default": 2}
    # a non-default value for a field Kafka did not print is a real difference
    o2 = copy.deepcopy(o)
    o2["value"]["leader_epoch"] = 7
    assert compare([canonical_from_kafka(k)], [canonical_from_ours(o2)]) == [
        f"{F} @0 value.leader_epoch: kafka=<absent> ours=7"
    ]
    o3 = copy.deepcopy(o)
    o3["value"]["commit_timestamp"] = TS + 9
    assert compare([canonical_from_kafka(k)], [canonical_from_ours(o3)]) == [
        f"{F} @0 value.commit_timestamp: kafka={TS} ours={TS + 9}"
    ]


def test_accepted_fields_are_listed_per_type_and_version():
    """A default is accepted only for the field, record type and value versions listed in
    ACCEPTED -- not for any field of that name in any record."""
    v3 = {"offset": 42, "leader_epoch": -1, "metadata": "", "commit_timestamp": TS, "expire_timestamp": -1}
    k = _kafka(
        record_type=1, key=OC_KEY_K, value_version=3, value={"offset": 42, "metadata": "", "commitTimestamp": TS}
    )
    o = _ours(record_type=1, key=OC_KEY_K, value_version=3, value={**v3, "topic_id": "AAAAAAAAAAAAAAAAAAAAAA"})
    # v3 has leaderEpoch: Kafka prints it, so its absence is a real difference even at the default
    assert compare([canonical_from_kafka(k)], [canonical_from_ours(o)]) == [
        f"{F} @0 value.leader_epoch: kafka=<absent> ours=-1"
    ]
    # the same default in a record type where the field is not listed (type 8 has no leader_epoch)
    k8 = _kafka(record_type=8, key={"groupId": "g", "memberId": "m"}, value_version=0, value={"memberEpoch": 1})
    o8 = _ours(record_type=8, key={"group_id": "g", "member_id": "m"}, value_version=0, value={"member_epoch": 1})
    o8["value"]["leader_epoch"] = -1
    assert compare([canonical_from_kafka(k8)], [canonical_from_ours(o8)]) == [
        f"{F} @0 value.leader_epoch: kafka=<absent> ours=-1"
    ]


def test_a_field_absent_by_version_must_be_absent_in_every_record():
    """leaderEpoch does not exist in OffsetCommitValue v1: if Kafka printed it in one record of two,
    the other record's accepted absence is reported with the counts."""
    value = {"offset": 1, "metadata": "", "commitTimestamp": TS, "expireTimestamp": -1}
    ks = [
        _kafka(offset=0, record_type=1, key=OC_KEY_K, value_version=1, value=value),
        _kafka(offset=1, record_type=1, key=OC_KEY_K, value_version=1, value={**value, "leaderEpoch": -1}),
    ]
    ours_value = {**_snake(value), "leader_epoch": -1, "topic_id": "AAAAAAAAAAAAAAAAAAAAAA"}
    os_ = [_ours(offset=i, record_type=1, key=OC_KEY_K, value_version=1, value=ours_value) for i in (0, 1)]
    res = compare_detailed([canonical_from_kafka(k) for k in ks], [canonical_from_ours(o) for o in os_])
    assert res.unaccepted == [
        "<all files> @-1 <accepted field present> type 1 v1 value.leader_epoch: "
        'kafka="absent in 1 records" ours="2 records"'
    ]
    ks[1]["value"].pop("leaderEpoch")
    res = compare_detailed([canonical_from_kafka(k) for k in ks], [canonical_from_ours(o) for o in os_])
    assert res.unaccepted == []
    assert res.accepted[("absent-field-default", 1, 1, "value.leader_epoch")] == 2


def _snake(value: dict) -> dict:
    return {re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", k).lower(): v for k, v in value.items()}


def test_group_metadata_members_map_subscription_info():
    sub_b64, asg_b64 = "AAEAAAABAAZvcmRlcnP/////AAAAAA==", "AAEAAAABAAZvcmRlcnMAAAACAAAAAAAAAAP/////"
    k = _kafka(
        record_type=2,
        key={"group": "g"},
        value_version=3,
        value={
            "protocolType": "consumer",
            "generation": 7,
            "protocol": "range",
            "leader": "m1",
            "currentStateTimestamp": TS,
            "members": [
                {
                    "memberId": "m1",
                    "groupInstanceId": None,
                    "clientId": "c1",
                    "clientHost": "/h",
                    "rebalanceTimeout": 300000,
                    "sessionTimeout": 45000,
                    "subscription": {"topics": ["orders"], "userData": None, "ownedPartitions": []},
                    "assignment": {"assignedPartitions": [{"topic": "orders", "partitions": [0, 3]}], "userData": None},
                },
                {
                    "memberId": "m2",
                    "groupInstanceId": None,
                    "clientId": "c2",
                    "clientHost": "/h",
                    "rebalanceTimeout": 300000,
                    "sessionTimeout": 45000,
                    "subscription": "AAkAAAAA",
                    "assignment": "",
                },
            ],
        },
    )
    o = _ours(
        record_type=2,
        record_type_name="GroupMetadata",
        key={"group": "g"},
        value_version=3,
        value={
            "protocol_type": "consumer",
            "generation": 7,
            "protocol": "range",
            "leader": "m1",
            "current_state_timestamp": TS,
            "members": [
                {
                    "member_id": "m1",
                    "group_instance_id": None,
                    "client_id": "c1",
                    "client_host": "/h",
                    "rebalance_timeout": 300000,
                    "session_timeout": 45000,
                    "subscription": sub_b64,
                    "assignment": asg_b64,
                    "subscription_info": {
                        "version": 1,
                        "topics": ["orders"],
                        "user_data": None,
                        "owned_partitions": [],
                        "generation_id": -1,
                        "rack_id": None,
                    },
                    "assignment_info": {
                        "version": 1,
                        "assigned_partitions": [{"topic": "orders", "partitions": [0, 3]}],
                        "user_data": None,
                    },
                },
                {
                    "member_id": "m2",
                    "group_instance_id": None,
                    "client_id": "c2",
                    "client_host": "/h",
                    "rebalance_timeout": 300000,
                    "session_timeout": 45000,
                    "subscription": "AAkAAAAA",
                    "assignment": "",
                    "subscription_info": {
                        "version": 9,
                        "topics": [],
                        "user_data": None,
                        "owned_partitions": [],
                        "generation_id": -1,
                        "rack_id": None,
                    },
                    "assignment_info": None,
                },
            ],
        },
    )
    res = compare_detailed([canonical_from_kafka(k)], [canonical_from_ours(o)])
    assert res.unaccepted == []
    assert res.by_rule() == {"absent-field-default": 2, "consumer-protocol-version-above-3": 1}
    o["value"]["members"][0]["assignment_info"]["assigned_partitions"][0]["partitions"] = [0]
    assert compare([canonical_from_kafka(k)], [canonical_from_ours(o)]) == [
        f"{F} @0 value.members[0].assignment.assigned_partitions[0].partitions.<length>: kafka=2 ours=1"
    ]


def test_control_tombstone_unknown_error_and_envelope():
    kafka = [
        _kafka(
            offset=0,
            isControl=True,
            isTransactional=True,
            producerId=4000,
            producerEpoch=0,
            control_type="COMMIT",
            control_type_id=1,
            coordinator_epoch=3,
        ),
        _kafka(offset=1, record_type=4, key={"groupId": "cg1"}, tombstone=True, valueSize=-1),
        _kafka(offset=2, record_type=24, unknown_type=True),
        _kafka(offset=3, error="Found an unknown record version 9 for 1 type"),
        _kafka(offset=4, record_type=9, unknown_type=True, tombstone=True, valueSize=-1),
        _kafka(
            offset=5,
            magic=0,
            timestamp=-1,
            timestamp_type="NoTimestampType",
            position=500,
            baseOffset=None,
            record_type=1,
            key=OC_KEY_K,
            tombstone=True,
        ),
    ]
    ours = [
        _ours(
            offset=0,
            control=True,
            transactional=True,
            producer_id=4000,
            producer_epoch=0,
            control_type="COMMIT",
            control_type_id=1,
            control_version=0,
            coordinator_epoch=3,
        ),
        _ours(
            offset=1,
            record_type=4,
            record_type_name="ConsumerGroupPartitionMetadata",
            key={"group_id": "cg1"},
            tombstone=True,
        ),
        _ours(
            offset=2,
            status="undecodable",
            record_type=24,
            reason="unknown_record_type",
            error_part="key",
            error_position=2,
            error_detail="x",
            raw_key="ABgAAA==",
            raw_value="AAAA",
        ),
        _ours(
            offset=3,
            status="undecodable",
            record_type=1,
            key=OC_KEY_K,
            reason="unknown_value_version",
            error_part="value",
            error_position=0,
            error_detail="v9",
            raw_key="",
            raw_value="",
        ),
        _ours(
            offset=4,
            record_type=9,
            record_type_name="ShareGroupPartitionMetadata",
            key={"group_id": "cg1"},
            tombstone=True,
        ),
        _ours(
            offset=5,
            magic=0,
            timestamp=None,
            timestamp_type=None,
            batch_position=500,
            record_type=1,
            key=OC_KEY_K,
            tombstone=True,
        ),
    ]
    res = compare_detailed([canonical_from_kafka(r) for r in kafka], [canonical_from_ours(r) for r in ours])
    assert res.unaccepted == []
    assert res.by_rule() == {"types-unknown-to-kafka-4.2": 2}  # unknown_type flag and the key of type 9

    bad = copy.deepcopy(ours)
    bad[0]["coordinator_epoch"] = 4
    bad[5]["batch_position"] = 501
    del bad[2]
    bad.append(_ours(offset=9))
    diffs = compare([canonical_from_kafka(r) for r in kafka], [canonical_from_ours(r) for r in bad])
    assert diffs == [
        f'{F} @9 <extra in ours>: kafka=<absent> ours="1 offsets 9"',
        f'{F} @2 <missing in ours>: kafka="1 offsets 2" ours=<absent>',
        f"{F} @0 coordinator_epoch: kafka=3 ours=4",
        f"{F} @5 batch_position: kafka=500 ours=501",
    ]


def test_kip848_fields_and_tags():
    k = _kafka(
        record_type=8,
        key={"groupId": "cg1", "memberId": "m"},
        value_version=0,
        value={
            "memberEpoch": 5,
            "previousMemberEpoch": 4,
            "state": 0,
            "assignedPartitions": [{"topicId": "ASNFZ4mrze8BI0VniavN7w", "partitions": [0, 1]}],
            "partitionsPendingRevocation": [],
        },
    )
    o = _ours(
        record_type=8,
        key={"group_id": "cg1", "member_id": "m"},
        value_version=0,
        value={
            "member_epoch": 5,
            "previous_member_epoch": 4,
            "state": 0,
            "assigned_partitions": [
                {"topic_id": "ASNFZ4mrze8BI0VniavN7w", "partitions": [0, 1], "assignment_epochs": [5, 5]}
            ],
            "partitions_pending_revocation": [],
        },
    )
    res = compare_detailed([canonical_from_kafka(k)], [canonical_from_ours(o)])
    assert (res.unaccepted, res.by_rule()) == ([], {"tagged-field-added-after-4.2": 1})
    o["value"]["assigned_partitions"][0]["topic_id"] = "AAAAAAAAAAAAAAAAAAAAAA"
    assert len(compare([canonical_from_kafka(k)], [canonical_from_ours(o)])) == 1


def test_real_segments_cross_check(kafka_real_dump, manifest):
    kafka_records, _ = kafka_real_dump
    root = real_segments_dir()
    cmd = [sys.executable, "-m", "pipelines.cli.main", "inspect", "--records", str(root)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, encoding="utf-8")
    if proc.returncode != 0:
        pytest.fail(f"`{' '.join(cmd[1:])}` exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    ours = []
    for n, line in enumerate(proc.stdout.splitlines(), 1):
        try:
            ours.append(canonical_from_ours(json.loads(line)))
        except (ValueError, KeyError, TypeError) as e:
            pytest.fail(f"inspect --records line {n} does not follow docs/inspect-records.md ({e!r}): {line[:300]}")
    res = compare_detailed([canonical_from_kafka(r) for r in kafka_records], ours)
    assert not res.differences, res.summary()
    assert res.kafka_records == res.our_records == len(kafka_records)
    # Fields a value version does not have are accepted once per record of that version: as many
    # times as the independent parser's census (manifest.tsv) counts such records.
    census: Counter[str] = Counter()
    for row in manifest.values():
        for pair in filter(None, row["key_value_pairs"].split(",")):
            versions, n = pair.rsplit(":", 1)
            census[versions] += int(n)
    checked = 0
    for a in EVERY:
        for rtype in a.record_types:
            for version in a.versions or ():
                expected = census[f"{rtype}/{version}"]  # key version = record type for types 0-2
                assert res.accepted[(a.rule, rtype, version, a.field)] == expected, (a, rtype, version)
                checked += expected
    assert checked > 50_000  # the census's type 1 v1-v4 and type 2 v1 records
    assert set(res.by_rule()) == {"absent-field-default"}, res.by_rule()


def _inspect_records(path) -> list[dict]:
    cmd = [sys.executable, "-m", "pipelines.cli.main", "inspect", "--records", str(path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, encoding="utf-8")
    if proc.returncode != 0:
        pytest.fail(f"`{' '.join(cmd[1:])}` exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return [canonical_from_ours(json.loads(line)) for line in proc.stdout.splitlines()]


def test_generated_segments_cross_check(java, tmp_path):
    """Every record type, value version, magic and codec the generator writes, read by Kafka."""
    from pipelines.generate import generate
    from tests.support.dumplog import parse_dump, run_dump_log_segments

    out = tmp_path / "gen"
    generate(out, 40_000, seed=11, segment_bytes=256 * 1024)
    files = sorted(out.rglob("*.log"))
    kafka_records = parse_dump(run_dump_log_segments(files))
    ours = _inspect_records(out)
    res = compare_detailed([canonical_from_kafka(r) for r in kafka_records], ours)
    assert not res.differences, res.summary()
    assert res.kafka_records == res.our_records == len(kafka_records) >= 40_000
    types = {r.get("record_type") for r in ours}
    assert set(range(24)) - types <= {9, 18}, "the generator covers every released record type"
