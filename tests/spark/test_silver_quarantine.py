"""Quarantine: bronze rows with corrupted bytes land there raw, with reason and position; the
documented ``offsets-lakehouse redecode JOB`` moves what a newer decoder reads into its table.

Bronze comes from a JSON-lines dump (rows without producer epoch or batch fields, as a live
source delivers them). The bytes are the spec's hand-built examples (section 13), so the
expected values are the spec's, not the decoder's.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines.bronze.dump_source import ingest_dump
from pipelines.cli.main import cli
from pipelines.runtime.config import DumpSource
from pipelines.silver.ingest import run_silver
from pipelines.silver.redecode import redecode_quarantine
from tests.support.silver import read, versions
from tests.unit.test_silver_decode import KEY_13_1, KEY_13_5, TOPIC_ID, TS, VALUE_13_2, VALUE_13_4, group_value_13_6, h

CORRUPT = h("00 63") + VALUE_13_2[2:]  # OffsetCommit value version 99 does not exist
KEY_13_12_TYPE_8 = h("00 08 00 03 63 67 31 00 03 6d 2d 31")
VALUE_13_12_TYPE_8 = h(
    "00 00 00 00 00 05 00 00 00 04 00 02 01 23 45 67 89 ab cd ef 01 23 45 67 89 ab cd ef"
    " 03 00 00 00 00 00 00 00 01 00 01 00"
)


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def dump(path: Path, rows: list[tuple[int, bytes | None, bytes | None, bool]]) -> Path:
    with path.open("w") as fh:
        for offset, key, value, control in rows:
            line = {"partition": 7, "offset": offset, "timestamp": TS, "key": b64(key), "value": b64(value)}
            fh.write(json.dumps(line | {"control": control}) + "\n")
    return path


@pytest.fixture(scope="module")
def quarantined(spark, tmp_path_factory: pytest.TempPathFactory):
    from pipelines.runtime.tables import Tables

    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    tmp_path = tmp_path_factory.mktemp("quarantine")
    tables = Tables(spark, str(tmp_path / "lakehouse"))
    rows = [
        (100, KEY_13_1, VALUE_13_2, False),
        (101, KEY_13_1, CORRUPT, False),
        (102, KEY_13_1, VALUE_13_2[:20], False),  # cut inside commitTimestamp
        (103, h("00 00"), h("00 00 00 00 00 03"), True),  # a control key needs 4 bytes
        (104, KEY_13_5, group_value_13_6(), False),
        (105, KEY_13_1, None, False),
        (106, KEY_13_12_TYPE_8, VALUE_13_12_TYPE_8, False),  # owns partitions of topic id 0123…ef
    ]
    source = DumpSource(kind="dump", cluster="d", format="jsonl", paths=[str(dump(tmp_path / "d.jsonl", rows))])
    ingest_dump(spark, tables, "d", source, "r1", "/")
    result = run_silver(spark, tables, "r1")
    return tables, result, tmp_path


def test_corrupted_bytes_land_in_quarantine_raw_with_reason_and_position(spark, quarantined) -> None:
    tables, result, _ = quarantined
    assert result.quarantined == 3
    q = {r["record_offset"]: r for r in read(spark, tables, "quarantine").collect()}
    assert sorted(q) == [101, 102, 103]
    assert (q[101]["reason"], q[101]["error_part"], q[101]["error_position"]) == ("unknown_version", "value", 0)
    assert (q[101]["raw_key"], q[101]["raw_value"]) == (KEY_13_1, CORRUPT)
    assert (q[101]["record_type"], q[101]["value_version"], q[101]["group_id"]) == (1, 99, "testgroup")
    assert (q[102]["reason"], q[102]["raw_value"]) == ("truncated", VALUE_13_2[:20])
    assert (q[103]["reason"], q[103]["control"], q[103]["error_part"]) == ("bad_control_record", True, "key")
    assert all(r["decoder_version"].startswith("silver1-") and r["cluster"] == "d" for r in q.values())
    assert all(r["producer_epoch"] is None for r in q.values()), "dumps carry no producer epoch"
    [commit] = read(spark, tables, "offset_commits").collect()
    assert (commit["record_offset"], commit["committed_offset"], commit["leader_epoch"]) == (100, 42, 5)
    assert commit["timestamp"].timestamp() == TS / 1000
    [member] = read(spark, tables, "group_members").collect()
    assert member["assigned_partitions"][0]["partitions"] == [0, 3]
    # decoded + quarantined + control = bronze records
    decoded_tables = ("offset_commits", "group_metadata", "tombstones", "consumer_group_current_member_assignment")
    assert sum(read(spark, tables, t).count() for t in decoded_tables) + len(q) == 7
    [owned] = read(spark, tables, "consumer_group_current_member_assignment").collect()
    assert [(p["topic_id"], p["topic"]) for p in owned["assigned_partitions"]] == [(TOPIC_ID, None)], "no name yet"
    inventory = {
        (r["record_kind"], r["record_type"], r["value_version"], r["status"]): r["records"]
        for r in read(spark, tables, "version_inventory").collect()
    }
    assert inventory == {
        ("data", 1, 3, "decoded"): 1,
        ("data", 1, 99, "quarantined"): 1,
        ("data", 1, 3, "quarantined"): 1,
        ("control", None, None, "quarantined"): 1,
        ("data", 2, 3, "decoded"): 1,
        ("tombstone", 1, None, "decoded"): 1,
        ("data", 8, 0, "decoded"): 1,
    }


def test_redecode_moves_what_the_decoder_reads_and_keeps_the_rest(spark, quarantined) -> None:
    """Runs after the test above (it changes the lakehouse)."""
    tables, _, tmp_path = quarantined
    from delta.tables import DeltaTable

    # what an older decoder that did not know OffsetCommit v3 would have left: offset 100 in
    # quarantine instead of offset_commits (and 101 recorded by that older decoder too)
    commits = DeltaTable.forPath(spark, tables.path("silver", "offset_commits"))
    before = read(spark, tables, "offset_commits").collect()
    commits.delete("record_offset = 100")
    old = read(spark, tables, "quarantine").where("record_offset = 101").collect()[0].asDict()
    stale = [
        old | {"record_offset": 100, "raw_value": VALUE_13_2, "value_version": 3, "decoder_version": "silver1-old"},
        old | {"decoder_version": "silver1-old"},
    ]
    qt = DeltaTable.forPath(spark, tables.path("silver", "quarantine"))
    qt.delete("record_offset = 101")
    spark.createDataFrame(stale, read(spark, tables, "quarantine").schema).write.format("delta").mode("append").save(
        tables.path("silver", "quarantine")
    )

    config = tmp_path / "jobs.yaml"
    config.write_text(
        f"lakehouse: {{root: {tables.root}}}\n"
        "spark: {master: 'local[2]'}\n"
        f"sources: {{d: {{kind: dump, cluster: d, format: jsonl, paths: [{tmp_path}/d.jsonl]}}}}\n"
        "jobs: {j: {sources: [d], stages: [bronze, silver]}}\n"
    )
    status = CliRunner().invoke(cli, ["status", "-c", str(config), "--json"], catch_exceptions=False)
    silver = json.loads(status.stdout)["silver"]
    assert silver["quarantined"] == {"unknown_version": 2, "truncated": 1, "bad_control_record": 1}
    assert silver["watermark"] == silver["bronze_version"] and not silver["killed"]
    assert any("offsets-lakehouse redecode" in n for n in json.loads(status.stdout)["notes"])

    out = CliRunner().invoke(cli, ["redecode", "j", "-c", str(config), "--json"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["stages"][0]["details"][0]["released"] == 1

    assert read(spark, tables, "offset_commits").collect() == before, "offset 100 is back, as decoded before"
    q = {r["record_offset"]: r for r in read(spark, tables, "quarantine").collect()}
    assert sorted(q) == [101, 102, 103]
    assert q[101]["decoder_version"] == q[102]["decoder_version"] != "silver1-old", "re-tried by this decoder"
    statuses = {
        (r["record_type"], r["value_version"], r["status"]) for r in read(spark, tables, "version_inventory").collect()
    }
    assert (1, 3, "decoded") in statuses and (1, 99, "quarantined") in statuses

    v = versions(spark, tables)
    again = redecode_quarantine(spark, tables, "again")
    assert again.released == 0 and versions(spark, tables) == v, "nothing left to move: nothing written"


def test_topic_ids_learnt_later_name_earlier_records(spark, quarantined) -> None:
    """Offset 106 (spec 13.12) owns partitions of a topic id silver has never seen with a name. An
    offset commit v4 arriving later (spec 13.4: topic "orders", the same id) names it."""
    tables, _, tmp_path = quarantined
    later = dump(tmp_path / "later.jsonl", [(107, KEY_13_1, VALUE_13_4, False)])
    ingest_dump(
        spark, tables, "later", DumpSource(kind="dump", cluster="d", format="jsonl", paths=[str(later)]), "r2", "/"
    )
    result = run_silver(spark, tables, "r2")
    assert result.mode == "incremental" and result.bronze_rows == 1 and result.topic_names_resolved == 1
    [owned] = read(spark, tables, "consumer_group_current_member_assignment").collect()
    assert [(p["topic_id"], p["topic"], p["partitions"]) for p in owned["assigned_partitions"]] == [
        (TOPIC_ID, "orders", [0, 1])
    ]
    assert [(r["topic_id"], r["topic_name"]) for r in read(spark, tables, "topic_ids").collect()] == [
        (TOPIC_ID, "orders")
    ]
