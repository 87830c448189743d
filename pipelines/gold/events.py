"""The silver rows gold replays, declared once: which table, which rows, which event kind, which
columns. :func:`partition_events` builds one partition's events from the rows of those tables
(Arrow, in the replay's task), the plan's fallback scan (:func:`positions_frame`, Spark) and the
file lists the replay reads (:data:`SOURCE_TABLES`) follow the same declaration, so they always
agree on what an event is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.gold import engine as E
from pipelines.runtime.ddl import arrow_type

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.runtime.tables import Tables, TableSpec

__all__ = [
    "MEMBERS_TABLE",
    "SOURCES",
    "SOURCE_TABLES",
    "Source",
    "partition_events",
    "positions_frame",
    "read_schemas",
    "selected",
]

PART = ("cluster", "offsets_partition")
_COMMIT = ("group_id", "topic", "partition", "committed_offset", "leader_epoch", "metadata", "commit_timestamp",
           "expire_timestamp", "topic_id")  # fmt: skip
_CLASSIC = ("group_id", "protocol_type", "generation", "current_state_timestamp", "member_count")
_MEMBER_5 = ("group_id", "member_id", "instance_id", "rack_id", "client_id", "client_host", "subscribed_topic_names",
             "subscribed_topic_regex", "server_assignor", "rebalance_timeout_ms")  # fmt: skip
_MEMBER_8 = ("group_id", "member_id", "member_epoch", "previous_member_epoch", "state", "assigned_partitions",
             "partitions_pending_revocation")  # fmt: skip
# the fields of a classic member in group_generations.members, from silver.group_members
_MEMBER_STRUCT = ("member_index", "member_id", "group_instance_id", "client_id", "client_host", "session_timeout_ms",
                  "rebalance_timeout_ms", "subscribed_topics", "assigned_partitions")  # fmt: skip
# columns every silver record table starts with that an event carries when the table has them
_ENVELOPE = ("record_offset", "batch_base_offset", "timestamp", "producer_id", "transactional")
_OPTIONAL = ("record_type", "value_version")
MEMBERS_TABLE = "group_members"  # the members of classic group records, joined to them by log position


@dataclass(frozen=True)
class Source:
    """Rows of one silver table as events.

    ``kind`` is the event kind, or a mapping record type -> kind (tombstones). ``only`` keeps the
    rows whose column holds one of the values; ``present`` the rows whose (struct) column is not
    null. ``columns`` are taken by name; ``fields`` map an event column to a silver column or a
    struct field (``metadata.epoch``). Event columns neither names are null. ``typed``: the table
    has a ``record_type`` column (transaction markers do not). One source per table: one read."""

    table: str
    kind: str | Mapping[int, str]
    columns: tuple[str, ...] = ()
    fields: Mapping[str, str] = field(default_factory=dict)
    only: tuple[str, tuple[int, ...]] | None = None
    present: str | None = None
    typed: bool = True

    def read_columns(self) -> list[str]:
        """The silver columns this source reads, beyond the envelope."""
        cols = [*self.columns, *(path.split(".")[0] for path in self.fields.values())]
        if self.only is not None:
            cols.append(self.only[0])
        if self.present is not None:
            cols.append(self.present)
        return list(dict.fromkeys(cols))

    def sql_filter(self) -> str | None:
        """``only``/``present`` as a SQL predicate (the Spark scan of :func:`positions_frame`)."""
        terms = []
        if self.only is not None:
            terms.append(f"{self.only[0]} IN ({', '.join(str(v) for v in self.only[1])})")
        if self.present is not None:
            terms.append(f"{self.present} IS NOT NULL")
        return " AND ".join(terms) or None


# tombstones of every record type gold replays, by type: offsets, classic groups, the group and
# target assignment epochs of the new protocols, the streams topology, their members
_TOMBSTONE_KIND = {
    0: E.OFFSET_TOMBSTONE,
    1: E.OFFSET_TOMBSTONE,
    2: E.GROUP_TOMBSTONE,
    **dict.fromkeys((3, 6, 11, 12, 17, 20, 23), E.NEW_GROUP_TOMBSTONE),
    **dict.fromkeys((5, 7, 8, 10, 13, 14, 19, 21, 22), E.MEMBER_TOMBSTONE),
}
# share-group records (10 member metadata, 11 group epoch, 12 target assignment epoch, 13 target and
# 14 current assignment of a member) and streams-group records (17 group epoch, 19 member metadata,
# 20 target assignment epoch, 21/22 target/current tasks of a member, 23 topology): one row each,
# the value in the struct column named for its type (null in the other rows)
_SHARE_KIND = {10: E.MEMBER, 11: E.NEW_GROUP, 12: E.NEW_GROUP, 13: E.MEMBER, 14: E.MEMBER}
_SHARE_FIELDS = {
    "generation": "metadata.epoch",
    "assignment_epoch": "target_assignment_metadata.assignment_epoch",
    **{f: f"member_metadata.{f}" for f in ("rack_id", "client_id", "client_host", "subscribed_topic_names")},
    "target_partitions": "target_assignment_member.topic_partitions",
    **{f: f"current_member_assignment.{f}" for f in ("member_epoch", "previous_member_epoch", "state",
                                                      "assigned_partitions")},
}  # fmt: skip
_STREAMS_KIND = {17: E.NEW_GROUP, 19: E.MEMBER, 20: E.NEW_GROUP, 21: E.MEMBER, 22: E.MEMBER, 23: E.NEW_GROUP}
_STREAMS_TASKS = ("active_tasks", "standby_tasks", "warmup_tasks")
_STREAMS_FIELDS = {
    "generation": "metadata.epoch",
    "validated_topology_epoch": "metadata.validated_topology_epoch",
    "assignment_epoch": "target_assignment_metadata.assignment_epoch",
    **{f: f"member_metadata.{f}" for f in ("instance_id", "rack_id", "client_id", "client_host",
                                          "rebalance_timeout_ms", "topology_epoch", "process_id", "user_endpoint",
                                          "client_tags")},
    **{f"target_{t}": f"target_assignment_member.{t}" for t in _STREAMS_TASKS},
    **{f: f"current_member_assignment.{f}" for f in ("member_epoch", "previous_member_epoch", "state",
                                                      *_STREAMS_TASKS, *(f"{t}_pending_revocation" for t in
                                                                         _STREAMS_TASKS))},
    "topology": "topology",
}  # fmt: skip

SOURCES = (
    Source("offset_commits", E.COMMIT, _COMMIT),
    Source(
        "tombstones",
        _TOMBSTONE_KIND,
        ("group_id", "topic", "partition", "member_id"),
        only=("record_type", tuple(sorted(_TOMBSTONE_KIND))),
    ),
    Source("group_metadata", E.GROUP, _CLASSIC, {"assignor": "protocol", "leader": "leader"}),
    Source("consumer_group_metadata", E.NEW_GROUP, ("group_id",), {"generation": "epoch"}),
    Source(
        "consumer_group_target_assignment_metadata",
        E.NEW_GROUP,
        ("group_id",),
        {"assignment_epoch": "assignment_epoch"},
    ),
    Source(
        "share_group_records",
        _SHARE_KIND,
        ("group_id", "member_id"),
        _SHARE_FIELDS,
        only=("record_type", tuple(_SHARE_KIND)),
    ),
    Source(
        "streams_group_records",
        _STREAMS_KIND,
        ("group_id", "member_id"),
        _STREAMS_FIELDS,
        only=("record_type", tuple(_STREAMS_KIND)),
    ),
    Source("transaction_markers", E.MARKER, ("control_type_id",), only=("control_type_id", (0, 1)), typed=False),
    Source("consumer_group_member_metadata", E.MEMBER, _MEMBER_5),
    Source(
        "consumer_group_target_assignment_member",
        E.MEMBER,
        ("group_id", "member_id"),
        {"target_partitions": "topic_partitions"},
    ),
    Source("consumer_group_current_member_assignment", E.MEMBER, _MEMBER_8),
)
# the silver tables gold reads (group_members: the members of classic group records)
SOURCE_TABLES = tuple(dict.fromkeys([*(s.table for s in SOURCES), MEMBERS_TABLE]))
_EVENT_TYPES = {name: arrow_type(ddl) for name, ddl in E.EVENT_COLUMNS}


# -- what each table is read as -----------------------------------------------------------------------
def read_schemas(specs: Mapping[str, TableSpec]) -> dict[str, pa.Schema]:
    """Per source table, the Arrow schema of the columns the events need, in the table's declared
    types (timestamps as epoch milliseconds): built on the driver, so tasks never read YAML."""
    out = {}
    for source in SOURCES:
        declared = {c.name: c.type for c in specs[source.table].columns}
        wanted = [c for c in (*_ENVELOPE, *_OPTIONAL) if c in declared] + source.read_columns()
        out[source.table] = _schema(declared, wanted)
    declared = {c.name: c.type for c in specs[MEMBERS_TABLE].columns}
    out[MEMBERS_TABLE] = _schema(declared, ["record_offset", *_MEMBER_STRUCT])
    return out


def _schema(declared: Mapping[str, str], names: list[str]) -> pa.Schema:
    return pa.schema(
        [pa.field(n, pa.int64() if n == "timestamp" else arrow_type(declared[n])) for n in dict.fromkeys(names)]
    )


# -- one partition's events, in Arrow ---------------------------------------------------------------------
def partition_events(read: Callable[[str], pa.Table | None]) -> pa.Table:
    """One partition's events in :data:`pipelines.gold.engine.EVENT_COLUMNS`, ordered by log
    position. ``read(table)`` returns the partition's rows of a source table that the replay
    needs (those above the applied offset) in :func:`read_schemas`' columns, or None."""
    parts = []
    for source in SOURCES:
        rows = read(source.table)
        if rows is None or not rows.num_rows:
            continue
        rows = selected(rows, source)
        if not rows.num_rows:
            continue
        members = _members(rows, read(MEMBERS_TABLE)) if source.table == "group_metadata" else None
        parts.append(_events(rows, source, members))
    schema = pa.schema([pa.field(n, t) for n, t in _EVENT_TYPES.items()])
    if not parts:
        return schema.empty_table()
    events = pa.concat_tables(parts)
    return events.take(pc.sort_indices(events.column("record_offset")))


def selected(rows: pa.Table, source: Source) -> pa.Table:
    """The rows of a source table that are events (its ``only`` and ``present`` filters)."""
    if source.only is not None:
        column, values = source.only
        rows = rows.filter(
            pc.fill_null(pc.is_in(rows.column(column), pa.array(values, rows.column(column).type)), False)
        )
    if source.present is not None:
        rows = rows.filter(pc.is_valid(rows.column(source.present)))
    return rows


def _events(rows: pa.Table, source: Source, members: pa.Array | None) -> pa.Table:
    n = rows.num_rows
    names = set(rows.column_names)
    if isinstance(source.kind, str):
        kind = pa.array([source.kind] * n, pa.string())
    else:
        kinds = source.kind  # rows were selected by record type: every one has a kind
        kind = pa.array([kinds[t] for t in rows.column("record_type").to_pylist()], pa.string())
    cols: dict[str, pa.Array | pa.ChunkedArray] = {
        "kind": kind,
        "record_offset": rows.column("record_offset"),
        "batch_id": pc.coalesce(rows.column("batch_base_offset"), rows.column("record_offset")),
        "timestamp_ms": rows.column("timestamp"),
    }
    for name in ("producer_id", "transactional", "value_version"):
        if name in names:
            cols[name] = rows.column(name)
    if source.typed:
        cols["record_type"] = rows.column("record_type")
    for name in source.columns:
        cols[name] = rows.column(name)
    for name, path in source.fields.items():
        top, *inner = path.split(".")
        col = rows.column(top)
        for f in inner:
            col = pc.struct_field(col, f)
        cols[name] = col
    if members is not None:
        cols["members"] = members
    arrays = []
    for name, typ in _EVENT_TYPES.items():
        col = cols.get(name)
        arrays.append(pa.nulls(n, typ) if col is None else (col if col.type == typ else col.cast(typ)))
    return pa.Table.from_arrays(arrays, names=list(_EVENT_TYPES))


def _members(groups: pa.Table, members: pa.Table | None) -> pa.Array:
    """Per group record, its members (ordered by member index) as group_generations keeps them;
    an empty list for a record without members (an Empty group)."""
    typ = _EVENT_TYPES["members"]
    offsets = groups.column("record_offset").to_numpy(zero_copy_only=False)
    lengths = np.zeros(len(offsets), np.int64)
    take = np.zeros(0, np.int64)
    if members is not None and members.num_rows:
        members = members.sort_by([("record_offset", "ascending"), ("member_index", "ascending")])
        at = members.column("record_offset").to_numpy(zero_copy_only=False)
        uniq, first, count = np.unique(at, return_index=True, return_counts=True)
        i = np.clip(np.searchsorted(uniq, offsets), 0, len(uniq) - 1)
        found = uniq[i] == offsets
        lengths = np.where(found, count[i], 0)
        # the member rows of each group record in turn: its first member's index, then the next ones
        own = lengths[found]
        before = np.concatenate([[0], np.cumsum(own)[:-1]])
        take = np.repeat(first[i][found] - before, own) + np.arange(own.sum())
    source = members if members is not None else pa.table({c: pa.nulls(0) for c in _MEMBER_STRUCT})
    struct = pa.StructArray.from_arrays(
        [source.column(c).combine_chunks().take(pa.array(take, pa.int64())) for c in _MEMBER_STRUCT],
        names=list(_MEMBER_STRUCT),
    )
    bounds = pa.array(np.concatenate([[0], np.cumsum(lengths)]), pa.int32())
    return pa.ListArray.from_arrays(bounds, struct).cast(typ)


# -- the plan's fallback scan, on Spark -------------------------------------------------------------------
def positions_frame(spark: SparkSession, tables: Tables) -> DataFrame | None:
    """(cluster, offsets_partition, record_offset) of every event: a narrow scan."""
    from pipelines.runtime import lake  # local: Spark is only needed on the driver

    out = None
    for s in SOURCES:
        df = lake.read(spark, tables.path("silver", s.table), s.sql_filter())
        if df is None:
            continue
        df = df.select(*PART, "record_offset")
        out = df if out is None else out.unionByName(df)
    return out
