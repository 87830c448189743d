"""Share-group (KIP-932) and streams-group (KIP-1071) members, and streams topologies, inside gold's
engine (:mod:`pipelines.gold.engine`, which feeds this module its events). No Spark.

Member lifecycle, as Kafka 4.2's coordinator replays the records (``GroupMetadataManager.replay``),
which differs from a latest-value-per-key reading of the log:

* a member metadata record (10 / 19) or a current assignment record (14 / 22) creates the member
  if it does not exist and sets that part of it;
* a current assignment tombstone leaves the member in the group with member epoch and previous
  member epoch -1 and no assignment (its state is kept); for an unknown member it is ignored;
* only a member metadata tombstone removes the member (ignored for an unknown member; Kafka
  refuses a log where the member's epoch is not -1 by then, which a coordinator never writes);
* target assignment records (13 / 21) set the group's target for a member id, member or not; a
  tombstone clears it.

A broker writes a leave as current, target and metadata tombstones, then a group epoch bump. A
table row exists while the id is a member or has a target; ``record_offset_<metadata type>`` and
``record_offset_<current type>`` both null mark a target of an id that is not a member.

Topologies: the latest topology record (23) per streams group, one row per subtopology.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.gold.handles import Values, concat, rows
from pipelines.runtime.ddl import arrow_type

__all__ = ["FAMILIES", "SHARE", "STREAMS", "TOPOLOGY_COLUMNS", "Family", "FamilyMembers", "Topologies"]

_TP = "array<struct<topic_id:string,topic:string,partitions:array<int>>>"
TASKS = "array<struct<subtopology_id:string,partitions:array<int>,assignment_epochs:array<int>>>"
TARGET_TASKS = "array<struct<subtopology_id:string,partitions:array<int>>>"
_TOPIC_INFO = (
    "array<struct<name:string,partitions:int,replication_factor:smallint,"
    "topic_configs:array<struct<key:string,value:string>>>>"
)
_COPARTITION = (
    "array<struct<source_topics:array<smallint>,source_topic_regex:array<smallint>,"
    "repartition_source_topics:array<smallint>>>"
)
# a subtopology of a topology record (silver.streams_group_records.topology), and gold's columns of it
TOPOLOGY_COLUMNS = (
    ("subtopology_id", "string"), ("source_topics", "array<string>"), ("source_topic_regex", "array<string>"),
    ("state_changelog_topics", _TOPIC_INFO), ("repartition_sink_topics", "array<string>"),
    ("repartition_source_topics", _TOPIC_INFO), ("copartition_groups", _COPARTITION),
)  # fmt: skip
TOPOLOGY = f"struct<epoch:int,subtopologies:array<struct<{','.join(f'{n}:{t}' for n, t in TOPOLOGY_COLUMNS)}>>>"

METADATA, TARGET, CURRENT = 0, 1, 2  # the parts of a member, in Family.types order


@dataclass(frozen=True)
class Family:
    """The member records of one group type and the gold table they make.

    ``columns``: per part (metadata, target, current) the value columns, named as the event
    columns that carry them and as the table's columns; ``types``: the record types of the parts;
    ``emptied``: the current-part columns a current assignment tombstone empties; ``ddl``: output
    types where they are not the event column's."""

    table: str
    types: tuple[int, int, int]
    columns: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]
    emptied: tuple[str, ...]
    ddl: Mapping[str, str] = field(default_factory=dict)

    def offset_column(self, part: int) -> str:
        return f"record_offset_{self.types[part]}"

    def part_columns(self, part: int) -> tuple[str, ...]:
        return (*self.columns[part], self.offset_column(part))


SHARE = Family(
    "share_group_members",
    (10, 13, 14),
    (
        ("rack_id", "client_id", "client_host", "subscribed_topic_names"),
        ("target_partitions",),
        ("member_epoch", "previous_member_epoch", "state", "assigned_partitions"),
    ),
    emptied=("assigned_partitions",),
    ddl={"assigned_partitions": _TP},  # no assignment epochs in a share assignment
)
_STREAMS_TASKS = ("active_tasks", "standby_tasks", "warmup_tasks", "active_tasks_pending_revocation",
                  "standby_tasks_pending_revocation", "warmup_tasks_pending_revocation")  # fmt: skip
_STREAMS_METADATA = ("instance_id", "rack_id", "client_id", "client_host", "rebalance_timeout_ms", "topology_epoch",
                     "process_id", "user_endpoint", "client_tags")  # fmt: skip
STREAMS = Family(
    "streams_group_members",
    (19, 21, 22),
    (
        _STREAMS_METADATA,
        ("target_active_tasks", "target_standby_tasks", "target_warmup_tasks"),
        ("member_epoch", "previous_member_epoch", "state", *_STREAMS_TASKS),
    ),
    emptied=_STREAMS_TASKS,
)
FAMILIES = (SHARE, STREAMS)


class FamilyMembers:
    """One family's members of a partition: restored from its persisted rows, changed by events,
    written back as the partition's complete rows (:meth:`table`)."""

    def __init__(self, family: Family, persisted: pa.Table | None, events: pa.Table, event_types: Mapping[str, str]):
        self.family = family
        ev = events
        for part in (METADATA, TARGET, CURRENT):
            ev = ev.append_column(family.offset_column(part), events.column("record_offset"))
        self.values = [Values([persisted, ev], family.part_columns(p)) for p in (METADATA, TARGET, CURRENT)]
        self.ev0 = self.values[0].starts[1]
        self.persisted = persisted
        self.types = {c: arrow_type(family.ddl.get(c) or event_types[c]) for part in family.columns for c in part}
        # (group, member) -> [metadata handle, target handle, current handle, offset of a current tombstone]
        self.slots: dict[tuple[str, str], list[int | None]] = {}
        self.restored: dict[tuple[str, str], int] = {}
        self.changed: set[tuple[str, str]] = set()
        offsets = tuple(family.offset_column(p) for p in (METADATA, TARGET, CURRENT))
        for i, (g, m, *present) in enumerate(rows(persisted, ("group_id", "member_id", *offsets))):
            self.restored[(g, m)] = i
            # a row a current assignment tombstone left holds its values already (epochs -1, none owned)
            self.slots[(g, m)] = [None if o is None else i for o in present] + [None]

    @staticmethod
    def is_member(slots: list[int | None]) -> bool:
        return slots[METADATA] is not None or slots[CURRENT] is not None or slots[3] is not None

    def apply(self, record_type: int, group: str, member: str, k: int, offset: int, tombstone: bool) -> None:
        """Event ``k`` (its index in the events) of one of the family's member record types."""
        part = self.family.types.index(record_type)
        key = (group, member)
        slots = self.slots.get(key) or [None, None, None, None]
        if part == TARGET:
            slots[TARGET] = None if tombstone else self.ev0 + k
        elif not tombstone:
            slots[part] = self.ev0 + k
            if part == CURRENT:
                slots[3] = None
        elif not self.is_member(slots):
            return  # a tombstone of a member the group does not have: Kafka ignores it
        elif part == CURRENT:
            slots[3] = offset  # epochs -1, nothing owned; the state of the last current record stays
        else:  # the metadata tombstone: the member goes (a target for its id may stay)
            slots[METADATA] = slots[CURRENT] = slots[3] = None
        self.slots[key] = slots
        self.changed.add(key)

    def members(self) -> set[tuple[str, str]]:
        """(group, member id) of every member (what the coordinator lists), not target-only ids."""
        return {k for k, s in self.slots.items() if self.is_member(s)}

    def table(self, run_id: str) -> pa.Table:
        fam = self.family
        keep = [i for key, i in self.restored.items() if key not in self.changed]
        built_keys = sorted(k for k in self.changed if any(s is not None for s in self.slots[k]))
        slots = [self.slots[k] for k in built_keys]
        columns: dict[str, pa.Array | pa.ChunkedArray] = {
            "group_id": pa.array([g for g, _ in built_keys], pa.string()),
            "member_id": pa.array([m for _, m in built_keys], pa.string()),
        }
        for part, values in enumerate(self.values):
            taken = values.take([s[part] for s in slots]) if slots else None
            for i, name in enumerate(fam.part_columns(part)):
                typ = pa.int64() if i == len(fam.columns[part]) else self.types[name]
                col = taken[i] if taken is not None else pa.array([], typ)
                columns[name] = col.cast(typ)
        tombed = pa.array([s[3] is not None for s in slots], pa.bool_())
        if len(slots) and pc.any(tombed).as_py():
            for name in ("member_epoch", "previous_member_epoch"):
                columns[name] = pc.if_else(tombed, pa.scalar(-1, self.types[name]), columns[name])
            for name in fam.emptied:
                columns[name] = pc.if_else(tombed, pa.scalar([], self.types[name]), columns[name])
            at = fam.offset_column(CURRENT)
            columns[at] = pc.coalesce(pa.array([s[3] for s in slots], pa.int64()), columns[at])
        columns["updated_run_id"] = pa.array([run_id] * len(slots), pa.string())
        return concat(self.persisted, keep, pa.table(columns))


class Topologies:
    """The latest topology record per streams group of a partition, one row per subtopology."""

    COLUMNS = ("group_id", "topology_epoch", *(n for n, _ in TOPOLOGY_COLUMNS), "record_offset", "updated_run_id")

    def __init__(self, persisted: pa.Table | None, events: pa.Table) -> None:
        self.persisted = persisted
        self.events = events
        self.restored: dict[str, list[int]] = {}
        for i, (g,) in enumerate(rows(persisted, ("group_id",))):
            self.restored.setdefault(g, []).append(i)
        self.latest: dict[str, int | None] = {}  # group -> event index of its topology record (None: tombstone)
        self._epochs: list[int | None] | None = None  # per event: its topology's epoch (read when first needed)

    @property
    def epochs(self) -> list[int | None]:
        if self._epochs is None:
            self._epochs = pc.struct_field(self.events.column("topology"), "epoch").to_pylist()
        return self._epochs

    def restored_epochs(self) -> dict[str, int]:
        """Topology epoch per group of the persisted rows (a topology without subtopologies has none)."""
        return dict(rows(self.persisted, ("group_id", "topology_epoch")))

    def apply(self, group: str, k: int, tombstone: bool) -> int | None:
        """Event ``k``, a topology record or tombstone; returns the group's topology epoch now."""
        self.latest[group] = None if tombstone else k
        return None if tombstone else self.epochs[k]

    def table(self, run_id: str) -> pa.Table:
        keep = [i for g, idx in self.restored.items() if g not in self.latest for i in idx]
        groups = sorted(g for g, k in self.latest.items() if k is not None)
        picked = [self.latest[g] for g in groups]
        schema = pa.schema(
            [("group_id", pa.string()), ("topology_epoch", pa.int32())]
            + [(n, arrow_type(t)) for n, t in TOPOLOGY_COLUMNS]
            + [("record_offset", pa.int64()), ("updated_run_id", pa.string())]
        )
        if not picked:
            return concat(self.persisted, keep, schema.empty_table())
        topo = self.events.column("topology").take(pa.array(picked, pa.int64())).combine_chunks()
        subs = pc.struct_field(topo, "subtopologies")
        counts = pc.fill_null(pc.list_value_length(subs), 0).to_numpy(zero_copy_only=False)
        flat = pc.list_flatten(subs)
        offsets = self.events.column("record_offset").take(pa.array(picked, pa.int64())).to_pylist()
        epochs = [self.epochs[k] for k in picked]

        def repeat(values: list, typ: pa.DataType) -> pa.Array:
            return pa.array([v for v, n in zip(values, counts, strict=True) for _ in range(n)], typ)

        columns = {
            "group_id": repeat(groups, pa.string()),
            "topology_epoch": repeat(epochs, pa.int32()),
            **{n: pc.struct_field(flat, n).cast(arrow_type(t)) for n, t in TOPOLOGY_COLUMNS},
            "record_offset": repeat(offsets, pa.int64()),
            "updated_run_id": pa.array([run_id] * int(counts.sum()), pa.string()),
        }
        return concat(self.persisted, keep, pa.table(columns, schema=schema))
