"""What a silver decoding task hands to the writes (pipelines/silver/split.py), against the wide
decoded rows it comes from and against a census and topic map worked out here, record by record,
from the raw bytes."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pipelines.codec import primitives as P
from pipelines.generate import generate
from pipelines.silver.contract import MEMBER_TABLE, RECORD_TABLES
from pipelines.silver.decode import ENVELOPE_COLUMNS, MEMBERS, build_plan, decode_table
from pipelines.silver.local import bronze_rows, bronze_table
from pipelines.silver.split import INVENTORY, RESOLVABLE, TOPIC_IDS, decode_blobs

PLAN = build_plan()
REAL = Path(__file__).resolve().parents[2].parent / "shared" / "testdata" / "real-segments"


@pytest.fixture(scope="module")
def bronze(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    out = tmp_path_factory.mktemp("split") / "logs"
    generate(out, 8000, seed=5, partitions=3, segment_bytes=64 * 1024)
    rows = list(bronze_rows([out], "gen"))
    # records no decoder reads: quarantined with their bytes (and counted by the census as such)
    bad = [
        (b"\x00\x01\xff", b"\x00\x03\x00"),  # offset-commit key cut short
        (b"\x00\x63\x00\x01x", b"\x00\x00"),  # record type 99
        (b"\x01", None),  # one-byte key: no type
        (b"\x00\x02\x00\x01g", b"\x00\x07\x00"),  # group metadata value version 7
    ]
    last = max(r["offset"] for r in rows if r["partition"] == 0)
    for i, (key, value) in enumerate(bad):
        rows.append({**rows[0], "partition": 0, "offset": last + 1 + i, "key": key, "value": value, "control": False})
    return bronze_table(rows)


def _reference(batch: pa.RecordBatch) -> dict[str, list[dict[str, Any]]]:
    """Each table's rows taken from the wide decoded rows (envelope + the table's struct)."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for wide in decode_table(batch, PLAN).to_pylist():
        [table] = [t for t in RECORD_TABLES if wide[t] is not None]
        envelope = {c: wide[c] for c in ENVELOPE_COLUMNS}
        payload = dict(wide[table])
        if table == "group_metadata":
            for member in payload.pop(MEMBERS):
                out[MEMBER_TABLE].append(envelope | member)
        out[table].append(envelope | payload)
    return out


def _blobs(table: pa.Table, rows_per_batch: int) -> dict[str, list[pa.Table]]:
    out: dict[str, list[pa.Table]] = defaultdict(list)
    for blob in decode_blobs(table.to_batches(max_chunksize=rows_per_batch), PLAN):
        for name, n, data in zip(*(blob.column(c).to_pylist() for c in ("table", "rows", "data")), strict=True):
            got = pa.ipc.open_stream(data).read_all() if data else None
            if got is not None:
                assert got.num_rows == n, name
            out[name].append(got if got is not None else pa.table({"n": [n]}))
    return out


def _key(row: dict[str, Any]) -> tuple:
    return (row["cluster"], row["offsets_partition"], row["record_offset"], row.get("member_index"))


def test_each_table_receives_exactly_its_wide_rows_in_its_declared_columns(bronze: pa.Table) -> None:
    reference: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for batch in bronze.to_batches(max_chunksize=1500):
        for name, rows in _reference(batch).items():
            reference[name] += rows
    got = _blobs(bronze, 1500)
    compared = 0
    for name in (*RECORD_TABLES, MEMBER_TABLE):
        rows = [r for t in got.get(name, []) for r in t.to_pylist()]
        for t in got.get(name, []):
            assert t.schema == PLAN.tables[name], name
        want = {_key(r): {c: r.get(c) for c in PLAN.tables[name].names} for r in reference[name]}
        have = {_key(r): r for r in rows}
        assert len(have) == len(rows), f"{name}: a row written twice"
        assert have == want, name
        compared += len(want)
    assert compared > bronze.num_rows  # every record, and the members of group records on top
    assert len(reference["quarantine"]) == 4 and len(reference[MEMBER_TABLE]) > 100


def _least(a: Any, b: Any) -> Any:
    """min ignoring nulls, as SQL's MIN aggregate."""
    return b if a is None else a if b is None else min(a, b)


def _greatest(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def _int16(data: bytes | None) -> int | None:
    return None if data is None or len(data) < 2 else int.from_bytes(data[:2], "big", signed=True)


def test_the_census_counts_the_raw_records_and_their_quarantine(bronze: pa.Table) -> None:
    got = _blobs(bronze, 1000)
    quarantined = {_key(r) for t in got["quarantine"] for r in t.to_pylist()}
    want: dict[tuple, list] = {}
    for r in bronze.to_pylist():
        kind = "control" if r["control"] else ("tombstone" if r["value"] is None else "data")
        rtype = None if r["control"] else _int16(r["key"])
        version = None if r["control"] else _int16(r["value"])
        status = "quarantined" if (r["cluster"], r["partition"], r["offset"], None) in quarantined else "decoded"
        key = (r["cluster"], r["partition"], kind, rtype, version, status)
        acc = want.setdefault(key, [0, r["offset"], r["offset"], r["timestamp"], r["timestamp"]])
        acc[0] += 1
        acc[1], acc[2] = min(acc[1], r["offset"]), max(acc[2], r["offset"])
        acc[3], acc[4] = _least(acc[3], r["timestamp"]), _greatest(acc[4], r["timestamp"])
    have: dict[tuple, list] = {}
    for t in got[INVENTORY]:
        for r in t.to_pylist():
            key = tuple(r[c] for c in ("cluster", "offsets_partition", "record_kind", "record_type",
                                       "value_version", "status"))  # fmt: skip
            acc = have.setdefault(key, [0, r["first_offset"], r["last_offset"], r["first_timestamp"],
                                        r["last_timestamp"]])  # fmt: skip
            acc[0] += r["records"]
            acc[1], acc[2] = min(acc[1], r["first_offset"]), max(acc[2], r["last_offset"])
            acc[3], acc[4] = _least(acc[3], r["first_timestamp"]), _greatest(acc[4], r["last_timestamp"])
    assert have == want
    kinds = Counter(k[2] for k in want)
    assert kinds["control"] and kinds["tombstone"] and kinds["data"]
    assert sum(v[0] for k, v in want.items() if k[5] == "quarantined") == 4


def test_topic_ids_are_the_pairs_the_records_carry(bronze: pa.Table) -> None:
    got = _blobs(bronze, 2000)
    rows = {name: [r for t in got.get(name, []) for r in t.to_pylist()] for name in RECORD_TABLES}
    want: dict[tuple, Any] = {}

    def add(cluster: str, topic_id: str | None, name: str | None, ts: Any) -> None:
        if topic_id in (None, P.ZERO_UUID) or name is None:
            return
        key = (cluster, topic_id, name)
        want[key] = _least(want.get(key), ts)

    for r in rows["offset_commits"]:
        add(r["cluster"], r["topic_id"], r["topic"], r["timestamp"])
    for r in rows["consumer_group_partition_metadata"]:
        for t in r["topics"] or ():
            add(r["cluster"], t["topic_id"], t["topic_name"], r["timestamp"])
    for r in rows["share_group_records"]:
        for struct, array in (("partition_metadata", "topics"), ("state_partition_metadata", "initializing_topics"),
                              ("state_partition_metadata", "initialized_topics"),
                              ("state_partition_metadata", "deleting_topics")):  # fmt: skip
            for t in (r[struct] or {}).get(array) or ():
                add(r["cluster"], t["topic_id"], t["topic_name"], r["timestamp"])
    for r in rows["streams_group_records"]:
        for t in (r["partition_metadata"] or {}).get("topics") or ():
            add(r["cluster"], t["topic_id"], t["topic_name"], r["timestamp"])
    have: dict[tuple, Any] = {}
    for t in got[TOPIC_IDS]:
        for r in t.to_pylist():
            key = (r["cluster"], r["topic_id"], r["topic_name"])
            have[key] = _least(have.get(key), r["first_seen"])
    assert have == want
    assert len(want) >= 3  # the generated log names topic ids by commit (v4) and in group metadata
    resolvable = sum(t.column("n")[0].as_py() for t in got[RESOLVABLE])
    named_by_id = len(rows["consumer_group_target_assignment_member"]) + len(
        rows["consumer_group_current_member_assignment"]
    )
    named_by_id += sum(
        (r["target_assignment_member"] is not None) + (r["current_member_assignment"] is not None)
        for r in rows["share_group_records"]
    )
    assert resolvable == named_by_id > 0


@pytest.mark.skipif(not REAL.is_dir(), reason="../shared/testdata/real-segments not present")
def test_real_segments_split_like_their_wide_rows() -> None:
    dirs = sorted(p for p in REAL.iterdir() if p.is_dir())[:40]
    rows = [r for d in dirs for r in bronze_rows([d], d.name)]
    table = bronze_table(rows)
    got = _blobs(table, 5000)
    reference: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for batch in table.to_batches(max_chunksize=5000):
        for name, part in _reference(batch).items():
            reference[name] += part
    for name in (*RECORD_TABLES, MEMBER_TABLE):
        have = sorted(map(_key, (r for t in got.get(name, []) for r in t.to_pylist())), key=repr)
        assert have == sorted(map(_key, reference[name]), key=repr), name
    assert sum(len(v) for v in reference.values()) > 10_000
