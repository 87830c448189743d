"""Reference replay: the state Kafka's group coordinator loads from ``__consumer_offsets``.

A deliberately small and readable implementation of spec section 12, used as the
oracle for the generator's expected state and for gold. Partitions are independent;
within one partition records are applied in offset order:

* offset commits (types 0 and 1 share the logical key (group, topic, partition)):
  latest record wins; a tombstone deletes the key and drops pending transactional
  offsets for it (4.x behaviour);
* transactional commits stay pending per (partition, producer id) until a control
  record of the same producer id: COMMIT applies each pending offset only if its record
  offset is later than the committed one's, ABORT discards them;
* every other record type: latest value per key, tombstone deletes;
* share and streams group members follow Kafka 4.2's coordinator rather than latest-value-per-key:
  a member metadata (10 / 19) or current assignment (14 / 22) record creates the member; a
  current assignment tombstone leaves it with member epochs -1 and nothing assigned (its state
  kept); only a member metadata tombstone removes it; tombstones of unknown members are ignored.

Deleted offsets are remembered with the position of the tombstone and an inferred
cause: ``group_deletion`` (a group tombstone for the same group in the same batch),
``expiry`` (retention had elapsed by the tombstone's timestamp, spec 12.5), else
``explicit_delete`` (admin OffsetDelete, topic deletion, ...).

Groups (spec 12.3): a group exists while it has a live group metadata record (classic type 2,
consumer 3, share 11, streams 17) or, without one, while it has live or pending offsets — the
"simple" (offsets-only) group the coordinator creates when it replays an offset commit of an
unknown group, listed as a classic group in state Empty with an empty protocol type. An
offsets-only group whose last offset is deleted is remembered as deleted, with that offset's
cause (``transaction_aborted`` when only aborted pending offsets held it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pipelines.codec.errors import DecodeError
from pipelines.codec.reader import Batch
from pipelines.codec.records import decode_control, decode_record
from pipelines.codec.segments import SegmentFile, discover, iter_segment

OFFSET_TYPES = (0, 1)
GROUP_TOMBSTONE_TYPES = (2, 3, 11, 17)  # classic, consumer, share, streams group records
# group metadata record type -> the group type Kafka lists (GroupType) and, for the new
# protocols, the protocol type it reports
GROUP_TYPES = {2: "classic", 3: "consumer", 11: "share", 17: "streams"}
# consumer-group member records (spec 12.7): member metadata and current assignment make a member
CONSUMER_MEMBER_TYPES = (5, 8)
STABLE_MEMBER = 0  # ConsumerGroupCurrentMemberAssignmentValue.State
STREAMS_STABLE_MEMBER = 1  # StreamsGroupCurrentMemberAssignmentValue.State (spec 9.6)
# share and streams groups: metadata type -> (member metadata, target, current assignment) types
MEMBER_FAMILIES = {11: (10, 13, 14), 17: (19, 21, 22)}
TARGET_EPOCH_TYPES = {3: 6, 11: 12, 17: 20}  # group metadata type -> target assignment metadata type
STREAMS_TOPOLOGY = 23
_STREAMS_TASKS = ("active_tasks", "standby_tasks", "warmup_tasks")
# what a current assignment tombstone empties
EMPTIED = {
    11: ("assigned_partitions",),
    17: (*_STREAMS_TASKS, *(f"{t}_pending_revocation" for t in _STREAMS_TASKS)),
}
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000


@dataclass(slots=True)
class Entry:
    """One record of the log, decoded: what the replay consumes."""

    partition: int
    offset: int
    timestamp: int | None
    producer_id: int = -1
    transactional: bool = False
    control_type: int | None = None  # for control records: 0 ABORT, 1 COMMIT
    record_type: int | None = None
    key: dict[str, Any] | None = None
    value: dict[str, Any] | None = None  # None: tombstone (for data records)
    value_version: int | None = None

    @property
    def is_control(self) -> bool:
        return self.control_type is not None


@dataclass
class Committed:
    value: dict[str, Any]
    value_version: int
    partition: int
    record_offset: int
    timestamp: int | None


@dataclass
class Deleted:
    partition: int
    record_offset: int
    timestamp: int | None
    cause: str
    last_value: dict[str, Any] | None


@dataclass
class ReplayState:
    offsets: dict[tuple[str, str, int], Committed] = field(default_factory=dict)
    # (offsets partition, producer id) -> {(group, topic, partition): Committed}
    pending: dict[tuple[int, int], dict[tuple[str, str, int], Committed]] = field(default_factory=dict)
    # (record type, key tuple) -> (value, value version, partition, record offset) for all other types
    records: dict[tuple[int, tuple], tuple[dict[str, Any], int, int, int]] = field(default_factory=dict)
    deleted_offsets: dict[tuple[str, str, int], Deleted] = field(default_factory=dict)
    applied: dict[int, int] = field(default_factory=dict)  # partition -> last applied offset
    undecodable: int = 0
    # offsets-only ("simple") groups: group -> (offsets partition, position it appeared at)
    simple_groups: dict[str, tuple[int, int]] = field(default_factory=dict)
    deleted_simple_groups: dict[str, Deleted] = field(default_factory=dict)
    # group -> its live offset keys: whether a group still has offsets, without a scan
    group_offsets: dict[str, set[tuple[str, str, int]]] = field(default_factory=dict)
    # offset key -> the producers holding it pending, and group -> its pending entries: a tombstone
    # and the simple-group check find them without scanning every producer (a 10M-record log has
    # thousands, and the scans made the replay quadratic)
    pending_holders: dict[tuple[str, str, int], set[tuple[int, int]]] = field(default_factory=dict)
    pending_groups: dict[str, int] = field(default_factory=dict)
    # share and streams members as the coordinator holds them: (group metadata type, group, member)
    # -> {"metadata": value or None, "current": value or None}
    members: dict[tuple[int, str, str], dict[str, Any]] = field(default_factory=dict)

    def set_offset(self, okey: tuple[str, str, int], entry: Committed) -> None:
        self.offsets[okey] = entry
        self.group_offsets.setdefault(okey[0], set()).add(okey)

    def drop_offset(self, okey: tuple[str, str, int]) -> Committed | None:
        keys = self.group_offsets.get(okey[0])
        if keys is not None:
            keys.discard(okey)
            if not keys:
                del self.group_offsets[okey[0]]
        return self.offsets.pop(okey, None)

    def has_metadata(self, group: str) -> bool:
        return any((t, (group,)) in self.records for t in GROUP_TYPES)

    def has_offsets(self, group: str) -> bool:
        """Live committed offsets, or transactional offsets still pending."""
        return group in self.group_offsets or group in self.pending_groups

    def add_pending(self, producer: tuple[int, int], okey: tuple[str, str, int], entry: Committed) -> None:
        held = self.pending.setdefault(producer, {})
        if okey not in held:
            self.pending_holders.setdefault(okey, set()).add(producer)
            self.pending_groups[okey[0]] = self.pending_groups.get(okey[0], 0) + 1
        held[okey] = entry

    def _forget_pending(self, producer: tuple[int, int], okey: tuple[str, str, int]) -> None:
        holders = self.pending_holders[okey]
        holders.discard(producer)
        if not holders:
            del self.pending_holders[okey]
        left = self.pending_groups[okey[0]] - 1
        if left:
            self.pending_groups[okey[0]] = left
        else:
            del self.pending_groups[okey[0]]

    def drop_pending_key(self, okey: tuple[str, str, int]) -> bool:
        """A tombstone drops the key's pending offsets of every producer; True when there were any."""
        producers = self.pending_holders.get(okey)
        if not producers:
            return False
        for producer in list(producers):
            del self.pending[producer][okey]
            self._forget_pending(producer, okey)
        return True

    def pop_producer(self, producer: tuple[int, int]) -> dict[tuple[str, str, int], Committed]:
        """A marker settles its producer's pending offsets: removed, and returned."""
        held = self.pending.pop(producer, {})
        for okey in held:
            self._forget_pending(producer, okey)
        return held


def _offset_key(key: dict[str, Any]) -> tuple[str, str, int]:
    return (key["group"], key["topic"], key["partition"])


def _group_of(record_type: int, key: dict[str, Any]) -> str:
    return key["group"] if record_type <= 2 else key["group_id"]


@dataclass
class _Members:
    """Members per group: ``consumer`` ids of KIP-848 consumer groups (from their member and
    current-assignment records), ``family`` share (11) and streams (17) members by (family, group)."""

    consumer: dict[str, set[str]]
    family: dict[tuple[int, str], dict[str, dict[str, Any]]]


class Replay:
    def __init__(self, retention_ms: int = DEFAULT_RETENTION_MS) -> None:
        self.retention_ms = retention_ms
        self.state = ReplayState()
        # group -> cause of its last offset deleted in the batch being applied
        self.batch_causes: dict[str, str] = {}

    # -- applying ---------------------------------------------------------------------------
    def apply_batch(self, entries: list[Entry]) -> None:
        """Apply the records of one batch (the unit in which the coordinator writes)."""
        if not entries:
            return
        group_tombstones = {
            _group_of(e.record_type, e.key)
            for e in entries
            if e.value is None and not e.is_control and e.record_type in GROUP_TOMBSTONE_TYPES and e.key
        }
        self.batch_causes = {}
        touched = {_group_of(e.record_type, e.key) for e in entries if not e.is_control and e.key}
        for e in entries:
            if e.is_control:  # a marker settles the pending offsets of its producer's groups
                touched.update(k[0] for k in self.state.pending.get((e.partition, e.producer_id), {}))
        for e in entries:
            self._apply(e, group_tombstones)
        self._settle_simple_groups(touched, entries[-1])

    def _settle_simple_groups(self, groups: set[str], last: Entry) -> None:
        """After a batch: which of ``groups`` exist through their offsets alone (spec 12.3)."""
        st = self.state
        for g in sorted(groups):
            if (2, (g,)) in st.records:
                st.deleted_simple_groups.pop(g, None)  # the id lives again, as a classic group
            now = st.has_offsets(g) and not st.has_metadata(g)
            if now and g not in st.simple_groups:
                st.simple_groups[g] = (last.partition, last.offset)
                st.deleted_simple_groups.pop(g, None)
            elif not now and g in st.simple_groups:
                del st.simple_groups[g]
                if st.has_metadata(g):
                    continue  # a group record took over: the group lives on as that group
                cause = self.batch_causes.get(g, "transaction_aborted")
                st.deleted_simple_groups[g] = Deleted(last.partition, last.offset, last.timestamp, cause, None)

    def _apply(self, e: Entry, group_tombstones: set[str]) -> None:
        st = self.state
        last = st.applied.get(e.partition)
        if last is not None and e.offset <= last:
            raise ValueError(f"partition {e.partition}: offset {e.offset} applied after {last}; replay needs order")
        st.applied[e.partition] = e.offset
        if e.is_control:
            self._marker(e)
            return
        if e.record_type is None or e.key is None:
            st.undecodable += 1
            return
        if e.record_type in OFFSET_TYPES:
            self._offset(e, group_tombstones)
            return
        for family, (metadata, _, current) in MEMBER_FAMILIES.items():
            if e.record_type in (metadata, current):
                self._member(e, family, "metadata" if e.record_type == metadata else "current")
        key = (e.record_type, tuple(e.key.values()))
        if e.value is None:
            st.records.pop(key, None)
        else:
            st.records[key] = (e.value, e.value_version or 0, e.partition, e.offset)

    def _member(self, e: Entry, family: int, part: str) -> None:
        """A share/streams member's metadata or current assignment record (module docstring)."""
        members = self.state.members
        key = (family, e.key["group_id"], e.key["member_id"])
        member = members.get(key)
        if e.value is not None:
            members.setdefault(key, {"metadata": None, "current": None})[part] = e.value
        elif member is None:
            return  # a tombstone of a member the group does not have
        elif part == "current":
            left = {"member_epoch": -1, "previous_member_epoch": -1, **{f: [] for f in EMPTIED[family]}}
            member["current"] = {**(member["current"] or {}), **left}  # the state of the last record stays
        else:
            del members[key]

    def _offset(self, e: Entry, group_tombstones: set[str]) -> None:
        st = self.state
        okey = _offset_key(e.key)  # type: ignore[arg-type]
        if e.value is None:
            previous = st.drop_offset(okey)
            pending = st.drop_pending_key(okey)
            cause = self._cause(okey, e, previous, group_tombstones, pending)
            st.deleted_offsets[okey] = Deleted(
                e.partition, e.offset, e.timestamp, cause, previous.value if previous else None
            )
            self.batch_causes[okey[0]] = cause
            return
        entry = Committed(e.value, e.value_version or 0, e.partition, e.offset, e.timestamp)
        if e.transactional:
            st.add_pending((e.partition, e.producer_id), okey, entry)
            return
        st.set_offset(okey, entry)
        st.deleted_offsets.pop(okey, None)

    def _marker(self, e: Entry) -> None:
        st = self.state
        pend = st.pop_producer((e.partition, e.producer_id))
        if e.control_type != 1:  # ABORT (or anything that is not COMMIT) discards
            return
        for okey, entry in pend.items():
            current = st.offsets.get(okey)
            if current is None or entry.record_offset > current.record_offset:
                st.set_offset(okey, entry)
                st.deleted_offsets.pop(okey, None)

    def _cause(
        self, okey: tuple[str, str, int], e: Entry, prev: Committed | None, tombstoned: set[str], pending: bool
    ) -> str:
        # Expiry first: when the coordinator expires the last offsets of an empty classic
        # group it tombstones the group in the same batch, which is not an admin deletion.
        group = okey[0]
        fallback = "group_deletion" if group in tombstoned else "explicit_delete"
        if prev is None or e.timestamp is None or pending:
            return fallback  # spec 12.5: an offset with pending transactional offsets never expires
        if prev.value_version == 1 and prev.value.get("expire_timestamp", -1) >= 0:
            return "expiry" if e.timestamp >= prev.value["expire_timestamp"] else fallback
        base = prev.value.get("commit_timestamp", 0)
        classic = self.state.records.get((2, (group,)))
        if (3, (group,)) in self.state.records or (classic is not None and classic[0]["members"]):
            # a live KIP-848 group or a Stable classic group: subscribed topics never expire
            # (we do not resolve subscriptions here, so no expiry is inferred at all)
            return fallback
        if classic is not None and classic[0]["protocol_type"] and classic[0].get("current_state_timestamp", -1) >= 0:
            base = classic[0]["current_state_timestamp"]  # an Empty group's clock starts when it emptied
        return "expiry" if e.timestamp - base >= self.retention_ms else fallback

    # -- views ------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The loaded state as plain JSON-able data (docs/reference-state.md)."""
        st = self.state
        offsets = [
            {
                "group": g,
                "topic": t,
                "partition": p,
                "offset": c.value["offset"],
                "leader_epoch": c.value.get("leader_epoch", -1),
                "metadata": c.value["metadata"],
                "commit_timestamp": c.value["commit_timestamp"],
                "expire_timestamp": c.value.get("expire_timestamp", -1),
                "topic_id": c.value.get("topic_id"),
                "offsets_partition": c.partition,
                "record_offset": c.record_offset,
            }
            for (g, t, p), c in sorted(st.offsets.items())
        ]
        pending = [
            {
                "offsets_partition": part,
                "producer_id": pid,
                "group": g,
                "topic": t,
                "partition": p,
                "offset": c.value["offset"],
                "record_offset": c.record_offset,
                "timestamp": c.timestamp,
            }
            for (part, pid), entries in sorted(st.pending.items())
            for (g, t, p), c in sorted(entries.items())
        ]
        deleted = [
            {
                "group": g,
                "topic": t,
                "partition": p,
                "offsets_partition": d.partition,
                "record_offset": d.record_offset,
                "timestamp": d.timestamp,
                "cause": d.cause,
            }
            for (g, t, p), d in sorted(st.deleted_offsets.items())
        ]
        return {
            "offsets": offsets,
            "pending_transactions": pending,
            "deleted_offsets": deleted,
            "classic_groups": self.classic_groups(),
            "consumer_groups": self.new_protocol_groups(3, 5, 6, 7, 8, 16),
            "share_groups": self.family_groups(11),
            "streams_groups": self.family_groups(17),
            "groups": self.listed_groups(),
            "deleted_simple_groups": [
                {
                    "group": g,
                    "offsets_partition": d.partition,
                    "record_offset": d.record_offset,
                    "timestamp": d.timestamp,
                    "cause": d.cause,
                }
                for g, d in sorted(st.deleted_simple_groups.items())
            ],
            "applied_offsets": {str(p): o for p, o in sorted(st.applied.items())},
        }

    def listed_groups(self) -> list[dict[str, Any]]:
        """Every group the coordinator would load, as ``listGroups`` reports it: group id, type,
        protocol type, state, and why it exists (its metadata record, or offsets alone)."""
        st = self.state
        out = []
        members = self._members()
        for (rtype, key), (value, _, part, _) in st.records.items():
            gtype = GROUP_TYPES.get(rtype)
            if gtype is None:
                continue
            group = key[0]
            if gtype == "classic":
                protocol_type, state = value["protocol_type"] or "", "Stable" if value["members"] else "Empty"
            else:
                protocol_type, state = gtype, self._new_protocol_state(gtype, group, value["epoch"], members)
            out.append(
                {
                    "group": group,
                    "type": gtype,
                    "protocol_type": protocol_type,
                    "state": state,
                    "exists_because": "metadata",
                    "offsets_partition": part,
                }
            )
        for group, (part, _) in st.simple_groups.items():
            out.append(
                {
                    "group": group,
                    "type": "classic",
                    "protocol_type": "",
                    "state": "Empty",
                    "exists_because": "offsets",
                    "offsets_partition": part,
                }
            )
        return sorted(out, key=lambda g: (g["group"], g["type"]))

    def _members(self) -> _Members:
        """Every group's members, indexed in one pass over the state: a view that looked them up
        by scanning the state once per group took hours at 30M records."""
        consumer: dict[str, set[str]] = {}
        for rtype, key in self.state.records:
            if rtype in CONSUMER_MEMBER_TYPES:
                consumer.setdefault(key[0], set()).add(key[1])
        family: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}
        for (f, g, m), value in self.state.members.items():
            family.setdefault((f, g), {})[m] = value
        return _Members(consumer, family)

    def _new_protocol_state(self, gtype: str, group: str, epoch: int, members: _Members) -> str | None:
        """The state the coordinator computes for a loaded group: consumer groups as
        ``ConsumerGroup`` does (Empty, Assigning, Reconciling, Stable); share groups Empty or
        Stable; streams groups as ``StreamsGroup`` does (Empty, NotReady, Assigning, Reconciling,
        Stable)."""
        recs = self.state.records
        if gtype == "share":
            return "Stable" if members.family.get((11, group)) else "Empty"
        if gtype == "streams":
            return self._streams_state(group, epoch, members.family.get((17, group), {}))
        consumer = members.consumer.get(group, set())
        if not consumer:
            return "Empty"
        target = recs.get((6, (group,)))
        assignment_epoch = target[0]["assignment_epoch"] if target else 0
        if epoch > assignment_epoch:
            return "Assigning"
        for m in consumer:
            current = recs.get((8, (group, m)))
            value = current[0] if current else {}
            if value.get("state", STABLE_MEMBER) != STABLE_MEMBER or value.get("member_epoch", 0) != assignment_epoch:
                return "Reconciling"
        return "Stable"

    def _target_epoch(self, family: int, group: str) -> int | None:
        rec = self.state.records.get((TARGET_EPOCH_TYPES[family], (group,)))
        return rec[0]["assignment_epoch"] if rec else None

    def _streams_state(self, group: str, epoch: int, members: dict[str, dict[str, Any]]) -> str:
        """Empty without members; NotReady while the topology is missing or is not the one the
        group validated; Assigning while the group epoch is ahead of the target assignment's;
        Reconciling while a member is not STABLE at the target epoch; else Stable."""
        if not members:
            return "Empty"
        meta = self.state.records[(17, (group,))][0]
        topology = self.state.records.get((STREAMS_TOPOLOGY, (group,)))
        if topology is None or topology[0]["epoch"] != meta.get("validated_topology_epoch", -1):
            return "NotReady"
        target = self._target_epoch(17, group) or 0
        if epoch > target:
            return "Assigning"
        for m in members.values():
            current = m["current"] or {}
            if current.get("state") != STREAMS_STABLE_MEMBER or current.get("member_epoch") != target:
                return "Reconciling"
        return "Stable"

    def family_groups(self, family: int) -> list[dict[str, Any]]:
        """Share (11) or streams (17) groups: epochs, state and members as the coordinator holds
        them (member metadata, the target assignment of the member id, the current assignment);
        streams groups also their validated topology epoch and topology record."""
        recs = self.state.records
        gtype = GROUP_TYPES[family]
        target_type = MEMBER_FAMILIES[family][1]
        out = []
        index = self._members()
        for (rtype, key), (value, _, part, _) in sorted(recs.items()):
            if rtype != family:
                continue
            group = key[0]
            members = []
            for mid, m in sorted(index.family.get((family, group), {}).items()):
                target = recs.get((target_type, (group, mid)))
                members.append({"member_id": mid, **m, "target": target[0] if target else None})
            view: dict[str, Any] = {
                "group": group,
                "epoch": value["epoch"],
                "assignment_epoch": self._target_epoch(family, group),
                "state": self._new_protocol_state(gtype, group, value["epoch"], index),
                "offsets_partition": part,
                "members": members,
            }
            if family == 17:
                topology = recs.get((STREAMS_TOPOLOGY, (group,)))
                view["validated_topology_epoch"] = value.get("validated_topology_epoch", -1)
                view["topology"] = topology[0] if topology else None
            out.append(view)
        return out

    def classic_groups(self) -> list[dict[str, Any]]:
        out = []
        for (rtype, key), (value, version, part, rec_off) in sorted(self.state.records.items()):
            if rtype != 2:
                continue
            members = [
                {
                    "member_id": m["member_id"],
                    "group_instance_id": m["group_instance_id"],
                    "client_id": m["client_id"],
                    "client_host": m["client_host"],
                    "session_timeout": m["session_timeout"],
                    "rebalance_timeout": m["rebalance_timeout"],
                    "subscribed_topics": (m.get("subscription_info") or {}).get("topics"),
                    "assigned_partitions": {
                        tp["topic"]: tp["partitions"]
                        for tp in (m.get("assignment_info") or {}).get("assigned_partitions", [])
                    },
                }
                for m in value["members"]
            ]
            out.append(
                {
                    "group": key[0],
                    "protocol_type": value["protocol_type"],
                    "generation": value["generation"],
                    "protocol": value["protocol"],
                    "leader": value["leader"],
                    "current_state_timestamp": value["current_state_timestamp"],
                    "state": "Stable" if members else "Empty",
                    "members": members,
                    "value_version": version,
                    "offsets_partition": part,
                    "record_offset": rec_off,
                }
            )
        return out

    def new_protocol_groups(
        self, meta: int, member: int, target_meta: int, target: int, current: int, regex: int | None
    ) -> list[dict[str, Any]]:
        """Group views for KIP-848 consumer, share and streams groups (same record pattern)."""
        recs = self.state.records
        groups: dict[str, dict[str, Any]] = {}
        for (rtype, key), (value, _, part, _) in sorted(recs.items()):
            if rtype == meta:
                groups[key[0]] = {
                    "group": key[0],
                    "epoch": value["epoch"],
                    "offsets_partition": part,
                    "assignment_epoch": None,
                    "members": {},
                    "regexes": {},
                }
        for (rtype, key), (value, _, _, _) in sorted(recs.items()):
            g = groups.get(key[0])
            if g is None:
                continue
            if rtype == target_meta:
                g["assignment_epoch"] = value["assignment_epoch"]
            elif rtype in (member, target, current):
                slot = {member: "metadata", target: "target", current: "current"}[rtype]
                g["members"].setdefault(key[1], {})[slot] = value
            elif regex is not None and rtype == regex:
                g["regexes"][key[1]] = value["topics"]
        for g in groups.values():
            g["members"] = [{"member_id": mid, **parts} for mid, parts in sorted(g["members"].items())]
        return list(groups.values())


# -- feeding the replay from segment files ------------------------------------------------------------
def entries_of_batch(partition: int, batch: Batch) -> list[Entry]:
    out = []
    for r in batch.records or ():
        if batch.is_control:
            try:
                ctype, _, _ = decode_control(r.key, r.value)
            except DecodeError:  # counted as undecodable; never guessed as COMMIT or ABORT
                out.append(Entry(partition, r.offset, r.timestamp, batch.producer_id, True))
                continue
            out.append(Entry(partition, r.offset, r.timestamp, batch.producer_id, True, control_type=ctype))
            continue
        d = decode_record(r.key, r.value)
        out.append(
            Entry(
                partition,
                r.offset,
                r.timestamp,
                batch.producer_id,
                batch.is_transactional,
                record_type=d.record_type if d.ok else None,
                key=d.key if d.ok else None,
                value=d.value,
                value_version=d.value_version,
            )
        )
    return out


def iter_batches(segments: Iterable[SegmentFile]) -> Iterator[list[Entry]]:
    for seg in segments:
        if seg.partition is None:
            raise ValueError(f"{seg.path}: partition unknown (directory is not __consumer_offsets-N)")
        for batch, _ in iter_segment(seg):
            if batch is not None:
                yield entries_of_batch(seg.partition, batch)


def replay_paths(
    paths: list[str], retention_ms: int = DEFAULT_RETENTION_MS, stop_at: dict[int, int] | None = None
) -> Replay:
    """Replay every partition found under ``paths`` (segments in base-offset order).

    ``stop_at`` ({partition: offset}) replays each listed partition only below that offset: the
    state at a known log position, e.g. a truth snapshot's ``offsets_topic_end_offsets``.
    """
    replay = Replay(retention_ms)
    for entries in iter_batches(discover(list(paths))):
        if stop_at is not None and entries:
            end = stop_at.get(entries[0].partition)
            entries = entries if end is None else [e for e in entries if e.offset < end]
        replay.apply_batch(entries)
    return replay
