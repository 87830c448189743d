"""Gold's ordered replay of one (cluster, offsets partition), resumable from persisted state.

Pure Python (no Spark): the Spark side (pipelines/gold/build.py) groups silver events by
(cluster, offsets partition), hands each group with its persisted gold state to
:func:`replay_partition`, and MERGEs what comes back. The semantics are the reference replay's
(pipelines/reference/replay.py, spec section 12, checked against a real broker by the Kafka
harness): this module only restores that replay's state from gold rows, applies the new events
batch by batch, and turns the result back into rows, remembering for every key the log position
of the event that last changed it (the MERGE's guard against older rows overwriting newer ones).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from pipelines.reference.replay import GROUP_TYPES, Committed, Deleted, Entry, Replay

OKey = tuple[str, str, int]

# event kinds produced by build.py from the silver tables; new-protocol group records (consumer
# group metadata 3 and target assignment metadata 6, share 11, streams 17) carry their record type
COMMIT, OFFSET_TOMBSTONE, GROUP, GROUP_TOMBSTONE, CONSUMER_GROUP, CONSUMER_GROUP_TOMBSTONE, MARKER = (
    "commit",
    "offset_tombstone",
    "group",
    "group_tombstone",
    "consumer_group",
    "consumer_group_tombstone",
    "marker",
)
PROTOCOL_OF = {t: name for t, name in GROUP_TYPES.items()}  # group record type -> current_groups.protocol
RECORD_OF = {name: t for t, name in GROUP_TYPES.items()}
TARGET_ASSIGNMENT = 6  # consumer groups' target assignment metadata: the assignment epoch


@dataclass
class PartitionState:
    """Gold's persisted state for one offsets partition (rows of the gold tables, as dicts)."""

    offsets: list[dict[str, Any]] = field(default_factory=list)  # current_offsets rows (live and deleted)
    pending: list[dict[str, Any]] = field(default_factory=list)  # pending_transactions rows
    groups: list[dict[str, Any]] = field(default_factory=list)  # current_groups rows (classic, consumer)
    applied_offset: int | None = None


@dataclass
class PartitionResult:
    offsets: list[dict[str, Any]]  # changed current_offsets rows
    pending: list[dict[str, Any]]  # the partition's complete pending set
    groups: list[dict[str, Any]]  # changed current_groups rows
    applied_offset: int | None
    events: int
    history: list[dict[str, Any]] = field(default_factory=list)  # offset_history rows, one per change


def _value(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "offset": row["committed_offset"],
        "leader_epoch": row["leader_epoch"],
        "metadata": row["metadata"],
        "commit_timestamp": row["commit_timestamp"],
        "expire_timestamp": row["expire_timestamp"],
        "topic_id": row["topic_id"],
    }


def _classic_value(row: dict[str, Any]) -> dict[str, Any]:
    """A classic group record's value as the reference replay keeps it, from a gold row or an event."""
    return {
        "protocol_type": row["protocol_type"],
        "generation": row["generation"],
        "protocol": row["assignor"],
        "leader": row["leader"],
        "current_state_timestamp": row["current_state_timestamp"],
        "members": [{}] * (row["member_count"] or 0),
    }


def _commit_columns(c: Committed) -> dict[str, Any]:
    """A committed value's columns, shared by current_offsets and pending_transactions rows."""
    v = c.value
    return {
        "committed_offset": v["offset"],
        "leader_epoch": v.get("leader_epoch", -1),
        "metadata": v["metadata"],
        "commit_timestamp": v["commit_timestamp"],
        "expire_timestamp": v.get("expire_timestamp", -1),
        "topic_id": v.get("topic_id"),
        "value_version": c.value_version,
        "record_offset": c.record_offset,
        "record_timestamp": c.timestamp,
    }


def restore(partition: int, state: PartitionState, retention_ms: int) -> Replay:
    replay = Replay(retention_ms)
    st = replay.state
    for r in state.offsets:
        key = (r["group_id"], r["topic"], r["partition"])
        if r["deleted"]:
            st.deleted_offsets[key] = Deleted(
                partition, r["deleted_offset"], r["deleted_timestamp"], r["delete_cause"], None
            )
        else:
            st.set_offset(
                key, Committed(_value(r), r["value_version"], partition, r["record_offset"], r["record_timestamp"])
            )
    for r in state.pending:
        st.pending.setdefault((partition, r["producer_id"]), {})[(r["group_id"], r["topic"], r["partition"])] = (
            Committed(_value(r), r["value_version"], partition, r["record_offset"], r["record_timestamp"])
        )
    for g in state.groups:
        if g["deleted"]:
            continue
        key = (g["group_id"],)
        if g["exists_because"] == "offsets":  # an offsets-only group: no record behind it
            st.simple_groups[g["group_id"]] = (partition, g["state_offset"])
        elif g["protocol"] == "classic":
            st.records[(2, key)] = (_classic_value(g), g["value_version"], partition, g["record_offset"])
        else:
            rtype = RECORD_OF[g["protocol"]]
            st.records[(rtype, key)] = ({"epoch": g["generation"]}, g["value_version"], partition, g["record_offset"])
            if g["assignment_epoch"] is not None:
                st.records[(TARGET_ASSIGNMENT, key)] = ({"assignment_epoch": g["assignment_epoch"]}, 0, partition, -1)
    if state.applied_offset is not None:
        st.applied[partition] = state.applied_offset
    return replay


def _entry(partition: int, e: dict[str, Any]) -> Entry:
    kind = e["kind"]
    pid = -1 if e["producer_id"] is None else e["producer_id"]
    txn = bool(e["transactional"])  # null (Kafka source): the broker already resolved it
    ts = e["timestamp_ms"]
    off = e["record_offset"]
    if kind == MARKER:
        return Entry(partition, off, ts, pid, True, control_type=e["control_type_id"])
    if kind in (COMMIT, OFFSET_TOMBSTONE):
        key = {"group": e["group_id"], "topic": e["topic"], "partition": e["partition"]}
        value = None if kind == OFFSET_TOMBSTONE else _value(e)
        return Entry(
            partition,
            off,
            ts,
            pid,
            txn,
            record_type=e["record_type"],
            key=key,
            value=value,
            value_version=e["value_version"],
        )
    if kind in (GROUP, GROUP_TOMBSTONE):
        value = None
        if kind == GROUP:
            value = _classic_value(e)
        return Entry(
            partition,
            off,
            ts,
            pid,
            txn,
            record_type=2,
            key={"group": e["group_id"]},
            value=value,
            value_version=e["value_version"],
        )
    rtype = e["record_type"]
    value = None
    if kind == CONSUMER_GROUP:
        value = {"assignment_epoch": e["generation"]} if rtype == TARGET_ASSIGNMENT else {"epoch": e["generation"]}
    return Entry(
        partition,
        off,
        ts,
        pid,
        txn,
        record_type=rtype,
        key={"group_id": e["group_id"]},
        value=value,
        value_version=e["value_version"],
    )


def _offset_row(st: Any, k: OKey, at: int) -> dict[str, Any]:
    """The current_offsets row of key ``k`` in replay state ``st``; ``at``: the position of the change."""
    group_id, topic, part = k
    live = st.offsets.get(k)
    if live is not None:
        return {
            "group_id": group_id,
            "topic": topic,
            "partition": part,
            **_commit_columns(live),
            "state_offset": at,
            "deleted": False,
            "deleted_offset": None,
            "deleted_timestamp": None,
            "delete_cause": None,
        }
    d = st.deleted_offsets[k]
    last_value = d.last_value or {}
    return {
        "group_id": group_id,
        "topic": topic,
        "partition": part,
        "committed_offset": last_value.get("offset"),
        "leader_epoch": last_value.get("leader_epoch"),
        "metadata": last_value.get("metadata"),
        "commit_timestamp": last_value.get("commit_timestamp"),
        "expire_timestamp": last_value.get("expire_timestamp"),
        "topic_id": last_value.get("topic_id"),
        "value_version": None,
        "record_offset": None,
        "record_timestamp": None,
        "state_offset": at,
        "deleted": True,
        "deleted_offset": d.record_offset,
        "deleted_timestamp": d.timestamp,
        "delete_cause": d.cause,
    }


def replay_partition(
    partition: int, state: PartitionState, events: Iterable[dict[str, Any]], retention_ms: int
) -> PartitionResult:
    """Apply ``events`` (ordered by record offset; ``batch_id`` groups a batch) on top of ``state``."""
    replay = restore(partition, state, retention_ms)
    st = replay.state
    changed_at: dict[OKey, int] = {}
    # every state a key took in this run, in log order: (position, log time, row) -> offset_history
    history_changes: dict[OKey, list[tuple[int, int, dict[str, Any]]]] = {}
    # (protocol, group) -> (position, row content) of every group row this run changed; ``known``
    # holds each touched group's rows as they stood before (from the restored state)
    groups_changed: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
    known: dict[str, dict[str, dict[str, Any] | None]] = {}
    n = 0
    for _, batch_events in groupby(events, key=lambda e: e["batch_id"]):
        batch = [_entry(partition, e) for e in batch_events]
        n += len(batch)
        affected: set[OKey] = set()
        for e in batch:
            if e.is_control:
                affected.update(st.pending.get((partition, e.producer_id), {}))
            elif e.record_type in (0, 1):
                affected.add((e.key["group"], e.key["topic"], e.key["partition"]))  # type: ignore[index]
        before = {k: (st.offsets.get(k), st.deleted_offsets.get(k)) for k in affected}
        touched = {k[0] for k in affected} | {
            e.key["group" if e.record_type == 2 else "group_id"]  # type: ignore[index]
            for e in batch
            if not e.is_control and e.record_type not in (0, 1, None)
        }
        for g in touched - known.keys():
            known[g] = _group_rows(st, g)
        replay.apply_batch(batch)
        last = batch[-1].offset
        for k in affected:
            if (st.offsets.get(k), st.deleted_offsets.get(k)) != before[k]:
                changed_at[k] = last
                history_changes.setdefault(k, []).append((last, batch[-1].timestamp, _offset_row(st, k, last)))
        # a group tombstone marks its group deleted even when the record it supersedes is not in
        # the log (compacted away), as an offset tombstone does for its key
        tombstoned = {
            (PROTOCOL_OF[e.record_type], e.key["group" if e.record_type == 2 else "group_id"])  # type: ignore[index]
            for e in batch
            if not e.is_control and e.value is None and e.record_type in PROTOCOL_OF
        }
        for g in touched:
            now = _group_rows(st, g)
            for protocol, row in now.items():
                if row != known[g][protocol] or (row is None and (protocol, g) in tombstoned):
                    groups_changed[(protocol, g)] = (last, row or _deleted_group(replay, g, known[g][protocol]))
            known[g] = now
    offsets = [_offset_row(st, k, at) for k, at in sorted(changed_at.items())]
    history = [
        {
            **row,
            "valid_from_offset": at,
            "valid_from_timestamp": ts,
            "valid_to_offset": nxt_at,
            "valid_to_timestamp": nxt_ts,
        }
        for k, changes in sorted(history_changes.items())
        for (at, ts, row), (nxt_at, nxt_ts, _) in zip(changes, [*changes[1:], (None, None, None)], strict=True)
    ]
    pending = [
        {
            "producer_id": pid,
            "group_id": k[0],
            "topic": k[1],
            "partition": k[2],
            **_commit_columns(c),
        }
        for (part, pid), entries in sorted(st.pending.items())
        for k, c in sorted(entries.items())
    ]
    groups = [
        {"group_id": g, "protocol": protocol, "state_offset": at, **row}
        for (protocol, g), (at, row) in sorted(groups_changed.items())
    ]
    return PartitionResult(offsets, pending, groups, st.applied.get(partition), n, history)


_GROUP_COLUMNS = (
    "protocol_type",
    "generation",
    "assignor",
    "leader",
    "current_state_timestamp",
    "member_count",
    "assignment_epoch",
    "value_version",
    "record_offset",
)


def _group_rows(st: Any, group: str) -> dict[str, dict[str, Any] | None]:
    """The current_groups row content of ``group`` per protocol (None: no live row), from the
    replay state: a live group record, or for classic, an offsets-only group (spec 12.3)."""
    out: dict[str, dict[str, Any] | None] = {}
    for rtype, protocol in PROTOCOL_OF.items():
        rec = st.records.get((rtype, (group,)))
        row: dict[str, Any] | None = None
        if rec is not None:
            value, version, _, record_offset = rec
            row = dict.fromkeys(_GROUP_COLUMNS) | {"value_version": version, "record_offset": record_offset}
            if rtype == 2:
                row |= {
                    "protocol_type": value.get("protocol_type"),
                    "generation": value.get("generation"),
                    "assignor": value.get("protocol"),
                    "leader": value.get("leader"),
                    "current_state_timestamp": value.get("current_state_timestamp"),
                    "member_count": len(value.get("members") or []),
                }
            else:
                target = st.records.get((TARGET_ASSIGNMENT, (group,))) if rtype == 3 else None
                row |= {
                    "protocol_type": protocol,
                    "generation": value.get("epoch"),
                    "assignment_epoch": target[0]["assignment_epoch"] if target else None,
                }
            row |= {"exists_because": "metadata", "deleted": False, "delete_cause": None}
        elif protocol == "classic" and group in st.simple_groups:
            row = dict.fromkeys(_GROUP_COLUMNS) | {"protocol_type": ""}
            row |= {"exists_because": "offsets", "deleted": False, "delete_cause": None}
        out[protocol] = row
    return out


def _deleted_group(replay: Replay, group: str, before: dict[str, Any] | None) -> dict[str, Any]:
    """A soft-deleted current_groups row, with why the group went in the batch just applied: the
    cause of the offset deletions that came with it (an expired empty group, an offsets-only
    group losing its last offset), ``converted`` when the id lives on as a group of another
    type, else ``group_deletion``. ``exists_because`` stays what it was while the group lived."""
    st = replay.state
    if st.has_metadata(group) or group in st.simple_groups:
        cause = "converted"
    else:
        cause = replay.batch_causes.get(group, "group_deletion")
        gone = st.deleted_simple_groups.get(group)
        if gone is not None and gone.record_offset == st.applied.get(gone.partition):
            cause = gone.cause  # an offsets-only group went in this batch, e.g. its pending offsets aborted
    was = before["exists_because"] if before else None
    return dict.fromkeys(_GROUP_COLUMNS) | {"exists_because": was, "deleted": True, "delete_cause": cause}
