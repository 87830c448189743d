"""Topic names filled into Arrow rows on the driver (pipelines.silver.topics.fill_topic_names_arrow):
the same rule as the Spark fill — ``topic`` becomes the name of (row's cluster, ``topic_id``), null
when silver.topic_ids has none — with null lists, null structs and empty lists kept as they are."""

from __future__ import annotations

import pyarrow as pa

from pipelines.silver.topics import fill_topic_names_arrow

ITEM = pa.struct([("topic_id", pa.string()), ("topic", pa.string()), ("partitions", pa.list_(pa.int32()))])
SCHEMA = pa.schema([("cluster", pa.string()), ("member_id", pa.string()), ("assigned", pa.list_(ITEM))])
NAMES = {("a", "id-1"): "orders", ("b", "id-1"): "payments", ("a", "id-2"): "audit"}


def item(topic_id: str | None, topic: str | None = None, partitions: list[int] | None = None) -> dict:
    return {"topic_id": topic_id, "topic": topic, "partitions": partitions or [0]}


def test_names_follow_the_row_cluster_and_unknown_ids_become_null() -> None:
    rows = pa.Table.from_pylist(
        [
            {"cluster": "a", "member_id": "m1", "assigned": [item("id-1"), item("id-2", "stale", [3, 4])]},
            {"cluster": "b", "member_id": "m2", "assigned": [item("id-1"), item("id-9", "was-set")]},
            {"cluster": "a", "member_id": "m3", "assigned": None},
            {"cluster": "b", "member_id": "m4", "assigned": []},
            {"cluster": "a", "member_id": "m5", "assigned": [None, item(None), item("id-2")]},
        ],
        SCHEMA,
    )
    out = fill_topic_names_arrow(rows, ["assigned"], NAMES)
    assert out.schema == rows.schema
    got = out.column("assigned").to_pylist()
    assert got[0] == [item("id-1", "orders"), item("id-2", "audit", [3, 4])]
    assert got[1] == [item("id-1", "payments"), item("id-9", None)]
    assert got[2] is None
    assert got[3] == []
    assert got[4] == [None, item(None, None), item("id-2", "audit")]
    assert out.column("member_id").to_pylist() == ["m1", "m2", "m3", "m4", "m5"]


def test_a_sliced_table_keeps_its_rows_aligned() -> None:
    rows = pa.Table.from_pylist(
        [{"cluster": c, "member_id": f"m{i}", "assigned": [item("id-1")] * (i % 3)} for i, c in enumerate("abab")],
        SCHEMA,
    ).slice(1, 3)
    out = fill_topic_names_arrow(rows, ["assigned"], NAMES)
    assert out.column("assigned").to_pylist() == [[item("id-1", "payments")], [item("id-1", "orders")] * 2, []]


def test_an_array_inside_a_struct_column_is_filled_and_null_structs_stay_null() -> None:
    """share_group_records keeps its assignments in struct columns (``struct.field`` paths)."""
    outer = pa.struct([("epoch", pa.int32()), ("assigned", pa.list_(ITEM))])
    schema = pa.schema([("cluster", pa.string()), ("assignment", outer)])
    rows = pa.Table.from_pylist(
        [
            {"cluster": "a", "assignment": {"epoch": 3, "assigned": [item("id-1"), item("id-7", "stale")]}},
            {"cluster": "b", "assignment": None},
            {"cluster": "b", "assignment": {"epoch": 4, "assigned": None}},
            {"cluster": "b", "assignment": {"epoch": 5, "assigned": [item("id-1")]}},
        ],
        schema,
    ).slice(0, 4)
    out = fill_topic_names_arrow(rows, ["assignment.assigned"], NAMES)
    assert out.schema == rows.schema
    assert out.column("assignment").to_pylist() == [
        {"epoch": 3, "assigned": [item("id-1", "orders"), item("id-7", None)]},
        None,
        {"epoch": 4, "assigned": None},
        {"epoch": 5, "assigned": [item("id-1", "payments")]},
    ]
