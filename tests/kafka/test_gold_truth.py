"""Gold built from the broker's own files (bronze -> silver -> gold, the ``lake`` fixture) equals what
the broker's Admin API and the groups' own members report at the same log position:
listConsumerGroupOffsets for every group, the groups listGroups lists, live classic groups
(generation as their members saw it, members and assignments from describeConsumerGroups) and every
classic generation a scenario snapshot while its members were alive, and KIP-848 members and
epochs at the new_protocol scenario's snapshot."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pipelines.truth import Group, TruthSnapshot
from tests.support.streams import described_tasks, described_topology, tasks_of
from tests.support.streams import topology as streams_topology


def test_gold_equals_the_brokers_truth(lake, evidence, harness):
    snap = evidence.snapshot
    offsets = lake.read("gold", "current_offsets").where("NOT deleted").collect()
    ours = {(r["group_id"], r["topic"], r["partition"]): (r["committed_offset"], r["metadata"]) for r in offsets}
    truth = {k: (v.offset, v.metadata) for k, v in snap.committed().items()}
    assert truth, "the scenarios left committed offsets behind"
    assert ours == truth

    groups = lake.read("gold", "current_groups").where("NOT deleted").collect()
    by_id = {(r["group_id"], r["protocol"]): r for r in groups}
    compared = 0
    for g in snap.groups:
        if not g.exists or g.type not in ("classic", "consumer"):
            continue
        row = by_id.get((g.group_id, g.type))
        assert row is not None, f"{g.group_id} ({g.type}) is missing from gold.current_groups"
        if g.type == "consumer":
            assert row["generation"] == g.group_epoch, g.group_id
        elif row["exists_because"] == "metadata":
            assert row["member_count"] == len(g.members), g.group_id
        compared += 1
    # the harness expires empty groups after 1 minute, so how many scenario groups still exist at
    # the evidence depends on the machine's speed; a few always do (the last scenarios', and the
    # classic group whose member stays alive until the evidence)
    assert compared >= 3
    # groups deleted in the scenarios are not live in gold (the broker no longer lists them)
    listed = {g.group_id for g in snap.groups if g.exists}
    assert "standalone-assign" not in listed and "standalone-assign" not in {k[0] for k in by_id}


def test_gold_lists_the_groups_kafka_lists(spark, lake, evidence, harness):
    """gold.live_groups equals listGroups at the evidence — offsets-only (simple) groups, groups
    whose members all left, and share and streams groups included — by group id, type, state and
    protocol type."""
    snap = evidence.snapshot
    kafka = {
        (g.group_id, g.type): (g.state, g.protocol_type)
        for g in snap.groups
        if g.exists and g.type in ("classic", "consumer", "share", "streams") and not g.awaiting_cleanup()
    }
    lake.tables.register_existing()  # another test may have pointed the names elsewhere
    live = spark.table(lake.tables.name("gold", "live_groups")).collect()
    ours = {(r["group_id"], r["protocol"]): (r["state"], r["protocol_type"]) for r in live}
    assert ours == kafka
    because = {(r["group_id"], r["protocol"]): r["exists_because"] for r in live}
    simple = [k for k, v in because.items() if v == "offsets"]
    # the listing scenario runs last, so its groups are still there at the evidence
    facts = harness.result("group_listing").facts
    assert (facts["simple"], "classic") in simple
    for group in facts["members_left"]:
        assert any(k[0] == group and ours[k][0] == "Empty" for k in ours), group
    assert len(kafka) >= 3 and simple, (len(kafka), simple)
    assert {("share-group", "share"), ("streams-counts", "streams")} <= set(kafka), "kept alive for the evidence"


# -- classic groups while their members are alive --------------------------------------------------


def observed_classic(snap: TruthSnapshot) -> list[Group]:
    """The snapshot's classic groups whose live members were asked (generation observed)."""
    return [g for g in snap.groups if g.exists and g.type == "classic" and "generation" in g.observed_by_clients]


def members_of(snap: Group) -> dict[str, tuple[Any, ...]]:
    """{member id: (client id, host, static instance id, assigned partitions)} as the broker describes them."""
    return {
        m.member_id: (m.client_id, m.host, m.group_instance_id, frozenset((a.topic, a.partition) for a in m.assignment))
        for m in snap.members
    }


def gold_members(members: Iterable[Any]) -> dict[str, tuple[Any, ...]]:
    """The same from gold's member structs (group_generations.members, current_group_members rows)."""
    return {
        m["member_id"]: (
            m["client_id"],
            m["client_host"],
            m["group_instance_id"],
            frozenset((a["topic"], p) for a in m["assigned_partitions"] or [] for p in a["partitions"]),
        )
        for m in members
    }


def test_live_classic_groups_equal_the_brokers_description(spark, lake, evidence):
    """At the evidence, a classic group whose members are alive (the lifecycle scenario keeps its
    last member until then): gold.current_groups' generation, protocol type, assignor and member
    count, and gold.current_group_members, equal the generation the members hold and
    describeConsumerGroups' members with their assignments."""
    live = observed_classic(evidence.snapshot)
    assert [g.group_id for g in live] == ["classic-lifecycle"], "the lifecycle scenario's member is kept alive"
    lake.tables.register_existing()
    groups = {
        r["group_id"]: r
        for r in lake.read("gold", "current_groups").where("protocol = 'classic' AND NOT deleted").collect()
    }
    members = spark.table(lake.tables.name("gold", "current_group_members")).collect()
    for g in live:
        row = groups[g.group_id]
        got = (row["generation"], row["protocol_type"], row["assignor"], row["member_count"])
        assert got == (g.generation, g.protocol_type, g.partition_assignor, len(g.members)), g.group_id
        assert gold_members(m for m in members if m["group_id"] == g.group_id) == members_of(g), g.group_id
        assert {m["generation"] for m in members if m["group_id"] == g.group_id} == {g.generation}


def test_every_observed_classic_generation_is_in_gold(lake, evidence, harness):
    """Every classic generation a scenario snapshot while its members were alive (one after each
    completed rebalance of the lifecycle scenario, the recreated group's first generation, and
    the evidence): gold.group_generations' row of the generation current at the snapshot's log
    position has that generation, protocol type, assignor and the described members with their
    assignments. gold.group_generations is history, so the evidence's gold answers for every
    earlier position."""
    rows = lake.read("gold", "group_generations").collect()
    snaps = [s for r in harness.results for s in harness.result(r).snapshots.values()] + [evidence.snapshot]
    compared: dict[str, set[int]] = {}
    for snap in snaps:
        for g in observed_classic(snap):
            # the generation current at the position: started before it, not ended before it
            current = [
                r
                for r in rows
                if r["group_id"] == g.group_id
                and r["started_offset"] < (end := snap.offsets_topic_end_offsets[r["offsets_partition"]])
                and (r["ended_offset"] is None or r["ended_offset"] >= end)
            ]
            assert len(current) == 1, (g.group_id, g.generation, current)
            row = current[0]
            got = (row["generation"], row["protocol_type"], row["assignor"], row["member_count"])
            assert got == (g.generation, g.protocol_type, g.partition_assignor, len(g.members)), g.group_id
            assert gold_members(row["members"]) == members_of(g), (g.group_id, g.generation)
            compared.setdefault(g.group_id, set()).add(g.generation)
    # three joins and two leaves of the lifecycle scenario, and the recreated group's generation 1
    # (the evidence may add a sixth lifecycle generation: a retried evidence restarts the broker,
    # and the kept member may rejoin)
    assert set(compared) == {"classic-lifecycle", "delete-recreate"}, compared
    assert compared["classic-lifecycle"] >= {1, 2, 3, 4, 5} and compared["delete-recreate"] == {1}, compared
    static = [
        m for r in rows if r["group_id"] == "classic-lifecycle" for m in r["members"] or [] if m["group_instance_id"]
    ]
    assert static, "the lifecycle scenario's static member is in gold with its instance id"


# -- KIP-848 groups at a snapshot taken while their members were alive ----------------------------


def test_gold_members_equal_the_brokers_description(lake, harness):
    """KIP-848 members (member id, client id, host, assigned partitions) and group epochs in gold,
    from the broker's files cut at the new_protocol scenario's final snapshot, while its members
    were alive, equal describeConsumerGroups at that moment."""
    snap = lake.cut

    # Intended difference: KIP-848 records carry topic ids; Kafka 4.x no longer writes the records
    # that name them (type 4) and librdkafka commits by name, so gold has the ids and names only
    # where the log pairs them. The broker's own id -> name map stands in for the name here.
    names = harness.harness.topic_names(["np-t", "np-rx-a", "np-rx-b"])

    def parts(assignment) -> set[tuple[str, int]]:
        return {(a["topic"] or names.get(a["topic_id"]), p) for a in assignment or [] for p in a["partitions"]}

    wanted = {g.group_id for g in snap.groups if g.exists and g.type == "consumer"}
    got = {
        (r["group_id"], r["member_id"]): (r["client_id"], r["client_host"], parts(r["assigned_partitions"]))
        for r in lake.at_cut["consumer_group_members"]
        if r["group_id"] in wanted
    }
    want = {
        (g.group_id, m.member_id): (m.client_id, m.host, {(a.topic, a.partition) for a in m.assignment})
        for g in snap.groups
        if g.group_id in wanted
        for m in g.members
    }
    assert len(want) >= 4, "np-consumer (2), np-regex and np-migrated have live members"
    assert got == want
    epochs = {
        r["group_id"]: r["generation"]
        for r in lake.at_cut["current_groups"]
        if r["protocol"] == "consumer" and not r["deleted"]
    }
    assert {g: epochs.get(g) for g in wanted} == {
        g.group_id: g.group_epoch for g in snap.groups if g.group_id in wanted
    }


# -- share and streams groups at the evidence, their members alive ---------------------------------


def test_share_and_streams_groups_equal_the_brokers_description(spark, lake, evidence, harness):
    """The share consumer and a Kafka Streams instance are kept in their groups until the evidence:
    gold's share_group_members (client id, host, member epoch, assigned and target partitions),
    streams_group_members (client id, host, process id, instance id, member epoch, active, standby
    and warm-up tasks owned and targeted), streams_group_topologies and the groups' epochs and
    states in current_groups / live_groups equal describeShareGroups / describeStreamsGroups at
    that log position."""
    snap = evidence.snapshot
    share, streams = snap.group("share-group"), snap.group("streams-counts")
    assert share.exists and [m.client_id for m in share.members] == ["sh1"], "the share consumer is kept alive"
    assert streams.exists and len(streams.members) == 1, "a Streams instance is kept alive"
    lake.tables.register_existing()
    groups = {
        (r["group_id"], r["protocol"]): r
        for r in spark.table(lake.tables.name("gold", "live_groups"))
        .where("protocol IN ('share', 'streams')")
        .collect()
    }
    for g in (share, streams):
        row = groups[(g.group_id, g.type)]
        assert (row["generation"], row["assignment_epoch"], row["state"]) == (
            g.group_epoch,
            g.target_assignment_epoch,
            g.state,
        ), g.group_id
    assert groups[("streams-counts", "streams")]["topology_epoch"] == streams.topology_epoch

    topic = harness.result("share_group").facts["topic"]
    names = harness.harness.topic_names([topic])

    def parts(assignment: Iterable[Any] | None) -> set[tuple[str, int]]:
        return {(a["topic"] or names.get(a["topic_id"]), p) for a in assignment or [] for p in a["partitions"]}

    rows = lake.read("gold", "share_group_members").where("group_id = 'share-group'").collect()
    got = {
        r["member_id"]: (r["client_id"], r["client_host"], r["member_epoch"], parts(r["assigned_partitions"]))
        for r in rows
        if r["record_offset_10"] is not None or r["record_offset_14"] is not None
    }
    want = {
        m.member_id: (m.client_id, m.host, m.member_epoch, {(a.topic, a.partition) for a in m.assignment})
        for m in share.members
    }
    assert got == want and all(w[3] for w in want.values()), (got, want)
    targets = {r["member_id"]: parts(r["target_partitions"]) for r in rows}
    for m in share.members:
        if m.target_assignment is not None:
            assert targets[m.member_id] == {(a.topic, a.partition) for a in m.target_assignment}

    rows = lake.read("gold", "streams_group_members").where("group_id = 'streams-counts'").collect()
    got = {
        r["member_id"]: (
            r["client_id"],
            r["client_host"],
            r["process_id"],
            r["instance_id"],
            r["member_epoch"],
            tasks_of(r),
            tasks_of(r, "target_"),
        )
        for r in rows
        if r["record_offset_19"] is not None or r["record_offset_22"] is not None
    }
    want = {
        m.member_id: (
            m.client_id,
            m.host,
            m.process_id,
            m.group_instance_id,
            m.member_epoch,
            described_tasks(m.tasks),
            described_tasks(m.target_tasks),
        )
        for m in streams.members
    }
    assert got == want, (got, want)
    owned = sum(len(p) for m in want.values() for p in m[5]["active"].values())
    assert owned == 4, "the kept instance owns every active task: 2 subtopologies x 2 partitions"

    topology = lake.read("gold", "streams_group_topologies").where("group_id = 'streams-counts'").collect()
    got_topology = streams_topology(topology)
    assert {r["topology_epoch"] for r in topology} == {streams.topology_epoch}
    assert got_topology == described_topology(streams.subtopologies)
    assert len(got_topology) == 2
