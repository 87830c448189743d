"""Gold equals the generator's expected state (its independent intent, checked by the reference
replay when it was generated) through a first run, an incremental run and late data (earlier
segments arriving after later ones recompute the partition). Re-running changes nothing. History
and marts are checked against derivations that do not use gold (tests/spark/gold_marts_check.py), and
every gold table against the spec oracle (tests/support/spec_oracle.py)."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from bench.common import expected_gold as expected_from
from bench.common import gold_now as gold
from pipelines.bronze.ingest import ingest_segments
from pipelines.generate import generate
from pipelines.gold.build import run_gold
from pipelines.reference.replay import iter_batches, replay_paths
from pipelines.runtime import lake
from pipelines.runtime.config import SegmentsSource
from pipelines.silver.ingest import run_silver
from tests.spark import gold_marts_check as independent
from tests.support.oracle_compare import GOLD_SECTIONS, compare_with_gold
from tests.support.spec_oracle import oracle_of_files


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gold") / "logs"
    generate(out, 6000, seed=33, partitions=4, segment_bytes=24 * 1024)
    return out


def expected(root: Path) -> dict:
    return expected_from(json.loads((root / "expected-state.json").read_text()))


def ingest(spark, tables, paths: list[Path], run: str) -> None:
    src = SegmentsSource(kind="segments", cluster="c1", paths=[str(p) for p in paths])
    ingest_segments(spark, tables, "gen", src, f"{run}-bronze", "/")
    run_silver(spark, tables, f"{run}-silver")


def versions(spark, tables) -> dict[str, int | None]:
    return {t: lake.version(spark, tables.path("gold", t)) for t in tables.specs["gold"]}


def check_history_as_of(spark, root: Path) -> None:
    """As of batch ends spread over each partition's log, offset_history holds exactly the live
    offsets of the reference replay stopped there."""
    from pipelines.codec.segments import discover

    ends: dict[int, list[int]] = {}
    for b in iter_batches(discover([root])):
        if b:
            ends.setdefault(b[0].partition, []).append(b[-1].offset)
    checked = 0
    for part, positions in sorted(ends.items()):
        for pos in positions[len(positions) // 5 :: max(1, len(positions) // 4)]:
            ref = replay_paths([str(root)], stop_at={part: pos + 1}).snapshot()
            want = {
                (o["group"], o["topic"], o["partition"]): o["offset"]
                for o in ref["offsets"]
                if o["offsets_partition"] == part
            }
            rows = spark.sql(
                "SELECT group_id, topic, partition, committed_offset FROM gold.offset_history "
                f"WHERE cluster = 'c1' AND offsets_partition = {part} AND valid_from_offset <= {pos} "
                f"AND (valid_to_offset IS NULL OR valid_to_offset > {pos}) AND NOT deleted"
            ).collect()
            got = {(r["group_id"], r["topic"], r["partition"]): r["committed_offset"] for r in rows}
            assert len(got) == len(rows), f"overlapping intervals as of {part}/{pos}"
            assert got == want, f"as of {part}/{pos}"
            checked += 1
    assert checked >= 8


def check_group_tables(spark, root: Path) -> None:
    """current_group_members equals the members of the expected state's classic groups, and every
    generation the workload started is a row of group_generations."""
    exp = json.loads((root / "expected-state.json").read_text())
    want = {
        (g["group"], m["member_id"]): (g["generation"], m["client_id"], m["assigned_partitions"] or {})
        for g in exp["classic_groups"]
        for m in g["members"]
    }
    assert want
    rows = spark.sql("SELECT * FROM gold.current_group_members").collect()
    got = {
        (r["group_id"], r["member_id"]): (
            r["generation"],
            r["client_id"],
            {a["topic"]: list(a["partitions"]) for a in (r["assigned_partitions"] or [])},
        )
        for r in rows
    }
    assert got == want
    per_day = spark.sql("SELECT group_id, day, rebalances FROM gold.rebalances_per_day").collect()
    assert {(r["group_id"], r["day"]): r["rebalances"] for r in per_day} == dict(independent.rebalances_per_day(root))


def check_marts(spark, root: Path) -> None:
    """Mart counts against the raw log (codec only) for groups without transactions."""
    want = independent.cadence(root)
    assert want
    rows = spark.sql(
        "SELECT group_id, unix_millis(hour) AS hour, commit_batches, offsets_committed FROM gold.commit_cadence"
    ).collect()
    got = {(r["group_id"], r["hour"]): (r["commit_batches"], r["offsets_committed"]) for r in rows}
    txn_free = {g for g, _ in want}
    assert {k: v for k, v in got.items() if k[0] in txn_free} == want
    rewinds = independent.rewinds(root)
    assert sum(rewinds.values()) > 0
    rows = spark.sql(
        "SELECT group_id, topic, partition, count(*) AS n FROM gold.offset_rewinds GROUP BY 1, 2, 3"
    ).collect()
    got_rewinds = {(r["group_id"], r["topic"], r["partition"]): r["n"] for r in rows if r["group_id"] in txn_free}
    assert got_rewinds == {k: n for k, n in rewinds.items() if k[0] in txn_free}
    exp = json.loads((root / "expected-state.json").read_text())
    load = spark.sql("SELECT offsets_partition, live_offsets FROM gold.coordinator_load").collect()
    per_part: dict[int, int] = {}
    for o in exp["offsets"]:
        per_part[o["offsets_partition"]] = per_part.get(o["offsets_partition"], 0) + 1
    assert {r["offsets_partition"]: r["live_offsets"] for r in load if r["live_offsets"]} == per_part


def test_runs_over_slices_end_in_the_expected_state(spark, tables, generated, tmp_path):
    """Each partition's log arrives in three slices: the middle segments (first run: every
    partition replayed from its start), then the last ones (incremental: only new events on top of
    the persisted state), then the first ones (late data at or below the applied offset: the
    partition is recomputed). The end state equals the generator's expected state (soft deletes
    older than the retention purged); a re-run changes no table; history, group tables and marts
    equal independent derivations from the log and the generator's event log."""
    slices = {name: tmp_path / name for name in ("middle", "last", "first")}
    for part_dir in sorted(generated.glob("__consumer_offsets-*")):
        logs = sorted(part_dir.glob("*.log"))
        assert len(logs) >= 3, part_dir
        third = max(1, len(logs) // 3)
        chosen = {"first": logs[:third], "middle": logs[third : 2 * third], "last": logs[2 * third :]}
        for name, files in chosen.items():
            (slices[name] / part_dir.name).mkdir(parents=True)
            for f in files:
                shutil.copy(f, slices[name] / part_dir.name / f.name)
    runs = []
    for i, name in enumerate(("middle", "last", "first")):
        ingest(spark, tables, [slices[name]], f"r{i}")
        runs.append(run_gold(spark, tables, f"g{i}", soft_delete_retention_days=RETENTION_DAYS))
        if name == "last":  # the incremental run closed the intervals the first run left open
            tables.register_existing(["gold"])  # the views and tables by name (a job registers nothing)
            check_history_chains(spark)
    assert (runs[0].partitions_incremental, runs[0].partitions_recomputed) == (0, 4)
    assert (runs[1].partitions_incremental, runs[1].partitions_recomputed) == (4, 0)
    assert runs[2].partitions_recomputed == 4 and all("late data" in w for w in runs[2].recomputed), runs[2].recomputed
    want = expected(generated)
    assert want["live"] and want["deleted"] and want["classic"] and want["pending"]
    # soft deletes older than the retention (in each partition's log time) are purged, no others
    kept = kept_deletes(generated, RETENTION_DAYS)
    assert len(kept) < len(want["deleted"]), "the retention must purge something, or this proves nothing"
    all_deleted = want["deleted"]
    want["deleted"] = {k: v for k, v in all_deleted.items() if k in kept}
    assert gold(spark, tables) == want
    assert runs[2].purged >= len(all_deleted) - len(kept)
    before = versions(spark, tables)
    again = run_gold(spark, tables, "g-again", soft_delete_retention_days=RETENTION_DAYS)
    assert again.events == 0 and versions(spark, tables) == before
    tables.register_existing(["gold"])
    live = spark.sql("SELECT count(*) AS n FROM gold.live_offsets").collect()[0]["n"]
    assert live == len(want["live"])
    check_history_as_of(spark, generated)
    check_group_tables(spark, generated)
    check_marts(spark, generated)
    # the spec oracle, which shares no code with gold or the reference replay: every table the
    # retention does not purge (current_offsets loses its old soft deletes) after the three runs
    check_against_oracle(spark, tables, generated, [t for t in GOLD_SECTIONS if t != "current_offsets"])
    # a gold table laid out by an older version (partitioned by cluster and offsets partition, as
    # before 2026-11-27) makes the next run drop gold and rebuild it from silver; that
    # full refresh, without a retention, brings the purged soft deletes back (and nothing else)
    path = tables.path("gold", "pending_transactions")
    lake.drop(spark, path)
    columns = tables.spec("gold", "pending_transactions").ddl_columns()
    old_layout = ["cluster", "offsets_partition"]
    spark.createDataFrame([], columns).write.format("delta").partitionBy(*old_layout).save(path)
    assert lake.partition_columns(spark, path) == old_layout
    rebuilt = run_gold(spark, tables, "g-rebuild")
    assert rebuilt.mode == "full refresh" and rebuilt.partitions_recomputed == 4
    assert lake.partition_columns(spark, path) == ["cluster"]
    assert gold(spark, tables) == {**want, "deleted": all_deleted}
    check_against_oracle(spark, tables, generated, list(GOLD_SECTIONS))  # the rebuild: every table


def check_against_oracle(spark, tables, root: Path, names: list[str]) -> None:
    """Gold's tables equal the spec oracle's model of the log (tests/support/oracle_compare.py),
    field by field, on rows present on both sides."""
    rows = {}
    for t in names:
        rows[t] = [r.asDict(recursive=True) for r in spark.read.format("delta").load(tables.path("gold", t)).collect()]
    cmp = compare_with_gold(oracle_of_files([root]), rows, cluster_name="c1", tables=names)
    assert not cmp.differences, cmp.report()
    kinds = ("gold keeps it live beside", "the same batch", "§12.5")
    assert all(any(k in a for k in kinds) for a in cmp.accepted), cmp.accepted
    assert cmp.rows["offset_history"] >= 2_000 and cmp.rows["group_generations"] >= 100, cmp.rows
    assert cmp.rows["current_groups"] >= 15 and cmp.rows["consumer_group_members"] >= 5, cmp.rows
    assert cmp.rows["pending_transactions"] >= 5, cmp.rows
    assert min(cmp.rows[t] for t in ("share_group_members", "streams_group_members", "streams_group_topologies")), (
        cmp.rows
    )
    if "current_offsets" in names:
        assert cmp.rows["current_offsets"] >= 100, cmp.rows
    causes = Counter(r["delete_cause"] for r in rows["offset_history"] if r["deleted"])
    assert min(causes[c] for c in ("expiry", "group_deletion", "explicit_delete")) >= 5, causes


# record types gold replays (pipelines/gold/events.py)
GOLD_REPLAYS = (0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13, 14, 17, 19, 20, 21, 22, 23)
# the generated log's last deletions happen seconds before its end: 4 s purges them
RETENTION_DAYS = 4 / 86_400


def kept_deletes(root: Path, days: float) -> set[tuple]:
    """Keys of the expected soft deletes within ``days`` of their partition's latest record that
    gold replays (offset, group and member records, COMMIT/ABORT markers; not the regex (16), the
    partition metadata (4, 9, 18) or share state (15) records)."""
    from pipelines.codec.segments import discover

    log_now: dict[int, int] = {}
    for b in iter_batches(discover([root])):
        for e in b:
            if (e.is_control or e.record_type in GOLD_REPLAYS) and e.timestamp is not None:
                log_now[e.partition] = max(log_now.get(e.partition, e.timestamp), e.timestamp)
    exp = json.loads((root / "expected-state.json").read_text())
    return {
        (d["group"], d["topic"], d["partition"])
        for d in exp["deleted_offsets"]
        # a tombstone without a timestamp (magic 0) has no age: kept
        if d["timestamp"] is None or d["timestamp"] >= log_now[d["offsets_partition"]] - days * 86_400_000
    }


def check_history_chains(spark) -> None:
    """Per key: exactly one open interval, the current_offsets state, and each closed interval ends
    where the next one starts."""
    broken = spark.sql(
        """
        SELECT * FROM (
          SELECT *, lead(valid_from_offset) OVER w AS next_from,
                 sum(CASE WHEN valid_to_offset IS NULL THEN 1 ELSE 0 END) OVER k AS open_rows
          FROM gold.offset_history
          WINDOW w AS (PARTITION BY cluster, group_id, topic, partition ORDER BY valid_from_offset),
                 k AS (PARTITION BY cluster, group_id, topic, partition)
        ) WHERE open_rows != 1 OR NOT (valid_to_offset <=> next_from)
        """
    ).count()
    assert broken == 0
    mismatched = spark.sql(
        """
        SELECT * FROM gold.current_offsets c LEFT JOIN gold.offset_history h
          ON c.cluster = h.cluster AND c.group_id = h.group_id AND c.topic = h.topic AND c.partition = h.partition
         AND h.valid_to_offset IS NULL
        WHERE h.valid_from_offset IS NULL OR h.valid_from_offset != c.state_offset OR h.deleted != c.deleted
        """
    ).count()
    assert mismatched == 0
    multi = spark.sql(
        "SELECT count(*) AS n FROM (SELECT group_id FROM gold.offset_history GROUP BY group_id, topic, partition "
        "HAVING count(*) > 1)"
    ).collect()[0]["n"]
    assert multi > 0  # keys with several versions exist, so the chain check above checked something


# -- the state rules of gold.live_groups, by example -------------------------------------------------
def _rows(table: str, rows: list[dict]) -> list[dict]:
    """Rows of a gold table: every declared column, None where the example does not set it."""
    from pipelines.runtime.tables import load_specs

    names = [c.name for c in load_specs()["gold"][table].columns]
    defaults = {"cluster": "c", "offsets_partition": 0, "updated_run_id": "r", "deleted": False, "state_offset": 0}
    return [{n: r.get(n, defaults.get(n)) for n in names} for r in rows]


def test_live_groups_states_of_share_and_streams_groups_by_example(spark) -> None:
    """gold.live_groups' SQL over hand-made rows of current_groups and the member tables, each case
    with the state Kafka 4.2's coordinator computes for it (docs/gold.md): share groups Empty
    without members, else Stable; streams groups Empty without members, NotReady without a
    topology or one not validated, Assigning while the group epoch is ahead of the target's,
    Reconciling while a member is not STABLE (1) at the target epoch, else Stable. Rows of target
    assignments of ids that are not members do not count as members."""
    from pipelines.runtime.tables import load_specs, load_views

    def group(gid: str, protocol: str, **fields) -> dict:
        return {"group_id": gid, "protocol": protocol, "protocol_type": protocol, "exists_because": "metadata",
                "generation": 2, "assignment_epoch": 2, **fields}  # fmt: skip

    def streams(gid: str, **fields) -> dict:
        return group(gid, "streams", **{"topology_epoch": 0, "validated_topology_epoch": 0, **fields})

    def member(gid: str, mid: str, epoch: int | None = 2, state: int | None = 1, **offsets) -> dict:
        meta = {"record_offset_19": 1} if offsets == {} else offsets
        return {"group_id": gid, "member_id": mid, "member_epoch": epoch, "state": state, **meta}

    cases = {
        ("s-empty", "share"): "Empty",
        ("s-target-only", "share"): "Empty",
        ("s-stable", "share"): "Stable",
        ("s-fenced", "share"): "Stable",  # epoch -1 after a current assignment tombstone: still a member
        ("t-empty", "streams"): "Empty",
        ("t-target-only", "streams"): "Empty",
        ("t-no-topology", "streams"): "NotReady",
        ("t-not-validated", "streams"): "NotReady",
        ("t-kafka-4.1", "streams"): "NotReady",
        ("t-assigning", "streams"): "Assigning",
        ("t-revoking", "streams"): "Reconciling",
        ("t-behind", "streams"): "Reconciling",
        ("t-fenced", "streams"): "Reconciling",
        ("t-no-current", "streams"): "Reconciling",
        ("t-stable", "streams"): "Stable",
    }
    groups = [
        group("s-empty", "share"),
        group("s-target-only", "share"),
        group("s-stable", "share"),
        group("s-fenced", "share"),
        group("s-deleted", "share", deleted=True, delete_cause="group_deletion"),
        streams("t-empty"),
        streams("t-target-only"),
        streams("t-no-topology", topology_epoch=None),
        streams("t-not-validated", topology_epoch=1),
        streams("t-kafka-4.1", validated_topology_epoch=-1),
        streams("t-assigning", generation=3),
        streams("t-revoking"),
        streams("t-behind"),
        streams("t-fenced"),
        streams("t-no-current"),
        streams("t-stable"),
    ]
    share = [
        {"group_id": "s-target-only", "member_id": "x", "record_offset_13": 5},
        {"group_id": "s-stable", "member_id": "a", "record_offset_10": 1, "record_offset_14": 2, "member_epoch": 2},
        {"group_id": "s-fenced", "member_id": "a", "record_offset_10": 1, "record_offset_14": 9, "member_epoch": -1},
        {"group_id": "s-deleted", "member_id": "a", "record_offset_10": 1},
    ]
    members = [
        member("t-target-only", "x", None, None, record_offset_21=5),
        member("t-no-topology", "a"),
        member("t-not-validated", "a"),
        member("t-kafka-4.1", "a"),
        member("t-assigning", "a"),
        member("t-revoking", "a", state=2),
        member("t-behind", "a", epoch=1),
        member("t-fenced", "a", epoch=-1, record_offset_19=1, record_offset_22=9),
        member("t-no-current", "a", epoch=None, state=None),
        member("t-stable", "a"),
        member("t-stable", "x", None, None, record_offset_21=5),  # a target of a non-member: not counted
    ]
    specs = load_specs()["gold"]
    names = {}
    for table, rows in (("current_groups", groups), ("share_group_members", share),
                        ("streams_group_members", members), ("consumer_group_members", [])):  # fmt: skip
        names[table] = f"example_{table}"
        spark.createDataFrame(_rows(table, rows), specs[table].ddl_columns()).createOrReplaceTempView(names[table])
    [view] = [v for v in load_views() if v.layer == "gold" and v.name == "live_groups"]
    got = {(r["group_id"], r["protocol"]): r["state"] for r in spark.sql(view.sql.format(**names)).collect()}
    assert got == cases
