"""The reference replay implements the coordinator's loading rules of spec section 12."""

from __future__ import annotations

import pytest

from pipelines.reference.replay import Entry, Replay

G, T = "payments", "orders"


def commit(offset: int, value_offset: int, ts: int = 1000, pid: int = -1, txn: bool = False, rtype: int = 1) -> Entry:
    value = {"offset": value_offset, "leader_epoch": 0, "metadata": "", "commit_timestamp": ts, "expire_timestamp": -1}
    return Entry(
        0,
        offset,
        ts,
        pid,
        txn,
        record_type=rtype,
        key={"group": G, "topic": T, "partition": 0},
        value=value,
        value_version=3 if rtype else 0,
    )


def tombstone(offset: int, ts: int = 2000, rtype: int = 1) -> Entry:
    return Entry(0, offset, ts, record_type=rtype, key={"group": G, "topic": T, "partition": 0}, value=None)


def marker(offset: int, pid: int, commit_: bool) -> Entry:
    return Entry(0, offset, 3000, pid, True, control_type=1 if commit_ else 0)


def committed(replay: Replay) -> int | None:
    c = replay.state.offsets.get((G, T, 0))
    return None if c is None else c.value["offset"]


def run(*batches: list[Entry]) -> Replay:
    r = Replay()
    for b in batches:
        r.apply_batch(b)
    return r


def test_latest_record_wins_even_backwards() -> None:
    assert committed(run([commit(0, 50)], [commit(1, 10)])) == 10


def test_type0_and_type1_keys_are_one_logical_entry() -> None:
    r = run([commit(0, 50, rtype=0)], [commit(1, 60, rtype=1)])
    assert committed(r) == 60 and len(r.state.offsets) == 1
    assert committed(run([commit(0, 50, rtype=1)], [tombstone(1, rtype=0)])) is None


def test_transactional_commit_pending_until_commit_marker() -> None:
    r = run([commit(0, 5)], [commit(1, 42, pid=7, txn=True)])
    assert committed(r) == 5 and r.snapshot()["pending_transactions"][0]["offset"] == 42
    r.apply_batch([marker(2, 7, True)])
    assert committed(r) == 42 and r.snapshot()["pending_transactions"] == []


def test_abort_discards() -> None:
    assert committed(run([commit(0, 5)], [commit(1, 42, pid=7, txn=True)], [marker(2, 7, False)])) == 5


def test_plain_commit_after_transactional_record_wins_over_commit_marker() -> None:
    r = run([commit(0, 42, pid=7, txn=True)], [commit(1, 43)], [marker(2, 7, True)])
    assert committed(r) == 43


def test_markers_match_by_producer_id_only_and_per_partition() -> None:
    r = run([commit(0, 42, pid=7, txn=True)], [marker(1, 8, True)])
    assert committed(r) is None  # another producer's marker is ignored
    r.apply_batch([Entry(1, 0, 1, 7, True, control_type=1)])  # same pid, other partition
    assert committed(r) is None
    r.apply_batch([marker(2, 7, True)])
    assert committed(r) == 42


def test_tombstone_deletes_and_cancels_pending() -> None:
    r = run([commit(0, 5)], [commit(1, 42, pid=7, txn=True)], [tombstone(2)], [marker(3, 7, True)])
    assert committed(r) is None
    assert r.snapshot()["deleted_offsets"][0]["record_offset"] == 2


def test_offsets_replay_must_be_in_order() -> None:
    with pytest.raises(ValueError, match="order"):
        run([commit(5, 1)], [commit(3, 1)])


def test_deletion_causes() -> None:
    day = 86_400_000
    group_tomb = Entry(0, 2, 5000, record_type=2, key={"group": G}, value=None)
    r = run([commit(0, 5, ts=1000)], [tombstone(1, ts=5000), group_tomb])
    assert r.snapshot()["deleted_offsets"][0]["cause"] == "group_deletion"
    r = run([commit(0, 5, ts=1000)], [tombstone(1, ts=1000 + 8 * day)])
    assert r.snapshot()["deleted_offsets"][0]["cause"] == "expiry"
    r = run([commit(0, 5, ts=1000)], [tombstone(1, ts=2000)])
    assert r.snapshot()["deleted_offsets"][0]["cause"] == "explicit_delete"
    # a new commit resurrects the key: it is no longer deleted
    r.apply_batch([commit(2, 6)])
    assert r.snapshot()["deleted_offsets"] == [] and committed(r) == 6


def test_offset_with_pending_transactional_offsets_is_never_expired() -> None:
    """Spec 12.5: the coordinator does not expire an offset while its key has pending transactional
    offsets, so a tombstone of such a key is no expiry, however old the commit."""
    day = 86_400_000
    r = run([commit(0, 5, ts=1000)], [commit(1, 42, ts=1000, pid=7, txn=True)], [tombstone(2, ts=1000 + 8 * day)])
    assert r.snapshot()["deleted_offsets"][0]["cause"] == "explicit_delete"
    r = run([commit(0, 5, ts=1000)], [commit(1, 42, ts=1000, pid=7, txn=True)], [marker(2, 7, False)])
    r.apply_batch([tombstone(3, ts=1000 + 8 * day)])  # aborted: nothing pending any more
    assert r.snapshot()["deleted_offsets"][0]["cause"] == "expiry"


def test_classic_group_state_and_deletion() -> None:
    value = {
        "protocol_type": "consumer",
        "generation": 3,
        "protocol": "range",
        "leader": "m1",
        "current_state_timestamp": 10,
        "members": [
            {
                "member_id": "m1",
                "group_instance_id": None,
                "client_id": "c",
                "client_host": "/h",
                "rebalance_timeout": 1,
                "session_timeout": 2,
                "subscription": b"",
                "assignment": b"",
                "subscription_info": {"topics": [T]},
                "assignment_info": {"assigned_partitions": [{"topic": T, "partitions": [0, 1]}]},
            }
        ],
    }
    r = run([Entry(0, 0, 1, record_type=2, key={"group": G}, value=value, value_version=3)])
    [g] = r.classic_groups()
    assert (g["generation"], g["state"], g["members"][0]["assigned_partitions"]) == (3, "Stable", {T: [0, 1]})
    r.apply_batch([Entry(0, 1, 2, record_type=2, key={"group": G}, value=None)])
    assert r.classic_groups() == []


def test_new_protocol_group_view() -> None:
    key = {"group_id": "cg"}
    mkey = {"group_id": "cg", "member_id": "m"}
    r = run(
        [
            Entry(0, 0, 1, record_type=3, key=key, value={"epoch": 4, "metadata_hash": 0}),
            Entry(0, 1, 1, record_type=5, key=mkey, value={"client_id": "c"}),
            Entry(0, 2, 1, record_type=6, key=key, value={"assignment_epoch": 4, "assignment_timestamp": 0}),
            Entry(0, 3, 1, record_type=8, key=mkey, value={"member_epoch": 4}),
        ]
    )
    [g] = r.snapshot()["consumer_groups"]
    assert g["epoch"] == 4 and g["assignment_epoch"] == 4
    assert g["members"] == [{"member_id": "m", "metadata": {"client_id": "c"}, "current": {"member_epoch": 4}}]
    r.apply_batch([Entry(0, 4, 2, record_type=3, key=key, value=None)])
    assert r.snapshot()["consumer_groups"] == []  # a type-3 tombstone marks the group as gone


def listed(r: Replay) -> dict[str, tuple[str, str, str, str]]:
    return {g["group"]: (g["type"], g["protocol_type"], g["state"], g["exists_because"]) for g in r.listed_groups()}


def test_offsets_only_group_exists_while_it_has_offsets() -> None:
    # an assign() consumer that commits: Kafka lists a classic group, Empty, empty protocol type
    r = run([commit(0, 5)])
    assert listed(r) == {G: ("classic", "", "Empty", "offsets")}
    # its only offset deleted (admin OffsetDelete): the group is gone, remembered with the cause
    r.apply_batch([tombstone(1, ts=2000)])
    assert listed(r) == {}
    [gone] = r.snapshot()["deleted_simple_groups"]
    assert (gone["group"], gone["record_offset"], gone["cause"]) == (G, 1, "explicit_delete")
    # a new commit brings it back
    r.apply_batch([commit(2, 6)])
    assert listed(r) == {G: ("classic", "", "Empty", "offsets")} and r.snapshot()["deleted_simple_groups"] == []


def test_offsets_only_group_held_by_pending_offsets_until_abort() -> None:
    r = run([commit(0, 42, pid=7, txn=True)])
    assert listed(r) == {G: ("classic", "", "Empty", "offsets")}
    r.apply_batch([marker(1, 7, False)])
    assert listed(r) == {}
    assert r.snapshot()["deleted_simple_groups"][0]["cause"] == "transaction_aborted"
    # a COMMIT marker turns the pending offset into a live one: the group stays
    r = run([commit(0, 42, pid=7, txn=True)], [marker(1, 7, True)])
    assert listed(r) == {G: ("classic", "", "Empty", "offsets")}


def test_group_record_takes_over_and_its_tombstone_leaves_an_offsets_only_group() -> None:
    empty = {
        "protocol_type": "",
        "generation": 2,
        "protocol": None,
        "leader": None,
        "current_state_timestamp": 10,
        "members": [],
    }
    r = run([commit(0, 5)], [Entry(0, 1, 1, record_type=2, key={"group": G}, value=empty, value_version=3)])
    assert listed(r) == {G: ("classic", "", "Empty", "metadata")}
    assert r.snapshot()["deleted_simple_groups"] == []  # it did not disappear: its record took over
    # the group record tombstoned while an offset is still live: the offsets keep the group
    r.apply_batch([Entry(0, 2, 2, record_type=2, key={"group": G}, value=None)])
    assert listed(r) == {G: ("classic", "", "Empty", "offsets")}
    # group deletion: offset tombstone and group tombstone in one batch
    r.apply_batch([tombstone(3), Entry(0, 4, 3, record_type=2, key={"group": G}, value=None)])
    assert listed(r) == {}
    assert r.snapshot()["deleted_simple_groups"][0]["cause"] == "group_deletion"


@pytest.mark.parametrize(
    ("epoch", "current", "state"),
    [
        (5, {"member_epoch": 4, "state": 0}, "Assigning"),  # group epoch ahead of the target
        (4, {"member_epoch": 3, "state": 0}, "Reconciling"),  # member behind the target epoch
        (4, {"member_epoch": 4, "state": 1}, "Reconciling"),  # member still revoking
        (4, {"member_epoch": 4, "state": 0}, "Stable"),
    ],
)
def test_consumer_group_state_as_the_coordinator_computes_it(epoch: int, current: dict, state: str) -> None:
    key, mkey = {"group_id": "cg"}, {"group_id": "cg", "member_id": "m"}
    r = run(
        [
            Entry(0, 0, 1, record_type=3, key=key, value={"epoch": epoch}),
            Entry(0, 1, 1, record_type=5, key=mkey, value={"client_id": "c"}),
            Entry(0, 2, 1, record_type=6, key=key, value={"assignment_epoch": 4}),
            Entry(0, 3, 1, record_type=8, key=mkey, value=current),
        ]
    )
    assert listed(r) == {"cg": ("consumer", "consumer", state, "metadata")}
    # the member leaves (its records tombstoned): Empty
    r.apply_batch([Entry(0, o, 2, record_type=t, key=mkey, value=None) for o, t in ((4, 8), (5, 5))])
    assert listed(r) == {"cg": ("consumer", "consumer", "Empty", "metadata")}


# -- share and streams groups (Kafka 4.2's coordinator; docs/gold.md) --------------------------------
SHARE_TP = [{"topic_id": "AAAAAAAAAAAAAAAAAAAAAQ", "partitions": [0, 1]}]


def rec(offset: int, rtype: int, group: str, value: dict | None, member: str | None = None) -> Entry:
    key = {"group_id": group} if member is None else {"group_id": group, "member_id": member}
    return Entry(0, offset, 1000 + offset, record_type=rtype, key=key, value=value, value_version=0)


def share_join(o: int, member: str, epoch: int) -> list[Entry]:
    return [
        rec(
            o,
            10,
            "sg",
            {"rack_id": None, "client_id": "c", "client_host": "/h", "subscribed_topic_names": ["t"]},
            member,
        ),
        rec(o + 1, 11, "sg", {"epoch": epoch, "metadata_hash": 0}),
        rec(o + 2, 12, "sg", {"assignment_epoch": epoch, "assignment_timestamp": 0}),
        rec(o + 3, 13, "sg", {"topic_partitions": SHARE_TP}, member),
        rec(
            o + 4,
            14,
            "sg",
            {"member_epoch": epoch, "previous_member_epoch": epoch - 1, "state": 0, "assigned_partitions": SHARE_TP},
            member,
        ),
    ]


def share_view(r: Replay) -> tuple[str, dict]:
    [g] = r.snapshot()["share_groups"]
    members = {m["member_id"]: (m["current"] or {}) for m in g["members"]}
    return g["state"], {mid: (c.get("member_epoch"), c.get("assigned_partitions")) for mid, c in members.items()}


def test_share_member_lifecycle() -> None:
    """A current assignment tombstone leaves the member in the group (epochs -1, nothing assigned):
    the group stays Stable; only the member metadata tombstone removes it; tombstones of a member
    the group does not have change nothing; a current assignment record alone makes a member."""
    r = run(share_join(0, "m1", 1))
    assert share_view(r) == ("Stable", {"m1": (1, SHARE_TP)})
    r.apply_batch([rec(5, 14, "sg", None, "m1"), rec(6, 13, "sg", None, "m1"), rec(7, 11, "sg", {"epoch": 2})])
    assert share_view(r) == ("Stable", {"m1": (-1, [])})
    [g] = r.snapshot()["share_groups"]
    assert g["members"][0]["current"]["state"] == 0 and g["members"][0]["target"] is None  # state kept
    r.apply_batch([rec(8, 14, "sg", None, "ghost"), rec(9, 10, "sg", None, "ghost")])
    assert share_view(r) == ("Stable", {"m1": (-1, [])})
    r.apply_batch([rec(10, 10, "sg", None, "m1"), rec(11, 11, "sg", {"epoch": 3})])
    assert share_view(r) == ("Empty", {})
    r.apply_batch([rec(12, 14, "sg", {"member_epoch": 3, "previous_member_epoch": 2, "state": 0,
                                      "assigned_partitions": []}, "m2")])  # fmt: skip
    assert share_view(r) == ("Stable", {"m2": (3, [])})
    assert listed(r) == {"sg": ("share", "share", "Stable", "metadata")}


STREAMS_META = {"instance_id": None, "rack_id": None, "client_id": "c", "client_host": "/h", "rebalance_timeout_ms": 1,
                "topology_epoch": 0, "process_id": "p", "user_endpoint": None, "client_tags": []}  # fmt: skip


def streams_current(epoch: int, state: int = 1) -> dict:
    tasks = [{"subtopology_id": "0", "partitions": [0], "assignment_epochs": None}]
    empty: list = []
    return {"member_epoch": epoch, "previous_member_epoch": epoch - 1, "state": state, "active_tasks": tasks,
            "standby_tasks": empty, "warmup_tasks": empty, "active_tasks_pending_revocation": empty,
            "standby_tasks_pending_revocation": empty, "warmup_tasks_pending_revocation": empty}  # fmt: skip


def streams_group(epoch: int = 1, validated: int = 0, target: int = 1, current: dict | None = None,
                  topology: int | None = 0) -> Replay:  # fmt: skip
    batch = [
        rec(0, 17, "st", {"epoch": epoch, "metadata_hash": 0, "validated_topology_epoch": validated}),
        rec(1, 19, "st", STREAMS_META, "m1"),
        rec(2, 20, "st", {"assignment_epoch": target, "assignment_timestamp": 0}),
    ]
    if current is not None:
        batch.append(rec(3, 22, "st", current, "m1"))
    if topology is not None:
        batch.append(rec(4, 23, "st", {"epoch": topology, "subtopologies": []}))
    return run(batch)


@pytest.mark.parametrize(
    ("group", "state"),
    [
        ({"current": streams_current(1)}, "Stable"),
        ({"current": streams_current(1), "topology": None}, "NotReady"),  # no topology record
        ({"current": streams_current(1), "validated": -1}, "NotReady"),  # Kafka 4.1 wrote no validated epoch
        ({"current": streams_current(1), "topology": 1}, "NotReady"),  # a new topology, not validated yet
        ({"current": streams_current(1), "epoch": 2}, "Assigning"),  # group epoch ahead of the target
        ({"current": streams_current(1, state=2)}, "Reconciling"),  # revoking tasks
        ({"current": streams_current(0)}, "Reconciling"),  # behind the target epoch
        ({}, "Reconciling"),  # a member without a current assignment
    ],
)
def test_streams_group_state_as_the_coordinator_computes_it(group: dict, state: str) -> None:
    r = streams_group(**group)
    assert listed(r) == {"st": ("streams", "streams", state, "metadata")}
    [g] = r.snapshot()["streams_groups"]
    assert g["state"] == state and g["validated_topology_epoch"] == group.get("validated", 0)


def test_each_group_s_state_comes_from_its_own_members() -> None:
    """Groups of every kind side by side, some sharing member ids: a group's state is computed
    from its own members only (the views index the members once, not a scan per group)."""
    stable, behind = {"member_epoch": 4, "state": 0}, {"member_epoch": 3, "state": 0}

    def consumer(o: int, group: str, current: dict | None) -> list[Entry]:
        batch = [rec(o, 3, group, {"epoch": 4}), rec(o + 1, 6, group, {"assignment_epoch": 4})]
        if current is not None:
            batch += [rec(o + 2, 5, group, {"client_id": "c"}, "m"), rec(o + 3, 8, group, current, "m")]
        return batch

    def streams(o: int, group: str, member: bool) -> list[Entry]:
        batch = [
            rec(o, 17, group, {"epoch": 1, "metadata_hash": 0, "validated_topology_epoch": 0}),
            rec(o + 1, 20, group, {"assignment_epoch": 1, "assignment_timestamp": 0}),
            rec(o + 2, 23, group, {"epoch": 0, "subtopologies": []}),
        ]
        if member:
            batch += [rec(o + 3, 19, group, STREAMS_META, "m1"), rec(o + 4, 22, group, streams_current(1), "m1")]
        return batch

    r = run(
        consumer(0, "cg-stable", stable),
        consumer(10, "cg-empty", None),
        consumer(20, "cg-reconciling", behind),
        share_join(30, "m1", 1),
        [rec(40, 11, "sg-empty", {"epoch": 1, "metadata_hash": 0})],
        streams(50, "st-stable", True),
        streams(60, "st-empty", False),
    )
    assert {g: v[2] for g, v in listed(r).items()} == {
        "cg-stable": "Stable",
        "cg-empty": "Empty",
        "cg-reconciling": "Reconciling",
        "sg": "Stable",
        "sg-empty": "Empty",
        "st-stable": "Stable",
        "st-empty": "Empty",
    }
    snap = r.snapshot()
    assert {g["group"]: (g["state"], [m["member_id"] for m in g["members"]]) for g in snap["share_groups"]} == {
        "sg": ("Stable", ["m1"]),
        "sg-empty": ("Empty", []),
    }
    assert {g["group"]: (g["state"], [m["member_id"] for m in g["members"]]) for g in snap["streams_groups"]} == {
        "st-stable": ("Stable", ["m1"]),
        "st-empty": ("Empty", []),
    }


def test_streams_member_fenced_then_removed() -> None:
    r = streams_group(current=streams_current(1))
    r.apply_batch([rec(5, 22, "st", None, "m1"), rec(6, 21, "st", None, "m1")])
    [g] = r.snapshot()["streams_groups"]
    [m] = g["members"]
    assert (m["current"]["member_epoch"], m["current"]["previous_member_epoch"], m["current"]["state"]) == (-1, -1, 1)
    assert m["current"]["active_tasks"] == [] and g["state"] == "Reconciling"  # epoch -1 is not the target's
    r.apply_batch([rec(7, 19, "st", None, "m1")])
    assert listed(r)["st"][2] == "Empty" and r.snapshot()["streams_groups"][0]["members"] == []
