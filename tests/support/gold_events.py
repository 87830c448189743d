"""Gold's engine without Spark: its event tables built from the codec's decoded records, one
:class:`pipelines.gold.engine.PartitionReplay` per partition, the output as Python rows.

The mapping of records to events is this module's own, written from the silver contract (the
columns ``pipelines/gold/events.py`` declares for each event kind, and silver's representation
rules: the all-zero topic id is null, a zero-length consumer assignment is ``[]``, topic names
of KIP-848 assignments resolved from the ids the log pairs with names). It does not use
``pipelines.gold.build`` or ``events`` (Spark), nor the reference replay.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from pipelines.gold import engine as ge
from tests.support.spec_oracle import ZERO_UUID, LogBatch, Rec

GOLD_TABLES = (
    "current_offsets",
    "pending_transactions",
    "current_groups",
    "offset_history",
    "group_generations",
    "consumer_group_members",
    "share_group_members",
    "streams_group_members",
    "streams_group_topologies",
)
RETENTION_MS = 7 * 24 * 3600 * 1000
_NEW_GROUP_TYPES = (3, 6, 11, 12, 17, 20, 23)  # group epochs, target assignment epochs, the streams topology
_TARGET_EPOCH_TYPES = (6, 12, 20)
_MEMBER_TYPES = (5, 7, 8)
_SHARE_MEMBER_TYPES = (10, 13, 14)
_STREAMS_MEMBER_TYPES = (19, 21, 22)
_STREAMS_METADATA = (
    "instance_id",
    "rack_id",
    "client_id",
    "client_host",
    "rebalance_timeout_ms",
    "topology_epoch",
    "process_id",
    "user_endpoint",
    "client_tags",
)
_TASKS = ("active_tasks", "standby_tasks", "warmup_tasks")
_MEMBER_5 = (
    "instance_id",
    "rack_id",
    "client_id",
    "client_host",
    "subscribed_topic_names",
    "subscribed_topic_regex",
    "server_assignor",
    "rebalance_timeout_ms",
)
# where the log pairs topic ids with names (silver.topic_ids): type -> list fields of the value
_NAMED_TOPIC_LISTS = {
    4: ("topics",),
    9: ("topics",),
    15: ("initializing_topics", "initialized_topics", "deleting_topics"),
    18: ("topics",),
}


def topic_names(batches: Iterable[LogBatch]) -> dict[str, str]:
    """Topic id -> name, from every record that carries both (offset commits v4, types 4, 9, 15, 18)."""
    names: dict[str, str] = {}
    for b in batches:
        for r in b.records:
            v = r.value
            if v is None:
                continue
            if r.type in (0, 1) and v.get("topic_id") not in (None, ZERO_UUID):
                names[v["topic_id"]] = r.key["topic"]
            for fld in _NAMED_TOPIC_LISTS.get(r.type, ()):
                for t in v.get(fld) or []:
                    if t.get("topic_id") not in (None, ZERO_UUID) and t.get("topic_name") is not None:
                        names[t["topic_id"]] = t["topic_name"]
    return names


def _members(value: dict[str, Any]) -> list[dict[str, Any]]:
    """A classic record's members as silver.group_members holds them, in member order."""
    consumer = value["protocol_type"] == "consumer"
    out = []
    for i, m in enumerate(value["members"]):
        sub, asg = m.get("subscription_info"), m.get("assignment_info")
        if asg is not None:
            assigned = [{"topic": a["topic"], "partitions": a["partitions"]} for a in asg["assigned_partitions"]]
        else:
            assigned = [] if consumer and m["assignment"] == b"" else None
        out.append(
            {
                "member_index": i,
                "member_id": m["member_id"],
                "group_instance_id": m.get("group_instance_id"),
                "client_id": m["client_id"],
                "client_host": m["client_host"],
                "session_timeout_ms": m["session_timeout"],
                "rebalance_timeout_ms": m.get("rebalance_timeout", -1),
                "subscribed_topics": None if sub is None else sub["topics"],
                "assigned_partitions": assigned,
            }
        )
    return out


def _parts(parts: list[dict[str, Any]] | None, names: dict[str, str], epochs: bool) -> list[dict[str, Any]] | None:
    if parts is None:
        return None
    out = []
    for p in parts:
        row = {"topic_id": p["topic_id"], "topic": names.get(p["topic_id"]), "partitions": p["partitions"]}
        if epochs:
            row["assignment_epochs"] = p.get("assignment_epochs")
        out.append(row)
    return out


def _record_event(rec: Rec, names: dict[str, str]) -> dict[str, Any] | None:
    """The event fields of one data record, or None for a record type gold does not replay."""
    t, v, key = rec.type, rec.value, rec.key
    if t in (0, 1):
        row: dict[str, Any] = {"group_id": key["group"], "topic": key["topic"], "partition": key["partition"]}
        if v is None:
            return row | {"kind": ge.OFFSET_TOMBSTONE}
        tid = v.get("topic_id")
        return row | {
            "kind": ge.COMMIT,
            "committed_offset": v["offset"],
            "leader_epoch": v.get("leader_epoch", -1),
            "metadata": v["metadata"],
            "commit_timestamp": v["commit_timestamp"],
            "expire_timestamp": v.get("expire_timestamp", -1),
            "topic_id": None if tid in (None, ZERO_UUID) else tid,
        }
    if t == 2:
        if v is None:
            return {"kind": ge.GROUP_TOMBSTONE, "group_id": key["group"]}
        members = _members(v)
        return {
            "kind": ge.GROUP,
            "group_id": key["group"],
            "protocol_type": v["protocol_type"],
            "generation": v["generation"],
            "assignor": v["protocol"],
            "leader": v["leader"],
            "current_state_timestamp": v.get("current_state_timestamp", -1),
            "member_count": len(members),
            "members": members,
        }
    if t in _NEW_GROUP_TYPES:
        if v is None:
            return {"kind": ge.NEW_GROUP_TOMBSTONE, "group_id": key["group_id"]}
        row = {"kind": ge.NEW_GROUP, "group_id": key["group_id"]}
        if t in _TARGET_EPOCH_TYPES:
            return row | {"assignment_epoch": v["assignment_epoch"]}
        if t == 23:
            return row | {"topology": _silver_topology(v)}
        row["generation"] = v["epoch"]
        return row | ({"validated_topology_epoch": v.get("validated_topology_epoch", -1)} if t == 17 else {})
    if t in _SHARE_MEMBER_TYPES or t in _STREAMS_MEMBER_TYPES:
        row = {"group_id": key["group_id"], "member_id": key["member_id"]}
        if v is None:
            return row | {"kind": ge.MEMBER_TOMBSTONE}
        return row | {"kind": ge.MEMBER} | _family_fields(t, v, names)
    if t in _MEMBER_TYPES:
        row = {"group_id": key["group_id"], "member_id": key["member_id"]}
        if v is None:
            return row | {"kind": ge.MEMBER_TOMBSTONE}
        row["kind"] = ge.MEMBER
        if t == 5:
            return row | {f: v.get(f) for f in _MEMBER_5}
        if t == 7:
            return row | {"target_partitions": _parts(v.get("topic_partitions"), names, epochs=False)}
        return row | {
            "member_epoch": v.get("member_epoch"),
            "previous_member_epoch": v.get("previous_member_epoch"),
            "state": v.get("state"),
            "assigned_partitions": _parts(v.get("assigned_partitions"), names, epochs=True),
            "partitions_pending_revocation": _parts(v.get("partitions_pending_revocation"), names, epochs=True),
        }
    return None


def _tasks(tasks: list[dict[str, Any]], epochs: bool) -> list[dict[str, Any]]:
    out = []
    for task in tasks:
        row = {"subtopology_id": task["subtopology_id"], "partitions": task["partitions"]}
        out.append(row | ({"assignment_epochs": task.get("assignment_epochs")} if epochs else {}))
    return out


def _family_fields(t: int, v: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """The event columns of a share (10, 13, 14) or streams (19, 21, 22) member record."""
    if t == 10:
        return {f: v.get(f) for f in ("rack_id", "client_id", "client_host", "subscribed_topic_names")}
    if t == 13:
        return {"target_partitions": _parts(v["topic_partitions"], names, epochs=False)}
    if t == 14:
        return {
            "member_epoch": v["member_epoch"],
            "previous_member_epoch": v["previous_member_epoch"],
            "state": v["state"],
            "assigned_partitions": _parts(v["assigned_partitions"], names, epochs=True),
        }
    if t == 19:
        return {f: v.get(f) for f in _STREAMS_METADATA}
    if t == 21:
        return {f"target_{k}": _tasks(v[k], epochs=False) for k in _TASKS}
    current = {f: v[f] for f in ("member_epoch", "previous_member_epoch", "state")}
    return current | {k: _tasks(v[k], epochs=True) for k in (*_TASKS, *(f"{k}_pending_revocation" for k in _TASKS))}


def _silver_topology(v: dict[str, Any]) -> dict[str, Any]:
    """A topology record's value in silver's struct (its declared fields only)."""

    def topics(infos: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{f: i[f] for f in ("name", "partitions", "replication_factor", "topic_configs")} for i in infos]

    subs = []
    for sub in v["subtopologies"]:
        subs.append(
            {
                "subtopology_id": sub["subtopology_id"],
                "source_topics": sub["source_topics"],
                "source_topic_regex": sub["source_topic_regex"],
                "state_changelog_topics": topics(sub["state_changelog_topics"]),
                "repartition_sink_topics": sub["repartition_sink_topics"],
                "repartition_source_topics": topics(sub["repartition_source_topics"]),
                "copartition_groups": [
                    {f: c[f] for f in ("source_topics", "source_topic_regex", "repartition_source_topics")}
                    for c in sub["copartition_groups"]
                ],
            }
        )
    return {"epoch": v["epoch"], "subtopologies": subs}


def event_rows(batches: Iterable[LogBatch], names: dict[str, str]) -> list[dict[str, Any]]:
    """Gold's events of a partition's batches, in log order."""
    out = []
    empty = dict.fromkeys(ge.event_schema().names)
    for b in batches:
        batch_id = b.base_offset if b.base_offset is not None else (b.marker_offset or b.records[0].offset)
        envelope = {"batch_id": batch_id, "producer_id": b.producer_id, "transactional": b.transactional}
        if b.marker is not None:
            out.append(
                empty
                | envelope
                | {
                    "kind": ge.MARKER,
                    "record_offset": b.marker_offset,
                    "timestamp_ms": b.marker_timestamp,
                    "control_type_id": 1 if b.marker == "COMMIT" else 0,
                }
            )
            continue
        for r in b.records:
            ev = _record_event(r, names)
            if ev is not None:
                ctx = {"record_offset": r.offset, "timestamp_ms": r.timestamp, "record_type": r.type}
                out.append(empty | envelope | ctx | {"value_version": r.version} | ev)
    return out


def run_engine(
    cluster_batches: dict[int, list[LogBatch]], cluster: str = "c", retention_ms: int = RETENTION_MS
) -> dict[str, list[dict[str, Any]]]:
    """Gold's tables (one run from empty per partition, soft deletes kept) as rows of all partitions."""
    names = topic_names(b for bs in cluster_batches.values() for b in bs)
    schema = ge.event_schema()
    tables: dict[str, list[dict[str, Any]]] = {t: [] for t in GOLD_TABLES}
    for part, batches in sorted(cluster_batches.items()):
        events = pa.Table.from_pylist(event_rows(batches, names), schema=schema)
        inp = ge.PartitionInput(
            cluster,
            part,
            events,
            offsets=None,
            pending=None,
            groups=None,
            history=None,
            generations=None,
            members=None,
            applied_offset=None,
        )
        out = ge.PartitionReplay(inp, "oracle-run", retention_ms, None).run()
        for t in GOLD_TABLES:
            table = out.tables.get(t)
            if table is not None:  # build.py adds the partition columns: so do we
                tables[t].extend({"cluster": cluster, "offsets_partition": part, **r} for r in table.to_pylist())
    return tables
