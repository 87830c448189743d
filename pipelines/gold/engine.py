"""Gold's replay engine: the group coordinator's loading rules (spec section 12) applied to one
(cluster, offsets partition), resumed from the persisted gold state. No Spark.

Written for speed and deliberately apart from :mod:`pipelines.reference.replay` — the reference
stays an oracle gold is tested against, not code gold runs. The Spark side
(:mod:`pipelines.gold.build`) hands :meth:`PartitionReplay.run` one partition's new events and its
persisted rows as Arrow tables and writes back what it returns:

* the **complete** current state of the partition — ``current_offsets``, ``pending_transactions``,
  ``current_groups``, ``consumer_group_members`` — which replaces the partition's rows;
* ``offset_history`` and ``group_generations`` rows to write in place of the partition's open rows
  (``valid_to_offset`` / ``ended_offset`` null): the intervals this run closed, and every interval
  open now. Closed intervals of earlier runs are never rewritten.

Python touches only keys and integer *handles*: a handle indexes the rows that carry values (the
persisted rows, then the events), and the output columns are gathered from those rows with Arrow's
``take``. A row nothing changed is passed through unchanged (its ``updated_run_id`` included).

The rules, per batch (the unit the coordinator writes atomically):

* offset commits (record types 0 and 1 share the key (group, topic, partition)): a
  non-transactional commit sets the key; a transactional one waits, per producer id, for the
  producer's next marker: COMMIT applies each waiting offset unless the key already holds a later
  record, ABORT drops them. A tombstone deletes the key (soft delete, with its inferred cause) and
  drops waiting offsets of the key.
* group records (classic 2, consumer 3, share 11, streams 17; a consumer group's target assignment
  epoch 6): the latest value per group, a tombstone deletes it.
* an **offsets-only group** exists while a group has live or waiting offsets but no group record
  (Kafka lists it as a classic group, state Empty, protocol type "").
* classic generations: a group record starts a generation unless it continues the previous
  record's; a tombstone ends the generation (``group_deleted``).
* KIP-848 members: the latest member metadata (5), target assignment (7) and current assignment (8)
  per (group, member), a tombstone clears its slot.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.gold import modern as M
from pipelines.gold.handles import Values, concat, concat_all, renamed, rows, set_column
from pipelines.runtime import collector
from pipelines.runtime.ddl import arrow_type

__all__ = [
    "DEFAULT_RETENTION_MS",
    "EVENT_COLUMNS",
    "EVENT_KINDS",
    "GROUP_PROTOCOLS",
    "PartitionInput",
    "PartitionOutput",
    "PartitionReplay",
    "event_schema",
    "purge_soft_deletes",
    "replay",
    "split_groups",
]

DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000  # offsets.retention.minutes' default, for the expiry cause

# event kinds, as gold's event frame labels silver rows
COMMIT = "commit"
OFFSET_TOMBSTONE = "offset_tombstone"
GROUP = "group"  # classic group metadata (type 2)
GROUP_TOMBSTONE = "group_tombstone"
# group-level records of the new protocols: group epoch (3, 11, 17), target assignment epoch (6, 12,
# 20), streams topology (23)
NEW_GROUP = "consumer_group"
NEW_GROUP_TOMBSTONE = "consumer_group_tombstone"
MARKER = "marker"
MEMBER = "member"  # member records: KIP-848 5, 7, 8; share 10, 13, 14; streams 19, 21, 22
MEMBER_TOMBSTONE = "member_tombstone"
EVENT_KINDS = (COMMIT, OFFSET_TOMBSTONE, GROUP, GROUP_TOMBSTONE, NEW_GROUP, NEW_GROUP_TOMBSTONE, MARKER, MEMBER,
               MEMBER_TOMBSTONE)  # fmt: skip

# group record type -> the group type listGroups reports (current_groups.protocol)
GROUP_PROTOCOLS = {2: "classic", 3: "consumer", 11: "share", 17: "streams"}
# target assignment metadata record type -> its group's metadata record type
TARGET_ASSIGNMENT = {6: 3, 12: 11, 20: 17}
TOPOLOGY = 23
COMMIT_MARKER = 1
MEMBER_SLOTS = {5: 0, 7: 1, 8: 2}

KEY = ("group_id", "topic", "partition")
# a committed value: what a deleted key keeps of its last value, and what it loses
LAST_VALUE = ("committed_offset", "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp", "topic_id")
RECORD = ("value_version", "record_offset", "record_timestamp")
GROUP_ROW = (
    "protocol_type", "generation", "assignor", "leader", "current_state_timestamp", "member_count",
    "assignment_epoch", "exists_because", "value_version", "record_offset", "deleted", "delete_cause",
    "topology_epoch", "validated_topology_epoch",
)  # fmt: skip
NO_TOPOLOGY = (None, None)  # GROUP_ROW's streams fields of any other group
# the current_groups row of an offsets-only group
SIMPLE_ROW = ("", None, None, None, None, None, None, "offsets", None, None, False, None, *NO_TOPOLOGY)
GENERATION_LAST = ("protocol_type", "assignor", "leader", "member_count", "last_record_offset", "members")
MEMBER_COLUMNS = (
    ("instance_id", "rack_id", "client_id", "client_host", "subscribed_topic_names", "subscribed_topic_regex",
     "server_assignor", "rebalance_timeout_ms", "record_offset_5"),
    ("target_partitions", "record_offset_7"),
    ("member_epoch", "previous_member_epoch", "state", "assigned_partitions", "partitions_pending_revocation",
     "record_offset_8"),
)  # fmt: skip


_MEMBER = (
    "struct<member_index:int,member_id:string,group_instance_id:string,client_id:string,client_host:string,"
    "session_timeout_ms:int,rebalance_timeout_ms:int,subscribed_topics:array<string>,"
    "assigned_partitions:array<struct<topic:string,partitions:array<int>>>>"
)
_ASSIGNED = "array<struct<topic_id:string,topic:string,partitions:array<int>,assignment_epochs:array<int>>>"
# the event frame: one row per silver record gold replays (gold.yaml's types; a unit test checks)
EVENT_COLUMNS = (
    ("kind", "string"), ("record_offset", "bigint"), ("batch_id", "bigint"), ("timestamp_ms", "bigint"),
    ("producer_id", "bigint"), ("transactional", "boolean"), ("record_type", "int"), ("value_version", "int"),
    ("control_type_id", "int"),
    # offset commits and tombstones
    ("group_id", "string"), ("topic", "string"), ("partition", "int"), ("committed_offset", "bigint"),
    ("leader_epoch", "int"), ("metadata", "string"), ("commit_timestamp", "bigint"), ("expire_timestamp", "bigint"),
    ("topic_id", "string"),
    # group records: classic generation, or group epoch / target assignment epoch
    ("generation", "int"), ("protocol_type", "string"), ("assignor", "string"), ("leader", "string"),
    ("current_state_timestamp", "bigint"), ("member_count", "int"), ("members", f"array<{_MEMBER}>"),
    # KIP-848 member records: 5 member metadata, 7 target assignment, 8 current assignment
    ("member_id", "string"), ("instance_id", "string"), ("rack_id", "string"), ("client_id", "string"),
    ("client_host", "string"), ("subscribed_topic_names", "array<string>"), ("subscribed_topic_regex", "string"),
    ("server_assignor", "string"), ("rebalance_timeout_ms", "int"),
    ("target_partitions", "array<struct<topic_id:string,topic:string,partitions:array<int>>>"),
    ("member_epoch", "int"), ("previous_member_epoch", "int"), ("state", "tinyint"),
    ("assigned_partitions", _ASSIGNED), ("partitions_pending_revocation", _ASSIGNED),
    # the new protocols' target assignment epoch (6, 12, 20); streams group metadata (17)
    ("assignment_epoch", "int"), ("validated_topology_epoch", "int"),
    # streams members: metadata (19), target (21) and current (22) assignment; the topology (23)
    ("topology_epoch", "int"), ("process_id", "string"), ("user_endpoint", "struct<host:string,port:int>"),
    ("client_tags", "array<struct<key:string,value:string>>"),
    *((name, M.TASKS) for name in ("active_tasks", "standby_tasks", "warmup_tasks", "active_tasks_pending_revocation",
                                   "standby_tasks_pending_revocation", "warmup_tasks_pending_revocation")),
    *((name, M.TARGET_TASKS) for name in ("target_active_tasks", "target_standby_tasks", "target_warmup_tasks")),
    ("topology", M.TOPOLOGY),
)  # fmt: skip


def event_schema() -> pa.Schema:
    return pa.schema([pa.field(name, arrow_type(ddl)) for name, ddl in EVENT_COLUMNS])


@dataclass
class PartitionInput:
    """One partition's new events (ordered by record offset, ``batch_id`` shared by a batch's
    records) and its persisted gold rows, each table in its gold columns."""

    cluster: str
    partition: int
    events: pa.Table
    offsets: pa.Table | None = None  # current_offsets
    pending: pa.Table | None = None  # pending_transactions
    groups: pa.Table | None = None  # current_groups
    history: pa.Table | None = None  # offset_history rows with valid_to_offset null
    generations: pa.Table | None = None  # group_generations rows with ended_offset null
    members: pa.Table | None = None  # consumer_group_members
    share_members: pa.Table | None = None  # share_group_members
    streams_members: pa.Table | None = None  # streams_group_members
    topologies: pa.Table | None = None  # streams_group_topologies
    applied_offset: int | None = None
    # per group, its live keys among current_offsets rows not given (:func:`replay` gives a group
    # replayed by key only the keys its events name): an offsets-only group lives while it has any
    live_elsewhere: dict[str, int] | None = None
    # a bucket of the partition (pipelines/gold/buckets.py: the events and rows of some of its groups):
    # what only the whole partition's events say — per event, the position and time of its batch's
    # last event; the events count, the last event's position and the latest event time
    batch_last: tuple[list[int], list[int | None]] | None = None
    partition_events: int | None = None
    partition_last_offset: int | None = None
    partition_log_now: int | None = None


@dataclass
class PartitionOutput:
    tables: dict[str, pa.Table]  # gold table -> rows to write for this partition
    applied_offset: int | None
    events: int
    log_now: int | None  # latest event timestamp of this run: the soft-delete retention's clock
    purged: int = 0
    # per table: whether this run changed any of the partition's rows (unchanged: nothing to write)
    changed: dict[str, bool] = field(default_factory=dict)


def purge_soft_deletes(offsets: pa.Table, log_now: int | None, retention_ms: int | None) -> tuple[pa.Table, int]:
    """``current_offsets`` rows without the soft deletes older than the retention, measured from the
    latest event of the run (log time: replaying old files purges as the live cluster did), and
    how many went. Safe: silver keeps the tombstone, and late data makes the partition replay from
    its start."""
    if retention_ms is None or log_now is None or not offsets.num_rows:
        return offsets, 0
    cutoff = log_now - retention_ms
    old = pc.and_(offsets.column("deleted"), pc.less(offsets.column("deleted_timestamp"), cutoff))
    kept = offsets.filter(pc.invert(pc.fill_null(old, False)))
    return kept, offsets.num_rows - kept.num_rows


# PartitionInput's persisted rows -> the gold table they are
STATE_TABLES = {
    "offsets": "current_offsets", "pending": "pending_transactions", "groups": "current_groups",
    "history": "offset_history", "generations": "group_generations", "members": "consumer_group_members",
    "share_members": "share_group_members", "streams_members": "streams_group_members",
    "topologies": "streams_group_topologies",
}  # fmt: skip


def split_groups(rows: pa.Table, groups: pa.Array) -> tuple[pa.Table, pa.Table]:
    """``rows`` of the ``groups``, and the rest (what :func:`replay` passes through)."""
    inside = pc.is_in(rows.column("group_id"), groups)
    return rows.filter(inside), rows.filter(pc.invert(inside))


def key_strings(rows: pa.Table) -> pa.Array:
    """Each row's (group, topic, partition) as one string, for set lookups. Two keys can share a
    string only when a group id holds the separator; a false match restores a key the run does not
    change, which the replay passes through unchanged (never a missed key)."""
    parts = [rows.column("group_id"), rows.column("topic"), pc.cast(rows.column("partition"), pa.string())]
    return pc.binary_join_element_wise(*parts, "\x00")


def split_keys(rows: pa.Table, whole: pa.Array, groups: pa.Array, keys: pa.Array) -> tuple[pa.Table, pa.Table]:
    """``rows`` of the ``whole`` groups and those of the ``keys`` (:func:`key_strings`) of the
    other ``groups``, and the rest."""
    inside = pc.is_in(rows.column("group_id"), whole).to_numpy(zero_copy_only=False)
    by_key = np.flatnonzero(pc.is_in(rows.column("group_id"), groups).to_numpy(zero_copy_only=False))
    if len(by_key):
        hit = pc.is_in(key_strings(rows.take(by_key)), keys).to_numpy(zero_copy_only=False)
        inside[by_key[hit]] = True
    mask = pa.array(inside, pa.bool_())
    return rows.filter(mask), rows.filter(pc.invert(mask))


def plain_commits(events: pa.Table) -> pa.ChunkedArray:
    """Per event, whether it is a non-transactional commit: a batch of only those takes the
    replay's short path (:meth:`PartitionReplay._commits`), and its groups are replayed by key."""
    return pc.and_not(pc.equal(events.column("kind"), COMMIT), pc.fill_null(events.column("transactional"), False))


def _unique(columns: list[pa.ChunkedArray | pa.Array]) -> pa.Array:
    chunks = [c.cast(pa.string()) for column in columns for c in getattr(column, "chunks", [column])]
    return pc.unique(pa.chunked_array(chunks, pa.string()).drop_null())


def replay(
    inp: PartitionInput,
    run_id: str,
    retention_ms: int = DEFAULT_RETENTION_MS,
    soft_delete_retention_ms: int | None = None,
) -> PartitionOutput:
    """:func:`_replay` (what the events touch) with the garbage collector paused
    (:mod:`pipelines.runtime.collector`)."""
    with collector.paused():
        return _replay(inp, run_id, retention_ms, soft_delete_retention_ms)


def _replay(
    inp: PartitionInput,
    run_id: str,
    retention_ms: int = DEFAULT_RETENTION_MS,
    soft_delete_retention_ms: int | None = None,
) -> PartitionOutput:
    """:class:`PartitionReplay` of what the events touch; every other persisted row passes through
    as it is, in Arrow (what changes for it: soft deletes the run's clock purges). Same output as
    the replay of the whole state, rows in another order: every rule of the replay is a rule of
    one group or of one key, and a key belongs to one group (the argument buckets rest on,
    docs/gold.md).

    A group with an event in a batch that is not only non-transactional commits (group records,
    tombstones, members, transactional commits: rules of the group) is replayed whole. The other
    touched groups are replayed by key: those whose events are plain commits, and those with
    pending transactional offsets of a producer one of the events' markers ends (a marker names a
    producer, not a group). A plain commit sets its key and, when its group has no group record,
    makes the group offsets-only; a marker commits or drops its producer's pending offsets, each
    against its key's current state, and an offsets-only group goes when it has neither live nor
    pending offsets left. So such a group needs its ``current_groups`` rows, its pending offsets,
    the current and open history rows of the keys its commits and pending offsets name, and the
    count of its other live keys (``live_elsewhere``) — not its whole state. An increment touches a
    share of a large partition's groups and a few keys of each: the replay's Python work follows
    those keys (at 30M records a 100k-record increment touched 33k groups holding 467k offset rows:
    the generator's log ends by resolving every open transaction, 27k markers)."""
    state = {name: getattr(inp, name) for name in STATE_TABLES}
    if inp.applied_offset is None or not any(t is not None and t.num_rows for t in state.values()):
        return PartitionReplay(inp, run_id, retention_ms, soft_delete_retention_ms).run()
    events = inp.events
    plain = plain_commits(events)
    mixed = pc.is_in(events.column("batch_id"), pc.unique(events.column("batch_id").filter(pc.invert(plain))))
    whole = _unique([events.column("group_id").filter(mixed)])
    commits = events.filter(pc.invert(mixed))
    commits = commits.filter(pc.invert(pc.is_in(commits.column("group_id"), whole)))
    keys = [key_strings(commits)]
    by_key = [commits.column("group_id")]
    waiting = whole  # the groups whose pending offsets the replay is given: all of them
    if inp.pending is not None and inp.pending.num_rows:
        ended = events.column("producer_id").filter(pc.equal(events.column("kind"), MARKER))
        ending = inp.pending.filter(pc.is_in(inp.pending.column("producer_id"), ended)).column("group_id")
        ending = pc.filter(ending, pc.invert(pc.is_in(ending, whole)))
        by_key.append(ending)
        waiting = _unique([whole, ending])
        of_ending = inp.pending.filter(pc.is_in(inp.pending.column("group_id"), ending))
        keys.append(key_strings(of_ending))
    by_key_groups = _unique(by_key)
    key_set = pc.unique(pa.chunked_array([c for k in keys for c in getattr(k, "chunks", [k])], pa.string()))
    mine: dict[str, pa.Table | None] = {}
    rest: dict[str, pa.Table] = {}
    for name, rows_ in state.items():
        if rows_ is None:
            mine[name] = None
        elif name in ("offsets", "history"):
            mine[name], rest[name] = split_keys(rows_, whole, by_key_groups, key_set)
        elif name == "pending":
            mine[name], rest[name] = split_groups(rows_, waiting)
        elif name == "groups":
            mine[name], rest[name] = split_groups(rows_, _unique([whole, by_key_groups]))
        else:
            mine[name], rest[name] = split_groups(rows_, whole)
    elsewhere = None
    if "offsets" in rest and rest["offsets"].num_rows:
        passed = rest["offsets"]
        live = pc.and_(pc.invert(passed.column("deleted")), pc.is_in(passed.column("group_id"), by_key_groups))
        counts = pc.value_counts(passed.column("group_id").filter(pc.fill_null(live, False)))
        elsewhere = dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True))
    given = dataclasses.replace(inp, **mine, live_elsewhere=elsewhere)
    out = PartitionReplay(given, run_id, retention_ms, soft_delete_retention_ms).run()
    for name, passed in rest.items():
        table = STATE_TABLES[name]
        if name == "offsets":
            passed, purged = purge_soft_deletes(passed, out.log_now, soft_delete_retention_ms)
            out.purged += purged
            out.changed[table] = out.changed.get(table, False) or purged > 0
        if passed.num_rows:
            built = out.tables[table]
            out.tables[table] = concat_all([built, passed], built.schema)
    return out


class PartitionReplay:
    """Replays one partition's events on its persisted state; :meth:`run` returns the rows to write."""

    def __init__(
        self,
        inp: PartitionInput,
        run_id: str,
        retention_ms: int = DEFAULT_RETENTION_MS,
        soft_delete_retention_ms: int | None = None,
    ) -> None:
        self.inp = inp
        self.run_id = run_id
        self.retention_ms = retention_ms
        # soft-deleted keys are dropped from current_offsets this long (log time) after their deletion
        self.soft_delete_retention_ms = soft_delete_retention_ms
        ev = inp.events
        # offsets: handles into the persisted offsets, the persisted pending offsets, then the events
        ev_values = ev.append_column("record_timestamp", ev.column("timestamp_ms"))
        self.values = Values([inp.offsets, inp.pending, ev_values], (*KEY, *LAST_VALUE, *RECORD))
        self.v_record_offset = self.values.column("record_offset")
        self.v_version = self.values.column("value_version")
        self.v_expire = self.values.column("expire_timestamp")
        self.v_commit_ts = self.values.column("commit_timestamp")
        self.ev0 = self.values.starts[2]
        # group generations: the fields of a generation's last record
        ev_gen = renamed(ev, {"record_offset": "last_record_offset"})
        self.gen_values = Values([inp.generations, ev_gen], GENERATION_LAST)
        self.gen_ev0 = self.gen_values.starts[1]
        # KIP-848 members: one value table per record type
        ev_members = ev.append_column("record_offset_5", ev.column("record_offset"))
        ev_members = ev_members.append_column("record_offset_7", ev.column("record_offset"))
        ev_members = ev_members.append_column("record_offset_8", ev.column("record_offset"))
        self.member_values = [Values([inp.members, ev_members], cols) for cols in MEMBER_COLUMNS]
        self.mem_ev0 = self.member_values[0].starts[1]
        # share and streams members, streams topologies (pipelines/gold/modern.py)
        types = dict(EVENT_COLUMNS)
        self.families = {
            M.SHARE.table: M.FamilyMembers(M.SHARE, inp.share_members, ev, types),
            M.STREAMS.table: M.FamilyMembers(M.STREAMS, inp.streams_members, ev, types),
        }
        self.family_of = {t: self.families[f.table] for f in M.FAMILIES for t in f.types}
        self.topologies = M.Topologies(inp.topologies, ev)

        # -- the state ---------------------------------------------------------------------------
        self.live: dict[tuple, int] = {}  # key -> handle of its committed value
        self.dead: dict[tuple, tuple] = {}  # key -> (tombstone offset, its timestamp, cause, handle of last value)
        self.key_handle: dict[tuple, int] = {}  # key -> a handle whose row carries the key
        self.live_count: dict[str, int] = {}  # group -> live keys
        self.pending: dict[int, dict[tuple, int]] = {}  # producer id -> key -> handle
        self.pending_count: dict[str, int] = {}  # group -> waiting keys
        self.classic: dict[str, tuple] = {}  # group -> its record: GROUP_ROW[:7] + (value_version, record_offset)
        # (type, group) -> (epoch, value_version, record_offset, validated topology epoch (streams))
        self.new_groups: dict[tuple[int, str], tuple] = {}
        self.assignment_epoch: dict[tuple[int, str], int] = {}  # (group type, group) -> target assignment epoch
        self.topology_epoch: dict[str, int] = {}  # streams group -> epoch of its topology record
        self.simple: set[str] = set()  # offsets-only groups
        self.generation: dict[str, list] = {}  # group -> open generation (see _generation_row)
        self.member_slots: dict[tuple[str, str], list[int | None]] = {}  # (group, member) -> handles of 5, 7, 8

        # -- what this run changed -------------------------------------------------------------------
        self.history: dict[tuple, list[tuple]] = {}  # key -> states taken: (at, ts, live h, dead tuple)
        self.changed_groups: dict[tuple[str, str], tuple[int, tuple]] = {}  # (protocol, group) -> (at, row)
        self.closed_generations: list[list] = []
        self.touched_generations: set[str] = set()
        self.changed_members: set[tuple[str, str]] = set()
        self.pending_changed = False
        self.applied = inp.applied_offset
        self._restore()

    # -- restoring the persisted state ---------------------------------------------------------------
    def _restore(self) -> None:
        inp = self.inp
        cols = (*KEY, "deleted", "deleted_offset", "deleted_timestamp", "delete_cause")
        for h, (g, t, p, deleted, d_off, d_ts, cause) in enumerate(rows(inp.offsets, cols)):
            key = (g, t, p)
            self.key_handle[key] = h
            if deleted:
                self.dead[key] = (d_off, d_ts, cause, None)
            else:
                self._set_live(key, h)
        for g, n in (inp.live_elsewhere or {}).items():
            self.live_count[g] = self.live_count.get(g, 0) + n
        base = self.values.starts[1]
        for i, (pid, g, t, p) in enumerate(rows(inp.pending, ("producer_id", *KEY))):
            self.pending.setdefault(pid, {})[(g, t, p)] = base + i
            self.key_handle.setdefault((g, t, p), base + i)
            self.pending_count[g] = self.pending_count.get(g, 0) + 1
        self.restored_groups: dict[tuple[str, str], int] = {}
        for i, row in enumerate(rows(inp.groups, ("protocol", "group_id", *GROUP_ROW))):
            protocol, g, *rest = row
            self.restored_groups[(protocol, g)] = i
            if rest[10]:  # deleted
                continue
            if rest[7] == "offsets":
                self.simple.add(g)
            elif protocol == "classic":
                self.classic[g] = (*rest[:7], rest[8], rest[9])
            else:
                rtype = {v: k for k, v in GROUP_PROTOCOLS.items()}[protocol]
                self.new_groups[(rtype, g)] = (rest[1], rest[8], rest[9], rest[13])
                if rest[6] is not None:
                    self.assignment_epoch[(rtype, g)] = rest[6]
                if rest[12] is not None:
                    self.topology_epoch[g] = rest[12]
        for g, epoch in self.topologies.restored_epochs().items():
            self.topology_epoch.setdefault(g, epoch)
        self.restored_generations: dict[str, int] = {}
        gen_cols = ("group_id", "generation", "started_offset", "started_timestamp", "records")
        for i, (g, gen, start, start_ts, records) in enumerate(rows(inp.generations, gen_cols)):
            self.restored_generations[g] = i
            self.generation[g] = [gen, start, start_ts, records, i]
        self.restored_members: dict[tuple[str, str], int] = {}
        for i, (g, m, r5, r7, r8) in enumerate(
            rows(inp.members, ("group_id", "member_id", "record_offset_5", "record_offset_7", "record_offset_8"))
        ):
            self.restored_members[(g, m)] = i
            self.member_slots[(g, m)] = [None if r is None else i for r in (r5, r7, r8)]

    def _set_live(self, key: tuple, h: int) -> None:
        if key not in self.live:
            self.live_count[key[0]] = self.live_count.get(key[0], 0) + 1
        self.live[key] = h

    def _drop_live(self, key: tuple) -> int | None:
        h = self.live.pop(key, None)
        if h is not None:
            n = self.live_count[key[0]] - 1
            if n:
                self.live_count[key[0]] = n
            else:
                del self.live_count[key[0]]
        return h

    def _unpend(self, pid: int, key: tuple) -> None:
        del self.pending[pid][key]
        n = self.pending_count[key[0]] - 1
        if n:
            self.pending_count[key[0]] = n
        else:
            del self.pending_count[key[0]]

    def _has_metadata(self, g: str) -> bool:
        return g in self.classic or any((t, g) in self.new_groups for t in (3, 11, 17))

    def _group_rows(self, g: str) -> dict[str, tuple | None]:
        """The current_groups row content of group ``g`` per protocol (None: no live row)."""
        out: dict[str, tuple | None] = {}
        rec = self.classic.get(g)
        if rec is not None:
            out["classic"] = (*rec[:7], "metadata", rec[7], rec[8], False, None, *NO_TOPOLOGY)
        elif g in self.simple:
            out["classic"] = SIMPLE_ROW
        else:
            out["classic"] = None
        for rtype in (3, 11, 17):
            protocol = GROUP_PROTOCOLS[rtype]
            rec = self.new_groups.get((rtype, g))
            if rec is None:
                out[protocol] = None
                continue
            target = self.assignment_epoch.get((rtype, g))
            topology = (self.topology_epoch.get(g), rec[3]) if rtype == 17 else NO_TOPOLOGY
            out[protocol] = (protocol, rec[0], None, None, None, None, target, "metadata", rec[1], rec[2], False, None,
                             *topology)  # fmt: skip
        return out

    # -- the replay ----------------------------------------------------------------------------------
    def run(self) -> PartitionOutput:
        inp = self.inp
        ev = inp.events
        n = ev.num_rows
        cols = {c: ev.column(c).to_pylist() for c in _EVENT_FIELDS}
        offsets = cols["record_offset"]
        log_now = pc.max(ev.column("timestamp_ms")).as_py() if n else None
        # a batch's changes are dated by its last event: of the events here, or of the whole
        # partition when these are a bucket of it
        last_offset, last_time = inp.batch_last or (offsets, cols["timestamp_ms"])
        if n and self.applied is not None and offsets[0] <= self.applied:
            raise ValueError(
                f"{self.inp.cluster}/{self.inp.partition}: event at {offsets[0]} is at or below the applied "
                f"offset {self.applied}; a partition with late data must be recomputed from its start"
            )
        # batch boundaries, and which batches hold only non-transactional commits (most of a log):
        # those take the short path
        plain = np.cumsum(np.concatenate([[0], plain_commits(ev).to_numpy(zero_copy_only=False)]))
        ids = np.asarray(ev.column("batch_id").to_numpy(zero_copy_only=False))
        starts = [0, *(np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist(), n] if n else [0]
        for i, j in itertools.pairwise(starts):
            last = (last_offset[j - 1], last_time[j - 1])
            if plain[j] - plain[i] == j - i:
                self._commits(cols, i, j, last)
            else:
                self._batch(cols, i, j, last)
        if n:
            self.applied = offsets[n - 1]
        if inp.batch_last is not None:  # a bucket: the partition's own count, position and clock
            n, log_now = inp.partition_events or 0, inp.partition_log_now
            if inp.partition_last_offset is not None:
                self.applied = inp.partition_last_offset
        return self._output(n, log_now)

    def _commits(self, c: dict[str, list], i: int, j: int, at: tuple[int, int | None]) -> None:
        """A batch of non-transactional commits (the common case): :meth:`_batch`'s rules, short.
        A commit can only make a group offsets-only, never end one."""
        groups, topics, parts = c["group_id"], c["topic"], c["partition"]
        live, dead, key_handle, live_count = self.live, self.dead, self.key_handle, self.live_count
        ev0 = self.ev0
        dirty: dict[tuple, None] = {}
        for k in range(i, j):
            key = (groups[k], topics[k], parts[k])
            if key not in live:
                if key not in key_handle:
                    key_handle[key] = ev0 + k
                live_count[key[0]] = live_count.get(key[0], 0) + 1
                if key in dead:
                    del dead[key]
            live[key] = ev0 + k
            dirty[key] = None
        last, last_ts = at
        history = self.history
        for key in dirty:
            if key in history:
                history[key].append((last, last_ts, live[key], None))
            else:
                history[key] = [(last, last_ts, live[key], None)]
        for g in {key[0] for key in dirty}:
            if g not in self.simple and not self._has_metadata(g):
                self.simple.add(g)
                self.changed_groups[("classic", g)] = (last, SIMPLE_ROW)

    def _batch(self, c: dict[str, list], i: int, j: int, at: tuple[int, int | None]) -> None:
        kinds = c["kind"]
        groups = c["group_id"]
        rtypes = c["record_type"]
        # what the batch touches, known before it is applied
        touched: set[str] = set()
        group_events: set[str] = set()
        tombstoned: set[tuple[str, str]] = set()  # (protocol, group) with a group tombstone in the batch
        for k in range(i, j):
            kind = kinds[k]
            if kind == MARKER:
                touched.update(key[0] for key in self.pending.get(c["producer_id"][k], ()))
                continue
            g = groups[k]
            touched.add(g)
            if kind in (GROUP, GROUP_TOMBSTONE, NEW_GROUP, NEW_GROUP_TOMBSTONE):
                group_events.add(g)
                if kind in (GROUP_TOMBSTONE, NEW_GROUP_TOMBSTONE) and rtypes[k] in GROUP_PROTOCOLS:
                    tombstoned.add((GROUP_PROTOCOLS[rtypes[k]], g))
        before = {g: self._group_rows(g) for g in group_events}
        was_simple = {g: g in self.simple for g in touched}
        tomb_groups = {g for _, g in tombstoned}
        causes: dict[str, str] = {}  # group -> cause of its last offset deleted in this batch
        dirty: dict[tuple, None] = {}
        ev0 = self.ev0
        for k in range(i, j):
            kind = kinds[k]
            if kind == COMMIT:
                key = (groups[k], c["topic"][k], c["partition"][k])
                h = ev0 + k
                if key not in self.key_handle:
                    self.key_handle[key] = h
                if c["transactional"][k]:
                    self.pending_changed = True
                    pend = self.pending.setdefault(c["producer_id"][k], {})
                    if key not in pend:
                        self.pending_count[key[0]] = self.pending_count.get(key[0], 0) + 1
                    pend[key] = h
                    continue
                self._set_live(key, h)
                self.dead.pop(key, None)
                dirty[key] = None
            elif kind == OFFSET_TOMBSTONE:
                key = (groups[k], c["topic"][k], c["partition"][k])
                if key not in self.key_handle:
                    self.key_handle[key] = ev0 + k
                prev = self._drop_live(key)
                pending = False
                for pid, pend in self.pending.items():
                    if key in pend:
                        self._unpend(pid, key)
                        self.pending_changed = pending = True
                cause = self._cause(key[0], c["timestamp_ms"][k], prev, tomb_groups, pending)
                self.dead[key] = (c["record_offset"][k], c["timestamp_ms"][k], cause, prev)
                causes[key[0]] = cause
                dirty[key] = None
            elif kind == MARKER:
                pend = self.pending.pop(c["producer_id"][k], None) or {}
                self.pending_changed = self.pending_changed or bool(pend)
                for key in pend:
                    n = self.pending_count[key[0]] - 1
                    if n:
                        self.pending_count[key[0]] = n
                    else:
                        del self.pending_count[key[0]]
                if c["control_type_id"][k] != COMMIT_MARKER:
                    continue  # ABORT drops the waiting offsets
                for key, h in pend.items():
                    current = self.live.get(key)
                    if current is None or self.v_record_offset[h] > self.v_record_offset[current]:
                        self._set_live(key, h)
                        self.dead.pop(key, None)
                        dirty[key] = None
            elif kind in (GROUP, GROUP_TOMBSTONE):
                g = groups[k]
                if kind == GROUP:
                    self.classic[g] = (
                        c["protocol_type"][k],
                        c["generation"][k],
                        c["assignor"][k],
                        c["leader"][k],
                        c["current_state_timestamp"][k],
                        c["member_count"][k],
                        None,
                        c["value_version"][k],
                        c["record_offset"][k],
                    )
                else:
                    self.classic.pop(g, None)
                self._generation_event(c, k, g, kind == GROUP_TOMBSTONE)
            elif kind in (NEW_GROUP, NEW_GROUP_TOMBSTONE):
                g, rtype = groups[k], rtypes[k]
                if rtype in TARGET_ASSIGNMENT:
                    if kind == NEW_GROUP:
                        self.assignment_epoch[(TARGET_ASSIGNMENT[rtype], g)] = c["assignment_epoch"][k]
                    else:
                        self.assignment_epoch.pop((TARGET_ASSIGNMENT[rtype], g), None)
                elif rtype == TOPOLOGY:
                    epoch = self.topologies.apply(g, k, kind == NEW_GROUP_TOMBSTONE)
                    if epoch is None:
                        self.topology_epoch.pop(g, None)
                    else:
                        self.topology_epoch[g] = epoch
                elif kind == NEW_GROUP:
                    self.new_groups[(rtype, g)] = (c["generation"][k], c["value_version"][k], c["record_offset"][k],
                                                   c["validated_topology_epoch"][k])  # fmt: skip
                else:
                    self.new_groups.pop((rtype, g), None)
            elif kind in (MEMBER, MEMBER_TOMBSTONE) and rtypes[k] in self.family_of:
                self.family_of[rtypes[k]].apply(
                    rtypes[k], groups[k], c["member_id"][k], k, c["record_offset"][k], kind == MEMBER_TOMBSTONE
                )
            elif kind in (MEMBER, MEMBER_TOMBSTONE):
                mkey = (groups[k], c["member_id"][k])
                slots = self.member_slots.get(mkey)
                if slots is None:
                    slots = self.member_slots[mkey] = [None, None, None]
                slots[MEMBER_SLOTS[rtypes[k]]] = self.mem_ev0 + k if kind == MEMBER else None
                self.changed_members.add(mkey)
        last, last_ts = at
        gone = self._settle_simple_groups(touched, causes)
        for key in dirty:
            h = self.live.get(key)
            self.history.setdefault(key, []).append((last, last_ts, h, None if h is not None else self.dead[key]))
        # current_groups rows this batch changed
        for g in group_events:
            now = self._group_rows(g)
            for protocol, row in now.items():
                # a tombstone of a group gold never saw (its records compacted away) still marks it
                # deleted; one of a group already deleted changes nothing (it went, and why, earlier)
                known = (protocol, g) in self.changed_groups or (protocol, g) in self.restored_groups
                if row != before[g][protocol] or (row is None and (protocol, g) in tombstoned and not known):
                    row = row or self._deleted_group(g, before[g][protocol], causes, gone)
                    self.changed_groups[(protocol, g)] = (last, row)
        for g in touched - group_events:
            if was_simple[g] == (g in self.simple):
                continue
            if g in self.simple:
                row = self._group_rows(g)["classic"]
            else:
                row = self._deleted_group(g, ("",) * 7 + ("offsets",), causes, gone)
            self.changed_groups[("classic", g)] = (last, row)  # type: ignore[assignment]

    def _settle_simple_groups(self, groups: set[str], causes: dict[str, str]) -> dict[str, str]:
        """After a batch: which of ``groups`` exist through their offsets alone; returns the
        offsets-only groups that went in the batch, with why."""
        gone = {}
        for g in groups:
            now = (g in self.live_count or g in self.pending_count) and not self._has_metadata(g)
            if now:
                self.simple.add(g)
            elif g in self.simple:
                self.simple.discard(g)
                if not self._has_metadata(g):
                    gone[g] = causes.get(g, "transaction_aborted")
        return gone

    def _cause(self, group: str, ts: int | None, prev: int | None, tomb_groups: set[str], pending: bool) -> str:
        """Why an offset was deleted (docs/reference-state.md): expiry when its retention had
        elapsed at the tombstone's time (never while the key had pending transactional offsets),
        a group deletion when the group's record went in the same batch, else an explicit delete
        (OffsetDelete, topic deletion)."""
        fallback = "group_deletion" if group in tomb_groups else "explicit_delete"
        if prev is None or ts is None or pending:
            return fallback
        expire = self.v_expire[prev]
        if self.v_version[prev] == 1 and expire is not None and expire >= 0:
            return "expiry" if ts >= expire else fallback
        base = self.v_commit_ts[prev] or 0
        classic = self.classic.get(group)
        if (3, group) in self.new_groups or (classic is not None and classic[5]):
            return fallback  # a live KIP-848 group or a classic group with members: its offsets do not expire
        if classic is not None and classic[0] and (classic[4] if classic[4] is not None else -1) >= 0:
            base = classic[4]  # an Empty group's clock starts when it emptied
        return "expiry" if ts - base >= self.retention_ms else fallback

    def _deleted_group(self, g: str, before: tuple | None, causes: dict[str, str], gone: dict[str, str]) -> tuple:
        """A soft-deleted current_groups row: ``converted`` when the id lives on as another group
        type, else the cause of the offsets deleted with it, else ``group_deletion``."""
        if self._has_metadata(g) or g in self.simple:
            cause = "converted"
        else:
            cause = gone.get(g) or causes.get(g, "group_deletion")
        was = before[7] if before else None
        return (None,) * 7 + (was, None, None, True, cause, *NO_TOPOLOGY)

    def _generation_event(self, c: dict[str, list], k: int, g: str, tombstone: bool) -> None:
        """Classic generations: a record continues the open generation when it carries the same
        generation, else ends it (``next_generation``) and starts one; a tombstone ends it."""
        off, ts = c["record_offset"][k], c["timestamp_ms"][k]
        gen = self.generation.get(g)
        self.touched_generations.add(g)
        if gen is not None and not tombstone and gen[0] == c["generation"][k]:
            gen[2] = ts if gen[2] is None else (gen[2] if ts is None else min(gen[2], ts))
            gen[3] += 1
            gen[4] = self.gen_ev0 + k
            return
        if gen is not None:
            self.closed_generations.append([g, *gen, off, ts, "group_deleted" if tombstone else "next_generation"])
            del self.generation[g]
        if not tombstone:
            self.generation[g] = [c["generation"][k], off, ts, 1, self.gen_ev0 + k]

    # -- output --------------------------------------------------------------------------------------
    def _output(self, n: int, log_now: int | None) -> PartitionOutput:
        offsets, purged = self._purge(self._offsets_table(), log_now)
        tables = {
            "current_offsets": offsets,
            "pending_transactions": self._pending_table(),
            "current_groups": self._groups_table(),
            "offset_history": self._history_table(),
            "group_generations": self._generations_table(),
            "consumer_group_members": self._members_table(),
            **{table: fam.table(self.run_id) for table, fam in self.families.items()},
            "streams_group_topologies": self.topologies.table(self.run_id),
        }
        return PartitionOutput(
            tables,
            self.applied,
            n,
            log_now,
            purged,
            changed={
                "current_offsets": bool(self.history) or purged > 0,
                "pending_transactions": self.pending_changed,
                "current_groups": bool(self.changed_groups),
                "consumer_group_members": bool(self.changed_members),
                **{table: bool(fam.changed) for table, fam in self.families.items()},
                "streams_group_topologies": bool(self.topologies.latest),
                "offset_history": bool(self.history),
                "group_generations": bool(self.touched_generations),
            },
        )

    def _purge(self, offsets: pa.Table, log_now: int | None) -> tuple[pa.Table, int]:
        return purge_soft_deletes(offsets, log_now, self.soft_delete_retention_ms)

    def _state_columns(
        self, live: list[int | None], dead: list[tuple | None]
    ) -> tuple[list[pa.ChunkedArray], list[pa.ChunkedArray], dict[str, list]]:
        """Value columns of key states (a live handle, or the dead tuple): a deleted key keeps its
        last value, not its record's version, offset or time."""
        last = [h if d is None else d[3] for h, d in zip(live, dead, strict=True)]
        extra = {
            "deleted": [d is not None for d in dead],
            "deleted_offset": [d and d[0] for d in dead],
            "deleted_timestamp": [d and d[1] for d in dead],
            "delete_cause": [d and d[2] for d in dead],
        }
        return self.values.take(last, LAST_VALUE), self.values.take(live, RECORD), extra

    def _offsets_table(self) -> pa.Table:
        changed = sorted(self.history)
        keep = [h for key, h in self._restored_keys() if key not in self.history]
        live = [self.live.get(k) for k in changed]
        last, record, extra = self._state_columns(live, [None if h is not None else self.dead[k] for k, h in
                                                         zip(changed, live, strict=True)])  # fmt: skip
        keys = self.values.take([self.key_handle[k] for k in changed], KEY)
        built = pa.table(
            {
                **dict(zip(KEY, keys, strict=True)),
                **dict(zip(LAST_VALUE, last, strict=True)),
                **dict(zip(RECORD, record, strict=True)),
                "state_offset": pa.array([self.history[k][-1][0] for k in changed], pa.int64()),
                "deleted": pa.array(extra["deleted"], pa.bool_()),
                "deleted_offset": pa.array(extra["deleted_offset"], pa.int64()),
                "deleted_timestamp": pa.array(extra["deleted_timestamp"], pa.int64()),
                "delete_cause": pa.array(extra["delete_cause"], pa.string()),
                "updated_run_id": pa.array([self.run_id] * len(changed), pa.string()),
            },
        )
        return concat(self.inp.offsets, keep, built)

    def _restored_keys(self) -> list[tuple[tuple, int]]:
        t = self.inp.offsets
        return [] if t is None else [(k, h) for h, k in enumerate(rows(t, KEY))]

    def _pending_table(self) -> pa.Table:
        entries = [(pid, key, h) for pid, pend in sorted(self.pending.items()) for key, h in sorted(pend.items())]
        handles = [h for _, _, h in entries]
        cols = self.values.take(handles, (*KEY, *LAST_VALUE, *RECORD))
        return pa.table({"producer_id": pa.array([pid for pid, _, _ in entries], pa.int64()),
             **dict(zip((*KEY, *LAST_VALUE, *RECORD), cols, strict=True))},
        )  # fmt: skip

    def _groups_table(self) -> pa.Table:
        keep = [i for pg, i in self.restored_groups.items() if pg not in self.changed_groups]
        changed = sorted(self.changed_groups.items(), key=lambda kv: (kv[0][1], kv[0][0]))
        rows = [row for _, (_, row) in changed]
        columns: dict[str, Any] = {
            "group_id": pa.array([g for (_, g), _ in changed], pa.string()),
            "protocol": pa.array([p for (p, _), _ in changed], pa.string()),
        }
        types = {"generation": pa.int32(), "current_state_timestamp": pa.int64(), "member_count": pa.int32(),
                 "assignment_epoch": pa.int32(), "value_version": pa.int32(), "record_offset": pa.int64(),
                 "deleted": pa.bool_(), "topology_epoch": pa.int32(),
                 "validated_topology_epoch": pa.int32()}  # fmt: skip
        for i, name in enumerate(GROUP_ROW):
            columns[name] = pa.array([r[i] for r in rows], types.get(name, pa.string()))
        columns["state_offset"] = pa.array([at for _, (at, _) in changed], pa.int64())
        columns["updated_run_id"] = pa.array([self.run_id] * len(changed), pa.string())
        return concat(self.inp.groups, keep, pa.table(columns))

    def _history_table(self) -> pa.Table:
        """Intervals this run closed and every interval open now (see the module docstring)."""
        key_h: list[int] = []
        frm: list[int] = []
        frm_ts: list[int | None] = []
        to: list[int | None] = []
        to_ts: list[int | None] = []
        live: list[int | None] = []
        dead: list[tuple | None] = []
        for key, changes in self.history.items():
            ats, tss, hs, ds = zip(*changes, strict=True)
            key_h.extend([self.key_handle[key]] * len(changes))
            frm.extend(ats)
            frm_ts.extend(tss)
            to.extend(ats[1:])
            to.append(None)
            to_ts.extend(tss[1:])
            to_ts.append(None)
            live.extend(hs)
            dead.extend(ds)
        keep, close, close_to = [], [], []
        hist = self.inp.history
        if hist is not None and hist.num_rows:
            for i, key in enumerate(rows(hist, KEY)):
                changes = self.history.get(key)
                if changes is None:
                    keep.append(i)
                else:  # the interval open before this run ends where the key's first new state starts
                    close.append(i)
                    close_to.append(changes[0][:2])
        last, record, extra = self._state_columns(live, dead)
        built = pa.table(
            {
                **dict(zip(KEY, self.values.take(key_h, KEY), strict=True)),
                "valid_from_offset": pa.array(frm, pa.int64()),
                "valid_from_timestamp": pa.array(frm_ts, pa.int64()),
                "valid_to_offset": pa.array(to, pa.int64()),
                "valid_to_timestamp": pa.array(to_ts, pa.int64()),
                **dict(zip(LAST_VALUE, last, strict=True)),
                **dict(zip(RECORD, record, strict=True)),
                "deleted": pa.array(extra["deleted"], pa.bool_()),
                "deleted_offset": pa.array(extra["deleted_offset"], pa.int64()),
                "deleted_timestamp": pa.array(extra["deleted_timestamp"], pa.int64()),
                "delete_cause": pa.array(extra["delete_cause"], pa.string()),
                "updated_run_id": pa.array([self.run_id] * len(frm), pa.string()),
            },
        )
        parts = [built]
        if hist is not None and hist.num_rows:
            parts.insert(0, hist.take(pa.array(keep, pa.int64())))
            closed = hist.take(pa.array(close, pa.int64()))
            closed = set_column(closed, "valid_to_offset", pa.array([t[0] for t in close_to], pa.int64()))
            closed = set_column(closed, "valid_to_timestamp", pa.array([t[1] for t in close_to], pa.int64()))
            closed = set_column(closed, "updated_run_id", pa.array([self.run_id] * len(close), pa.string()))
            parts.insert(1, closed)
        return concat_all(parts, built.schema)

    def _generations_table(self) -> pa.Table:
        keep = [i for g, i in self.restored_generations.items() if g not in self.touched_generations]
        rows = [*self.closed_generations]
        touched = self.touched_generations
        rows += [[g, *gen, None, None, None] for g, gen in sorted(self.generation.items()) if g in touched]
        # row: group, generation, started offset, started ts, records, last handle, ended offset, ended ts, reason
        last = self.gen_values.take([r[5] for r in rows])
        built = pa.table(
            {
                "group_id": pa.array([r[0] for r in rows], pa.string()),
                "generation": pa.array([r[1] for r in rows], pa.int32()),
                **{name: col for name, col in zip(GENERATION_LAST, last, strict=True) if name != "members"},
                "started_offset": pa.array([r[2] for r in rows], pa.int64()),
                "started_timestamp": pa.array([r[3] for r in rows], pa.int64()),
                "ended_offset": pa.array([r[6] for r in rows], pa.int64()),
                "ended_timestamp": pa.array([r[7] for r in rows], pa.int64()),
                "end_reason": pa.array([r[8] for r in rows], pa.string()),
                "records": pa.array([r[4] for r in rows], pa.int64()),
                "members": last[GENERATION_LAST.index("members")],
                "updated_run_id": pa.array([self.run_id] * len(rows), pa.string()),
            },
        )
        return concat(self.inp.generations, keep, built)

    def _members_table(self) -> pa.Table:
        keep = [i for m, i in self.restored_members.items() if m not in self.changed_members]
        live = sorted(m for m in self.changed_members if any(s is not None for s in self.member_slots[m]))
        columns: dict[str, Any] = {
            "group_id": pa.array([g for g, _ in live], pa.string()),
            "member_id": pa.array([m for _, m in live], pa.string()),
        }
        for slot, values in enumerate(self.member_values):
            handles = [self.member_slots[m][slot] for m in live]
            columns.update(zip(values.columns, values.take(handles), strict=True))
        columns["updated_run_id"] = pa.array([self.run_id] * len(live), pa.string())
        return concat(self.inp.members, keep, pa.table(columns))


_EVENT_FIELDS = (
    "kind", "record_offset", "batch_id", "timestamp_ms", "producer_id", "transactional", "record_type",
    "value_version", "group_id", "topic", "partition", "generation", "protocol_type", "assignor", "leader",
    "current_state_timestamp", "member_count", "control_type_id", "member_id", "assignment_epoch",
    "validated_topology_epoch",
)  # fmt: skip
