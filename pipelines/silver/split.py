"""Decoded rows to what silver writes, in the decoding task: each table's rows, the version
census and the topic ids the log names. No Spark.

:func:`decode_blobs` is the ``mapInArrow`` body of a silver run: it decodes a batch of bronze
rows (:func:`pipelines.silver.decode.decode_batch`) and returns, per table that received rows,
those rows in the table's declared columns as one Arrow IPC stream (:data:`BLOB_DDL`), plus:

* ``_inventory`` — the census of the batch's records (silver.version_inventory's columns): kind,
  type and version read from the leading int16 of the raw key and value, as every decoder reads
  them, and whether the record was quarantined. Independent of the typed tables: it counts the
  log, not what the decoder made of it.
* ``_topic_ids`` — the (topic id, topic name) pairs the records carry, with when first seen.
* ``_resolvable`` — how many rows name topics by id only (their names are filled in at write).

The Spark side (:mod:`pipelines.silver.frames`) keeps the blobs in a local checkpoint and writes
each table from its own blobs, so a record is decoded once and converted to Spark rows once, in
exactly its table's columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.codec import primitives as P
from pipelines.runtime import collector
from pipelines.runtime.blobs import ipc
from pipelines.silver.contract import MEMBER_TABLE, RECORD_TABLES
from pipelines.silver.decode import ENVELOPE_COLUMNS, MEMBERS, DecodePlan, decode_batch

__all__ = [
    "BLOB_DDL",
    "BLOB_SCHEMA",
    "INVENTORY",
    "RESOLVABLE",
    "TOPIC_IDS",
    "census",
    "decode_blobs",
    "split_batch",
    "topic_pairs",
]

BLOB_DDL = "table string, rows bigint, data binary"
BLOB_SCHEMA = pa.schema([("table", pa.string()), ("rows", pa.int64()), ("data", pa.binary())])  # BLOB_DDL in Arrow
INVENTORY = "_inventory"
TOPIC_IDS = "_topic_ids"
RESOLVABLE = "_resolvable"
ZERO_UUID = P.ZERO_UUID  # the all-zero UUID: no topic id

# arrays of structs with topic_id and topic_name in the decoded rows: the map the log carries,
# as (table, struct column or None, array field)
PAIR_ARRAYS = (
    ("consumer_group_partition_metadata", None, "topics"),
    ("share_group_records", "partition_metadata", "topics"),
    ("share_group_records", "state_partition_metadata", "initializing_topics"),
    ("share_group_records", "state_partition_metadata", "initialized_topics"),
    ("share_group_records", "state_partition_metadata", "deleting_topics"),
    ("streams_group_records", "partition_metadata", "topics"),
)
# rows whose topic names are filled in from silver.topic_ids: (table, struct column or None)
RESOLVED_BY_ID = (
    ("consumer_group_target_assignment_member", None),
    ("consumer_group_current_member_assignment", None),
    ("share_group_records", "target_assignment_member"),
    ("share_group_records", "current_member_assignment"),
)


# -- one decoded batch ------------------------------------------------------------------------------
def _table_of(wide: pa.RecordBatch) -> str:
    """The table a wide batch of :func:`decode_batch` holds (its one non-null struct column)."""
    for table in RECORD_TABLES:
        if wide.column(table).null_count < wide.num_rows:
            return table
    raise ValueError("a decoded batch without rows of any table")


def _flat(wide: pa.RecordBatch, table: str, schema: pa.Schema) -> pa.Table:
    """A table's rows from its wide batch: the envelope, then its struct's fields, in ``schema``."""
    struct = wide.column(table)
    fields = {f.name: struct.field(i) for i, f in enumerate(struct.type)}
    cols = []
    for f in schema:
        col = wide.column(f.name) if f.name in ENVELOPE_COLUMNS else fields[f.name]
        cols.append(col if col.type == f.type else col.cast(f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def _members(wide: pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    """group_members: one row per member of each group record (the record's envelope repeated)."""
    struct = wide.column("group_metadata")
    listed = struct.field(struct.type.get_field_index(MEMBERS))
    parents = pc.list_parent_indices(listed)
    members = pc.list_flatten(listed)
    fields = {f.name: members.field(i) for i, f in enumerate(members.type)}
    cols = []
    for f in schema:
        col = wide.column(f.name).take(parents) if f.name in ENVELOPE_COLUMNS else fields[f.name]
        cols.append(col if col.type == f.type else col.cast(f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def split_batch(wide_batches: list[pa.RecordBatch], plan: DecodePlan) -> dict[str, list[pa.Table]]:
    """Per table, its rows of these decoded batches (group_members from group_metadata's)."""
    out: dict[str, list[pa.Table]] = {}
    for wide in wide_batches:
        table = _table_of(wide)
        out.setdefault(table, []).append(_flat(wide, table, plan.tables[table]))
        if table == "group_metadata":
            members = _members(wide, plan.tables[MEMBER_TABLE])
            if members.num_rows:
                out.setdefault(MEMBER_TABLE, []).append(members)
    return out


def _int16(column: pa.Array) -> np.ndarray:
    """The leading big-endian int16 of each binary value; -32769 where it has fewer than 2 bytes
    (or is null)."""
    column = column.cast(pa.large_binary()) if column.type != pa.large_binary() else column
    n = len(column)
    out = np.full(n, -32769, np.int64)
    if n == 0:
        return out
    offsets = np.frombuffer(column.buffers()[1], np.int64, n + 1, column.offset * 8)
    data = np.frombuffer(column.buffers()[2], np.uint8) if column.buffers()[2] is not None else np.zeros(0, np.uint8)
    valid = ~np.asarray(column.is_null().to_numpy(zero_copy_only=False), bool)
    ok = valid & (offsets[1:] - offsets[:-1] >= 2)
    start = offsets[:-1][ok]
    out[ok] = ((data[start].astype(np.int64) << 8) | data[start + 1]).astype(np.int64)
    out[ok] = np.where(out[ok] >= 32768, out[ok] - 65536, out[ok])
    return out


def census(batch: pa.RecordBatch, quarantined: np.ndarray, schema: pa.Schema) -> pa.Table:
    """silver.version_inventory rows for one batch of bronze rows: per (cluster, offsets partition,
    kind, type, version, status) the count and the first and last offset and timestamp.
    ``quarantined``: a boolean per row."""
    control = np.asarray(batch.column("control").to_numpy(zero_copy_only=False), bool)
    tomb = np.asarray(batch.column("value").is_null().to_numpy(zero_copy_only=False), bool)
    kind = np.where(control, "control", np.where(tomb, "tombstone", "data"))
    rtype = np.where(control, -32769, _int16(batch.column("key")))
    version = np.where(control, -32769, _int16(batch.column("value")))
    rows = pa.table(
        {
            "cluster": batch.column("cluster"),
            "offsets_partition": batch.column("partition").cast(pa.int32()),
            "record_kind": pa.array(kind, pa.string()),
            "record_type": pa.array(rtype, pa.int32(), mask=rtype == -32769),
            "value_version": pa.array(version, pa.int32(), mask=version == -32769),
            "status": pa.array(np.where(quarantined, "quarantined", "decoded"), pa.string()),
            "offset": batch.column("offset"),
            "timestamp": batch.column("timestamp"),
        }
    )
    keys = ["cluster", "offsets_partition", "record_kind", "record_type", "value_version", "status"]
    grouped = rows.group_by(keys, use_threads=False).aggregate(
        [("offset", "count"), ("offset", "min"), ("offset", "max"), ("timestamp", "min"), ("timestamp", "max")]
    )
    named = {
        "records": "offset_count",
        "first_offset": "offset_min",
        "last_offset": "offset_max",
        "first_timestamp": "timestamp_min",
        "last_timestamp": "timestamp_max",
    }
    cols = [grouped.column(named.get(f.name, f.name)).cast(f.type) for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


def topic_pairs(parts: dict[str, list[pa.Table]], schema: pa.Schema) -> pa.Table:
    """(cluster, topic_id, topic_name, first_seen) of the pairs these table rows carry."""
    found = []
    for rows in parts.get("offset_commits", ()):
        ok = pc.and_(pc.is_valid(rows.column("topic_id")), pc.not_equal(rows.column("topic_id"), ZERO_UUID))
        ok = pc.and_(ok, pc.is_valid(rows.column("topic")))
        if pc.any(ok).as_py():
            sel = rows.filter(ok)
            found.append((sel.column("cluster"), sel.column("topic_id"), sel.column("topic"), sel.column("timestamp")))
    for table, struct, array in PAIR_ARRAYS:
        for rows in parts.get(table, ()):
            col = rows.column(struct if struct is not None else array)
            if struct is not None:
                col = pc.struct_field(col, array)
            col = col.combine_chunks()
            if not pc.sum(pc.fill_null(pc.list_value_length(col), 0)).as_py():
                continue
            parents = pc.list_parent_indices(col)
            items = pc.list_flatten(col)
            found.append(
                (
                    rows.column("cluster").take(parents),
                    pc.struct_field(items, "topic_id"),
                    pc.struct_field(items, "topic_name"),
                    rows.column("timestamp").take(parents),
                )
            )
    if not found:
        return schema.empty_table()
    pairs = pa.table(
        {
            "cluster": pa.chunked_array([f[0] for f in found]),
            "topic_id": pa.chunked_array([f[1] for f in found]),
            "topic_name": pa.chunked_array([f[2] for f in found]),
            "timestamp": pa.chunked_array([f[3] for f in found]),
        }
    )
    ok = pc.and_(pc.is_valid(pairs.column("topic_id")), pc.not_equal(pairs.column("topic_id"), ZERO_UUID))
    pairs = pairs.filter(pc.and_(ok, pc.is_valid(pairs.column("topic_name"))))
    grouped = pairs.group_by(["cluster", "topic_id", "topic_name"], use_threads=False).aggregate([("timestamp", "min")])
    cols = [grouped.column("timestamp_min" if f.name == "first_seen" else f.name).cast(f.type) for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


def resolvable(parts: dict[str, list[pa.Table]]) -> int:
    """Rows that name topics by id (their names are filled in from silver.topic_ids at write)."""
    n = 0
    for table, struct in RESOLVED_BY_ID:
        for rows in parts.get(table, ()):
            n += rows.num_rows if struct is None else rows.num_rows - rows.column(struct).null_count
    return n


def decode_blobs(batches: Iterable[pa.RecordBatch], plan: DecodePlan) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` body: per bronze batch, one blob row per table that received rows, and the
    batch's census, topic ids and resolvable count (see the module docstring)."""
    for batch in batches:
        if not batch.num_rows:
            continue
        with collector.paused():  # not across the yield: the caller's code runs there
            blobs = _blobs(batch, plan)
        yield blobs


def _blobs(batch: pa.RecordBatch, plan: DecodePlan) -> pa.RecordBatch:
    """:func:`decode_blobs` of one non-empty bronze batch."""
    wide = decode_batch(batch, plan)
    parts = split_batch(wide, plan)
    quarantined = np.zeros(batch.num_rows, bool)
    if "quarantine" in parts:
        q = pa.concat_tables(parts["quarantine"])
        at = pa.table(
            {
                "cluster": batch.column("cluster"),
                "partition": batch.column("partition").cast(pa.int32()),
                "offset": batch.column("offset"),
                "i": np.arange(batch.num_rows),
            }
        )
        key = ["cluster", "offsets_partition", "record_offset"]
        hit = at.join(q.select(key), ["cluster", "partition", "offset"], key, "inner")
        quarantined[hit.column("i").to_numpy()] = True
    names, rows, data = [], [], []
    for table, tabs in parts.items():
        t = pa.concat_tables(tabs) if len(tabs) > 1 else tabs[0]
        names.append(table)
        rows.append(t.num_rows)
        data.append(ipc(t))
    inv = census(batch, quarantined, plan.tables["version_inventory"])
    names.append(INVENTORY)
    rows.append(inv.num_rows)
    data.append(ipc(inv))
    topics = topic_pairs(parts, plan.tables["topic_ids"])
    if topics.num_rows:
        names.append(TOPIC_IDS)
        rows.append(topics.num_rows)
        data.append(ipc(topics))
    n = resolvable(parts)
    if n:
        names.append(RESOLVABLE)
        rows.append(n)
        data.append(b"")
    return pa.RecordBatch.from_arrays(
        [pa.array(names, pa.string()), pa.array(rows, pa.int64()), pa.array(data, pa.binary())], schema=BLOB_SCHEMA
    )
