"""Silver from generated logs of two clusters: reconciliation by record, incremental runs through
the change data feed, re-runs that change nothing, full refresh equal to incremental; gold keeps
the two clusters' same-named groups apart.

One lakehouse is built once for the module (bronze and silver runs are the expensive part):
cluster ``a`` arrives in two bronze runs (half its partitions first), cluster ``b`` — another
log whose group names overlap ``a``'s — in the second. Expected values come from ``inspect`` on
the log files, the generator's expected-state.json and the bytes' own topic id pairs.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pipelines.bronze.ingest import ingest_segments
from pipelines.generate import generate
from pipelines.runtime import faults
from pipelines.runtime import lake as lakeio
from pipelines.runtime.config import SegmentsSource
from pipelines.runtime.tables import Tables
from pipelines.silver import RECORD_TABLES
from pipelines.silver.ingest import run_silver
from pipelines.silver.progress import last_progress
from tests.support.silver import census, commits_of, read, snapshot, topic_id_pairs_of, versions


def source(paths: list[Path], cluster: str) -> SegmentsSource:
    return SegmentsSource(kind="segments", cluster=cluster, paths=[str(p) for p in paths])


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("silver-logs")
    generate(root / "a", 4000, seed=4, partitions=2, segment_bytes=32 * 1024)
    generate(root / "b", 2500, seed=8, partitions=2, segment_bytes=32 * 1024)
    for name in ("a", "b"):
        shutil.copytree(root / name / "__consumer_offsets-0", root / f"{name}-half" / name / "__consumer_offsets-0")
    return {"a": root / "a", "b": root / "b", "a-half": root / "a-half", "b-half": root / "b-half"}


def segments(paths: list[Path]) -> SegmentsSource:
    """One bronze source over paths whose directory names are the clusters (``.../a/...``)."""
    return SegmentsSource(
        kind="segments",
        cluster="unused",
        paths=[str(p) for p in paths],
        cluster_from_path=r"/(?P<cluster>[ab])/__consumer_offsets",
    )


@pytest.fixture(scope="module")
def lake(spark, logs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Three bronze loads, each followed by silver; the second run is first killed twice."""
    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    tables = Tables(spark, str(tmp_path_factory.mktemp("silver-lake") / "lakehouse"))
    out: dict[str, Any] = {"tables": tables}
    ingest_segments(spark, tables, "1", segments([logs["a-half"] / "a"]), "b1", "/")
    out["first"] = run_silver(spark, tables, "r1")
    ingest_segments(spark, tables, "2", segments([logs["a"], logs["b-half"] / "b"]), "b2", "/")
    out["before_kills"] = versions(spark, tables)
    out["killed"] = []
    for point in ("silver.after_write_before_commit", "silver.before_watermark"):
        with crash_at(point), pytest.raises(Crash):
            run_silver(spark, tables, f"killed-{point}")
        out["killed"].append((point, versions(spark, tables) | {"watermark": last_progress(spark, tables)["run_id"]}))
    out["second"] = run_silver(spark, tables, "r2")
    ingest_segments(spark, tables, "3", segments([logs["b"]]), "b3", "/")
    out["third"] = run_silver(spark, tables, "r3")
    return out


def counts_by(spark, tables, table: str, *cols: str, layer: str = "silver") -> Counter:
    """Rows per value of ``cols``, read by delta-rs (a Spark job per table cost ~2 s)."""
    got = lakeio.read_arrow(spark, tables.path(layer, table), columns=cols)
    if got is None:
        return Counter()
    counts = got.group_by(list(cols)).aggregate([([], "count_all")]).to_pylist()
    return Counter({tuple(r[c] for c in cols): r["count_all"] for r in counts})


def records(path: Path) -> int:
    return sum(p["records"] for p in census(path).values())


def test_runs_select_only_new_bronze_rows(lake, logs) -> None:
    first, second, third = lake["first"], lake["second"], lake["third"]
    assert first.mode == "snapshot" and first.bronze_rows == records(logs["a-half"])
    assert second.mode == "incremental", "read from bronze's change data feed"
    assert second.bronze_rows == records(logs["a"]) - records(logs["a-half"]) + records(logs["b-half"])
    assert third.mode == "incremental" and third.bronze_rows == records(logs["b"]) - records(logs["b-half"])
    assert sum(third.inserted.values()) == sum(third.rows.values()) > 0, "after a completed run: appended"


def test_killed_runs_wrote_partially_and_the_rerun_completed(lake) -> None:
    """Each kill left tables written and no watermark; the next run re-read the same bronze rows,
    inserted none twice (MERGE) and finished (later tests check the result against the logs)."""
    before = lake["before_kills"]
    killed = dict(lake["killed"])
    first = killed["silver.after_write_before_commit"]
    assert first["offset_commits"] == before["offset_commits"] + 1, "the first table was committed"
    assert first["group_metadata"] == before["group_metadata"], "the second only left unreferenced files"
    assert first["version_inventory"] == before["version_inventory"]
    assert killed["silver.before_watermark"]["version_inventory"] > before["version_inventory"]
    assert {v["watermark"] for v in killed.values()} == {"r1"}, "no kill wrote the watermark"
    second = lake["second"]
    assert second.bronze_version_from == lake["first"].bronze_version
    assert sum(second.inserted.values()) == 0, "the killed runs had inserted everything already"


def test_silver_reconciles_with_bronze_counted_in_records(spark, lake, logs) -> None:
    tables = lake["tables"]
    got: Counter = Counter()
    for table in RECORD_TABLES:
        got.update(counts_by(spark, tables, table, "cluster", "offsets_partition"))
    bronze = counts_by_bronze(spark, tables)
    assert got == bronze
    markers = counts_by(spark, tables, "transaction_markers", "cluster", "offsets_partition")
    tombstones = counts_by(spark, tables, "tombstones", "cluster", "offsets_partition")
    members = counts_by(spark, tables, "group_members", "cluster", "offsets_partition")
    for cluster in ("a", "b"):
        expected = census(logs[cluster])
        assert {p: n for (c, p), n in bronze.items() if c == cluster} == {p: e["records"] for p, e in expected.items()}
        for p, e in expected.items():
            assert markers[(cluster, p)] == e["control"]
            assert tombstones[(cluster, p)] == e["tombstones"]
            assert members[(cluster, p)] == e["members"], "group_members has one row per member per record"
    assert read(spark, tables, "quarantine") is None, "nothing quarantined, so no quarantine table"


def counts_by_bronze(spark, tables) -> Counter:
    return counts_by(spark, tables, "offsets_records", "cluster", "partition", layer="bronze")


def test_version_inventory_is_the_log_census(spark, lake, logs) -> None:
    inv = read(spark, lake["tables"], "version_inventory").collect()
    for cluster in ("a", "b"):
        got: dict[int, Counter] = {}
        for r in inv:
            if r["cluster"] != cluster or r["record_kind"] == "control":
                continue
            assert r["status"] == "decoded"
            version = "null" if r["record_kind"] == "tombstone" else str(r["value_version"])
            got.setdefault(r["offsets_partition"], Counter())[f"{r['record_type']}/{version}"] += r["records"]
        assert got == {p: e["by_type_version"] for p, e in census(logs[cluster]).items()}
        assert sum(r["records"] for r in inv if r["cluster"] == cluster) == sum(
            e["records"] for e in census(logs[cluster]).values()
        )


def test_two_clusters_with_the_same_group_names_stay_apart(spark, lake, logs) -> None:
    df = read(spark, lake["tables"], "offset_commits")
    for cluster in ("a", "b"):
        got = {
            (r[0], r[1], r[2], r[3], r[4], r[5])
            for r in df.where(f"cluster = '{cluster}'")
            .select("offsets_partition", "record_offset", "group_id", "topic", "partition", "committed_offset")
            .collect()
        }
        assert got == commits_of(logs[cluster])
    groups = {c: {r[0] for r in df.where(f"cluster = '{c}'").select("group_id").distinct().collect()} for c in "ab"}
    assert groups["a"] & groups["b"], "the two logs share group names"
    # gold too: each cluster's current offsets are its own log's expected state
    from pipelines.gold.build import run_gold

    tables = lake["tables"]
    run_gold(spark, tables, "gold-two-clusters")
    live = spark.read.format("delta").load(tables.path("gold", "current_offsets")).where("NOT deleted").collect()
    for cluster in ("a", "b"):
        exp = json.loads((logs[cluster] / "expected-state.json").read_text())
        want = {(o["group"], o["topic"], o["partition"]): o["offset"] for o in exp["offsets"]}
        mine = [r for r in live if r["cluster"] == cluster]
        got = {(r["group_id"], r["topic"], r["partition"]): r["committed_offset"] for r in mine}
        assert got == want, cluster


def test_values_match_the_reference_replay(spark, lake, logs) -> None:
    tables = lake["tables"]
    for cluster in ("a", "b"):
        state = json.loads((logs[cluster] / "expected-state.json").read_text())
        commits = {
            (r["offsets_partition"], r["record_offset"]): r
            for r in read(spark, tables, "offset_commits").where(f"cluster = '{cluster}'").collect()
        }
        for o in state["offsets"]:
            r = commits[(o["offsets_partition"], o["record_offset"])]
            assert (r["group_id"], r["topic"], r["partition"], r["committed_offset"], r["leader_epoch"]) == (
                o["group"],
                o["topic"],
                o["partition"],
                o["offset"],
                o["leader_epoch"],
            )
            assert (r["metadata"], r["commit_timestamp"], r["expire_timestamp"]) == (
                o["metadata"],
                o["commit_timestamp"],
                o["expire_timestamp"],
            )
        members: dict[tuple, list] = {}
        for m in read(spark, tables, "group_members").where(f"cluster = '{cluster}'").collect():
            members.setdefault((m["offsets_partition"], m["record_offset"]), []).append(m)
        for g in state["classic_groups"]:
            got = sorted(members.get((g["offsets_partition"], g["record_offset"]), []), key=lambda m: m["member_index"])
            assert [m["member_id"] for m in got] == [e["member_id"] for e in g["members"]]
            if g["protocol_type"] == "consumer":
                for m, e in zip(got, g["members"], strict=True):
                    assert m["subscribed_topics"] == e["subscribed_topics"]
                    assert {a["topic"]: a["partitions"] for a in m["assigned_partitions"]} == e["assigned_partitions"]


def test_topic_ids_resolve_to_the_names_the_log_carries(spark, lake, logs) -> None:
    tables = lake["tables"]
    share = read(spark, tables, "share_group_records")
    checked = 0
    for cluster in ("a", "b"):
        known = dict(topic_id_pairs_of(logs[cluster]))
        ids = {
            (r["topic_id"], r["topic_name"])
            for r in read(spark, tables, "topic_ids").where(f"cluster = '{cluster}'").collect()
        }
        assert ids == set(known.items())
        rows = share.where(f"cluster = '{cluster}' AND record_type IN (13, 14)").collect()
        for r in rows:
            if r["record_type"] == 13:
                arrays = r["target_assignment_member"]["topic_partitions"]
            else:
                arrays = r["current_member_assignment"]["assigned_partitions"]
            for e in arrays:
                assert e["topic"] == known.get(e["topic_id"]), (cluster, r["record_offset"], e)
                checked += e["topic"] is not None
    assert checked > 0, "some share-group assignments name their topics"


def test_full_refresh_equals_incremental_and_reruns_change_nothing(spark, lake) -> None:
    """A full refresh killed after its first table is completed by the next plain run; then a
    run with nothing new in bronze writes no table version at all."""
    tables = lake["tables"]
    incremental = snapshot(spark, tables)
    with crash_at("silver.refresh_after_first_table"), pytest.raises(Crash):
        run_silver(spark, tables, "refresh", full_refresh=True)
    result = run_silver(spark, tables, "after-kill")
    assert result.mode == "full_refresh", "the pending refresh is finished, whatever the flags"
    assert snapshot(spark, tables) == incremental
    before = versions(spark, tables)
    again = run_silver(spark, tables, "again")
    assert again.mode == "up_to_date" and again.bronze_rows == 0
    assert versions(spark, tables) == before


def test_a_table_laid_out_by_an_older_version_makes_silver_rebuild(spark, lake) -> None:
    """A table partitioned as silver used to partition it (by offsets partition too) cannot take
    this version's writes: silver drops it and rebuilds everything from bronze, to the same rows."""
    tables = lake["tables"]
    before = snapshot(spark, tables)
    path = tables.path("silver", "transaction_markers")
    old = spark.read.format("delta").load(path)
    rows = old.collect()
    lakeio.drop(spark, path)
    spark.createDataFrame(rows, old.schema).write.format("delta").partitionBy("cluster", "offsets_partition").save(path)
    assert lakeio.partition_columns(spark, path) == ["cluster", "offsets_partition"] and rows
    rebuilt = run_silver(spark, tables, "relayout")
    assert rebuilt.mode == "full_refresh"
    assert lakeio.partition_columns(spark, path) == ["cluster"]
    assert snapshot(spark, tables) == before


class Crash(Exception):
    pass


@contextmanager
def crash_at(point: str) -> Iterator[None]:
    """Stop a run at a named fault point (pipelines/runtime/faults.py) as a kill would: what is
    committed stays, nothing after the point happens. The e2e tier kills real processes."""
    assert point in faults.POINTS

    def fail(name: str) -> None:
        if name == point:
            raise Crash(name)

    original = faults.point
    faults.point = fail
    os.environ["OFFSETS_FAULT"] = point
    try:
        yield
    finally:
        faults.point = original
        os.environ.pop("OFFSETS_FAULT", None)
