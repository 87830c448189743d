"""Compare the spec oracle (tests/support/spec_oracle.py) with another account of the same log:
the generator's ``expected-state.json`` or ``Replay.snapshot()`` (same shape,
docs/reference-state.md), field by field, counting what was compared.

A :class:`Comparison` lists every difference and counts rows and fields per section, so a test
can assert both that nothing differs and that enough was compared (vacuity guards).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.support.spec_oracle import (
    FAMILY_PARTS,
    METADATA_TYPES,
    SHARE_EMPTIED,
    STREAMS_EMPTIED,
    STREAMS_TOPOLOGY,
    TOPOLOGY_FIELDS,
    UNSUBSCRIBED,
    ZERO_UUID,
    ClusterModel,
    PartitionModel,
    classic_members,
    held_current,
    members_of,
)

# new-protocol families: metadata type -> (member metadata, target member, current member) types
FAMILY_MEMBER_TYPES = {3: (5, 7, 8), 11: (10, 13, 14), 17: (19, 21, 22)}
FAMILY_TARGET_META = {3: 6, 11: 12, 17: 20}
FAMILY_SECTION = {3: "consumer_groups", 11: "share_groups", 17: "streams_groups"}


@dataclass
class Comparison:
    """Differences between two accounts, and how much was compared."""

    differences: list[str] = field(default_factory=list)
    rows: Counter[str] = field(default_factory=Counter)  # section -> rows present on both sides
    fields: Counter[str] = field(default_factory=Counter)  # section -> field values compared
    accepted: list[str] = field(default_factory=list)  # differences set aside, each with its reason

    def report(self, limit: int = 25) -> str:
        head = "\n".join(self.differences[:limit])
        more = f"\n... and {len(self.differences) - limit} more" if len(self.differences) > limit else ""
        return f"{len(self.differences)} differences:\n{head}{more}"

    def diff_keyed(
        self,
        section: str,
        ours: dict[Any, dict[str, Any]],
        theirs: dict[Any, dict[str, Any]],
        fields: Sequence[str],
        accept: Callable[[str, dict[str, Any], dict[str, Any]], str | None] | None = None,
    ) -> None:
        """Rows keyed alike: keys on one side only, then every named field of the common rows.
        ``accept(field, ours, theirs)`` may set a difference aside, giving the reason."""
        for k in sorted(ours.keys() - theirs.keys(), key=repr):
            self.differences.append(f"{section} {k}: only in the oracle")
        for k in sorted(theirs.keys() - ours.keys(), key=repr):
            self.differences.append(f"{section} {k}: missing from the oracle")
        for k in sorted(ours.keys() & theirs.keys(), key=repr):
            self.rows[section] += 1
            for f in fields:
                self.fields[section] += 1
                a, b = ours[k].get(f), theirs[k].get(f)
                if a == b:
                    continue
                reason = accept(f, ours[k], theirs[k]) if accept is not None else None
                if reason is not None:
                    self.accepted.append(f"{section} {k} {f}: oracle {a!r}, other {b!r}: {reason}")
                else:
                    self.differences.append(f"{section} {k} {f}: oracle {a!r} != {b!r}")


def keyed(
    rows: Iterable[dict[str, Any]], key: Callable[[dict[str, Any]], Any], section: str
) -> dict[Any, dict[str, Any]]:
    out: dict[Any, dict[str, Any]] = {}
    for r in rows:
        k = key(r)
        if k in out:
            raise AssertionError(f"{section}: two rows for {k}")
        out[k] = r
    return out


def narrower_expiry(field: str, ours: dict[str, Any], theirs: dict[str, Any]) -> str | None:
    """The one rule where gold and the reference replay knowingly infer less than §12.5: they
    never infer expiry while a KIP-848 group lives or a classic group is Stable
    (docs/reference-state.md), where §12.5 expires the offsets of topics the group does not
    subscribe to. Accepted only where the other side says exactly what the oracle would say had
    that offset not expired."""
    if field not in ("cause", "delete_cause") or ours.get("expiry_rule") != UNSUBSCRIBED:
        return None
    if theirs.get(field) != ours.get("fallback_cause"):
        return None
    return "§12.5 expires an unsubscribed topic of a live group; docs/reference-state.md does not"


def same_batch(field: str, ours: dict[str, Any], theirs: dict[str, Any]) -> str | None:
    """Gold dates what a batch did by the batch's last record *it replays*; the oracle by the
    batch's last record. They differ when a batch ends in a record gold does not replay (a
    streams topology, share state metadata, a regex resolution): accepted when gold's position
    lies inside the oracle's batch."""
    if field != "state_offset" or ours.get("batch_first_offset") is None or theirs.get(field) is None:
        return None
    if ours["batch_first_offset"] <= theirs[field] <= ours[field]:
        return "the same batch, dated by its last record gold replays"
    return None


def gold_accepts(field: str, ours: dict[str, Any], theirs: dict[str, Any]) -> str | None:
    return narrower_expiry(field, ours, theirs) or same_batch(field, ours, theirs)


# -- the oracle in the vocabulary of expected-state.json -------------------------------------------
def snapshot_view(cluster: ClusterModel) -> dict[str, Any]:
    """The oracle's state with the sections and field names of ``expected-state.json``."""
    view: dict[str, Any] = {s: [] for s in SNAPSHOT_KEYS}
    view["applied_offsets"] = {}
    for p, m in sorted(cluster.partitions.items()):
        _partition_view(p, m, view)
    return view


def _partition_view(p: int, m: PartitionModel, view: dict[str, Any]) -> None:
    for (g, t, part), o in m.offsets.items():
        if not o["deleted"]:
            view["offsets"].append(
                {
                    "group": g,
                    "topic": t,
                    "partition": part,
                    "offset": o["committed_offset"],
                    "leader_epoch": o["leader_epoch"],
                    "metadata": o["metadata"],
                    "commit_timestamp": o["commit_timestamp"],
                    "expire_timestamp": o["expire_timestamp"],
                    "topic_id": o["topic_id"],
                    "offsets_partition": p,
                    "record_offset": o["record_offset"],
                }
            )
        else:
            view["deleted_offsets"].append(
                {
                    "group": g,
                    "topic": t,
                    "partition": part,
                    "offsets_partition": p,
                    "record_offset": o["deleted_offset"],
                    "timestamp": o["deleted_timestamp"],
                    "cause": o["delete_cause"],
                    "expiry_rule": o["expiry_rule"],
                    "fallback_cause": o["fallback_cause"],
                }
            )
    for r in m.pending_rows():
        view["pending_transactions"].append(
            {
                "offsets_partition": p,
                "producer_id": r["producer_id"],
                "group": r["group_id"],
                "topic": r["topic"],
                "partition": r["partition"],
                "offset": r["committed_offset"],
                "record_offset": r["record_offset"],
                "timestamp": r["record_timestamp"],
            }
        )
    for group, live in m.live.items():
        for (t, _), rec in live.items():
            if t == 2:
                view["classic_groups"].append(_classic_view(p, group, rec))
            elif t in FAMILY_SECTION:
                view[FAMILY_SECTION[t]].append(_family_view(p, group, t, rec, live, m))
    for (g, protocol), row in m.groups.items():
        if not row["deleted"]:
            view["groups"].append(
                {
                    "group": g,
                    "type": protocol,
                    "protocol_type": row["protocol_type"],
                    "state": row["state"],
                    "exists_because": row["exists_because"],
                    "offsets_partition": p,
                }
            )
        elif row["exists_because"] == "offsets" and row["delete_cause"] != "converted":
            view["deleted_simple_groups"].append(
                {
                    "group": g,
                    "offsets_partition": p,
                    "record_offset": row["state_offset"],
                    "timestamp": row["state_timestamp"],
                    "cause": row["delete_cause"],
                    "expiry_rule": row["expiry_rule"],
                    "fallback_cause": row["fallback_cause"],
                }
            )
    if m.applied_offset is not None:
        view["applied_offsets"][str(p)] = m.applied_offset


def _classic_view(p: int, group: str, rec: Any) -> dict[str, Any]:
    v = rec.value
    members = []
    for mm in classic_members(v):
        assigned = mm["assigned_partitions"]
        members.append(
            {
                "member_id": mm["member_id"],
                "group_instance_id": mm["group_instance_id"],
                "client_id": mm["client_id"],
                "client_host": mm["client_host"],
                "rebalance_timeout": mm["rebalance_timeout_ms"],
                "session_timeout": mm["session_timeout_ms"],
                "subscribed_topics": mm["subscribed_topics"],
                # the snapshot writes {} for an assignment that is not consumer-protocol bytes
                "assigned_partitions": {a["topic"]: a["partitions"] for a in assigned or []},
            }
        )
    return {
        "group": group,
        "protocol_type": v["protocol_type"],
        "generation": v["generation"],
        "protocol": v["protocol"],
        "leader": v["leader"],
        "current_state_timestamp": v.get("current_state_timestamp", -1),
        "state": "Stable" if v["members"] else "Empty",
        "members": members,
        "value_version": rec.version,
        "offsets_partition": p,
        "record_offset": rec.offset,
    }


def _family_view(p: int, group: str, meta_type: int, rec: Any, live: dict[tuple, Any], m: PartitionModel) -> dict:
    if meta_type in FAMILY_PARTS:
        return _share_streams_view(p, group, meta_type, rec, live, m)
    member_types = FAMILY_MEMBER_TYPES[meta_type]
    members: dict[str, dict[str, Any]] = {}
    for (t, k), r in live.items():
        if t in member_types:
            slot = ("metadata", "target", "current")[member_types.index(t)]
            members.setdefault(k[1], {"member_id": k[1], "metadata": None, "target": None, "current": None})[slot] = (
                r.value
            )
    target_meta = live.get((FAMILY_TARGET_META[meta_type], (group,)))
    regexes = {k[1]: r.value["topics"] for (t, k), r in live.items() if t == 16} if meta_type == 3 else {}
    return {
        "group": group,
        "epoch": rec.value["epoch"],
        "assignment_epoch": target_meta.value["assignment_epoch"] if target_meta is not None else None,
        "offsets_partition": p,
        "members": [members[mid] for mid in sorted(members)],
        "regexes": regexes,
    }


def _share_streams_view(
    p: int, group: str, meta_type: int, rec: Any, live: dict[tuple, Any], m: PartitionModel
) -> dict[str, Any]:
    """A share or streams group as expected-state.json shows it (docs/reference-state.md): the
    members the coordinator holds (decision 9) with their metadata, target and held current
    assignment values, the group's state; streams groups their topology and validated epoch."""
    parts = FAMILY_PARTS[meta_type]
    emptied = SHARE_EMPTIED if meta_type == 11 else STREAMS_EMPTIED
    members = []
    for mid, member in sorted(members_of(m, meta_type, group).items()):
        target = live.get((parts["target"], (group, mid)))
        members.append(
            {
                "member_id": mid,
                "metadata": member["metadata"].value if member["metadata"] is not None else None,
                "target": target.value if target is not None else None,
                "current": held_current(member, emptied),
            }
        )
    target_meta = live.get((FAMILY_TARGET_META[meta_type], (group,)))
    listed = m.groups.get((group, METADATA_TYPES[meta_type]))
    view = {
        "group": group,
        "epoch": rec.value["epoch"],
        "assignment_epoch": target_meta.value["assignment_epoch"] if target_meta is not None else None,
        "state": listed["state"] if listed is not None and not listed["deleted"] else None,
        "offsets_partition": p,
        "members": members,
    }
    if meta_type == 17:
        topology = live.get((STREAMS_TOPOLOGY, (group,)))
        view["validated_topology_epoch"] = rec.value.get("validated_topology_epoch", -1)
        view["topology"] = topology.value if topology is not None else None
    return view


SNAPSHOT_KEYS = (
    "offsets",
    "deleted_offsets",
    "pending_transactions",
    "classic_groups",
    "consumer_groups",
    "share_groups",
    "streams_groups",
    "groups",
    "deleted_simple_groups",
)

# section -> (key fields, compared fields)
_GROUP_KEY = ("offsets_partition", "group")
_OFFSET_KEY = ("offsets_partition", "group", "topic", "partition")
SNAPSHOT_SECTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "offsets": (
        _OFFSET_KEY,
        ("offset", "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp", "topic_id", "record_offset"),
    ),
    "deleted_offsets": (_OFFSET_KEY, ("record_offset", "timestamp", "cause")),
    "pending_transactions": (
        ("offsets_partition", "producer_id", "group", "topic", "partition"),
        ("offset", "record_offset", "timestamp"),
    ),
    "classic_groups": (
        _GROUP_KEY,
        (
            "protocol_type",
            "generation",
            "protocol",
            "leader",
            "current_state_timestamp",
            "state",
            "members",
            "value_version",
            "record_offset",
        ),
    ),
    "consumer_groups": (_GROUP_KEY, ("epoch", "assignment_epoch", "members", "regexes")),
    "share_groups": (_GROUP_KEY, ("epoch", "assignment_epoch", "state", "members")),
    "streams_groups": (
        _GROUP_KEY,
        ("epoch", "assignment_epoch", "state", "members", "validated_topology_epoch", "topology"),
    ),
    "groups": (("offsets_partition", "group", "type"), ("protocol_type", "state", "exists_because")),
    "deleted_simple_groups": (_GROUP_KEY, ("record_offset", "timestamp", "cause")),
}


def _normalise(section: str, row: dict[str, Any]) -> dict[str, Any]:
    """Representation only: the all-zero topic id means "none" (spec §2.1)."""
    if section in ("offsets",) and row.get("topic_id") == ZERO_UUID:
        return {**row, "topic_id": None}
    return row


def compare_with_snapshot(
    cluster: ClusterModel, snapshot: dict[str, Any], sections: Sequence[str] = tuple(SNAPSHOT_SECTIONS)
) -> Comparison:
    """The oracle against ``expected-state.json`` / ``Replay.snapshot()``, section by section.

    One difference is set aside, each instance named in ``accepted``: a group id with live
    metadata records of two families at once (no coordinator writes that; the generator's
    deletion of a new-protocol group that never converted does). The oracle lists the family
    whose record is the latest (its decision 6); the snapshot lists both."""
    ours = snapshot_view(cluster)
    out = Comparison()
    twice = _listed_twice(cluster)
    for section in sections:
        key, fields = SNAPSHOT_SECTIONS[section]
        theirs_rows = [_normalise(section, r) for r in snapshot.get(section, [])]
        if section == "groups":
            kept = []
            for r in theirs_rows:
                listed = twice.get((r["offsets_partition"], r["group"]))
                if listed is not None and r["type"] != listed:
                    out.accepted.append(f"groups {r['group']}: snapshot also lists it as {r['type']}")
                    continue
                kept.append(r)
            theirs_rows = kept
        k = lambda r, key=key: tuple(r[f] for f in key)  # noqa: E731
        out.diff_keyed(
            section, keyed(ours[section], k, section), keyed(theirs_rows, k, section), fields, narrower_expiry
        )
    if "applied_offsets" not in snapshot:
        return out  # a partial snapshot (sections given): nothing to say about positions
    ours_applied, theirs_applied = ours["applied_offsets"], snapshot["applied_offsets"]
    out.diff_keyed(
        "applied_offsets",
        {p: {"offset": o} for p, o in ours_applied.items()},
        {p: {"offset": o} for p, o in theirs_applied.items()},
        ("offset",),
    )
    return out


def _listed_twice(cluster: ClusterModel) -> dict[tuple[int, str], str]:
    """(partition, group) -> the family the oracle lists, for ids with two live metadata families."""
    out = {}
    for p, m in cluster.partitions.items():
        for group, live in m.live.items():
            families = {t for (t, _) in live if t in METADATA_TYPES}
            if len(families) > 1:
                out[(p, group)] = next(r["protocol"] for (g, _), r in m.listed_groups().items() if g == group)
    return out


# -- the oracle against gold's tables -------------------------------------------------------------
_OFFSET_VALUE = (
    "committed_offset",
    "leader_epoch",
    "metadata",
    "commit_timestamp",
    "expire_timestamp",
    "topic_id",
    "value_version",
    "record_offset",
    "record_timestamp",
)
_DELETION = ("deleted", "deleted_offset", "deleted_timestamp", "delete_cause")
GOLD_SECTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "current_offsets": (
        ("offsets_partition", "group_id", "topic", "partition"),
        (*_OFFSET_VALUE, "state_offset", *_DELETION),
    ),
    "pending_transactions": (("offsets_partition", "producer_id", "group_id", "topic", "partition"), _OFFSET_VALUE),
    "current_groups": (
        ("offsets_partition", "group_id", "protocol"),
        (
            "protocol_type",
            "generation",
            "assignor",
            "leader",
            "current_state_timestamp",
            "member_count",
            "assignment_epoch",
            "topology_epoch",
            "validated_topology_epoch",
            "exists_because",
            "value_version",
            "record_offset",
            "deleted",
            "delete_cause",
        ),
    ),
    "group_generations": (
        ("offsets_partition", "group_id", "started_offset"),
        (
            "generation",
            "protocol_type",
            "assignor",
            "leader",
            "member_count",
            "started_timestamp",
            "ended_offset",
            "ended_timestamp",
            "end_reason",
            "records",
            "last_record_offset",
            "members",
        ),
    ),
    "consumer_group_members": (
        ("offsets_partition", "group_id", "member_id"),
        (
            "instance_id",
            "rack_id",
            "client_id",
            "client_host",
            "subscribed_topic_names",
            "subscribed_topic_regex",
            "server_assignor",
            "rebalance_timeout_ms",
            "member_epoch",
            "previous_member_epoch",
            "state",
            "assigned_partitions",
            "partitions_pending_revocation",
            "target_partitions",
            "record_offset_5",
            "record_offset_7",
            "record_offset_8",
        ),
    ),
    "share_group_members": (
        ("offsets_partition", "group_id", "member_id"),
        (
            "rack_id",
            "client_id",
            "client_host",
            "subscribed_topic_names",
            "member_epoch",
            "previous_member_epoch",
            "state",
            "assigned_partitions",
            "target_partitions",
            "record_offset_10",
            "record_offset_13",
            "record_offset_14",
        ),
    ),
    "streams_group_members": (
        ("offsets_partition", "group_id", "member_id"),
        (
            "instance_id",
            "rack_id",
            "client_id",
            "client_host",
            "rebalance_timeout_ms",
            "topology_epoch",
            "process_id",
            "user_endpoint",
            "client_tags",
            "member_epoch",
            "previous_member_epoch",
            "state",
            *STREAMS_EMPTIED,
            "target_active_tasks",
            "target_standby_tasks",
            "target_warmup_tasks",
            "record_offset_19",
            "record_offset_21",
            "record_offset_22",
        ),
    ),
    "streams_group_topologies": (
        ("offsets_partition", "group_id", "subtopology_id"),
        ("topology_epoch", *TOPOLOGY_FIELDS, "record_offset"),
    ),
    "offset_history": (
        ("offsets_partition", "group_id", "topic", "partition", "valid_from_offset"),
        ("valid_from_timestamp", "valid_to_offset", "valid_to_timestamp", *_OFFSET_VALUE, *_DELETION),
    ),
}


def gold_view(cluster: ClusterModel, names: dict[str, str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The oracle's state as rows of gold's tables (columns of schemas/tables/gold.yaml)."""
    out: dict[str, list[dict[str, Any]]] = {t: [] for t in GOLD_SECTIONS}
    members = cluster.members(names)
    for p, m in sorted(cluster.partitions.items()):
        at = {"offsets_partition": p}
        out["current_offsets"] += [
            {**at, "group_id": g, "topic": t, "partition": part, **row} for (g, t, part), row in m.offsets.items()
        ]
        out["pending_transactions"] += [{**at, **row} for row in m.pending_rows()]
        out["current_groups"] += [{**at, **row} for row in m.groups.values()]
        out["group_generations"] += [{**at, **row} for row in m.generation_rows()]
        out["offset_history"] += [{**at, **row} for row in m.history_rows()]
    out["consumer_group_members"] = [{"offsets_partition": p, **row} for (p, _, _), row in members.items()]
    for table, family in (("share_group_members", 11), ("streams_group_members", 17)):
        rows = cluster.family_members(family, names)
        out[table] = [{"offsets_partition": p, **row} for (p, _, _), row in rows.items()]
    out["streams_group_topologies"] = [
        {"offsets_partition": p, **row} for p, m in sorted(cluster.partitions.items()) for row in m.topology_rows()
    ]
    return out


# a deleted key keeps its last value's offset (gold.yaml: "the last one before the deletion,
# when known") and loses its record position; gold clears the other value columns
_DELETED_OFFSET_FIELDS = ("committed_offset", "record_offset", *_DELETION)
_DELETED_GROUP_FIELDS = ("deleted", "delete_cause", "exists_because")


def compare_with_gold(
    cluster: ClusterModel,
    gold: dict[str, list[dict[str, Any]]],
    cluster_name: str | None = None,
    tables: Sequence[str] = tuple(GOLD_SECTIONS),
    names: dict[str, str] | None = None,
) -> Comparison:
    """The oracle against gold's tables given as rows (``{table: [row, ...]}``, e.g. from
    ``DataFrame.collect()`` as dicts or Arrow ``to_pylist()``); rows of other clusters are left
    out when ``cluster_name`` is given; member tables name topic ids by ``names`` when given (else
    by the pairs the oracle's log carries). Gold must keep its soft deletes
    (``soft_delete_retention_days: null``): a purged deletion reads as missing.

    Deleted rows are compared on what a deletion means: for offsets the last committed offset and
    the tombstone (position, time, cause); for groups the cause and why the group had existed.
    One difference is set aside, each instance named in ``accepted``: see
    :func:`compare_with_snapshot` (a group id with two live metadata families)."""
    ours = gold_view(cluster, names)
    out = Comparison()
    twice = _listed_twice(cluster)
    for table in tables:
        key, fields = GOLD_SECTIONS[table]
        theirs_rows = [r for r in gold.get(table, []) if cluster_name is None or r.get("cluster") == cluster_name]
        k = lambda r, key=key: tuple(r[f] for f in key)  # noqa: E731
        mine, theirs = keyed(ours[table], k, table), keyed(theirs_rows, k, table)
        if table == "current_groups":
            for x, r in list(theirs.items()):
                listed = twice.get((x[0], x[1]))
                if listed is not None and x[2] != listed and not r["deleted"] and mine.get(x, {}).get("deleted"):
                    out.accepted.append(f"current_groups {x}: gold keeps it live beside the {listed} group")
                    del theirs[x], mine[x]
        deleted_fields = _DELETED_GROUP_FIELDS if table == "current_groups" else _DELETED_OFFSET_FIELDS
        if "deleted" in fields:
            gone = {x for x, r in mine.items() if r["deleted"]}
            out.diff_keyed(
                table,
                {x: mine[x] for x in gone},
                {x: r for x, r in theirs.items() if x in gone},
                deleted_fields + (("state_offset",) if table != "offset_history" else ()),
                gold_accepts,
            )
            mine = {x: r for x, r in mine.items() if x not in gone}
            theirs = {x: r for x, r in theirs.items() if x not in gone}
        out.diff_keyed(table, mine, theirs, fields, gold_accepts)
    return out
