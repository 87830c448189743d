"""The DumpLogSegments output parser, validated without our decoder:

* on all real segment files against the independent census (manifest.tsv);
* on the spec's §13 hand-built byte examples;
* on hand-built KIP-848 / share / streams / compressed / control / legacy batches, which also
  pins down how Kafka 4.2.1 prints them (docs/kafka-dumplog-format.md).
"""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import pytest

from tests.kafkatools.conftest import real_segments_dir
from tests.support import logbuild as lb
from tests.support.dumplog import DumpParseError, parse_dump

pytestmark = pytest.mark.kafkatools

TS = 1700000000000
U = lb.uuid("0123456789abcdef0123456789abcdef")
U_TEXT = "ASNFZ4mrze8BI0VniavN7w"  # spec §2.1 / §13.4: URL-safe base64 without padding


# ---------------------------------------------------------------- real segments vs manifest


def _pairs(field: str) -> Counter[str]:
    return Counter({k: int(v) for k, v in (p.rsplit(":", 1) for p in field.split(",") if p)})


def _first(rec: dict) -> int:
    return rec["offset"] if rec["baseOffset"] is None else rec["baseOffset"]


def test_real_segments_match_manifest(kafka_real_dump, manifest):
    records, info = kafka_real_dump
    root = real_segments_dir().resolve()
    per_file: dict[str, list[dict]] = {rel: [] for rel in manifest}
    for r in records:
        per_file[str(Path(r["file"]).resolve().relative_to(root))].append(r)
    assert {str(Path(f).resolve().relative_to(root)) for f in info} == set(manifest)
    batches = {str(Path(f).resolve().relative_to(root)): v for f, v in info.items()}

    mismatches = []
    for rel, row in manifest.items():
        recs = per_file[rel]
        data = [r for r in recs if not r["isControl"]]
        got = {
            "batches": batches[rel]["batches"],
            "records": len(recs),
            "data_records": len(data),
            "control_records": len(recs) - len(data),
            "tombstones": sum(r["tombstone"] for r in data),
            "key_value_pairs": Counter(f"{r['record_type']}/{r['value_version']}" for r in data if not r["tombstone"]),
            "tombstones_by_key": Counter(str(r["record_type"]) for r in data if r["tombstone"]),
            # the census counts batch offsets: first batch's base offset, last batch's last offset
            "first_offset": _first(recs[0]) if recs else None,
            "last_offset": recs[-1]["lastOffset"] if recs else None,
            "delete_horizon_batches": len({r["position"] for r in recs if r["deleteHorizonMs"] is not None}),
            "unparsed_bytes": batches[rel]["invalid_trailing_bytes"],
        }
        want = {
            "batches": int(row["batches"]),
            "records": int(row["records"]),
            "data_records": int(row["data_records"]),
            "control_records": int(row["control_records"]),
            "tombstones": int(row["tombstones"]),
            "key_value_pairs": _pairs(row["key_value_pairs"]),
            "tombstones_by_key": _pairs(row["tombstones_by_key"]),
            "first_offset": int(row["first_offset"]) if row["records"] != "0" else None,
            "last_offset": int(row["last_offset"]) if row["records"] != "0" else None,
            "delete_horizon_batches": int(row["delete_horizon_batches"]),
            "unparsed_bytes": int(row["unparsed_bytes"]),
        }
        if got != want:
            mismatches.append(
                f"{rel}: " + ", ".join(f"{k} kafka={got[k]} manifest={want[k]}" for k in want if got[k] != want[k])
            )
    assert not mismatches, f"{len(mismatches)} file(s) differ:\n" + "\n".join(mismatches[:20])
    assert sum(len(v) for v in per_file.values()) == sum(int(r["records"]) for r in manifest.values())
    # Kafka decoded every record of the real data (only types 1 and 2 occur there).
    assert not [r for r in records if r["error"] or r["unknown_type"]]


# ---------------------------------------------------------------- spec §13 examples

KEY_13_1 = "0001 0009 7465737467726f7570 0006 6f7264657273 00000003"
HEX_13_8 = """00 00 00 00 00 00 00 65 00 00 00 51 00 00 00 00 02 90 55 cd 71 00 00 00 00 00 00
00 00 01 8b cf e5 68 00 00 00 01 8b cf e5 68 00 ff ff ff ff ff ff ff ff ff ff ff ff ff ff
00 00 00 01 3e 00 00 00 32 00 01 00 09 74 65 73 74 67 72 6f 75 70 00 06 6f 72 64 65 72 73
00 00 00 03 01 00"""
HEX_13_9 = """00 00 00 00 00 00 00 64 00 00 00 69 00 00 00 00 02 3d 5c 73 a3 00 00 00 00 00 00
00 00 01 8b cf e5 68 00 00 00 01 8b cf e5 68 00 ff ff ff ff ff ff ff ff ff ff ff
ff ff ff 00 00 00 01 6e 00 00 00 32 00 01 00 09 74 65 73 74 67 72 6f 75 70 00 06
6f 72 64 65 72 73 00 00 00 03 30 00 03 00 00 00 00 00 00 00 2a 00 00 00 05 00 00
00 00 01 8b cf e5 68 00 00"""
HEX_13_10_TXN = """00 00 00 00 00 00 00 66 00 00 00 69 00 00 00 00 02 d3 d2 48 4e 00 10 00 00 00 00
00 00 01 8b cf e5 68 00 00 00 01 8b cf e5 68 00 00 00 00 00 00 00 0f a0 00 00 00
00 00 00 00 00 00 01 6e 00 00 00 32 00 01 00 09 74 65 73 74 67 72 6f 75 70 00 06
6f 72 64 65 72 73 00 00 00 03 30 00 03 00 00 00 00 00 00 00 2a 00 00 00 05 00 00
00 00 01 8b cf e5 68 00 00"""
HEX_13_10_CTL = """00 00 00 00 00 00 00 67 00 00 00 42 00 00 00 00 02 f6 35 1f 43 00 30 00 00 00 00
00 00 01 8b cf e5 68 00 00 00 01 8b cf e5 68 00 00 00 00 00 00 00 0f a0 00 00 ff
ff ff ff 00 00 00 01 20 00 00 00 08 00 00 00 01 0c 00 00 00 00 00 03 00"""
HEX_13_11_M1 = (
    "00 00 00 00 00 00 00 07 00 00 00 4b 7b 50 cf b3 01 00 00 00 01 8b cf e5 68 00 00 00 00 19"
    + KEY_13_1
    + "00 00 00 1c 00 01 00 00 00 00 00 00 00 2a 00 00 00 00 01 8b cf e5 68 00"
    "00 00 01 8b d5 0b c4 00"
)
HEX_13_11_M0 = "00 00 00 00 00 00 00 07 00 00 00 27 75 8e 2a 13 00 00 00 00 00 19" + KEY_13_1 + "ff ff ff ff"

KEY_JSON = {"group": "testgroup", "topic": "orders", "partition": 3}
V3_JSON = {"offset": 42, "leaderEpoch": 5, "metadata": "", "commitTimestamp": TS}


def _hex(s: str) -> bytes:
    return bytes.fromhex("".join(s.split()))


def _pick(rec: dict, *names: str) -> dict:
    return {n: rec[n] for n in names}


def test_spec_section_13_examples(dump_built):
    # Our byte builder reproduces the spec's bytes (so the builder-based tests below rest on it).
    key = lb.key(1, "testgroup", "orders", 3)
    v3 = lb.i16(3) + lb.i64(42) + lb.i32(5) + lb.string("") + lb.i64(TS)
    assert lb.batch_v2(100, [(key, v3)]) == _hex(HEX_13_9)
    assert lb.batch_v2(101, [(key, None)]) == _hex(HEX_13_8)
    assert lb.control_batch(103, True, 3, producer_id=4000) == _hex(HEX_13_10_CTL)
    assert lb.message_legacy(7, key, None, magic=0) == _hex(HEX_13_11_M0)

    out = dump_built(
        {
            "s13_8_9_10": _hex(HEX_13_9) + _hex(HEX_13_8) + _hex(HEX_13_10_TXN) + _hex(HEX_13_10_CTL),
            "s13_11_m1": _hex(HEX_13_11_M1),
            "s13_11_m0": _hex(HEX_13_11_M0),
        }
    )
    commit, tomb, txn, ctl = out["s13_8_9_10"]
    batch = (
        "baseOffset",
        "position",
        "size",
        "crc",
        "magic",
        "compresscodec",
        "isTransactional",
        "isControl",
        "producerId",
        "producerEpoch",
        "partitionLeaderEpoch",
    )
    assert _pick(commit, *batch) == dict(
        baseOffset=100,
        position=0,
        size=117,
        crc=0x3D5C73A3,
        magic=2,
        compresscodec="none",
        isTransactional=False,
        isControl=False,
        producerId=-1,
        producerEpoch=-1,
        partitionLeaderEpoch=0,
    )
    assert _pick(
        commit,
        "offset",
        "timestamp",
        "timestamp_type",
        "record_type",
        "key",
        "tombstone",
        "value_version",
        "value",
        "error",
    ) == dict(
        offset=100,
        timestamp=TS,
        timestamp_type="CreateTime",
        record_type=1,
        key=KEY_JSON,
        tombstone=False,
        value_version=3,
        value=V3_JSON,
        error=None,
    )
    assert _pick(
        tomb,
        "offset",
        "position",
        "size",
        "crc",
        "record_type",
        "key",
        "tombstone",
        "value",
        "valueSize",
        "value_version",
    ) == dict(
        offset=101,
        position=117,
        size=93,
        crc=0x9055CD71,
        record_type=1,
        key=KEY_JSON,
        tombstone=True,
        value=None,
        valueSize=-1,
        value_version=None,
    )
    assert _pick(
        txn, "offset", "position", "crc", "isTransactional", "producerId", "producerEpoch", "sequence", "value"
    ) == dict(
        offset=102,
        position=210,
        crc=0xD3D2484E,
        isTransactional=True,
        producerId=4000,
        producerEpoch=0,
        sequence=0,
        value=V3_JSON,
    )
    assert _pick(
        ctl,
        "offset",
        "position",
        "size",
        "crc",
        "isControl",
        "isTransactional",
        "producerId",
        "control_type",
        "control_type_id",
        "coordinator_epoch",
        "record_type",
        "key",
        "tombstone",
    ) == dict(
        offset=103,
        position=327,
        size=78,
        crc=0xF6351F43,
        isControl=True,
        isTransactional=True,
        producerId=4000,
        control_type="COMMIT",
        control_type_id=1,
        coordinator_epoch=3,
        record_type=None,
        key=None,
        tombstone=False,
    )

    (m1,) = out["s13_11_m1"]
    assert _pick(
        m1,
        "offset",
        "position",
        "size",
        "magic",
        "crc",
        "recordCrc",
        "timestamp",
        "timestamp_type",
        "key",
        "value_version",
        "value",
        "baseOffset",
        "producerId",
    ) == dict(
        offset=7,
        position=0,
        size=87,
        magic=1,
        crc=0x7B50CFB3,
        recordCrc=0x7B50CFB3,
        timestamp=TS,
        timestamp_type="CreateTime",
        key=KEY_JSON,
        value_version=1,
        value={"offset": 42, "metadata": "", "commitTimestamp": TS, "expireTimestamp": TS + 86_400_000},
        baseOffset=None,
        producerId=-1,
    )
    (m0,) = out["s13_11_m0"]
    assert _pick(m0, "offset", "size", "magic", "crc", "timestamp", "timestamp_type", "key", "tombstone") == dict(
        offset=7,
        size=51,
        magic=0,
        crc=0x758E2A13,
        timestamp=-1,
        timestamp_type="NoTimestampType",
        key=KEY_JSON,
        tombstone=True,
    )


# ---------------------------------------------------------------- new-protocol records (spec §7-9)

G = "cg1"
SUB_V1 = _hex("0001 00000001 0006 6f7264657273 ffffffff 00000000")  # spec §13.7


def _tp(parts: list[int], epochs: list[int] | None = None) -> bytes:
    tags = {} if epochs is None else {0: lb.carray([lb.i32(e) for e in epochs])}
    return U + lb.carray([lb.i32(p) for p in parts]) + lb.tags(tags)


def _tasks(sub: str, parts: list[int], epochs: list[int] | None = None) -> bytes:
    tags = {} if epochs is None else {0: lb.carray([lb.i32(e) for e in epochs])}
    return lb.cstring(sub) + lb.carray([lb.i32(p) for p in parts]) + lb.tags(tags)


def _kv(k: str, v: str) -> bytes:
    return lb.cstring(k) + lb.cstring(v) + lb.tags()


# (key bytes, value bytes or None, expected Kafka key JSON data, expected value JSON data or None)
NEW_PROTOCOL_RECORDS = [
    # type 3, 4.1+ with MetadataHash tag / 4.0 layout (tag at default 0 is not printed)
    (
        lb.key(3, G),
        lb.i16(0) + lb.i32(5) + lb.tags({0: lb.i64(0x1122334455667788)}),
        {"groupId": G},
        {"epoch": 5, "metadataHash": 0x1122334455667788},
    ),
    (lb.key(3, G), _hex("0000 00000005 00"), {"groupId": G}, {"epoch": 5}),
    # type 4 tombstone
    (lb.key(4, G), None, {"groupId": G}, None),
    # type 5 without and with the ClassicMemberMetadata tag (bytes print as standard base64)
    (
        lb.key(5, G, "m-1"),
        lb.i16(0)
        + lb.cstring(None)
        + lb.cstring("r")
        + lb.cstring("c")
        + lb.cstring("/h")
        + lb.carray([lb.cstring("orders")])
        + lb.cstring(None)
        + lb.i32(-1)
        + lb.cstring(None)
        + lb.tags(),
        {"groupId": G, "memberId": "m-1"},
        {
            "instanceId": None,
            "rackId": "r",
            "clientId": "c",
            "clientHost": "/h",
            "subscribedTopicNames": ["orders"],
            "subscribedTopicRegex": None,
            "rebalanceTimeoutMs": -1,
            "serverAssignor": None,
        },
    ),
    (
        lb.key(5, G, "m-1"),
        lb.i16(0)
        + lb.cstring("i")
        + lb.cstring(None)
        + lb.cstring("c")
        + lb.cstring("/h")
        + lb.carray([])
        + lb.cstring("or.*")
        + lb.i32(1000)
        + lb.cstring("uniform")
        + lb.tags(
            {
                0: lb.uvarint(1)
                + lb.i32(45000)
                + lb.carray([lb.cstring("range") + lb.cbytes(SUB_V1) + lb.tags()])
                + lb.tags()
            }
        ),
        {"groupId": G, "memberId": "m-1"},
        {
            "instanceId": "i",
            "rackId": None,
            "clientId": "c",
            "clientHost": "/h",
            "subscribedTopicNames": [],
            "subscribedTopicRegex": "or.*",
            "rebalanceTimeoutMs": 1000,
            "serverAssignor": "uniform",
            "classicMemberMetadata": {
                "sessionTimeoutMs": 45000,
                "supportedProtocols": [{"name": "range", "metadata": "AAEAAAABAAZvcmRlcnP/////AAAAAA=="}],
            },
        },
    ),
    # type 8 (spec §13.12); the 4.3 AssignmentEpochs tag is unknown to 4.2.1 and silently skipped
    (
        lb.key(8, G, "m-1"),
        lb.i16(0) + lb.i32(5) + lb.i32(4) + lb.i8(0) + lb.carray([_tp([0, 1])]) + lb.carray([]) + lb.tags(),
        {"groupId": G, "memberId": "m-1"},
        {
            "memberEpoch": 5,
            "previousMemberEpoch": 4,
            "state": 0,
            "assignedPartitions": [{"topicId": U_TEXT, "partitions": [0, 1]}],
            "partitionsPendingRevocation": [],
        },
    ),
    (
        lb.key(8, G, "m-1"),
        lb.i16(0)
        + lb.i32(5)
        + lb.i32(4)
        + lb.i8(1)
        + lb.carray([_tp([0, 1], [5, 5])])
        + lb.carray([_tp([2])])
        + lb.tags(),
        {"groupId": G, "memberId": "m-1"},
        {
            "memberEpoch": 5,
            "previousMemberEpoch": 4,
            "state": 1,
            "assignedPartitions": [{"topicId": U_TEXT, "partitions": [0, 1]}],
            "partitionsPendingRevocation": [{"topicId": U_TEXT, "partitions": [2]}],
        },
    ),
    # type 16
    (
        lb.key(16, G, "or.*"),
        lb.i16(0) + lb.carray([lb.cstring("orders")]) + lb.i64(10) + lb.i64(TS) + lb.tags(),
        {"groupId": G, "regularExpression": "or.*"},
        {"topics": ["orders"], "version": 10, "timestamp": TS},
    ),
    # share groups: 10, 11 (4.1+ layout), 15
    (
        lb.key(10, G, "m"),
        lb.i16(0) + lb.cstring(None) + lb.cstring("c") + lb.cstring("/h") + lb.carray([lb.cstring("t")]) + lb.tags(),
        {"groupId": G, "memberId": "m"},
        {"rackId": None, "clientId": "c", "clientHost": "/h", "subscribedTopicNames": ["t"]},
    ),
    (lb.key(11, G), lb.i16(0) + lb.i32(3) + lb.i64(99) + lb.tags(), {"groupId": G}, {"epoch": 3, "metadataHash": 99}),
    (
        lb.key(15, G),
        lb.i16(0)
        + lb.carray([U + lb.cstring("a") + lb.carray([lb.i32(0)]) + lb.tags()])
        + lb.carray([])
        + lb.carray([U + lb.cstring("b") + lb.tags()])
        + lb.tags(),
        {"groupId": G},
        {
            "initializingTopics": [{"topicId": U_TEXT, "topicName": "a", "partitions": [0]}],
            "initializedTopics": [],
            "deletingTopics": [{"topicId": U_TEXT, "topicName": "b"}],
        },
    ),
    # streams groups: 17 (tags at default omitted / set printed), 19 (nullable struct), 22, 23
    (lb.key(17, G), lb.i16(0) + lb.i32(2) + lb.i64(77) + lb.tags(), {"groupId": G}, {"epoch": 2, "metadataHash": 77}),
    (
        lb.key(17, G),
        lb.i16(0) + lb.i32(2) + lb.i64(77) + lb.tags({0: lb.i32(4), 1: lb.carray([_kv("k", "v")])}),
        {"groupId": G},
        {
            "epoch": 2,
            "metadataHash": 77,
            "validatedTopologyEpoch": 4,
            "lastAssignmentConfigs": [{"key": "k", "value": "v"}],
        },
    ),
    (
        lb.key(19, G, "m"),
        lb.i16(0)
        + lb.cstring(None)
        + lb.cstring(None)
        + lb.cstring("c")
        + lb.cstring("/h")
        + lb.i32(-1)
        + lb.i32(1)
        + lb.cstring("p")
        + lb.i8(1)
        + lb.cstring("host")
        + lb.u16(65535)
        + lb.tags()
        + lb.carray([_kv("k", "v")])
        + lb.tags(),
        {"groupId": G, "memberId": "m"},
        {
            "instanceId": None,
            "rackId": None,
            "clientId": "c",
            "clientHost": "/h",
            "rebalanceTimeoutMs": -1,
            "topologyEpoch": 1,
            "processId": "p",
            "userEndpoint": {"host": "host", "port": 65535},
            "clientTags": [{"key": "k", "value": "v"}],
        },
    ),
    (
        lb.key(19, G, "m"),
        lb.i16(0)
        + lb.cstring(None)
        + lb.cstring(None)
        + lb.cstring("c")
        + lb.cstring("/h")
        + lb.i32(-1)
        + lb.i32(1)
        + lb.cstring("p")
        + lb.i8(-1)
        + lb.carray([])
        + lb.tags(),
        {"groupId": G, "memberId": "m"},
        {
            "instanceId": None,
            "rackId": None,
            "clientId": "c",
            "clientHost": "/h",
            "rebalanceTimeoutMs": -1,
            "topologyEpoch": 1,
            "processId": "p",
            "userEndpoint": None,
            "clientTags": [],
        },
    ),
    (
        lb.key(22, G, "m"),
        lb.i16(0)
        + lb.i32(3)
        + lb.i32(2)
        + lb.i8(1)
        + lb.carray([_tasks("0", [0], [3])])
        + lb.carray([]) * 5
        + lb.tags(),
        {"groupId": G, "memberId": "m"},
        {
            "memberEpoch": 3,
            "previousMemberEpoch": 2,
            "state": 1,
            "activeTasks": [{"subtopologyId": "0", "partitions": [0], "assignmentEpochs": [3]}],
            "standbyTasks": [],
            "warmupTasks": [],
            "activeTasksPendingRevocation": [],
            "standbyTasksPendingRevocation": [],
            "warmupTasksPendingRevocation": [],
        },
    ),
    (
        lb.key(23, G),
        lb.i16(0)
        + lb.i32(1)
        + lb.carray(
            [
                lb.cstring("0")
                + lb.carray([lb.cstring("in")])
                + lb.carray([])
                + lb.carray([lb.cstring("chg") + lb.i32(0) + lb.i16(0) + lb.carray([_kv("a", "b")]) + lb.tags()])
                + lb.carray([])
                + lb.carray([])
                + lb.carray([lb.carray([lb.i16(0)]) + lb.carray([]) + lb.carray([]) + lb.tags()])
                + lb.tags()
            ]
        )
        + lb.tags(),
        {"groupId": G},
        {
            "epoch": 1,
            "subtopologies": [
                {
                    "subtopologyId": "0",
                    "sourceTopics": ["in"],
                    "sourceTopicRegex": [],
                    "stateChangelogTopics": [
                        {
                            "name": "chg",
                            "partitions": 0,
                            "replicationFactor": 0,
                            "topicConfigs": [{"key": "a", "value": "b"}],
                        }
                    ],
                    "repartitionSinkTopics": [],
                    "repartitionSourceTopics": [],
                    "copartitionGroups": [{"sourceTopics": [0], "sourceTopicRegex": [], "repartitionSourceTopics": []}],
                }
            ],
        },
    ),
]


def _check_new_protocol(recs: list[dict], codec: str) -> None:
    assert len(recs) == len(NEW_PROTOCOL_RECORDS)
    for i, (r, (k, v, kjson, vjson)) in enumerate(zip(recs, NEW_PROTOCOL_RECORDS, strict=True)):
        assert (r["offset"], r["compresscodec"], r["error"], r["unknown_type"]) == (i, codec, None, False), r
        assert r["record_type"] == int.from_bytes(k[:2], "big")
        assert r["key"] == kjson
        assert r["tombstone"] is (v is None)
        assert r["value_version"] == (None if v is None else 0)
        assert r["value"] == vjson, f"record {i} type {r['record_type']}"


def test_new_protocol_records_plain_and_gzip(dump_built):
    pairs = [(k, v) for k, v, _, _ in NEW_PROTOCOL_RECORDS]
    out = dump_built(
        {
            "plain": b"".join(lb.batch_v2(i, [p]) for i, p in enumerate(pairs)),
            "gzip": lb.batch_v2(0, pairs, codec="gzip"),
        }
    )
    _check_new_protocol(out["plain"], "none")
    _check_new_protocol(out["gzip"], "gzip")
    assert {r["position"] for r in out["gzip"]} == {0}
    assert dump_built.info["gzip"]["batches"] == 1


def test_classic_and_edge_cases(dump_built):
    """Shapes the parser must know: versions, fields absent per version, failed consumer-protocol
    decoding, unknown types, decode errors, control markers, legacy wrappers, UTF-8, trailing bytes."""
    k1 = lb.key(1, "g", "t", 1)
    v3 = lb.i16(3) + lb.i64(42) + lb.i32(5) + lb.string("") + lb.i64(TS)
    asg = _hex("0001 00000001 0006 6f7264657273 00000002 00000000 00000003 ffffffff")

    def member(sub: bytes, a: bytes) -> bytes:
        return (
            lb.string("m1")
            + lb.string("c1")
            + lb.string("/h")
            + lb.i32(300000)
            + lb.i32(45000)
            + lb.i32(len(sub))
            + sub
            + lb.i32(len(a))
            + a
        )

    gm_v1 = (
        lb.i16(1)
        + lb.string("consumer")
        + lb.i32(7)
        + lb.string("range")
        + lb.string("m1")
        + lb.i32(2)
        + member(SUB_V1, b"")
        + member(lb.i16(9) + lb.i32(0), asg)
    )
    wrapper = lb.message_legacy(
        12, None, gzip.compress(lb.message_legacy(0, k1, v3) + lb.message_legacy(1, k1, None)), attributes=1
    )
    segments = {
        "records": lb.batch_v2(
            0,
            [
                (k1, lb.i16(4) + lb.i64(42) + lb.i32(5) + lb.cstring("x") + lb.i64(TS) + lb.tags({0: U})),
                (k1, lb.i16(4) + lb.i64(42) + lb.i32(5) + lb.cstring("x") + lb.i64(TS) + lb.tags()),
                (lb.key(0, "g", "t", 1), lb.i16(0) + lb.i64(42) + lb.string("md") + lb.i64(TS)),
                (lb.key(2, "grüppe-€"), gm_v1),
                (lb.key(24, G), lb.i16(0) + lb.tags()),
                (lb.key(9, G), None),
                (k1, lb.i16(9) + lb.i64(42)),
                (b"\x00", lb.i16(0)),
            ],
        )
        + lb.control_batch(8, False, 9, producer_id=77, producer_epoch=2)
        + lb.batch_v2(
            9, [(lb.i16(0) + lb.i16(9), lb.i16(0) + lb.i32(0))], control=True, transactional=True, producer_id=78
        )
        + lb.batch_v2(10, [(k1, v3)], log_append_time=True, base_ts=TS + 5)
        + wrapper
        + lb.batch_v2(13, [(k1, v3)])[:40],
    }
    wrapper_pos = len(segments["records"]) - 40 - len(wrapper)
    recs = dump_built(segments)["records"]
    by_off = {r["offset"]: r for r in recs}
    assert sorted(by_off) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    assert by_off[0]["value"] == {
        "offset": 42,
        "leaderEpoch": 5,
        "metadata": "x",
        "commitTimestamp": TS,
        "topicId": U_TEXT,
    }
    assert "topicId" not in by_off[1]["value"]  # tagged field at its default: not printed
    assert (by_off[2]["record_type"], by_off[2]["value_version"], by_off[2]["value"]) == (
        0,
        0,
        {"offset": 42, "metadata": "md", "commitTimestamp": TS},
    )
    gm = by_off[3]
    assert gm["key"] == {"group": "grüppe-€"}
    assert gm["value"]["members"] == [  # v1: no groupInstanceId; decoded subscription/assignment
        {
            "memberId": "m1",
            "clientId": "c1",
            "clientHost": "/h",
            "rebalanceTimeout": 300000,
            "sessionTimeout": 45000,
            "subscription": {"topics": ["orders"], "userData": None, "ownedPartitions": []},
            "assignment": "",
        },
        {
            "memberId": "m1",
            "clientId": "c1",
            "clientHost": "/h",
            "rebalanceTimeout": 300000,
            "sessionTimeout": 45000,
            "subscription": "AAkAAAAA",
            "assignment": {"assignedPartitions": [{"topic": "orders", "partitions": [0, 3]}], "userData": None},
        },
    ]
    assert "currentStateTimestamp" not in gm["value"]
    assert _pick(by_off[4], "record_type", "unknown_type", "key", "tombstone") == dict(
        record_type=24, unknown_type=True, key=None, tombstone=False
    )
    assert _pick(by_off[5], "record_type", "unknown_type", "tombstone") == dict(
        record_type=9, unknown_type=True, tombstone=True
    )
    assert by_off[6]["error"] == "Found an unknown record version 9 for 1 type"
    assert by_off[7]["error"] == "Could not read version from key's buffer."
    assert _pick(
        by_off[8], "isControl", "control_type", "control_type_id", "coordinator_epoch", "producerId", "producerEpoch"
    ) == dict(
        isControl=True, control_type="ABORT", control_type_id=0, coordinator_epoch=9, producerId=77, producerEpoch=2
    )
    assert _pick(by_off[9], "control_type", "control_type_id", "coordinator_epoch") == dict(
        control_type="UNKNOWN", control_type_id=9, coordinator_epoch=None
    )
    assert _pick(by_off[10], "timestamp", "timestamp_type", "maxTimestamp") == dict(
        timestamp=TS + 5, timestamp_type="LogAppendTime", maxTimestamp=TS + 5
    )
    # magic-1 gzip wrapper at offset 12 holding relative offsets 0, 1 -> absolute 11, 12
    assert [
        (r["offset"], r["magic"], r["compresscodec"], r["position"], r["lastOffset"], r["tombstone"])
        for r in recs
        if r["magic"] == 1
    ] == [(11, 1, "gzip", wrapper_pos, 12, False), (12, 1, "gzip", wrapper_pos, 12, True)]
    assert dump_built.info["records"]["invalid_trailing_bytes"] == 40


def test_parser_is_strict():
    head = ["Dumping /x/00000000000000000000.log", "Log starting offset: 0"]
    batch = (
        "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 "
        "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: "
        "OptionalLong.empty position: 0 CreateTime: 1 size: 80 magic: 2 compresscodec: none crc: 1 isvalid: true"
    )
    rec = "| offset: 0 CreateTime: 1 keySize: 7 valueSize: -1 sequence: -1 headerKeys: [] key: "
    ok = rec + '{"type":"3","data":{"groupId":"a payload: b"}} payload: <DELETE>'
    (r,) = parse_dump([*head, batch, ok])
    assert r["key"] == {"groupId": "a payload: b"} and r["tombstone"]
    for bad in (
        [*head, batch, "something else"],
        [*head, ok],
        [batch],
        [*head, batch, rec + "{bad json"],
        [*head, batch, ok.replace("<DELETE>", '{"version":"0","data":{}}')],
        [*head, batch, rec.replace(" key: ", "")],
    ):
        with pytest.raises(DumpParseError):
            parse_dump(bad)
