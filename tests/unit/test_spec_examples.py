"""The hand-built byte examples of the spec (section 13 and 2.2) decode exactly as documented.

Expected values are transcribed from the specification text, not from our decoder.
"""

from __future__ import annotations

import crc32c
import pytest

from pipelines.codec import primitives as P
from pipelines.codec.reader import Batch, iter_log
from pipelines.codec.records import decode_assignment, decode_control, decode_record, decode_subscription
from pipelines.codec.writer import encode_batch


def h(text: str) -> bytes:
    return bytes.fromhex(" ".join(text.split()))


KEY_13_1 = h("00 01 00 09 74 65 73 74 67 72 6f 75 70 00 06 6f 72 64 65 72 73 00 00 00 03")
VALUE_13_2 = h("00 03 00 00 00 00 00 00 00 2a 00 00 00 05 00 00 00 00 01 8b cf e5 68 00")
TS = 1700000000000
TOPIC_ID = "ASNFZ4mrze8BI0VniavN7w"


def test_crc32c_check_value() -> None:
    assert crc32c.crc32c(b"123456789") == 0xE3069283


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (-2, "03"),
        (63, "7e"),
        (-64, "7f"),
        (64, "80 01"),
        (300, "d8 04"),
        (2147483647, "fe ff ff ff 0f"),
        (-2147483648, "ff ff ff ff 0f"),
    ],
)
def test_zigzag_varint_table(value: int, encoded: str) -> None:
    out = bytearray()
    P.write_varint(out, value)
    assert bytes(out) == h(encoded)
    assert P.read_varint(h(encoded), 0, len(h(encoded))) == (value, len(h(encoded)))


@pytest.mark.parametrize(
    ("value", "encoded"), [(0, "00"), (1, "01"), (127, "7f"), (128, "80 01"), (300, "ac 02"), (16384, "80 80 01")]
)
def test_unsigned_varint_table(value: int, encoded: str) -> None:
    out = bytearray()
    P.write_uvarint(out, value)
    assert bytes(out) == h(encoded)
    assert P.read_uvarint(h(encoded), 0, len(h(encoded))) == (value, len(h(encoded)))


def test_uuid_prints_like_kafka() -> None:
    assert P.uuid_to_str(h("01 23 45 67 89 ab cd ef 01 23 45 67 89 ab cd ef")) == TOPIC_ID


def test_13_1_and_13_2_offset_commit_v3() -> None:
    assert len(KEY_13_1) == 25 and len(VALUE_13_2) == 24
    d = decode_record(KEY_13_1, VALUE_13_2)
    assert d.ok and d.record_type == 1 and d.value_version == 3
    assert d.key == {"group": "testgroup", "topic": "orders", "partition": 3}
    assert d.value == {
        "offset": 42,
        "leader_epoch": 5,
        "metadata": "",
        "commit_timestamp": TS,
        "expire_timestamp": -1,
        "topic_id": P.ZERO_UUID,
    }


def test_13_3_offset_commit_v1() -> None:
    value = h("00 01 00 00 00 00 00 00 00 2a 00 00 00 00 01 8b cf e5 68 00 00 00 01 8b f3 f1 ec 00")
    d = decode_record(KEY_13_1, value)
    assert d.ok and d.value_version == 1 and len(value) == 28
    assert d.value["offset"] == 42 and d.value["metadata"] == ""
    assert d.value["commit_timestamp"] == TS and d.value["expire_timestamp"] == 1700604800000
    assert d.value["leader_epoch"] == -1  # absent in v1: the declared default


def test_13_4_offset_commit_v4_flexible() -> None:
    with_id = h(
        "00 04 00 00 00 00 00 00 00 2a 00 00 00 05 01 00 00 01 8b cf e5 68 00 01 00 10"
        "01 23 45 67 89 ab cd ef 01 23 45 67 89 ab cd ef"
    )
    without = h("00 04 00 00 00 00 00 00 00 2a 00 00 00 05 01 00 00 01 8b cf e5 68 00 00")
    assert len(with_id) == 42 and len(without) == 24
    d = decode_record(KEY_13_1, with_id)
    assert d.ok and d.value["topic_id"] == TOPIC_ID and d.value["leader_epoch"] == 5 and d.value["offset"] == 42
    d = decode_record(KEY_13_1, without)
    assert d.ok and d.value["topic_id"] == P.ZERO_UUID and d.value["commit_timestamp"] == TS


GROUP_KEY = h("00 02 00 09 74 65 73 74 67 72 6f 75 70")
SUBSCRIPTION = h("00 01 00 00 00 01 00 06 6f 72 64 65 72 73 ff ff ff ff 00 00 00 00")
ASSIGNMENT = h("00 01 00 00 00 01 00 06 6f 72 64 65 72 73 00 00 00 02 00 00 00 00 00 00 00 03 ff ff ff ff")
GROUP_VALUE = (
    h(
        "00 03 00 08 63 6f 6e 73 75 6d 65 72 00 00 00 07 00 05 72 61 6e 67 65"
        "00 0e 63 6f 6e 73 75 6d 65 72 2d 31 2d 61 62 63 00 00 01 8b cf e5 68 00 00 00 00 01"
        "00 0e 63 6f 6e 73 75 6d 65 72 2d 31 2d 61 62 63 ff ff 00 0a 63 6f 6e 73 75 6d 65 72 2d 31"
        "00 09 2f 31 30 2e 30 2e 30 2e 35 00 04 93 e0 00 00 af c8 00 00 00 16"
    )
    + SUBSCRIPTION
    + h("00 00 00 1e")
    + ASSIGNMENT
)


def test_13_5_to_13_7_group_metadata_v3() -> None:
    assert len(GROUP_KEY) == 13 and len(GROUP_VALUE) == 160
    d = decode_record(GROUP_KEY, GROUP_VALUE)
    assert d.ok and d.record_type == 2 and d.key == {"group": "testgroup"} and d.value_version == 3
    v = d.value
    assert (v["protocol_type"], v["generation"], v["protocol"], v["leader"], v["current_state_timestamp"]) == (
        "consumer",
        7,
        "range",
        "consumer-1-abc",
        TS,
    )
    [m] = v["members"]
    assert m["member_id"] == "consumer-1-abc" and m["group_instance_id"] is None
    assert (m["client_id"], m["client_host"]) == ("consumer-1", "/10.0.0.5")
    assert (m["rebalance_timeout"], m["session_timeout"]) == (300000, 45000)
    assert m["subscription"] == SUBSCRIPTION and m["assignment"] == ASSIGNMENT
    assert m["subscription_info"] == {
        "version": 1,
        "topics": ["orders"],
        "user_data": None,
        "owned_partitions": [],
        "generation_id": -1,
        "rack_id": None,
    }
    assert m["assignment_info"] == {
        "version": 1,
        "assigned_partitions": [{"topic": "orders", "partitions": [0, 3]}],
        "user_data": None,
    }


def test_consumer_protocol_reading_rules() -> None:
    assert decode_assignment(b"") is None  # zero-length assignment = no assignment
    # a version newer than known reads as the newest known, trailing bytes ignored
    newer = h("00 07") + SUBSCRIPTION[2:] + h("00 00 00 09 ff ff") + h("de ad be ef")
    sub = decode_subscription(newer)
    assert sub["version"] == 7 and sub["topics"] == ["orders"] and sub["generation_id"] == 9


TOMBSTONE_BATCH = h(
    "00 00 00 00 00 00 00 65 00 00 00 51 00 00 00 00 02 90 55 cd 71 00 00 00 00 00 00"
    "00 00 01 8b cf e5 68 00 00 00 01 8b cf e5 68 00 ff ff ff ff ff ff ff ff ff ff ff ff ff ff 00 00 00 01"
    "3e 00 00 00 32 00 01 00 09 74 65 73 74 67 72 6f 75 70 00 06 6f 72 64 65 72 73 00 00 00 03 01 00"
)
COMMIT_BATCH = h(
    "00 00 00 00 00 00 00 64 00 00 00 69 00 00 00 00 02 3d 5c 73 a3 00 00 00 00 00 00"
    "00 00 01 8b cf e5 68 00 00 00 01 8b cf e5 68 00 ff ff ff ff ff ff ff ff ff ff ff"
    "ff ff ff 00 00 00 01 6e 00 00 00 32 00 01 00 09 74 65 73 74 67 72 6f 75 70 00 06"
    "6f 72 64 65 72 73 00 00 00 03 30 00 03 00 00 00 00 00 00 00 2a 00 00 00 05 00 00"
    "00 00 01 8b cf e5 68 00 00"
)
TXN_BATCH = h(
    "00 00 00 00 00 00 00 66 00 00 00 69 00 00 00 00 02 d3 d2 48 4e 00 10 00 00 00 00"
    "00 00 01 8b cf e5 68 00 00 00 01 8b cf e5 68 00 00 00 00 00 00 00 0f a0 00 00 00"
    "00 00 00 00 00 00 01 6e 00 00 00 32 00 01 00 09 74 65 73 74 67 72 6f 75 70 00 06"
    "6f 72 64 65 72 73 00 00 00 03 30 00 03 00 00 00 00 00 00 00 2a 00 00 00 05 00 00"
    "00 00 01 8b cf e5 68 00 00"
)
MARKER_BATCH = h(
    "00 00 00 00 00 00 00 67 00 00 00 42 00 00 00 00 02 f6 35 1f 43 00 30 00 00 00 00"
    "00 00 01 8b cf e5 68 00 00 00 01 8b cf e5 68 00 00 00 00 00 00 00 0f a0 00 00 ff"
    "ff ff ff 00 00 00 01 20 00 00 00 08 00 00 00 01 0c 00 00 00 00 00 03 00"
)


def _only_batch(data: bytes) -> Batch:
    items = list(iter_log(data))
    assert len(items) == 1 and isinstance(items[0], Batch), items
    return items[0]


def test_13_8_tombstone_batch() -> None:
    assert len(TOMBSTONE_BATCH) == 93
    b = _only_batch(TOMBSTONE_BATCH)
    assert (b.base_offset, b.magic, b.crc, b.attributes, b.producer_id, b.records_count) == (
        101,
        2,
        0x9055CD71,
        0,
        -1,
        1,
    )
    [r] = b.records
    assert r.offset == 101 and r.timestamp == TS and r.key == KEY_13_1 and r.value is None
    d = decode_record(r.key, r.value)
    assert d.ok and d.tombstone and d.key == {"group": "testgroup", "topic": "orders", "partition": 3}
    assert encode_batch(b) == TOMBSTONE_BATCH


def test_13_9_offset_commit_batch() -> None:
    assert len(COMMIT_BATCH) == 117
    b = _only_batch(COMMIT_BATCH)
    assert (b.base_offset, b.crc, b.is_transactional, b.is_control) == (100, 0x3D5C73A3, False, False)
    [r] = b.records
    assert r.offset == 100 and r.key == KEY_13_1 and r.value == VALUE_13_2
    assert encode_batch(b) == COMMIT_BATCH


def test_13_10_transactional_commit_and_marker() -> None:
    log = TXN_BATCH + MARKER_BATCH
    txn, marker = list(iter_log(log))
    assert isinstance(txn, Batch) and isinstance(marker, Batch)
    assert (txn.base_offset, txn.crc, txn.attributes, txn.is_transactional, txn.producer_id) == (
        102,
        0xD3D2484E,
        0x10,
        True,
        4000,
    )
    assert (txn.producer_epoch, txn.base_sequence) == (0, 0)
    assert decode_record(txn.records[0].key, txn.records[0].value).value["offset"] == 42
    assert (marker.base_offset, marker.crc, marker.attributes, marker.is_control, marker.is_transactional) == (
        103,
        0xF6351F43,
        0x30,
        True,
        True,
    )
    assert marker.producer_id == 4000 and marker.base_sequence == -1
    [r] = marker.records
    assert decode_control(r.key, r.value) == (1, 0, 3)  # COMMIT, version 0, coordinator epoch 3
    assert encode_batch(txn) + encode_batch(marker) == log


def test_13_11_legacy_messages() -> None:
    value = h("00 01 00 00 00 00 00 00 00 2a 00 00 00 00 01 8b cf e5 68 00 00 00 01 8b d5 0b c4 00")
    magic1 = h("00 00 00 00 00 00 00 07 00 00 00 4b 7b 50 cf b3 01 00 00 00 01 8b cf e5 68 00 00 00 00 19") + KEY_13_1
    magic1 += h("00 00 00 1c") + value
    assert len(magic1) == 87
    b = _only_batch(magic1)
    assert (b.magic, b.crc, b.base_offset, b.timestamp_type) == (1, 0x7B50CFB3, 7, "CreateTime")
    [r] = b.records
    assert r.offset == 7 and r.timestamp == TS and r.key == KEY_13_1
    d = decode_record(r.key, r.value)
    assert d.value_version == 1 and d.value["expire_timestamp"] == TS + 86_400_000
    assert encode_batch(b) == magic1

    magic0 = h("00 00 00 00 00 00 00 07 00 00 00 27 75 8e 2a 13 00 00 00 00 00 19") + KEY_13_1 + h("ff ff ff ff")
    assert len(magic0) == 51
    b = _only_batch(magic0)
    assert (b.magic, b.crc, b.timestamp_type) == (0, 0x758E2A13, None)
    [r] = b.records
    assert r.timestamp is None and r.value is None and decode_record(r.key, r.value).tombstone
    assert encode_batch(b) == magic0


def test_13_12_kip848_values() -> None:
    key3 = h("00 03 00 03 63 67 31")
    d = decode_record(key3, h("00 00 00 00 00 05 01 00 08 11 22 33 44 55 66 77 88"))
    assert d.ok and d.key == {"group_id": "cg1"} and d.value == {"epoch": 5, "metadata_hash": 0x1122334455667788}
    d = decode_record(key3, h("00 00 00 00 00 05 00"))
    assert d.ok and d.value == {"epoch": 5, "metadata_hash": 0}

    key8 = h("00 08 00 03 63 67 31 00 03 6d 2d 31")
    value8 = h(
        "00 00 00 00 00 05 00 00 00 04 00 02 01 23 45 67 89 ab cd ef 01 23 45 67 89 ab cd ef"
        "03 00 00 00 00 00 00 00 01 00 01 00"
    )
    assert len(value8) == 40
    d = decode_record(key8, value8)
    assert d.ok and d.key == {"group_id": "cg1", "member_id": "m-1"}
    assert d.value == {
        "member_epoch": 5,
        "previous_member_epoch": 4,
        "state": 0,
        "assigned_partitions": [{"topic_id": TOPIC_ID, "partitions": [0, 1], "assignment_epochs": None}],
        "partitions_pending_revocation": [],
    }
    # with the 4.3+ AssignmentEpochs tag the element's tagged section grows and the value is 51 bytes
    element = h(
        "01 23 45 67 89 ab cd ef 01 23 45 67 89 ab cd ef 03 00 00 00 00 00 00 00 0101 00 09 03 00 00 00 05 00 00 00 05"
    )
    value8_tagged = h("00 00 00 00 00 05 00 00 00 04 00 02") + element + h("01 00")
    assert len(value8_tagged) == 51
    d = decode_record(key8, value8_tagged)
    assert d.ok and d.value["assigned_partitions"][0]["assignment_epochs"] == [5, 5]
