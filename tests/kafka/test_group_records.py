"""Share-group (KIP-932) and streams-group (KIP-1071) records in silver, from the broker's own files
(the ``lake`` fixture), against the broker: every such record bronze holds is decoded into silver
(nothing quarantined), and the state those records give at each snapshot's log position — the
latest record of each key below it, unless a tombstone came later — is what describeShareGroups /
describeStreamsGroups reported then: group epoch, target assignment epoch, topology, members with
their client, host, process and epochs, current and target assignments."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pipelines.runtime import lake as lake_io
from pipelines.truth import Group, TruthSnapshot
from tests.support.streams import described_tasks, described_topology, tasks_of
from tests.support.streams import topology as streams_topology

STREAMS_TYPES = range(17, 24)  # 18 was never written by a release
SHARE_TYPES = range(9, 16)  # 9: 3.9/4.0 only
Key = tuple[int, Any]  # (record type, member id or None)


def record_type(key: bytes) -> int:
    return int.from_bytes(key[:2], "big", signed=True)


def test_every_share_and_streams_record_is_in_silver(lake):
    """Position by position, bronze's share- and streams-group records are silver's rows and
    tombstones of those types: none lost, none quarantined."""
    bronze = lake.read("bronze", "offsets_records").where("NOT control").select("partition", "offset", "key").collect()
    tombstones = lake.read("silver", "tombstones").collect()
    # silver creates its quarantine table with the first record it cannot decode
    quarantine = lake_io.read(lake.tables.spark, lake.tables.path("silver", "quarantine"))
    assert quarantine is None or quarantine.count() == 0
    for table, types, written in (
        ("streams_group_records", STREAMS_TYPES, {17, 19, 20, 21, 22, 23}),
        ("share_group_records", SHARE_TYPES, {10, 11, 12, 13, 14, 15}),
    ):
        raw = {(r["partition"], r["offset"]): t for r in bronze if (t := record_type(bytes(r["key"]))) in types}
        rows = lake.read("silver", table).select("offsets_partition", "record_offset").collect()
        decoded = [(r["offsets_partition"], r["record_offset"]) for r in rows]
        decoded += [(t["offsets_partition"], t["record_offset"]) for t in tombstones if t["record_type"] in types]
        assert len(decoded) == len(set(decoded)) and set(decoded) == set(raw), table
        # every type the scenarios make Kafka 4.2 write (18 never released, 9 only by 3.9/4.0)
        assert set(raw.values()) == written, (table, sorted(set(raw.values())))


# -- the state the records give at a log position ----------------------------------------------------


class GroupRecords:
    """One group's records and tombstones from silver, replayed up to a log position."""

    def __init__(self, lake, table: str, group: str, types: Iterable[int]) -> None:
        types = list(types)
        self.rows = lake.read("silver", table).where(f"group_id = '{group}'").collect()
        tombs = lake.read("silver", "tombstones").where(f"group_id = '{group}'").collect()
        self.tombstones = [t for t in tombs if t["record_type"] in types]
        parts = {r["offsets_partition"] for r in self.rows}
        assert len(parts) == 1, f"{group}: records in offsets partitions {parts}"
        self.partition = parts.pop()

    def at(self, snap: TruthSnapshot) -> dict[Key, Any]:
        """{(type, member id): row} of the keys live below the snapshot's end offset."""
        end = snap.offsets_topic_end_offsets[self.partition]
        events = [(r["record_offset"], r, False) for r in self.rows]
        events += [(t["record_offset"], t, True) for t in self.tombstones]
        latest: dict[Key, tuple[Any, bool]] = {}
        for offset, row, tomb in sorted(events, key=lambda e: e[0]):
            if offset < end:
                latest[(row["record_type"], row["member_id"])] = (row, tomb)
        return {k: row for k, (row, tomb) in latest.items() if not tomb}


def members_of_type(state: dict[Key, Any], rtype: int) -> set[str]:
    return {member for t, member in state if t == rtype}


def snapshots_of(harness, evidence, scenario: str, group: str) -> list[tuple[str, Group, TruthSnapshot]]:
    """Every snapshot of the scenario and the evidence in which the group exists."""
    snaps = [*harness.result(scenario).snapshots.items(), ("evidence", evidence.snapshot)]
    out = []
    for label, snap in snaps:
        g = next((x for x in snap.groups if x.group_id == group), None)
        if g is not None and g.exists:
            out.append((label, g, snap))
    return out


# -- streams groups ----------------------------------------------------------------------------------


def test_streams_group_records_equal_describe_streams_groups(lake, harness, evidence):
    """The Kafka Streams application's group (one instance, two, one, none): at every snapshot,
    silver's records give the group epoch, target assignment epoch, topology (subtopologies with
    their source, repartition and changelog topics), the members (client id, host, process id,
    instance id), their member epochs and current and target active/standby/warmup tasks that
    describeStreamsGroups reported."""
    group = "streams-counts"
    records = GroupRecords(lake, "streams_group_records", group, STREAMS_TYPES)
    compared, epochs, members, standby = [], set(), 0, 0
    for label, g, snap in snapshots_of(harness, evidence, "streams_group", group):
        st = records.at(snap)
        where = f"{group} at {label}"
        assert st[(17, None)]["metadata"]["epoch"] == g.group_epoch, where
        assert st[(20, None)]["target_assignment_metadata"]["assignment_epoch"] == g.target_assignment_epoch, where
        topology = st[(23, None)]["topology"]
        assert topology["epoch"] == g.topology_epoch, where
        assert streams_topology(topology["subtopologies"]) == described_topology(g.subtopologies), where
        ids = {m.member_id for m in g.members}
        assert members_of_type(st, 19) == members_of_type(st, 21) == members_of_type(st, 22) == ids, where
        for m in g.members:
            meta = st[(19, m.member_id)]["member_metadata"]
            assert (meta["client_id"], meta["client_host"], meta["instance_id"], meta["process_id"]) == (
                m.client_id,
                m.host,
                m.group_instance_id,
                m.process_id,
            ), where
            current = st[(22, m.member_id)]["current_member_assignment"]
            assert current["member_epoch"] == m.member_epoch, where
            assert tasks_of(current) == described_tasks(m.tasks), where
            assert tasks_of(st[(21, m.member_id)]["target_assignment_member"]) == described_tasks(m.target_tasks), where
            standby += sum(len(p) for p in described_tasks(m.tasks)["standby"].values())
        compared.append(label)
        epochs.add(g.group_epoch)
        members += len(g.members)
    assert {"one_member", "two_members", "member_left", "final"} <= set(compared), compared
    assert len(epochs) >= 3 and members >= 4 and standby >= 2, (epochs, members, standby)


# -- share groups ------------------------------------------------------------------------------------


def test_share_group_records_equal_describe_share_groups(lake, harness, evidence):
    """The share group (one ShareConsumer, snapshot while it was alive, and the evidence after it
    left): silver's records give the group epoch, target assignment epoch, the members (client id,
    host), their member epochs and assigned partitions that describeShareGroups reported; the group
    is Stable then, so the target assignment equals the assignment."""
    group = "share-group"
    records = GroupRecords(lake, "share_group_records", group, SHARE_TYPES)
    topic = harness.result("share_group").facts["topic"]
    names = harness.harness.topic_names([topic])
    resolved = 0

    def partitions(topics: Iterable[Any]) -> set[tuple[str, int]]:
        nonlocal resolved
        out = set()
        for t in topics or []:
            name = names.get(t["topic_id"])
            # silver names the id where the log maps it (type 15): it must be the broker's name
            assert t["topic"] in (None, name), t
            resolved += t["topic"] is not None
            out |= {(name, p) for p in t["partitions"]}
        return out

    compared, members = [], 0
    for label, g, snap in snapshots_of(harness, evidence, "share_group", group):
        st = records.at(snap)
        where = f"{group} at {label}"
        assert st[(11, None)]["metadata"]["epoch"] == g.group_epoch, where
        assert st[(12, None)]["target_assignment_metadata"]["assignment_epoch"] == g.target_assignment_epoch, where
        ids = {m.member_id for m in g.members}
        assert members_of_type(st, 10) == members_of_type(st, 13) == members_of_type(st, 14) == ids, where
        for m in g.members:
            meta = st[(10, m.member_id)]["member_metadata"]
            assert (meta["client_id"], meta["client_host"]) == (m.client_id, m.host), where
            current = st[(14, m.member_id)]["current_member_assignment"]
            described = {(a.topic, a.partition) for a in m.assignment}
            assert current["member_epoch"] == m.member_epoch, where
            assert partitions(current["assigned_partitions"]) == described, where
            if g.state == "Stable":
                target = st[(13, m.member_id)]["target_assignment_member"]["topic_partitions"]
                assert partitions(target) == described, where
        compared.append(label)
        members += len(g.members)
    assert "final" in compared and members >= 1, (compared, members)
    assert resolved, "silver resolved no share-group topic id to its name (type 15 names them)"
