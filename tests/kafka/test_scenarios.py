"""Each scenario's truth snapshot is what the scenario intended: a broken driver cannot hide."""

from __future__ import annotations

from pipelines.truth import Group, TruthSnapshot
from tests.harness.scenarios import LONG_METADATA


def offsets_of(snap: TruthSnapshot, group: str, topic: str) -> dict[int, int]:
    g = snap.group(group)
    assert g.exists, f"{group} does not exist in the snapshot"
    assert {o.topic for o in g.offsets} <= {topic}, g.offsets
    return {o.partition: o.offset for o in g.offsets}


def assigned(g: Group) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for m in g.members for tp in m.assignment}


def test_snapshots_are_consistent_and_follow_the_format(harness):
    for name, r in harness.results.items():
        r = harness.result(name)
        for label, snap in r.snapshots.items():
            assert snap.offsets_topic_end_offsets, (name, label)
            assert {g.group_id for g in snap.groups} == set(r.groups) or label != "final", (name, label)
            # round trip through the documented JSON form
            assert TruthSnapshot.model_validate_json(snap.model_dump_json()) == snap


def test_classic_lifecycle(harness):
    r = harness.result("classic_lifecycle")
    snap, topic = r.final, r.facts["topic"]
    g = snap.group("classic-lifecycle")
    assert (g.type, g.state, g.partition_assignor) == ("classic", "Stable", "range")
    assert [m.client_id for m in g.members] == ["c1"]
    assert assigned(g) == {(topic, p) for p in range(4)}
    # three joins and two leaves, one rebalance each, as c1 saw them
    assert r.facts["generations_seen"] == [1, 2, 3, 4, 5]
    assert g.generation == 5 and g.observed_by_clients == ["generation"] and "leader" in g.not_observed
    assert offsets_of(snap, "classic-lifecycle", topic) == {0: 20, 1: 6, 2: 7, 3: 8}
    meta = {o.partition: o.metadata for o in g.offsets}
    # confluent-kafka 2.16 sends the metadata string with its C terminator: the broker keeps the NUL
    assert meta[2] == "short\x00" and meta[3] == LONG_METADATA + "\x00" and len(LONG_METADATA) >= 127
    # a snapshot after every rebalance, all members alive: c1; c1 + static c2; + c3; c3 left
    steps = {
        label: sorted((m.client_id, m.group_instance_id) for m in s.group("classic-lifecycle").members)
        for label, s in r.snapshots.items()
    }
    c1, c2, c3 = ("c1", None), ("c2", "c2-static"), ("c3", None)
    assert steps == {
        "generation_1": [c1],
        "generation_2": [c1, c2],
        "generation_3": [c1, c2, c3],
        "generation_4": [c1, c2],
        "final": [c1],
    }
    for s in r.snapshots.values():
        lg = s.group("classic-lifecycle")
        assert lg.state == "Stable" and assigned(lg) == {(topic, p) for p in range(4)}


def test_offset_reset_backwards_and_forwards(harness):
    r = harness.result("offset_reset")
    topic = r.facts["topic"]
    got = [offsets_of(r.snapshots[k], "offset-reset", topic) for k in ("committed", "reset_to_earliest", "final")]
    assert got == [{0: 60, 1: 70}, {0: 0, 1: 0}, {0: 90, 1: 95}]
    assert r.final.group("offset-reset").state == "Empty"


def test_delete_and_recreate(harness):
    r = harness.result("delete_and_recreate")
    topic, group, standalone = r.facts["topic"], r.facts["group"], r.facts["standalone"]
    before = r.snapshots["before_delete"]
    assert offsets_of(before, group, topic) == {0: 3, 1: 4, 2: 5}
    assert offsets_of(before, standalone, topic) == {0: 1, 2: 2}
    assert before.group(standalone).simple_consumer_group is True
    deleted = r.snapshots["deleted"]
    assert not deleted.group(group).exists and not deleted.group(standalone).exists
    # recreated under the same name: nothing of the old incarnation survives
    assert offsets_of(r.final, group, topic) == {1: 9}
    assert r.final.group(group).generation == 1
    assert not r.final.group(standalone).exists


def test_transactional_offset_commits(harness):
    r = harness.result("transactional_commits")
    offsets = offsets_of(r.final, "txn-offsets", r.facts["topic"])
    assert 1 not in offsets, "the aborted transaction's offset must not be visible"
    assert offsets[0] == 10, "the committed transaction's offset"
    # the plain commit (35) is later in the log than the transaction's pending offset (30)
    assert offsets[2] == 35


def test_offset_expiry(harness):
    r = harness.result("offset_expiry")
    topic = r.facts["topic"]
    assert offsets_of(r.snapshots["committed"], "expiry", topic) == {0: 2, 1: 3}
    g = r.final.group("expiry")
    assert not g.exists or not g.offsets


def test_new_protocol_groups(harness):
    r = harness.result("new_protocol")
    snap, topic, ids = r.final, r.facts["topic"], r.facts["member_ids"]
    g = snap.group("np-consumer")
    assert g.type == "consumer" and g.state == "Stable"
    assert sorted(m.member_id for m in g.members) == ids["np-consumer"]
    assert assigned(g) == {(topic, p) for p in range(4)}
    assert g.group_epoch is not None and g.group_epoch >= 1
    assert all(m.member_epoch is not None and m.member_epoch <= g.group_epoch for m in g.members)
    assert g.generation is None and "generation" in g.not_observed
    # 2 partitions each, committed at 3 by np-a and 4 by np-b
    assert sorted(offsets_of(snap, "np-consumer", topic).values()) == [3, 3, 4, 4]
    rx = snap.group("np-regex")
    assert rx.type == "consumer" and assigned(rx) == {("np-rx-a", 0), ("np-rx-a", 1), ("np-rx-b", 0)}
    mixed = r.snapshots["mixed"].group("np-migrated")
    assert mixed.type == "consumer", "a consumer-protocol member joining converts the classic group"
    assert len(mixed.members) == 2
    mig = snap.group("np-migrated")
    assert mig.type == "consumer" and [m.member_id for m in mig.members] == ids["np-migrated"]
    assert offsets_of(snap, "np-migrated", topic) == {0: 7, 1: 8}


def test_topic_deleted_and_recreated(harness):
    r = harness.result("topic_recreated")
    topic = r.facts["topic"]
    assert offsets_of(r.snapshots["before_delete"], "topic-recreate", topic) == {0: 5, 1: 6}
    g = r.snapshots["topic_deleted"].group("topic-recreate")
    assert not g.exists or not g.offsets
    assert offsets_of(r.final, "topic-recreate", topic) == {0: 2}


def test_explicit_offset_delete(harness):
    r = harness.result("explicit_offset_delete")
    assert offsets_of(r.final, "offset-delete", r.facts["topic"]) == {1: 5}


def test_share_group(harness):
    r = harness.result("share_group")
    g = r.final.group("share-group")
    assert g.type == "share" and g.state == "Stable" and [m.client_id for m in g.members] == ["sh1"]
    assert assigned(g) == {(r.facts["topic"], 0), (r.facts["topic"], 1)}
    assert r.facts["received"] >= 10


def test_streams_group(harness):
    """The Streams application's group at each step: one member, two (active and standby tasks
    spread over both), one again, none; each membership change bumps the group epoch; every
    input record processed and its offset committed; the topology has the two subtopologies."""
    r = harness.result("streams_group")
    source = r.facts["source"]
    steps = ["one_member", "two_members", "member_left", "final"]
    groups = [r.snapshots[k].group("streams-counts") for k in steps]
    assert [g.type for g in groups] == ["streams"] * 4
    assert [g.state for g in groups] == ["Stable", "Stable", "Stable", "Empty"]
    assert [len(g.members) for g in groups] == [1, 2, 1, 0]
    epochs = [g.group_epoch for g in groups]
    assert epochs == sorted(set(epochs)), epochs
    clients = [sorted(m.client_id.split("-StreamThread")[0] for m in g.members) for g in groups]
    assert clients == [["streams-a"], ["streams-a", "streams-b"], ["streams-a"], []]

    def tasks(g, kind: str) -> set[tuple[str, int]]:
        return {(t.subtopology_id, p) for m in g.members for t in getattr(m.tasks, kind) for p in t.partitions}

    # two subtopologies on a 2-partition input: 4 active tasks; the stateful one's 2 tasks get a
    # standby on the other instance when there are two
    everything = {(s, p) for s in ("0", "1") for p in (0, 1)}
    assert [tasks(g, "active") for g in groups[:3]] == [everything] * 3
    assert tasks(groups[1], "standby") == {("1", 0), ("1", 1)} and not tasks(groups[0], "standby")
    final = groups[3]
    assert [(s.subtopology_id, s.source_topics) for s in final.subtopologies] == [("0", [source]), ("1", [])]
    assert [t.name for t in final.subtopologies[1].state_changelog_topics] == ["streams-counts-counts-changelog"]
    assert {(o.topic, o.partition): o.offset for o in final.offsets if o.topic == source} == {
        (source, 0): 20,
        (source, 1): 20,
    }


def test_bulk_commits(harness):
    r = harness.result("bulk_roll")
    assert offsets_of(r.final, "bulk-roll", r.facts["topic"]) == r.facts["expected_offsets"]


def test_group_listing(harness):
    """The groups the listing scenario leaves behind, as the broker lists them: the offsets-only
    group is a simple classic group with an empty protocol type, the others Empty."""
    r = harness.result("group_listing")
    simple = r.final.group(r.facts["simple"])
    assert (simple.type, simple.state, simple.protocol_type, simple.simple_consumer_group) == (
        "classic",
        "Empty",
        "",
        True,
    )
    assert not simple.members and offsets_of(r.final, simple.group_id, r.facts["topic"]) == {0: 1, 1: 2}
    classic, consumer = (r.final.group(g) for g in r.facts["members_left"])
    assert (classic.type, classic.state, classic.members) == ("classic", "Empty", [])
    assert (consumer.type, consumer.state, consumer.protocol_type, consumer.members) == (
        "consumer",
        "Empty",
        "consumer",
        [],
    )
