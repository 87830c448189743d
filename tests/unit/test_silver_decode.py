"""The pure silver decoder (Arrow in, Arrow out, no Spark).

Expected values come from the specification's hand-built bytes (section 13), from the real
segments' independent manifest, and from the generator's own record of what it did
(generator-events.jsonl.gz) and the reference replay (expected-state.json) — never from the
decoder's output.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pipelines.codec import primitives as P
from pipelines.codec.records import RECORDS
from pipelines.generate import generate
from pipelines.runtime.ddl import arrow_type
from pipelines.runtime.tables import load_specs
from pipelines.silver.contract import RECORD_TABLES
from pipelines.silver.decode import (
    CONSUMER_TABLES,
    ENVELOPE_COLUMNS,
    MEMBERS,
    RENAMES,
    SHARE_COLUMNS,
    STREAMS_COLUMNS,
    build_plan,
    decode_batch,
    decode_table,
    payload_columns,
)
from pipelines.silver.local import bronze_rows, bronze_table
from tests.conftest import manifest_rows, real_segments_dir
from tests.unit.test_real_segments import _pairs


def h(text: str) -> bytes:
    return bytes.fromhex(" ".join(text.split()))


# spec section 13
KEY_13_1 = h("00 01 00 09 74 65 73 74 67 72 6f 75 70 00 06 6f 72 64 65 72 73 00 00 00 03")
VALUE_13_2 = h("00 03 00 00 00 00 00 00 00 2a 00 00 00 05 00 00 00 00 01 8b cf e5 68 00")
VALUE_13_3 = h("00 01 00 00 00 00 00 00 00 2a 00 00 00 00 01 8b cf e5 68 00 00 00 01 8b f3 f1 ec 00")
VALUE_13_4 = h(
    "00 04 00 00 00 00 00 00 00 2a 00 00 00 05 01 00 00 01 8b cf e5 68 00 01 00 10"
    " 01 23 45 67 89 ab cd ef 01 23 45 67 89 ab cd ef"
)
VALUE_13_4_NO_ID = h("00 04 00 00 00 00 00 00 00 2a 00 00 00 05 01 00 00 01 8b cf e5 68 00 00")
KEY_13_5 = h("00 02 00 09 74 65 73 74 67 72 6f 75 70")
SUB_13_7 = h("00 01 00 00 00 01 00 06 6f 72 64 65 72 73 ff ff ff ff 00 00 00 00")
ASG_13_7 = h("00 01 00 00 00 01 00 06 6f 72 64 65 72 73 00 00 00 02 00 00 00 00 00 00 00 03 ff ff ff ff")


def group_value_13_6(subscription: bytes = SUB_13_7, assignment: bytes = ASG_13_7, ptype: bytes = b"consumer") -> bytes:
    return (
        h("00 03")
        + len(ptype).to_bytes(2, "big")
        + ptype
        + h("00 00 00 07  00 05 72 61 6e 67 65  00 0e 63 6f 6e 73 75 6d 65 72 2d 31 2d 61 62 63")
        + h("00 00 01 8b cf e5 68 00  00 00 00 01")
        + h("00 0e 63 6f 6e 73 75 6d 65 72 2d 31 2d 61 62 63  ff ff")
        + h("00 0a 63 6f 6e 73 75 6d 65 72 2d 31  00 09 2f 31 30 2e 30 2e 30 2e 35")
        + h("00 04 93 e0  00 00 af c8")
        + len(subscription).to_bytes(4, "big")
        + subscription
        + len(assignment).to_bytes(4, "big")
        + assignment
    )


TS = 1700000000000
TOPIC_ID = "ASNFZ4mrze8BI0VniavN7w"
PLAN = build_plan("test-decoder")


def record(key: bytes | None, value: bytes | None, offset: int = 100, **kw: Any) -> dict[str, Any]:
    row = {
        "cluster": "c1",
        "partition": 7,
        "offset": offset,
        "timestamp": TS * 1000,
        "producer_id": -1,
        "producer_epoch": -1,
        "transactional": False,
        "control": False,
        "key": key,
        "value": value,
        "source_uri": "/data/__consumer_offsets-7/00000000000000000000.log",
        "batch_position": 0,
    }
    row.update(kw)
    return row


def decode(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """table -> rows (envelope + that table's columns); group_members exploded from group_metadata."""
    out = decode_table(bronze_table(rows).to_batches()[0], PLAN).to_pylist()
    assert len(out) == len(rows), "one wide row per bronze row"
    tables: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for wide in out:
        present = [t for t in RECORD_TABLES if wide[t] is not None]
        assert len(present) == 1, present
        table = present[0]
        envelope = {c: wide[c] for c in ENVELOPE_COLUMNS}
        payload = dict(wide[table])
        if table == "group_metadata":
            for member in payload.pop(MEMBERS):
                tables["group_members"].append(envelope | member)
        tables[table].append(envelope | payload)
    return tables


def only(tables: dict[str, list[dict[str, Any]]], table: str) -> dict[str, Any]:
    assert sum(len(v) for k, v in tables.items() if k != "group_members") == 1
    [row] = tables[table]
    return row


# -- spec section 13 ----------------------------------------------------------------------------
def test_offset_commit_v3_13_2() -> None:
    row = only(decode([record(KEY_13_1, VALUE_13_2)]), "offset_commits")
    assert row["cluster"] == "c1" and row["offsets_partition"] == 7 and row["record_offset"] == 100
    assert row["timestamp"].timestamp() == TS / 1000
    assert (row["record_type"], row["value_version"]) == (1, 3)
    assert (row["group_id"], row["topic"], row["partition"]) == ("testgroup", "orders", 3)
    assert (row["committed_offset"], row["leader_epoch"], row["metadata"]) == (42, 5, "")
    assert (row["commit_timestamp"], row["expire_timestamp"]) == (TS, -1)
    assert row["topic_id"] is None and row["unknown_tags"] is None


def test_offset_commit_v1_13_3_expire_timestamp() -> None:
    row = only(decode([record(KEY_13_1, VALUE_13_3)]), "offset_commits")
    assert (row["value_version"], row["committed_offset"], row["leader_epoch"]) == (1, 42, -1)
    assert (row["commit_timestamp"], row["expire_timestamp"]) == (TS, 1700604800000)


def test_offset_commit_v4_13_4_topic_id_where_present() -> None:
    rows = decode([record(KEY_13_1, VALUE_13_4, 1), record(KEY_13_1, VALUE_13_4_NO_ID, 2)])["offset_commits"]
    by_offset = {r["record_offset"]: r for r in rows}
    assert by_offset[1]["topic_id"] == TOPIC_ID and by_offset[1]["value_version"] == 4
    assert by_offset[2]["topic_id"] is None
    assert all(r["committed_offset"] == 42 and r["leader_epoch"] == 5 for r in rows)


def test_unknown_tags_kept_raw() -> None:
    # 13.4 without topic id, its empty tag section replaced by one unknown tag 7 of 2 bytes
    value = VALUE_13_4_NO_ID[:-1] + h("01 07 02 ab cd")
    row = only(decode([record(KEY_13_1, value)]), "offset_commits")
    assert row["unknown_tags"] == [{"tag": 7, "data": h("ab cd")}]


def test_group_metadata_13_6_one_consumer_member() -> None:
    tables = decode([record(KEY_13_5, group_value_13_6())])
    group = only(tables, "group_metadata")
    assert (group["group_id"], group["value_version"], group["protocol_type"]) == ("testgroup", 3, "consumer")
    assert (group["generation"], group["protocol"], group["leader"]) == (7, "range", "consumer-1-abc")
    assert (group["current_state_timestamp"], group["member_count"]) == (TS, 1)
    [m] = tables["group_members"]
    assert (m["record_offset"], m["member_index"], m["group_id"], m["generation"]) == (100, 0, "testgroup", 7)
    assert (m["member_id"], m["group_instance_id"], m["client_id"]) == ("consumer-1-abc", None, "consumer-1")
    assert (m["client_host"], m["rebalance_timeout_ms"], m["session_timeout_ms"]) == ("/10.0.0.5", 300000, 45000)
    assert (m["subscription_version"], m["subscribed_topics"], m["owned_partitions"]) == (1, ["orders"], [])
    assert (m["subscription_generation_id"], m["rack_id"], m["subscription_user_data"]) == (-1, None, None)
    assert (m["assignment_version"], m["assigned_partitions"]) == (1, [{"topic": "orders", "partitions": [0, 3]}])
    assert m["subscription"] is None and m["assignment"] is None and m["protocol_error"] is None


def test_other_protocol_types_keep_raw_bytes() -> None:
    tables = decode([record(KEY_13_5, group_value_13_6(b"\x00\x01meta", b"\x00\x01asg", b"connect"))])
    [m] = tables["group_members"]
    assert (m["subscription"], m["assignment"]) == (b"\x00\x01meta", b"\x00\x01asg")
    assert m["subscribed_topics"] is None and m["assigned_partitions"] is None and m["protocol_error"] is None


def test_consumer_protocol_bytes_that_do_not_decode_stay_raw_with_the_reason() -> None:
    tables = decode([record(KEY_13_5, group_value_13_6(subscription=b"\x00"))])
    assert not tables["quarantine"], "the broker treats these bytes as opaque: the record still decodes"
    [m] = tables["group_members"]
    assert m["subscription"] == b"\x00" and m["subscribed_topics"] is None
    assert m["protocol_error"].startswith("subscription: truncated")
    assert m["assigned_partitions"] == [{"topic": "orders", "partitions": [0, 3]}]


def test_zero_length_assignment_is_no_assignment() -> None:
    [m] = decode([record(KEY_13_5, group_value_13_6(assignment=b""))])["group_members"]
    assert m["assigned_partitions"] == [] and m["assignment_version"] is None and m["assignment"] is None


def test_tombstone_13_8() -> None:
    row = only(decode([record(KEY_13_1, None, 101)]), "tombstones")
    assert (row["record_type"], row["record_type_name"], row["record_offset"]) == (1, "OffsetCommit", 101)
    assert (row["group_id"], row["topic"], row["partition"], row["member_id"]) == ("testgroup", "orders", 3, None)


def test_transactional_commit_and_marker_13_10() -> None:
    txn = {"producer_id": 4000, "producer_epoch": 0, "transactional": True}
    tables = decode(
        [
            record(KEY_13_1, VALUE_13_2, 102, **txn),
            record(h("00 00 00 01"), h("00 00 00 00 00 03"), 103, control=True, **txn),
        ]
    )
    [commit] = tables["offset_commits"]
    assert (commit["transactional"], commit["producer_id"], commit["producer_epoch"]) == (True, 4000, 0)
    [marker] = tables["transaction_markers"]
    assert (marker["record_offset"], marker["control_type"], marker["control_type_id"]) == (103, "COMMIT", 1)
    assert (marker["control_version"], marker["coordinator_epoch"], marker["producer_id"]) == (0, 3, 4000)


def test_kip848_13_12_types_3_and_8() -> None:
    tables = decode(
        [
            record(h("00 03 00 03 63 67 31"), h("00 00 00 00 00 05 01 00 08 11 22 33 44 55 66 77 88"), 1),
            record(h("00 03 00 03 63 67 31"), h("00 00 00 00 00 05 00"), 2),
            record(
                h("00 08 00 03 63 67 31 00 03 6d 2d 31"),
                h(
                    "00 00 00 00 00 05 00 00 00 04 00 02 01 23 45 67 89 ab cd ef 01 23 45 67 89 ab cd ef"
                    " 03 00 00 00 00 00 00 00 01 00 01 00"
                ),
                3,
            ),
        ]
    )
    meta = {r["record_offset"]: r for r in tables["consumer_group_metadata"]}
    assert (meta[1]["group_id"], meta[1]["epoch"], meta[1]["metadata_hash"]) == ("cg1", 5, 0x1122334455667788)
    assert (meta[2]["epoch"], meta[2]["metadata_hash"]) == (5, 0)
    [cur] = tables["consumer_group_current_member_assignment"]
    assert (cur["group_id"], cur["member_id"], cur["member_epoch"], cur["previous_member_epoch"]) == (
        "cg1",
        "m-1",
        5,
        4,
    )
    assert cur["state"] == 0 and cur["layout"] is None and cur["partitions_pending_revocation"] == []
    assert cur["assigned_partitions"] == [
        {"topic_id": TOPIC_ID, "topic": None, "partitions": [0, 1], "assignment_epochs": None}
    ]


# -- quarantine ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "value", "control", "reason", "part", "position"),
    [
        # 13.2 with value version 99: no such OffsetCommit version (the version is bytes 0-1)
        (KEY_13_1, h("00 63") + VALUE_13_2[2:], False, "unknown_version", "value", 0),
        # type id 99 is not a __consumer_offsets record type
        (h("00 63") + KEY_13_1[2:], VALUE_13_2, False, "unknown_type", "key", 0),
        (None, VALUE_13_2, False, "null_key", "key", 0),
        # the group name's first byte (after type id and string length) is not UTF-8
        (KEY_13_1[:4] + b"\xff" + KEY_13_1[5:], VALUE_13_2, False, "bad_utf8", "key", 4),
        # one byte more than the v3 layout consumes: it ends at byte 24
        (KEY_13_1, VALUE_13_2 + b"\x00", False, "trailing_bytes", "value", 24),
        # a control key needs 4 bytes
        (h("00 00"), h("00 00 00 00 00 03"), True, "bad_control_record", "key", 0),
    ],
    ids=["unknown_version", "unknown_type", "null_key", "bad_utf8", "trailing_bytes", "bad_control_record"],
)
def test_undecodable_records_are_quarantined_raw(key, value, control, reason, part, position) -> None:
    q = only(decode([record(key, value, 55, control=control)]), "quarantine")
    assert (q["reason"], q["error_part"], q["error_position"]) == (reason, part, position)
    assert (q["raw_key"], q["raw_value"], q["control"]) == (key, value, control)
    assert (q["record_offset"], q["decoder_version"], q["batch_position"]) == (55, "test-decoder", 0)
    assert q["source_uri"].endswith("00000000000000000000.log") and q["error_detail"]


def test_quarantine_keeps_what_decoded_before_the_failure() -> None:
    q = only(decode([record(KEY_13_1, h("00 63") + VALUE_13_2[2:])]), "quarantine")
    assert (q["record_type"], q["value_version"], q["group_id"]) == (1, 99, "testgroup")


def test_truncated_value_is_quarantined() -> None:
    q = only(decode([record(KEY_13_1, VALUE_13_2[:20])]), "quarantine")
    assert (q["reason"], q["error_part"], q["raw_value"]) == ("truncated", "value", VALUE_13_2[:20])
    assert 2 <= q["error_position"] <= 20


# -- the silver.yaml declarations cover every declared field -----------------------------------------
_KAFKA_TO_SPARK = {
    "int8": "tinyint",
    "int16": "smallint",
    "uint16": "int",
    "int32": "int",
    "int64": "bigint",
    "string": "string",
    "bytes": "binary",
    "uuid": "string",
    "bool": "boolean",
}
# silver adds the resolved topic name next to topic ids in assignment structs
_EXTRA = {"topic"}


def _covers(spark_type: pa.DataType, field: Any, where: str) -> None:
    """The Arrow type of a silver column holds the Kafka field (recursively)."""
    if field.is_array:
        assert pa.types.is_list(spark_type), where
        spark_type = spark_type.value_type
    if field.struct is None:
        assert spark_type == arrow_type(_KAFKA_TO_SPARK[field.elem]), f"{where}: {spark_type} vs {field.elem}"
        return
    assert pa.types.is_struct(spark_type), where
    names = {spark_type.field(i).name: spark_type.field(i).type for i in range(spark_type.num_fields)}
    for sub in field.struct.fields:
        assert sub.key in names, f"{where}.{sub.key} missing"
        _covers(names[sub.key], sub, f"{where}.{sub.key}")


@pytest.mark.parametrize("type_id", sorted({*CONSUMER_TABLES, *SHARE_COLUMNS, *STREAMS_COLUMNS}))
def test_typed_tables_cover_every_layout_of_their_record_type(type_id: int) -> None:
    specs = load_specs()["silver"]
    decl = RECORDS[type_id].decl
    if type_id in CONSUMER_TABLES:
        table = CONSUMER_TABLES[type_id]
        columns = {c.name: arrow_type(c.type) for c in specs[table].columns}
    else:
        table = "share_group_records" if type_id in SHARE_COLUMNS else "streams_group_records"
        column = {**SHARE_COLUMNS, **STREAMS_COLUMNS}[type_id]
        struct = arrow_type(next(c.type for c in specs[table].columns if c.name == column))
        columns = {struct.field(i).name: struct.field(i).type for i in range(struct.num_fields)}
    table_columns = {c.name for c in specs[table].columns}
    assert {f.key for f in decl.key.fields} <= table_columns, "every key field is a column"
    assert {"record_type", "value_version", "layout", "unknown_tags"} & table_columns >= {"record_type"}
    for layout in decl.layouts:
        for f in layout.struct.fields:
            name = RENAMES.get(type_id, {}).get(f.key, f.key)
            assert name in columns, f"{decl.name} ({layout.name or 'current'}): {name} has no column"
            _covers(columns[name], f, f"{decl.name}.{name}")


def test_plan_holds_each_table_minus_the_envelope() -> None:
    specs = load_specs()["silver"]
    for table in RECORD_TABLES:
        struct = PLAN.struct(table)
        names = [struct.field(i).name for i in range(struct.num_fields)]
        expected = [c.name for c in payload_columns(specs, table)]
        assert names == expected + ([MEMBERS] if table == "group_metadata" else [])
    for c in specs["offset_commits"].columns[: len(ENVELOPE_COLUMNS)]:
        assert c.name in ENVELOPE_COLUMNS
    for table in (*RECORD_TABLES, "group_members"):
        assert [c.name for c in specs[table].columns][: len(ENVELOPE_COLUMNS)] == list(ENVELOPE_COLUMNS)


# -- generated logs: the generator's events and the reference replay --------------------------------
@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("silver-gen") / "logs"
    generate(out, 12000, seed=11, partitions=4, segment_bytes=64 * 1024)
    return out


@pytest.fixture(scope="module")
def decoded(generated: Path) -> dict[str, list[dict[str, Any]]]:
    rows = list(bronze_rows([generated], "gen"))
    table = bronze_table(rows)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for batch in table.to_batches(max_chunksize=1000):
        for name, got in decode([*batch.to_pylist()]).items():
            out[name] += got
    out["_bronze"] = rows
    return out


def by_position(rows: list[dict[str, Any]]) -> dict[tuple[int, int], dict[str, Any]]:
    out = {}
    for r in rows:
        key = (r["offsets_partition"], r["record_offset"])
        assert key not in out
        out[key] = r
    return out


def test_every_generated_record_lands_in_exactly_one_table(decoded) -> None:
    positions = Counter((r["offsets_partition"], r["record_offset"]) for t in RECORD_TABLES for r in decoded[t])
    bronze = Counter((r["partition"], r["offset"]) for r in decoded["_bronze"])
    assert positions == bronze
    assert not decoded["quarantine"]
    assert len(decoded["group_members"]) == sum(g["member_count"] for g in decoded["group_metadata"])


def test_generated_records_match_the_generator_events(generated: Path, decoded) -> None:
    commits = by_position(decoded["offset_commits"])
    groups = by_position(decoded["group_metadata"])
    tombstones = by_position(decoded["tombstones"])
    markers = by_position(decoded["transaction_markers"])
    new_protocol = {
        k: v
        for t in (*CONSUMER_TABLES.values(), "share_group_records", "streams_group_records")
        for k, v in by_position(decoded[t]).items()
    }
    meta_type = {"consumer": 3, "share": 11, "streams": 17}
    member_types = {"consumer": (5, 7, 8), "share": (10, 13, 14), "streams": (19, 21, 22)}
    seen: set[tuple[int, int]] = set()
    checked = Counter()
    with gzip.open(generated / "generator-events.jsonl.gz", "rt") as fh:
        for line in fh:
            ev = json.loads(line)
            span = [(ev["partition"], o) for o in range(ev["first_offset"], ev["last_offset"] + 1)]
            seen.update(span)
            kind = ev["event"]
            if kind in ("commit", "reset", "txn_begin"):
                rows = [commits[p] for p in span]
                assert {r["group_id"] for r in rows} == {ev["group"]}
                if kind == "commit":
                    assert {f"{r['topic']}:{r['partition']}": r["committed_offset"] for r in rows} == ev["offsets"]
                transactional = kind == "txn_begin"
                assert all(r["transactional"] is transactional for r in rows)
                if transactional:
                    assert {r["producer_id"] for r in rows} == {ev["producer_id"]}
            elif kind in ("rebalance", "empty"):
                [pos] = span
                g = groups[pos]
                assert (g["group_id"], g["generation"]) == (ev["group"], ev["generation"])
                assert g["member_count"] == (ev["members"] if kind == "rebalance" else 0)
            elif kind in ("txn_commit", "txn_abort"):
                [pos] = span
                m = markers[pos]
                assert m["control_type"] == ("COMMIT" if kind == "txn_commit" else "ABORT")
                assert m["producer_id"] == ev["producer_id"] and m["coordinator_epoch"] == 3
            elif kind in ("delete_group", "expire"):
                assert {tombstones[p]["group_id"] for p in span} == {ev["group"]}
            elif kind in MEMBER_TOMBSTONES:
                rows = [new_protocol[p] for p in span if p in new_protocol]
                assert {r["group_id"] for r in rows} == {ev["group"]}
                [meta] = [r for r in rows if r["record_type"] == meta_type[ev["kind"]]]
                epoch = meta["epoch"] if "epoch" in meta else meta["metadata"]["epoch"]
                assert epoch == ev["epoch"]
                # which member records the write tombstoned: metadata, target, current (by part)
                parts = dict(zip(member_types[ev["kind"]], ("metadata", "target", "current"), strict=True))
                leaving = {parts[tombstones[p]["record_type"]] for p in span if p in tombstones and
                           tombstones[p]["member_id"]}  # fmt: skip
                assert leaving == MEMBER_TOMBSTONES[kind], kind
            else:
                raise AssertionError(f"unexpected event {kind}")
            checked[kind] += 1
    assert seen == {(r["partition"], r["offset"]) for r in decoded["_bronze"]}, "every record belongs to an event"
    assert {"commit", "rebalance", "txn_commit", "txn_abort", "delete_group", "member_join"} <= set(checked)


def test_generated_records_match_the_reference_replay(generated: Path, decoded) -> None:
    state = json.loads((generated / "expected-state.json").read_text())
    commits = by_position(decoded["offset_commits"])
    for o in state["offsets"]:
        r = commits[(o["offsets_partition"], o["record_offset"])]
        assert (r["group_id"], r["topic"], r["partition"], r["committed_offset"]) == (
            o["group"],
            o["topic"],
            o["partition"],
            o["offset"],
        )
        assert (r["leader_epoch"], r["metadata"], r["commit_timestamp"]) == (
            o["leader_epoch"],
            o["metadata"],
            o["commit_timestamp"],
        )
        assert r["expire_timestamp"] == o["expire_timestamp"]
        assert r["topic_id"] == (None if o["topic_id"] in (None, P.ZERO_UUID) else o["topic_id"])
    for p in state["pending_transactions"]:
        r = commits[(p["offsets_partition"], p["record_offset"])]
        assert r["transactional"] and r["producer_id"] == p["producer_id"] and r["committed_offset"] == p["offset"]
    tombstones = by_position(decoded["tombstones"])
    for d in state["deleted_offsets"]:
        t = tombstones[(d["offsets_partition"], d["record_offset"])]
        assert (t["group_id"], t["topic"], t["partition"]) == (d["group"], d["topic"], d["partition"])
    groups = by_position(decoded["group_metadata"])
    members: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for m in decoded["group_members"]:
        members[(m["offsets_partition"], m["record_offset"])].append(m)
    assert state["classic_groups"]
    for g in state["classic_groups"]:
        pos = (g["offsets_partition"], g["record_offset"])
        row = groups[pos]
        assert (row["group_id"], row["protocol_type"], row["generation"]) == (
            g["group"],
            g["protocol_type"],
            g["generation"],
        )
        assert (row["protocol"], row["leader"], row["current_state_timestamp"]) == (
            g["protocol"],
            g["leader"],
            g["current_state_timestamp"],
        )
        assert row["member_count"] == len(g["members"])
        got = sorted(members[pos], key=lambda m: m["member_index"])
        assert [m["member_index"] for m in got] == list(range(len(g["members"])))
        for m, e in zip(got, g["members"], strict=True):
            assert (m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"]) == (
                e["member_id"],
                e["group_instance_id"],
                e["client_id"],
                e["client_host"],
            )
            assert (m["session_timeout_ms"], m["rebalance_timeout_ms"]) == (
                e["session_timeout"],
                e["rebalance_timeout"],
            )
            if g["protocol_type"] == "consumer":
                assert m["subscribed_topics"] == e["subscribed_topics"]
                assert {a["topic"]: a["partitions"] for a in m["assigned_partitions"]} == e["assigned_partitions"]
            else:
                assert m["subscribed_topics"] is None and m["subscription"] is not None


# generator events that write a new-protocol group record, and the member records they tombstone
MEMBER_TOMBSTONES: dict[str, set[str]] = {
    "member_join": set(),
    "member_leave": {"metadata", "target", "current"},
    "member_fenced": {"target", "current"},  # the member stays (epoch -1) until...
    "member_remove": {"metadata"},  # ...a later write removes it
    "topology": set(),
    "topology_validated": set(),
}


def test_share_and_streams_values_match_the_reference_replay(generated: Path, decoded) -> None:
    """The latest share/streams member values in silver equal the replayed groups' members; a
    part the replay shows without a value has a tombstone (or no record) as its latest in silver,
    and a current assignment the replay holds after its tombstone has epochs -1 and owns nothing."""
    state = json.loads((generated / "expected-state.json").read_text())
    for table, groups, kinds in (
        ("share_group_records", state["share_groups"], {10: "metadata", 13: "target", 14: "current"}),
        ("streams_group_records", state["streams_groups"], {19: "metadata", 21: "target", 22: "current"}),
    ):
        assert groups, table
        latest: dict[tuple[str, str, str], Any] = {}
        rows = sorted(
            decoded[table] + decoded["tombstones"], key=lambda r: (r["offsets_partition"], r["record_offset"])
        )
        columns = SHARE_COLUMNS if table == "share_group_records" else STREAMS_COLUMNS
        for r in rows:
            if r["record_type"] not in kinds:
                continue
            slot = (r["group_id"], r["member_id"], kinds[r["record_type"]])
            if "record_type_name" in r and r.get(columns[r["record_type"]]) is not None:
                latest[slot] = r[columns[r["record_type"]]]
            else:
                latest.pop(slot, None)
        for g in groups:
            for m in g["members"]:
                for part in ("metadata", "target", "current"):
                    slot = (g["group"], m["member_id"], part)
                    want = m[part]
                    if slot not in latest:
                        left = part == "current" and want is not None
                        assert want is None or (left and want["member_epoch"] == want["previous_member_epoch"] == -1)
                        continue
                    got = latest[slot]
                    for k, v in want.items():
                        if isinstance(v, list) and v and isinstance(v[0], dict):
                            assert [{kk: e[kk] for kk in x} for e, x in zip(got[k], v, strict=True)] == v, (
                                g["group"],
                                part,
                                k,
                            )
                        else:
                            assert got[k] == v, (g["group"], part, k)


# -- the real broker segments ------------------------------------------------------------------------
def test_real_segments_decode_without_quarantine_and_match_the_manifest() -> None:
    root = real_segments_dir()
    rows = []
    for row in manifest_rows():  # one "cluster" per file, so every decoded row names its file
        rows += bronze_rows([root / row["relpath"]], row["relpath"])
    assert len(rows) == 40526
    per_file: dict[str, Counter] = defaultdict(Counter)
    protocols: dict[str, Counter] = defaultdict(Counter)
    members: dict[str, int] = defaultdict(int)
    decoded = 0
    for batch in bronze_table(rows).to_batches(max_chunksize=5000):
        for w in decode_table(batch, PLAN).to_pylist():
            decoded += 1
            [name] = [t for t in RECORD_TABLES if w[t] is not None]
            assert name != "quarantine", w[name]
            payload, rel = w[name], w["cluster"]
            if name == "tombstones":
                per_file[rel][f"{payload['record_type']}/null"] += 1
            elif name == "transaction_markers":
                per_file[rel]["control"] += 1
            else:
                per_file[rel][f"{payload['record_type']}/{payload['value_version']}"] += 1
            if name == "group_metadata":
                protocols[rel][payload["protocol_type"]] += 1
                assert payload["member_count"] == len(payload[MEMBERS])
                members[rel] = max(members[rel], payload["member_count"])
    assert decoded == 40526
    for row in manifest_rows():
        expected = _pairs(row["key_value_pairs"])
        for type_id, count in _pairs(row["tombstones_by_key"]).items():
            expected[f"{type_id}/null"] += count
        assert per_file[row["relpath"]] == expected, row["relpath"]
        assert protocols[row["relpath"]] == _pairs(row["protocol_types"]), row["relpath"]
        assert members[row["relpath"]] == int(row["max_members"] or 0), row["relpath"]


# -- the columnar path equals the per-record path -----------------------------------------------------
def _rows_by_position(batch: pa.RecordBatch, **kwargs: Any) -> dict[tuple, tuple[str, dict]]:
    out = {}
    for w in pa.Table.from_batches(decode_batch(batch, PLAN, **kwargs), schema=PLAN.schema).to_pylist():
        [name] = [t for t in RECORD_TABLES if w[t] is not None]
        key = (w["cluster"], w["offsets_partition"], w["record_offset"])
        assert key not in out
        out[key] = (name, w)
    return out


@pytest.mark.parametrize("source", ["real", "generated"])
def test_columnar_decoding_equals_the_per_record_decoding(source: str, generated: Path) -> None:
    """Every wide row silver builds column-wise (offset commits and tombstones as Arrow columns,
    the other types from the columnar decoder's structs) equals the row of the per-record path,
    on every real segment and on the generator's mix of every type, version and codec; small
    groups are decoded column-wise too, so every layout the columnar path takes is compared."""
    if source == "real":
        rows = []
        for row in manifest_rows():
            rows += bronze_rows([real_segments_dir() / row["relpath"]], row["relpath"])
    else:
        rows = list(bronze_rows([generated], "gen"))
    compared: Counter = Counter()
    for batch in bronze_table(rows).to_batches(max_chunksize=20_000):
        reference = _rows_by_position(batch, columnar=False)
        columnar = _rows_by_position(batch, small_groups_per_record=False)
        assert columnar == reference
        compared.update(name for name, _ in reference.values())
    assert sum(compared.values()) == len(rows)
    assert compared["offset_commits"] and compared["tombstones"] and compared["group_metadata"], compared
