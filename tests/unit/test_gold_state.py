"""Gold's resumable replay: any split of a partition's log into runs, with the state persisted as
gold rows between runs, ends in exactly the reference replay's state (live offsets, soft deletes
with cause, pending transactions, groups)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.codec.segments import discover
from pipelines.generate import generate
from pipelines.gold import state as gs
from pipelines.reference.replay import DEFAULT_RETENTION_MS, Entry, Replay, iter_batches


def event(e: Entry, batch_id: int) -> dict:
    """An Entry as build.py derives it from silver rows."""
    base = {
        "record_offset": e.offset,
        "batch_id": batch_id,
        "timestamp_ms": e.timestamp,
        "producer_id": e.producer_id,
        "transactional": e.transactional,
        "record_type": e.record_type,
        "value_version": e.value_version,
        "group_id": None,
        "topic": None,
        "partition": None,
        "control_type_id": e.control_type,
    }
    if e.is_control:
        return {**base, "kind": gs.MARKER}
    if e.record_type in (0, 1):
        v = e.value or {}
        return {
            **base,
            "kind": gs.COMMIT if e.value is not None else gs.OFFSET_TOMBSTONE,
            "group_id": e.key["group"],
            "topic": e.key["topic"],
            "partition": e.key["partition"],
            "committed_offset": v.get("offset"),
            "leader_epoch": v.get("leader_epoch", -1),
            "metadata": v.get("metadata"),
            "commit_timestamp": v.get("commit_timestamp"),
            "expire_timestamp": v.get("expire_timestamp", -1),
            "topic_id": v.get("topic_id"),
        }
    if e.record_type == 2:
        v = e.value or {}
        return {
            **base,
            "kind": gs.GROUP if e.value is not None else gs.GROUP_TOMBSTONE,
            "group_id": e.key["group"],
            "protocol_type": v.get("protocol_type"),
            "generation": v.get("generation"),
            "assignor": v.get("protocol"),
            "leader": v.get("leader"),
            "current_state_timestamp": v.get("current_state_timestamp", -1),
            "member_count": len(v.get("members") or []),
        }
    if e.record_type in (3, 6, 11, 17):
        v = e.value or {}
        return {
            **base,
            "kind": gs.CONSUMER_GROUP if e.value is not None else gs.CONSUMER_GROUP_TOMBSTONE,
            "group_id": e.key["group_id"],
            "generation": v.get("assignment_epoch") if e.record_type == 6 else v.get("epoch"),
        }
    return None  # other record types do not enter gold's offset replay


@pytest.fixture(scope="module")
def partitions(tmp_path_factory) -> dict[int, list[list[Entry]]]:
    out = tmp_path_factory.mktemp("gold") / "logs"
    generate(out, 12_000, seed=21, partitions=3, segment_bytes=64 * 1024)
    by_part: dict[int, list[list[Entry]]] = {}
    for batch in iter_batches(discover([out])):
        if batch:
            by_part.setdefault(batch[0].partition, []).append(batch)
    return by_part


def reference(batches: list[list[Entry]]) -> dict:
    r = Replay(DEFAULT_RETENTION_MS)
    for b in batches:
        r.apply_batch(b)
    snap = r.snapshot()
    return {
        "live": {
            (o["group"], o["topic"], o["partition"]): (o["offset"], o["metadata"], o["record_offset"])
            for o in snap["offsets"]
        },
        "deleted": {
            (d["group"], d["topic"], d["partition"]): (d["record_offset"], d["cause"]) for d in snap["deleted_offsets"]
        },
        "pending": sorted(
            (p["producer_id"], p["group"], p["topic"], p["partition"], p["offset"])
            for p in snap["pending_transactions"]
        ),
        "classic": {g["group"]: (g["generation"], len(g["members"])) for g in snap["classic_groups"]},
        "groups": {(g["type"], g["group"]): g["exists_because"] for g in snap["groups"]},
        "simple_groups_gone": {g["group"]: g["cause"] for g in snap["deleted_simple_groups"]},
    }


def run_in_chunks(part: int, batches: list[list[Entry]], cuts: list[int]) -> dict:
    events = []
    for b in batches:
        for e in b:
            ev = event(e, b[0].offset)
            if ev is not None:
                events.append(ev)
    bounds = [0, *sorted(set(cuts)), len(events)]
    offsets: dict[tuple, dict] = {}
    groups: dict[tuple, dict] = {}
    state = gs.PartitionState()
    for lo, hi in itertools.pairwise(bounds):
        chunk = events[lo:hi]
        # a cut inside a batch would split what the coordinator wrote atomically: move it to the batch end
        res = gs.replay_partition(part, state, chunk, DEFAULT_RETENTION_MS)
        for row in res.offsets:
            k = (row["group_id"], row["topic"], row["partition"])
            assert k not in offsets or row["state_offset"] >= offsets[k]["state_offset"]
            offsets[k] = row
        for row in res.groups:
            groups[(row["protocol"], row["group_id"])] = row
        state = gs.PartitionState(list(offsets.values()), res.pending, list(groups.values()), res.applied_offset)
    return {
        "live": {
            k: (r["committed_offset"], r["metadata"], r["record_offset"])
            for k, r in offsets.items()
            if not r["deleted"]
        },
        "deleted": {k: (r["deleted_offset"], r["delete_cause"]) for k, r in offsets.items() if r["deleted"]},
        "pending": sorted(
            (p["producer_id"], p["group_id"], p["topic"], p["partition"], p["committed_offset"]) for p in state.pending
        ),
        "classic": {
            g: (r["generation"], r["member_count"])
            for (proto, g), r in groups.items()
            if proto == "classic" and r["exists_because"] == "metadata" and not r["deleted"]
        },
        "groups": {(proto, g): r["exists_because"] for (proto, g), r in groups.items() if not r["deleted"]},
        # offsets-only groups that went: the classic row is soft-deleted with the cause
        "simple_groups_gone": {
            g: r["delete_cause"]
            for (proto, g), r in groups.items()
            if proto == "classic"
            and r["deleted"]
            and r["exists_because"] == "offsets"
            and r["delete_cause"] != "converted"
        },
    }


def batch_cuts(batches: list[list[Entry]], picks: list[int]) -> list[int]:
    """Event indexes at batch boundaries (runs never split a batch: bronze rows of one batch are
    read together from one file, and a torn batch is never ingested)."""
    ends, n = [], 0
    for b in batches:
        n += sum(1 for e in b if event(e, 0) is not None)
        ends.append(n)
    return [ends[p % len(ends)] for p in picks]


def test_one_run_equals_reference(partitions):
    for part, batches in partitions.items():
        assert run_in_chunks(part, batches, []) == reference(batches), part


@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(picks=st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=6))
def test_any_split_into_runs_equals_reference(partitions, picks):
    for part, batches in partitions.items():
        assert run_in_chunks(part, batches, batch_cuts(batches, picks)) == reference(batches), part


def test_state_offsets_only_move_forward(partitions):
    part, batches = next(iter(partitions.items()))
    # the assertion inside run_in_chunks checks every row against the previous one for its key
    run_in_chunks(part, batches, batch_cuts(batches, list(range(0, 400, 7))))


def history_in_chunks(part: int, batches: list[list[Entry]], cuts: list[int]) -> list[dict]:
    """offset_history rows of runs split at ``cuts``; an interval left open by one run is closed by
    the key's first state in a later run (what build.py's MERGE does)."""
    events = [ev for b in batches for e in b if (ev := event(e, b[0].offset)) is not None]
    bounds = [0, *sorted(set(cuts)), len(events)]
    rows: dict[tuple, dict] = {}
    offsets: dict[tuple, dict] = {}
    groups: dict[tuple, dict] = {}
    state = gs.PartitionState()
    for lo, hi in itertools.pairwise(bounds):
        res = gs.replay_partition(part, state, events[lo:hi], DEFAULT_RETENTION_MS)
        for h in sorted(res.history, key=lambda h: h["valid_from_offset"]):
            k = (h["group_id"], h["topic"], h["partition"])
            for old in rows.values():
                same_key = (old["group_id"], old["topic"], old["partition"]) == k
                if same_key and old["valid_to_offset"] is None and old["valid_from_offset"] < h["valid_from_offset"]:
                    old["valid_to_offset"] = h["valid_from_offset"]
            rows[(*k, h["valid_from_offset"])] = dict(h)
        for row in res.offsets:
            offsets[(row["group_id"], row["topic"], row["partition"])] = row
        for row in res.groups:
            groups[(row["protocol"], row["group_id"])] = row
        state = gs.PartitionState(list(offsets.values()), res.pending, list(groups.values()), res.applied_offset)
    return list(rows.values())


def as_of(history: list[dict], position: int) -> dict:
    live, deleted = {}, {}
    for h in history:
        if h["valid_from_offset"] <= position and (h["valid_to_offset"] is None or position < h["valid_to_offset"]):
            k = (h["group_id"], h["topic"], h["partition"])
            assert k not in live and k not in deleted, f"two intervals of {k} overlap at {position}"
            if h["deleted"]:
                deleted[k] = (h["deleted_offset"], h["delete_cause"])
            else:
                live[k] = (h["committed_offset"], h["metadata"], h["record_offset"])
    return {"live": live, "deleted": deleted}


@pytest.mark.parametrize("cuts", [[], [40, 41, 300, 1000]])
def test_history_as_of_every_batch_equals_reference_prefix(partitions, cuts):
    """As-of any log position, offset_history gives exactly what the reference replay of the log
    up to that position holds (live keys and soft deletes), however the log was split into runs."""
    part, batches = next(iter(partitions.items()))
    history = history_in_chunks(part, batches, batch_cuts(batches, cuts) if cuts else [])
    r = Replay(DEFAULT_RETENTION_MS)
    checked = 0
    for i, b in enumerate(batches):
        r.apply_batch(b)
        if i % 25 and i != len(batches) - 1:
            continue  # every 25th batch end and the last: the replay snapshot is the slow part
        snap = r.snapshot()
        expected = {
            "live": {
                (o["group"], o["topic"], o["partition"]): (o["offset"], o["metadata"], o["record_offset"])
                for o in snap["offsets"]
            },
            "deleted": {
                (d["group"], d["topic"], d["partition"]): (d["record_offset"], d["cause"])
                for d in snap["deleted_offsets"]
            },
        }
        assert as_of(history, b[-1].offset) == expected, f"as of {b[-1].offset}"
        checked += 1
    assert checked > 5


def _ev(offset: int, kind: str, **fields) -> dict:
    base = dict.fromkeys(["producer_id", "transactional", "value_version", "topic", "partition", "control_type_id"])
    return {**base, "record_offset": offset, "batch_id": offset, "timestamp_ms": 1000 + offset, "kind": kind, **fields}


def test_offsets_only_group_rows() -> None:
    """An assign() consumer's commit makes an offsets-only classic row; deleting its last offset
    soft-deletes it with that cause; a group tombstone with no record before it still marks the
    group deleted (the record was compacted away)."""
    commit = {"group_id": "g", "topic": "t", "partition": 0, "record_type": 1, "committed_offset": 5}
    commit |= {"leader_epoch": -1, "metadata": "", "commit_timestamp": 1000, "expire_timestamp": -1, "topic_id": None}
    res = gs.replay_partition(0, gs.PartitionState(), [_ev(0, gs.COMMIT, **commit)], DEFAULT_RETENTION_MS)
    [row] = res.groups
    assert (row["protocol"], row["protocol_type"], row["exists_because"], row["deleted"]) == (
        "classic",
        "",
        "offsets",
        False,
    )
    state = gs.PartitionState(res.offsets, res.pending, res.groups, res.applied_offset)
    tomb = {"group_id": "g", "topic": "t", "partition": 0, "record_type": 1}
    res = gs.replay_partition(0, state, [_ev(1, gs.OFFSET_TOMBSTONE, **tomb)], DEFAULT_RETENTION_MS)
    [row] = res.groups
    assert (row["exists_because"], row["deleted"], row["delete_cause"], row["state_offset"]) == (
        "offsets",
        True,
        "explicit_delete",
        1,
    )
    res = gs.replay_partition(
        0, gs.PartitionState(), [_ev(7, gs.GROUP_TOMBSTONE, group_id="h", record_type=2)], DEFAULT_RETENTION_MS
    )
    [row] = res.groups
    assert (row["group_id"], row["protocol"], row["deleted"], row["delete_cause"]) == (
        "h",
        "classic",
        True,
        "group_deletion",
    )
