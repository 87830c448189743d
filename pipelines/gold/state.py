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

from pipelines.reference.replay import Committed, Deleted, Entry, Replay

OKey = tuple[str, str, int]

# event kinds produced by build.py from the silver tables
COMMIT, OFFSET_TOMBSTONE, GROUP, GROUP_TOMBSTONE, CONSUMER_GROUP, CONSUMER_GROUP_TOMBSTONE, MARKER = (
    "commit",
    "offset_tombstone",
    "group",
    "group_tombstone",
    "consumer_group",
    "consumer_group_tombstone",
    "marker",
)


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
            st.offsets[key] = Committed(
                _value(r), r["value_version"], partition, r["record_offset"], r["record_timestamp"]
            )
    for r in state.pending:
        st.pending.setdefault((partition, r["producer_id"]), {})[(r["group_id"], r["topic"], r["partition"])] = (
            Committed(_value(r), r["value_version"], partition, r["record_offset"], r["record_timestamp"])
        )
    for g in state.groups:
        if g["deleted"]:
            continue
        if g["protocol"] == "classic":
            value = _classic_value(g)
            st.records[(2, (g["group_id"],))] = (value, g["value_version"], partition, g["record_offset"])
        else:
            st.records[(3, (g["group_id"],))] = ({"epoch": g["generation"]}, 0, partition, g["record_offset"])
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
    value = None if kind == CONSUMER_GROUP_TOMBSTONE else {"epoch": e["generation"]}
    return Entry(
        partition,
        off,
        ts,
        pid,
        txn,
        record_type=3,
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
    groups_changed: dict[tuple[int, str], int] = {}
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
        replay.apply_batch(batch)
        last = batch[-1].offset
        for k in affected:
            if (st.offsets.get(k), st.deleted_offsets.get(k)) != before[k]:
                changed_at[k] = last
                history_changes.setdefault(k, []).append((last, batch[-1].timestamp, _offset_row(st, k, last)))
        for e in batch:
            if e.record_type in (2, 3) and not e.is_control:
                groups_changed[(e.record_type, e.key["group" if e.record_type == 2 else "group_id"])] = e.offset  # type: ignore[index]
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
    groups = []
    for (rtype, group_id), at in sorted(groups_changed.items()):
        rec = st.records.get((rtype, (group_id,)))
        protocol = "classic" if rtype == 2 else "consumer"
        if rec is None:
            groups.append(
                {
                    "group_id": group_id,
                    "protocol": protocol,
                    "deleted": True,
                    "state_offset": at,
                    "protocol_type": None,
                    "generation": None,
                    "assignor": None,
                    "leader": None,
                    "current_state_timestamp": None,
                    "member_count": None,
                    "value_version": None,
                    "record_offset": None,
                }
            )
            continue
        value, version, _, record_offset = rec
        groups.append(
            {
                "group_id": group_id,
                "protocol": protocol,
                "deleted": False,
                "state_offset": at,
                "protocol_type": value.get("protocol_type") if rtype == 2 else "consumer",
                "generation": value.get("generation") if rtype == 2 else value.get("epoch"),
                "assignor": value.get("protocol") if rtype == 2 else None,
                "leader": value.get("leader") if rtype == 2 else None,
                "current_state_timestamp": value.get("current_state_timestamp") if rtype == 2 else None,
                "member_count": len(value.get("members") or []) if rtype == 2 else None,
                "value_version": version,
                "record_offset": record_offset,
            }
        )
    return PartitionResult(offsets, pending, groups, st.applied.get(partition), n, history)
