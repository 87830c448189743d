"""A second implementation of the coordinator's loading rules (spec section 12), for tests.

Written from ``../shared/reference/offsets-topic-format.md`` §12.1-12.8 and the table contracts
in ``docs/gold.md`` / ``schemas/tables/gold.yaml`` — not from ``pipelines/reference/replay.py``
or ``pipelines/gold/engine.py``, which it checks. It shares only the codec with them (segment
discovery, ``iter_log``, ``decode_record``, ``decode_control``), which is checked against Kafka's
own DumpLogSegments elsewhere. Plain dicts, one function per rule, slow on purpose.

Input: the batches of one cluster's log directory, per ``__consumer_offsets`` partition.
Output (:class:`PartitionModel` per partition, field names as gold's columns):

* ``offsets``: every key ever committed or deleted; live rows and soft deletes (position, cause,
  and how the cause was reached: the §12.5 case and what it would be without expiry);
* ``pending`` / ``pending_rows()``: transactional offsets waiting for their producer's marker;
* ``groups``: every group the coordinator would list, and those that went (with their cause);
* ``generations``: classic generations as intervals;
* ``member_rows()``: KIP-848 consumer group members (metadata, target and current assignment);
* ``family_member_rows()`` / ``topology_rows()``: share and streams group members, streams
  topologies;
* ``history``: every state of every offset key as validity intervals (SCD type 2);
* ``counts``: how often each rule decided something, so a test can say what its data exercised.

Decisions where the spec leaves a choice. The real segments (68 log directories, compared with the
reference replay) exercise 1-3, 5 (Empty groups, v1 absolute expiry, groups without protocol
type) and 6; transactions (4) and KIP-848 groups (7) occur only in generated logs. Three choices
were settled after comparing outputs, by the documents named there and never by the other
implementations' code: the batch end as position (2), the share/streams case of 5, and the
zero-length consumer assignment as ``[]`` (silver's representation, §6.3).

1. **Unit of application.** A batch is one coordinator write and is applied whole (§12.8: a batch
   may mix record types). Records apply in offset order inside it; the listing of groups is
   worked out once per batch, so a conversion that tombstones one family and writes the other in
   the same batch (§12.3) is one step, not a deletion followed by a creation.
2. **Positions.** A state takes hold at the end of the batch that produced it (its last
   record's offset and timestamp; for a transactional commit, its COMMIT marker): an offset's
   ``state_offset``, a history interval's start (as gold.yaml defines ``valid_from_offset``) and
   the position of a group that went. The records keep their own positions (``record_offset``,
   ``deleted_offset``, a generation's start and end).
3. **Tombstones of keys not live** still record a soft delete at their position (after
   compaction the value they delete may be gone; gold.yaml keeps "the last offset when known").
4. **Transactions.** Only offset-commit *values* of a transactional batch are held pending
   (§12.4 speaks of offset commits); a tombstone in such a batch deletes at once. A pending
   offset applied by COMMIT keeps its own record offset and timestamp (the comparison of §12.4
   is against "the record offset of the currently committed value").
5. **Delete cause** (inferred; docs/reference-state.md): ``expiry`` when §12.5 says the offset
   could have expired by the tombstone's timestamp, judged on the state just before the
   tombstone; else ``group_deletion`` when the same batch holds a tombstone of the group's
   metadata record (types 2, 3, 11, 17); else ``explicit_delete``. §12.5 is applied as written:
   an Empty classic group with a protocol type expires from its ``currentStateTimestamp`` (else
   the commit time); a Stable ``consumer`` group whose members' subscriptions all decode, and a
   KIP-848 group, expire only offsets of topics they do not subscribe to (commit time); a group
   without protocol type (no group record, or ``protocolType = ""``) expires from the commit
   time; a v1 value from its absolute ``expireTimestamp``; a key with pending transactional
   offsets never. Share and streams groups: the spec gives no rule, so the project's applies
   (docs/reference-state.md: only a live KIP-848 consumer group or a Stable classic group keeps
   offsets from expiring): commit time. A record without timestamp (magic 0) cannot be dated:
   not expiry. Retention: 7 days (the default since 2.0). Where §12.5 is finer than
   docs/reference-state.md (unsubscribed topics of Stable and KIP-848 groups; pending
   transactional offsets), the spec is followed.
6. **Groups** (docs/gold.md "Groups: what Kafka lists"): a group is listed while a metadata
   record lives (the latest of types 2, 3, 11, 17 if several do: a coordinator holds one group
   per id; no coordinator leaves two families live, the generator does), else while it has live or
   pending offsets (an offsets-only group: classic, Empty, protocol type ``""``). A listed row
   that goes: ``converted`` when a metadata record of another type took over; an offsets-only
   group: the cause of the batch's last deletion of its offsets, or ``transaction_aborted``
   when an ABORT dropped what held it; a group with a metadata record: ``expiry`` when an offset
   of the group expired in the same batch, else ``group_deletion``. A metadata tombstone for a
   group not listed (its records compacted away) leaves a deleted row of its type.
7. **KIP-848 members** are the member ids with a live member metadata (5), target (7) or
   current assignment (8) record; a group's state counts those with 5 or 8 (the coordinator
   creates a member from either). Consumer group state per docs/gold.md: Empty, Assigning
   (group epoch ahead of the target assignment epoch), Reconciling (a member not STABLE at that
   epoch), Stable.
9. **Share and streams members** (types 10/13/14, 19/21/22). §12.7 says only that they follow
   the KIP-848 pattern; the member lifecycle and the group states are taken from what Kafka
   4.2.1's coordinator does on loading (read from its jars for issue 14, stated in the issue and
   in docs/gold.md), not from the replay or gold's engine — but by the author who also wrote
   those two implementations of the same rules, so the three share that reading (the kafka tier
   checks it against a broker): a member metadata or current
   assignment record creates the member; a current assignment tombstone of a member sets its
   member epoch and previous member epoch to -1 and empties what it owns, keeping the rest; a
   member metadata tombstone removes the member; tombstones of ids that are not members change
   nothing. The target assignment (13/21) is the latest record per member id, member or not.
   Share groups: Empty without members, else Stable. Streams groups, in order: Empty without
   members; NotReady without a topology record (23) or when its epoch is not the group record's
   validated topology epoch (-1 when the record lacks that field); Assigning while the group
   epoch exceeds the target assignment epoch (0 without a record); Reconciling while a member
   is not STABLE (code 1, §9.6) at the target assignment epoch (a member without a current
   assignment never is); Stable.
8. **Input.** Torn tails end a partition (§10.10); a corrupt batch or an undecodable record
   raises, since the oracle is only for logs the codec reads whole. Magic 0/1 entries are their
   own batches. The high watermark (§12.1) is not known from the files: everything read applies.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.codec.reader import ReadIssue
from pipelines.codec.records import decode_control, decode_record
from pipelines.codec.segments import discover, iter_segment

RETENTION_MS = 7 * 24 * 3600 * 1000  # offsets.retention.minutes default since 2.0 (§12.5)
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"  # the all-zero topic id: none (§2.1)

OFFSET_TYPES = (0, 1)
CLASSIC = 2
METADATA_TYPES = {2: "classic", 3: "consumer", 11: "share", 17: "streams"}
MEMBER_TYPES = {5: "metadata", 7: "target", 8: "current"}
TARGET_EPOCH_TYPES = {3: 6, 11: 12, 17: 20}  # group metadata type -> target assignment metadata type
# decision 9: share (11) and streams (17) members: the record type of each part
FAMILY_PARTS = {11: {"metadata": 10, "target": 13, "current": 14}, 17: {"metadata": 19, "target": 21, "current": 22}}
STREAMS_TOPOLOGY = 23
STREAMS_STABLE = 1  # §9.6: a streams member's STABLE state code
TOPIC_NAME_SOURCES = {
    4: ("topics",),
    9: ("topics",),
    15: ("initializing_topics", "initialized_topics", "deleting_topics"),
    18: ("topics",),
}


class OracleInputError(ValueError):
    """The log holds something the oracle does not judge (corrupt, undecodable, out of order)."""


# -- input -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rec:
    """One data record as the codec decodes it."""

    offset: int
    timestamp: int | None
    type: int
    key: dict[str, Any]
    value: dict[str, Any] | None  # None: tombstone
    version: int | None

    @property
    def group(self) -> str:
        return self.key.get("group", self.key.get("group_id"))


@dataclass(frozen=True)
class LogBatch:
    """One batch (or legacy entry) of a partition: data records, or one transaction marker."""

    partition: int
    transactional: bool
    producer_id: int
    records: tuple[Rec, ...] = ()
    marker: str | None = None  # "COMMIT" / "ABORT" for a control batch
    marker_offset: int | None = None
    marker_timestamp: int | None = None
    base_offset: int | None = None  # the batch header's; identifies the batch

    @property
    def end(self) -> tuple[int, int | None]:
        """(offset, timestamp) of the batch's last record: where its effects take hold."""
        if self.marker is not None:
            return self.marker_offset, self.marker_timestamp  # type: ignore[return-value]
        last = self.records[-1]
        return last.offset, last.timestamp


def batches_of_files(paths: Iterable[str | Path]) -> dict[int, list[LogBatch]]:
    """The batches of every ``__consumer_offsets`` partition under ``paths``, in log order."""
    out: dict[int, list[LogBatch]] = defaultdict(list)
    ended: set[int] = set()
    for seg in discover(list(paths)):
        if seg.partition is None:
            raise OracleInputError(f"{seg.path}: not inside a __consumer_offsets-N directory")
        for batch, issue in iter_segment(seg):
            if issue is not None:
                if issue.kind != ReadIssue.TORN_TAIL:
                    raise OracleInputError(f"{seg.path}: {issue.kind} at byte {issue.position}: {issue.reason}")
                ended.add(seg.partition)
                continue
            assert batch is not None
            if seg.partition in ended:
                raise OracleInputError(f"{seg.path}: data after a torn tail")
            converted = log_batch(seg.partition, batch)
            if converted is not None:
                out[seg.partition].append(converted)
    return dict(out)


def log_batch(partition: int, batch: Any) -> LogBatch | None:
    """A reader ``Batch`` as the oracle's input; None for a batch without records."""
    if not batch.records:
        return None
    if batch.is_control:
        r = batch.records[0]
        ctype, _, _ = decode_control(r.key, r.value)
        kind = {0: "ABORT", 1: "COMMIT"}.get(ctype)
        if kind is None:
            return None  # not a transaction marker (§10.8): nothing for the coordinator
        return LogBatch(partition, True, batch.producer_id, (), kind, r.offset, r.timestamp, batch.base_offset)
    recs = []
    for r in batch.records:
        d = decode_record(r.key, r.value)
        if not d.ok:
            raise OracleInputError(f"partition {partition} offset {r.offset}: undecodable ({d.reason})")
        recs.append(Rec(r.offset, r.timestamp, d.record_type, d.key, None if d.tombstone else d.value, d.value_version))
    return LogBatch(partition, batch.is_transactional, batch.producer_id, tuple(recs), base_offset=batch.base_offset)


# -- the model -------------------------------------------------------------------------------------
OffsetKey = tuple[str, str, int]  # (group, topic, partition): §12.1's logical key


@dataclass
class PartitionModel:
    partition: int
    offsets: dict[OffsetKey, dict[str, Any]] = field(default_factory=dict)
    pending: dict[int, dict[OffsetKey, Rec]] = field(default_factory=dict)  # producer -> key -> record
    live: dict[str, dict[tuple, Rec]] = field(default_factory=lambda: defaultdict(dict))  # group -> (type, key) -> rec
    groups: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (group, protocol) -> row
    generations: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    history: dict[OffsetKey, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    applied_offset: int | None = None
    topic_names: dict[str, str] = field(default_factory=dict)  # topic id -> name, as the log pairs them
    # decision 9: (group type 11/17, group, member) -> {"metadata": Rec, "current": Rec, "left_at": offset}
    family_members: dict[tuple[int, str, str], dict[str, Any]] = field(default_factory=dict)
    # how often each rule decided something (what a test can say its data exercised)
    counts: Counter[str] = field(default_factory=Counter)

    # -- views -----------------------------------------------------------------------------------
    def live_offsets(self) -> dict[OffsetKey, dict[str, Any]]:
        return {k: v for k, v in self.offsets.items() if not v["deleted"]}

    def deleted_offsets(self) -> dict[OffsetKey, dict[str, Any]]:
        return {k: v for k, v in self.offsets.items() if v["deleted"]}

    def pending_rows(self) -> list[dict[str, Any]]:
        return [
            {
                "producer_id": pid,
                "group_id": key[0],
                "topic": key[1],
                "partition": key[2],
                **{f: offset_row(rec)[f] for f in offset_row_fields()},
            }
            for pid, by_key in sorted(self.pending.items())
            for key, rec in sorted(by_key.items())
        ]

    def listed_groups(self) -> dict[tuple[str, str], dict[str, Any]]:
        return {k: v for k, v in self.groups.items() if not v["deleted"]}

    def generation_rows(self) -> list[dict[str, Any]]:
        return [g for gens in self.generations.values() for g in gens]

    def member_rows(self, names: dict[str, str] | None = None) -> dict[tuple[str, str], dict[str, Any]]:
        return consumer_members(self, names if names is not None else self.topic_names)

    def history_rows(self) -> list[dict[str, Any]]:
        return [row for rows in self.history.values() for row in rows]

    def family_member_rows(self, family: int, names: dict[str, str] | None = None) -> dict[tuple, dict[str, Any]]:
        return family_members(self, family, names if names is not None else self.topic_names)

    def topology_rows(self) -> list[dict[str, Any]]:
        return topology_rows(self)


@dataclass
class _BatchNotes:
    """What one batch did, for the rules that look at the batch as a whole."""

    group_tombstones: set[str] = field(default_factory=set)  # groups whose metadata record it deleted
    offset_causes: dict[str, list[Cause]] = field(default_factory=lambda: defaultdict(list))  # group -> causes
    aborted_groups: set[str] = field(default_factory=set)
    touched_keys: set[OffsetKey] = field(default_factory=set)
    touched_groups: set[str] = field(default_factory=set)
    tombstoned_metadata: dict[str, int] = field(default_factory=dict)  # group -> type of the tombstone


# -- §12.1 ordering --------------------------------------------------------------------------------
def replay_partition(partition: int, batches: Iterable[LogBatch], retention_ms: int = RETENTION_MS) -> PartitionModel:
    """§12.1: a partition's state is its batches replayed in offset order."""
    model = PartitionModel(partition)
    for batch in batches:
        apply_batch(model, batch, retention_ms)
    return model


def apply_batch(model: PartitionModel, batch: LogBatch, retention_ms: int = RETENTION_MS) -> None:
    """§12.1/§12.8: one coordinator write, records in offset order; then the batch-wide views."""
    first = batch.marker_offset if batch.marker is not None else batch.records[0].offset
    if model.applied_offset is not None and first <= model.applied_offset:
        raise OracleInputError(f"partition {model.partition}: offset {first} after {model.applied_offset}")
    notes = _BatchNotes()
    if batch.marker is not None:
        apply_marker(model, batch, notes)
    else:
        # group tombstones of the batch are known before its offset tombstones are judged (§12.3)
        notes.group_tombstones = {r.group for r in batch.records if r.type in METADATA_TYPES and r.value is None}
        for rec in batch.records:
            apply_record(model, batch, rec, notes, retention_ms)
    end_offset, end_ts = batch.end
    for key in sorted(notes.touched_keys):
        model.offsets[key]["state_offset"] = end_offset
        record_history(model, key, end_offset, end_ts)
    for group in notes.tombstoned_metadata:
        if any(k[0] == group and not v["deleted"] for k, v in model.offsets.items()):
            model.counts["group_record_tombstoned_with_live_offsets"] += 1  # §12.3: they stay
    update_group_listing(model, notes, first, end_offset, end_ts)
    model.applied_offset = end_offset


def apply_record(model: PartitionModel, batch: LogBatch, rec: Rec, notes: _BatchNotes, retention_ms: int) -> None:
    if rec.value is not None:
        learn_topic_names(model, rec)
    if rec.type in OFFSET_TYPES:
        key = (rec.key["group"], rec.key["topic"], rec.key["partition"])
        notes.touched_groups.add(key[0])
        if rec.value is None:
            apply_offset_tombstone(model, key, rec, notes, retention_ms)
        elif batch.transactional:
            stage_pending(model, batch.producer_id, key, rec)
        else:
            apply_commit(model, key, rec)
            notes.touched_keys.add(key)
        return
    notes.touched_groups.add(rec.group)
    if rec.type == CLASSIC:
        apply_generation(model, rec)
    apply_member_lifecycle(model, rec)
    apply_latest_wins(model, rec, notes)


# -- §12.1 / §12.2 offsets -------------------------------------------------------------------------
def offset_row(rec: Rec) -> dict[str, Any]:
    """The committed value of an offset key (§4.1 fields)."""
    v = rec.value
    assert v is not None
    topic_id = v.get("topic_id")
    return {
        "committed_offset": v["offset"],
        "leader_epoch": v.get("leader_epoch", -1),
        "metadata": v["metadata"],
        "commit_timestamp": v["commit_timestamp"],
        "expire_timestamp": v.get("expire_timestamp", -1),
        "topic_id": None if topic_id in (None, ZERO_UUID) else topic_id,
        "value_version": rec.version,
        "record_offset": rec.offset,
        "record_timestamp": rec.timestamp,
        "state_offset": None,  # set at the end of the batch (decision 2)
        "deleted": False,
        "deleted_offset": None,
        "deleted_timestamp": None,
        "delete_cause": None,
        "expiry_rule": None,
        "fallback_cause": None,
    }


def apply_commit(model: PartitionModel, key: OffsetKey, rec: Rec) -> None:
    """§12.1: the latest record of a key wins, even when it moves the offset backwards; types 0
    and 1 are one logical key."""
    model.offsets[key] = offset_row(rec)


def apply_offset_tombstone(
    model: PartitionModel, key: OffsetKey, rec: Rec, notes: _BatchNotes, retention_ms: int
) -> None:
    """§12.2: a null value deletes the key (kept as a soft delete with its cause); §12.4: it also
    drops pending transactional offsets of that key."""
    judged = delete_cause(model, key, rec, notes, retention_ms)
    before = model.offsets.get(key)
    row = dict(before) if before else {f: None for f in offset_row_fields()}
    row.update(
        record_offset=None,
        deleted=True,
        deleted_offset=rec.offset,
        deleted_timestamp=rec.timestamp,
        delete_cause=judged.cause,
        expiry_rule=judged.expiry_rule,
        fallback_cause=judged.fallback,
    )
    model.offsets[key] = row
    for by_key in model.pending.values():
        if by_key.pop(key, None) is not None:
            model.counts["pending_dropped_by_tombstone"] += 1
    model.pending = {pid: by_key for pid, by_key in model.pending.items() if by_key}
    notes.offset_causes[key[0]].append(judged)
    model.counts[f"tombstone:{judged.cause}:{judged.expiry_rule}"] += 1
    notes.touched_keys.add(key)


# a deletion: the tombstone, the inferred cause, and how the cause was reached (Cause)
DELETION_FIELDS = ("deleted", "deleted_offset", "deleted_timestamp", "delete_cause", "expiry_rule", "fallback_cause")


def offset_row_fields() -> list[str]:
    return [
        "committed_offset",
        "leader_epoch",
        "metadata",
        "commit_timestamp",
        "expire_timestamp",
        "topic_id",
        "value_version",
        "record_offset",
        "record_timestamp",
    ]


# -- §12.4 transactions ----------------------------------------------------------------------------
def stage_pending(model: PartitionModel, producer_id: int, key: OffsetKey, rec: Rec) -> None:
    """§12.4: an offset commit of a transactional batch is pending for its producer id."""
    model.pending.setdefault(producer_id, {})[key] = rec


def apply_marker(model: PartitionModel, batch: LogBatch, notes: _BatchNotes) -> None:
    """§12.4: a marker resolves what its producer id (never the epoch) has pending here.

    COMMIT applies each pending offset only if its record offset is greater than that of the
    committed value; ABORT discards them; a marker with nothing pending changes nothing."""
    pending = model.pending.pop(batch.producer_id, {})
    for key, rec in pending.items():
        notes.touched_groups.add(key[0])
        if batch.marker == "ABORT":
            notes.aborted_groups.add(key[0])
            model.counts["abort_dropped_offset"] += 1
            continue
        current = model.offsets.get(key)
        if current is None or current["deleted"] or rec.offset > current["record_offset"]:
            apply_commit(model, key, rec)
            notes.touched_keys.add(key)
            model.counts["commit_marker_applied"] += 1
        else:
            model.counts["commit_marker_lost_to_later_record"] += 1


# -- §12.5 expiry, and the inferred delete cause ---------------------------------------------------
# §12.5 cases, as recorded with each deletion (``expiry_rule``): which case judged the offset
UNSUBSCRIBED = "unsubscribed_topic"  # of a Stable consumer-protocol or KIP-848 group: commit time


@dataclass(frozen=True)
class Cause:
    """An inferred delete cause with how it was reached."""

    cause: str
    expiry_rule: str  # the §12.5 case that judged the offset
    fallback: str  # the cause had the offset not expired


def delete_cause(model: PartitionModel, key: OffsetKey, rec: Rec, notes: _BatchNotes, retention_ms: int) -> Cause:
    """docs/reference-state.md: expiry if §12.5 allows it, else group deletion if the batch deletes
    the group's metadata record, else an explicit delete (OffsetDelete, topic deletion)."""
    fallback = "group_deletion" if key[0] in notes.group_tombstones else "explicit_delete"
    expired, rule = could_expire(model, key, rec.timestamp, retention_ms)
    return Cause("expiry" if expired else fallback, rule, fallback)


def could_expire(model: PartitionModel, key: OffsetKey, now: int | None, retention_ms: int) -> tuple[bool, str]:
    """§12.5: whether the coordinator could have expired this offset at ``now``, and the case."""
    current = model.offsets.get(key)
    if now is None:
        return False, "untimed_tombstone"
    if current is None or current["deleted"]:
        return False, "no_committed_value"
    group, topic, _ = key
    base, rule = expiry_base(model, group, topic, current)
    pending = any(key in by_key for by_key in model.pending.values())
    if base is None:
        expired = False
    elif current["value_version"] == 1 and current["expire_timestamp"] not in (None, -1):
        expired, rule = now >= current["expire_timestamp"], "absolute_v1"  # v1: absolute expiry
    else:
        expired = now - base >= retention_ms
        if not pending and rule == "empty_group" and expired != (now - current["commit_timestamp"] >= retention_ms):
            model.counts["empty_group_clock_decided"] += 1  # the state timestamp, not the commit, decided
    if pending:
        model.counts["pending_kept_from_expiry"] += expired
        return False, "pending_transaction"  # offsets with pending transactional commits are not expired
    return expired, rule


def expiry_base(model: PartitionModel, group: str, topic: str, current: dict[str, Any]) -> tuple[int | None, str]:
    """§12.5: the time retention counts from, by the group's state (None: this offset never
    expires), and the case that says so."""
    commit_ts = current["commit_timestamp"]
    meta = metadata_record(model, group)
    if meta is None:
        return commit_ts, "no_protocol_type"  # no group record
    if meta.type == 3:
        if topic in kip848_subscribed_topics(model, group):
            return None, "subscribed_topic"
        return commit_ts, UNSUBSCRIBED
    if meta.type != CLASSIC:
        return commit_ts, "share_or_streams"  # no rule in the spec; the project's (decision 5)
    v = meta.value
    assert v is not None
    if v["protocol_type"] == "":
        return commit_ts, "no_protocol_type"
    if not v["members"]:
        ts = v.get("current_state_timestamp", -1)
        return (commit_ts if ts in (None, -1) else ts), "empty_group"
    subscriptions = [m.get("subscription_info") for m in v["members"]]
    if v["protocol_type"] == "consumer" and all(s is not None for s in subscriptions):
        subscribed = {t for s in subscriptions for t in s["topics"]}  # type: ignore[union-attr]
        return (None, "subscribed_topic") if topic in subscribed else (commit_ts, UNSUBSCRIBED)
    return None, "stable_without_subscription"  # nothing expires


def kip848_subscribed_topics(model: PartitionModel, group: str) -> set[str]:
    """Topics a KIP-848 group subscribes to: its members' names and their regexes' resolutions."""
    live = model.live.get(group, {})
    topics: set[str] = set()
    regexes: set[str] = set()
    for (t, _), rec in live.items():
        if t == 5 and rec.value is not None:
            topics.update(rec.value.get("subscribed_topic_names") or [])
            if rec.value.get("subscribed_topic_regex"):
                regexes.add(rec.value["subscribed_topic_regex"])
    for (t, k), rec in live.items():
        if t == 16 and k[1] in regexes and rec.value is not None:
            topics.update(rec.value.get("topics") or [])
    return topics


# -- §12.2 / §12.3 / §12.7 everything but offsets: latest value per key ---------------------------
def record_key(rec: Rec) -> tuple:
    return (rec.type, tuple(rec.key[k] for k in sorted(rec.key)))


def apply_latest_wins(model: PartitionModel, rec: Rec, notes: _BatchNotes) -> None:
    """§12.1/§12.2: the latest record per key wins; a tombstone deletes the key."""
    live = model.live[rec.group]
    k = record_key(rec)
    if rec.value is None:
        if live.pop(k, None) is not None and rec.type in MEMBER_TYPES:
            model.counts["member_record_tombstoned"] += 1
        if rec.type in METADATA_TYPES:
            notes.tombstoned_metadata[rec.group] = rec.type
    else:
        live[k] = rec
    if not live:
        model.live.pop(rec.group, None)


def metadata_record(model: PartitionModel, group: str) -> Rec | None:
    """The live group metadata record (types 2, 3, 11, 17); the latest if several live."""
    recs = [r for (t, _), r in model.live.get(group, {}).items() if t in METADATA_TYPES]
    return max(recs, key=lambda r: r.offset) if recs else None


def learn_topic_names(model: PartitionModel, rec: Rec) -> None:
    """Topic id -> name pairs the log carries (offset commits v4, types 4, 9, 15 and 18)."""
    v = rec.value
    assert v is not None
    if rec.type in OFFSET_TYPES and v.get("topic_id") not in (None, ZERO_UUID):
        model.topic_names[v["topic_id"]] = rec.key["topic"]
    for fld in TOPIC_NAME_SOURCES.get(rec.type, ()):
        for t in v.get(fld) or []:
            if t.get("topic_id") not in (None, ZERO_UUID) and t.get("topic_name") is not None:
                model.topic_names[t["topic_id"]] = t["topic_name"]


# -- §12.6 classic generations --------------------------------------------------------------------
def classic_members(value: dict[str, Any]) -> list[dict[str, Any]]:
    """§5.1/§6: members of a classic group record, with the consumer-protocol fields decoded.

    Subscribed topics and assigned partitions are None where the bytes are not consumer-protocol
    bytes (or do not decode); a zero-length consumer assignment is "no assignment" (§6.3): []."""
    out = []
    consumer = value["protocol_type"] == "consumer"
    for i, m in enumerate(value["members"]):
        sub = m.get("subscription_info")
        asg = m.get("assignment_info")
        if asg is None and consumer and m.get("assignment") == b"":
            asg = {"assigned_partitions": []}
        out.append(
            {
                "member_index": i,
                "member_id": m["member_id"],
                "group_instance_id": m.get("group_instance_id"),
                "client_id": m["client_id"],
                "client_host": m["client_host"],
                "session_timeout_ms": m["session_timeout"],
                "rebalance_timeout_ms": m.get("rebalance_timeout", -1),
                "subscribed_topics": list(sub["topics"]) if sub else None,
                "assigned_partitions": None
                if asg is None
                else [{"topic": a["topic"], "partitions": list(a["partitions"])} for a in asg["assigned_partitions"]],
            }
        )
    return out


def apply_generation(model: PartitionModel, rec: Rec) -> None:
    """§12.6: a generation lasts from the first group record carrying it to the next record with
    another generation (a completed rebalance) or the group's tombstone."""
    gens = model.generations[rec.group]
    current = gens[-1] if gens and gens[-1]["ended_offset"] is None else None
    if rec.value is None:
        if current is not None:
            current.update(ended_offset=rec.offset, ended_timestamp=rec.timestamp, end_reason="group_deleted")
        return
    v = rec.value
    if current is not None and current["generation"] == v["generation"]:
        current["records"] += 1
        model.counts["generation_rewritten"] += 1
    else:
        if current is not None:
            current.update(ended_offset=rec.offset, ended_timestamp=rec.timestamp, end_reason="next_generation")
        current = {
            "group_id": rec.group,
            "generation": v["generation"],
            "started_offset": rec.offset,
            "started_timestamp": rec.timestamp,
            "ended_offset": None,
            "ended_timestamp": None,
            "end_reason": None,
            "records": 1,
        }
        gens.append(current)
    current.update(
        protocol_type=v["protocol_type"],
        assignor=v["protocol"],
        leader=v["leader"],
        member_count=len(v["members"]),
        last_record_offset=rec.offset,
        members=classic_members(v),
    )


# -- history (gold.yaml offset_history) -------------------------------------------------------------
def record_history(model: PartitionModel, key: OffsetKey, at_offset: int, at_ts: int | None) -> None:
    """A batch that changed a key closes the key's open interval and opens one with its state."""
    rows = model.history[key]
    if rows:
        rows[-1].update(valid_to_offset=at_offset, valid_to_timestamp=at_ts)
    state = model.offsets[key]
    rows.append(
        {
            "group_id": key[0],
            "topic": key[1],
            "partition": key[2],
            "valid_from_offset": at_offset,
            "valid_from_timestamp": at_ts,
            "valid_to_offset": None,
            "valid_to_timestamp": None,
            **{f: state[f] for f in (*offset_row_fields(), *DELETION_FIELDS)},
        }
    )


# -- groups the coordinator lists (docs/gold.md) ----------------------------------------------------
def group_view(model: PartitionModel, group: str) -> dict[str, Any] | None:
    """The group as listed now, or None: a live metadata record makes it, else live or pending
    offsets make an offsets-only group (§5.4: a group that only stores offsets)."""
    meta = metadata_record(model, group)
    if meta is not None:
        v = meta.value
        assert v is not None
        protocol = METADATA_TYPES[meta.type]
        row: dict[str, Any] = {
            "group_id": group,
            "protocol": protocol,
            "protocol_type": v["protocol_type"] if meta.type == CLASSIC else protocol,
            "generation": v["generation"] if meta.type == CLASSIC else v["epoch"],
            "assignor": v["protocol"] if meta.type == CLASSIC else None,
            "leader": v["leader"] if meta.type == CLASSIC else None,
            "current_state_timestamp": v.get("current_state_timestamp", -1) if meta.type == CLASSIC else None,
            "member_count": len(v["members"]) if meta.type == CLASSIC else None,
            "assignment_epoch": assignment_epoch(model, group, meta.type) if meta.type != CLASSIC else None,
            "topology_epoch": topology_epoch(model, group) if meta.type == 17 else None,
            "validated_topology_epoch": v.get("validated_topology_epoch", -1) if meta.type == 17 else None,
            "exists_because": "metadata",
            "value_version": meta.version,
            "record_offset": meta.offset,
        }
        row["state"] = group_state(model, group, row)
        return row
    has_offsets = any(k[0] == group for k, v in model.offsets.items() if not v["deleted"])
    has_pending = any(k[0] == group for by_key in model.pending.values() for k in by_key)
    if not (has_offsets or has_pending):
        return None
    return {
        "group_id": group,
        "protocol": "classic",
        "protocol_type": "",
        "generation": None,
        "assignor": None,
        "leader": None,
        "current_state_timestamp": None,
        "member_count": None,
        "assignment_epoch": None,
        "topology_epoch": None,
        "validated_topology_epoch": None,
        "exists_because": "offsets",
        "value_version": None,
        "record_offset": None,
        "state": "Empty",
    }


def assignment_epoch(model: PartitionModel, group: str, metadata_type: int = 3) -> int | None:
    rec = model.live.get(group, {}).get((TARGET_EPOCH_TYPES[metadata_type], (group,)))
    return rec.value["assignment_epoch"] if rec is not None and rec.value is not None else None


def topology_epoch(model: PartitionModel, group: str) -> int | None:
    rec = model.live.get(group, {}).get((STREAMS_TOPOLOGY, (group,)))
    return rec.value["epoch"] if rec is not None and rec.value is not None else None


def group_state(model: PartitionModel, group: str, row: dict[str, Any]) -> str | None:
    """The state Kafka reports right after loading (§5.4 for classic groups, docs/gold.md)."""
    protocol = row["protocol"]
    if protocol == "classic":
        return "Stable" if row["member_count"] else "Empty"
    live = model.live.get(group, {})
    if protocol == "share":
        return "Stable" if members_of(model, 11, group) else "Empty"
    if protocol == "streams":
        return streams_state(model, group, row)
    members = {k[1] for t, k in live if t in (5, 8)}
    if not members:
        return "Empty"
    target = row["assignment_epoch"] if row["assignment_epoch"] is not None else 0
    if row["generation"] > target:
        return "Assigning"
    for m in members:
        current = live.get((8, (group, m)))
        cv = current.value if current is not None else None
        if cv is None or cv.get("state", 0) != 0 or cv["member_epoch"] != target:
            return "Reconciling"
    return "Stable"


def update_group_listing(
    model: PartitionModel, notes: _BatchNotes, first: int, at_offset: int, at_ts: int | None
) -> None:
    """After a batch (``first`` .. ``at_offset``): list the groups it touched as they are now; rows
    that stop being listed stay as deleted rows with their cause (decision 6)."""
    for group in sorted(notes.touched_groups):
        now = group_view(model, group)
        gone = False
        for (g, protocol), row in list(model.groups.items()):
            if g != group or row["deleted"] or (now is not None and now["protocol"] == protocol):
                continue
            why = departure_cause(row, now, group, notes)
            row.update(
                deleted=True,
                delete_cause=why.cause,
                expiry_rule=why.expiry_rule,
                fallback_cause=why.fallback,
                record_offset=None,
                state_offset=at_offset,
                state_timestamp=at_ts,
                batch_first_offset=first,
            )
            gone = True
        before = model.groups.get((group, now["protocol"])) if now is not None else None
        if before is not None and not before["deleted"] and all(before.get(k) == v for k, v in now.items()):
            continue  # unchanged: keeps the position of the batch that made it
        if now is not None:
            model.groups[(group, now["protocol"])] = {
                **now,
                "deleted": False,
                "delete_cause": None,
                "expiry_rule": None,
                "fallback_cause": None,
                "state_offset": at_offset,
                "state_timestamp": at_ts,
                "batch_first_offset": first,
            }
        elif not gone and group in notes.tombstoned_metadata:
            protocol = METADATA_TYPES[notes.tombstoned_metadata[group]]
            if (group, protocol) not in model.groups:  # its records were compacted away (decision 6)
                why = metadata_departure_cause(group, notes)
                model.groups[(group, protocol)] = {
                    "group_id": group,
                    "protocol": protocol,
                    "exists_because": "metadata",
                    "record_offset": None,
                    "deleted": True,
                    "delete_cause": why.cause,
                    "expiry_rule": why.expiry_rule,
                    "fallback_cause": why.fallback,
                    "state_offset": at_offset,
                    "state_timestamp": at_ts,
                    "batch_first_offset": first,
                }


def departure_cause(row: dict[str, Any], now: dict[str, Any] | None, group: str, notes: _BatchNotes) -> Cause:
    if now is not None and now["exists_because"] == "metadata":
        return Cause("converted", "", "converted")
    if row["exists_because"] == "offsets":
        causes = notes.offset_causes.get(group)
        if causes:
            return causes[-1]
        gone = "transaction_aborted" if group in notes.aborted_groups else "explicit_delete"
        return Cause(gone, "", gone)
    return metadata_departure_cause(group, notes)


def metadata_departure_cause(group: str, notes: _BatchNotes) -> Cause:
    """A group record that went: expiry when an offset of the group expired in the batch."""
    rules = {c.expiry_rule for c in notes.offset_causes.get(group, []) if c.cause == "expiry"}
    if not rules:
        return Cause("group_deletion", "", "group_deletion")
    if rules == {UNSUBSCRIBED}:
        return Cause("expiry", UNSUBSCRIBED, "group_deletion")
    return Cause("expiry", "", "expiry")


# -- §12.7 KIP-848 members -------------------------------------------------------------------------
def _topic_partitions(parts: list[dict[str, Any]] | None, names: dict[str, str], epochs: bool) -> list[dict[str, Any]]:
    out = []
    for p in parts or []:
        row = {"topic_id": p["topic_id"], "topic": names.get(p["topic_id"]), "partitions": list(p["partitions"])}
        if epochs:
            e = p.get("assignment_epochs")
            row["assignment_epochs"] = None if e is None else list(e)
        out.append(row)
    return out


def consumer_members(model: PartitionModel, names: dict[str, str]) -> dict[tuple[str, str], dict[str, Any]]:
    """§12.7: a member's latest metadata (5), target (7) and current assignment (8), per
    (group, member), unless the latest record of that kind is a tombstone."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for group, live in model.live.items():
        for (t, k), rec in live.items():
            if t not in MEMBER_TYPES:
                continue
            member = k[1]
            row = out.setdefault((group, member), {"group_id": group, "member_id": member, **_empty_member()})
            v = rec.value
            assert v is not None
            row[f"record_offset_{t}"] = rec.offset
            if t == 5:
                row.update(
                    instance_id=v.get("instance_id"),
                    rack_id=v.get("rack_id"),
                    client_id=v.get("client_id"),
                    client_host=v.get("client_host"),
                    subscribed_topic_names=list(v.get("subscribed_topic_names") or []),
                    subscribed_topic_regex=v.get("subscribed_topic_regex"),
                    server_assignor=v.get("server_assignor"),
                    rebalance_timeout_ms=v.get("rebalance_timeout_ms"),
                )
            elif t == 7:
                row["target_partitions"] = _topic_partitions(v.get("topic_partitions"), names, epochs=False)
            else:
                row.update(
                    member_epoch=v.get("member_epoch"),
                    previous_member_epoch=v.get("previous_member_epoch"),
                    state=v.get("state"),
                    assigned_partitions=_topic_partitions(v.get("assigned_partitions"), names, epochs=True),
                    partitions_pending_revocation=_topic_partitions(
                        v.get("partitions_pending_revocation"), names, epochs=True
                    ),
                )
    return out


def _empty_member() -> dict[str, Any]:
    return {
        "instance_id": None,
        "rack_id": None,
        "client_id": None,
        "client_host": None,
        "subscribed_topic_names": None,
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "rebalance_timeout_ms": None,
        "member_epoch": None,
        "previous_member_epoch": None,
        "state": None,
        "assigned_partitions": None,
        "partitions_pending_revocation": None,
        "target_partitions": None,
        "record_offset_5": None,
        "record_offset_7": None,
        "record_offset_8": None,
    }


# -- decision 9: share and streams members ---------------------------------------------------------
def family_of(rec_type: int) -> tuple[int, str] | None:
    """(group metadata type, part) of a share/streams member record type, else None."""
    for family, parts in FAMILY_PARTS.items():
        for part, t in parts.items():
            if t == rec_type:
                return family, part
    return None


def apply_member_lifecycle(model: PartitionModel, rec: Rec) -> None:
    """Decision 9: members are made by metadata or current assignment records; a current
    assignment tombstone leaves the member (epochs -1, nothing owned); a metadata tombstone
    removes it; tombstones of non-members do nothing. Targets are kept as latest values."""
    found = family_of(rec.type)
    if found is None or found[1] == "target":
        return
    family, part = found
    key = (family, rec.group, rec.key["member_id"])
    member = model.family_members.get(key)
    if rec.value is not None:
        member = model.family_members.setdefault(key, {"metadata": None, "current": None, "left_at": None})
        member[part] = rec
        if part == "current":
            member["left_at"] = None
        return
    if member is None:
        model.counts["family_tombstone_of_a_non_member"] += 1
        return
    if part == "current":
        member["left_at"] = rec.offset
        model.counts[f"family_member_fenced:{family}"] += 1
    else:
        del model.family_members[key]
        model.counts[f"family_member_removed:{family}"] += 1


def members_of(model: PartitionModel, family: int, group: str) -> dict[str, dict[str, Any]]:
    return {m: v for (f, g, m), v in model.family_members.items() if f == family and g == group}


def held_current(member: dict[str, Any], emptied: tuple[str, ...]) -> dict[str, Any] | None:
    """The current assignment the coordinator holds for a member: its latest record's value, or
    after a current assignment tombstone that value with epochs -1 and nothing owned."""
    value = dict(member["current"].value) if member["current"] is not None else None
    if member["left_at"] is None:
        return value
    return {**(value or {}), "member_epoch": -1, "previous_member_epoch": -1, **{f: [] for f in emptied}}


SHARE_EMPTIED = ("assigned_partitions",)
STREAMS_TASKS = ("active_tasks", "standby_tasks", "warmup_tasks")
STREAMS_EMPTIED = (*STREAMS_TASKS, *(f"{t}_pending_revocation" for t in STREAMS_TASKS))


def streams_state(model: PartitionModel, group: str, row: dict[str, Any]) -> str:
    """Decision 9's streams group states, in order."""
    members = members_of(model, 17, group)
    if not members:
        return "Empty"
    if row["topology_epoch"] is None or row["topology_epoch"] != row["validated_topology_epoch"]:
        return "NotReady"
    target = row["assignment_epoch"] if row["assignment_epoch"] is not None else 0
    if row["generation"] > target:
        return "Assigning"
    for m in members.values():
        cur = held_current(m, STREAMS_EMPTIED)
        if cur is None or cur.get("state") != STREAMS_STABLE or cur.get("member_epoch") != target:
            return "Reconciling"
    return "Stable"


def _tasks(tasks: list[dict[str, Any]] | None, epochs: bool) -> list[dict[str, Any]] | None:
    if tasks is None:
        return None
    out = []
    for t in tasks:
        row = {"subtopology_id": t["subtopology_id"], "partitions": list(t["partitions"])}
        if epochs:
            e = t.get("assignment_epochs")
            row["assignment_epochs"] = None if e is None else list(e)
        out.append(row)
    return out


def family_members(model: PartitionModel, family: int, names: dict[str, str]) -> dict[tuple, dict[str, Any]]:
    """Rows of gold.share_group_members (11) / gold.streams_group_members (17): every member, and
    every member id with a target assignment (gold.yaml: such a row has no metadata or current
    record offset)."""
    parts = FAMILY_PARTS[family]
    ids: set[tuple[str, str]] = {(g, m) for (f, g, m) in model.family_members if f == family}
    targets: dict[tuple[str, str], Rec] = {}
    for group, live in model.live.items():
        for (t, k), rec in live.items():
            if t == parts["target"]:
                targets[(group, k[1])] = rec
                ids.add((group, k[1]))
    out = {}
    for group, member_id in sorted(ids):
        member = model.family_members.get((family, group, member_id), {"metadata": None, "current": None,
                                                                        "left_at": None})  # fmt: skip
        meta = member["metadata"].value if member["metadata"] is not None else {}
        target = targets.get((group, member_id))
        row: dict[str, Any] = {"group_id": group, "member_id": member_id}
        emptied = SHARE_EMPTIED if family == 11 else STREAMS_EMPTIED
        cur = held_current(member, emptied) or {}
        current_offset = member["left_at"] if member["left_at"] is not None else (
            member["current"].offset if member["current"] is not None else None)  # fmt: skip
        row[f"record_offset_{parts['metadata']}"] = member["metadata"].offset if member["metadata"] else None
        row[f"record_offset_{parts['target']}"] = target.offset if target is not None else None
        row[f"record_offset_{parts['current']}"] = current_offset
        row.update(
            member_epoch=cur.get("member_epoch"), previous_member_epoch=cur.get("previous_member_epoch"),
            state=cur.get("state"),
        )  # fmt: skip
        tv = target.value if target is not None else None
        if family == 11:
            row.update({f: meta.get(f) for f in ("rack_id", "client_id", "client_host")})
            row["subscribed_topic_names"] = list(meta["subscribed_topic_names"]) if meta else None
            row["assigned_partitions"] = (
                _topic_partitions(cur["assigned_partitions"], names, epochs=False) if cur else None
            )
            row["target_partitions"] = _topic_partitions(tv["topic_partitions"], names, epochs=False) if tv else None
        else:
            for f in ("instance_id", "rack_id", "client_id", "client_host", "rebalance_timeout_ms", "topology_epoch",
                      "process_id", "user_endpoint", "client_tags"):  # fmt: skip
                row[f] = meta.get(f)
            for f in STREAMS_EMPTIED:
                row[f] = _tasks(cur.get(f), epochs=True) if cur else None
            for t in STREAMS_TASKS:
                row[f"target_{t}"] = _tasks(tv[t], epochs=False) if tv else None
        out[(group, member_id)] = row
    return out


TOPOLOGY_FIELDS = ("source_topics", "source_topic_regex", "state_changelog_topics", "repartition_sink_topics",
                   "repartition_source_topics", "copartition_groups")  # fmt: skip


def topology_rows(model: PartitionModel) -> list[dict[str, Any]]:
    """Rows of gold.streams_group_topologies: the live topology record of each group, one row per
    subtopology (§9.7)."""
    out = []
    for group, live in model.live.items():
        rec = live.get((STREAMS_TOPOLOGY, (group,)))
        if rec is None or rec.value is None:
            continue
        for sub in rec.value["subtopologies"]:
            out.append(
                {
                    "group_id": group,
                    "topology_epoch": rec.value["epoch"],
                    "subtopology_id": sub["subtopology_id"],
                    **{f: sub[f] for f in TOPOLOGY_FIELDS},
                    "record_offset": rec.offset,
                }
            )
    return out


# -- a cluster -------------------------------------------------------------------------------------
@dataclass
class ClusterModel:
    """The oracle's state of one cluster: one model per offsets partition; topic names cluster-wide."""

    partitions: dict[int, PartitionModel]

    @property
    def topic_names(self) -> dict[str, str]:
        names: dict[str, str] = {}
        for p in self.partitions.values():
            names.update(p.topic_names)
        return names

    def members(self, names: dict[str, str] | None = None) -> dict[tuple[int, str, str], dict[str, Any]]:
        """KIP-848 member rows of every partition; topic names cluster-wide unless ``names`` are given."""
        names = self.topic_names if names is None else names
        return {(p, g, m): row for p, pm in self.partitions.items() for (g, m), row in pm.member_rows(names).items()}

    def family_members(
        self, family: int, names: dict[str, str] | None = None
    ) -> dict[tuple[int, str, str], dict[str, Any]]:
        """Share (11) or streams (17) member rows of every partition, topic names as ``members``'."""
        names = self.topic_names if names is None else names
        return {
            (p, g, m): row
            for p, pm in self.partitions.items()
            for (g, m), row in pm.family_member_rows(family, names).items()
        }


def replay_cluster(batches: dict[int, list[LogBatch]], retention_ms: int = RETENTION_MS) -> ClusterModel:
    return ClusterModel({p: replay_partition(p, bs, retention_ms) for p, bs in sorted(batches.items())})


def oracle_of_files(paths: Iterable[str | Path], retention_ms: int = RETENTION_MS) -> ClusterModel:
    """The oracle's state of the log directory (one cluster) under ``paths``."""
    return replay_cluster(batches_of_files(paths), retention_ms)
