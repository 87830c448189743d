"""Silver decoding: Arrow batches of bronze rows in, Arrow batches of decoded rows out. No Spark.

:func:`decode_batch` turns each bronze row into **one wide row**: the envelope (log position and
transaction context, passed through column-wise without touching Python objects) plus one struct
column per silver record table, of which exactly one is non-null — the table the record belongs
to (offset_commits, group_metadata with its members, the KIP-848 tables, share/streams records,
tombstones, transaction_markers or quarantine). The Spark side (pipelines/silver/ingest.py) runs
it once per bronze row with ``mapInArrow`` and splits the result into the tables, so a record is
decoded once however many tables it feeds.

The struct layouts come from ``schemas/tables/silver.yaml``: a table's struct holds its columns
minus the envelope. :func:`build_plan` reads them (on the driver) into a picklable
:class:`DecodePlan`; executors never read YAML.

Values are Kafka's, unchanged (int64 timestamps stay epoch milliseconds with Kafka's sentinels),
with two documented exceptions: the tagged topic id of an offset commit is null when absent (the
all-zero UUID), and unknown tagged fields of the top-level value become ``unknown_tags``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.codec import primitives as P
from pipelines.codec.columnar import decode_columns
from pipelines.codec.errors import DecodeError
from pipelines.codec.records import CONTROL_TYPES, TYPE_NAMES, decode_control, decode_record
from pipelines.codec.schema import UNKNOWN_TAGS, schemas_dir
from pipelines.runtime.ddl import arrow_type
from pipelines.silver.contract import MEMBER_TABLE, RECORD_TABLES

# (silver column, bronze column): the envelope every record table starts with
ENVELOPE = (
    ("cluster", "cluster"),
    ("offsets_partition", "partition"),
    ("record_offset", "offset"),
    ("timestamp", "timestamp"),
    ("producer_id", "producer_id"),
    ("producer_epoch", "producer_epoch"),
    ("transactional", "transactional"),
    # the batch a record came in: gold applies a batch at once (spec 12.3), without joining bronze
    ("batch_base_offset", "base_offset"),
)
ENVELOPE_COLUMNS = tuple(silver for silver, _ in ENVELOPE)
# (quarantine column, bronze column): a quarantine row keeps its bronze row (envelope, raw bytes,
# provenance), so it can be decoded again (redecode) and a quality move can build it from bronze
QUARANTINE_BRONZE = (
    *ENVELOPE,
    ("control", "control"),
    ("raw_key", "key"),
    ("raw_value", "value"),
    ("source_uri", "source_uri"),
    ("batch_position", "batch_position"),
)
# bronze columns the decoder reads (others are ignored)
INPUT_COLUMNS = (
    "cluster",
    "partition",
    "offset",
    "timestamp",
    "producer_id",
    "producer_epoch",
    "transactional",
    "control",
    "key",
    "value",
    "source_uri",
    "batch_position",
    "base_offset",
)

MEMBERS = "members"  # extra field of the group_metadata struct: the group_members rows of the record

# KIP-848 record types with their own table
CONSUMER_TABLES = {
    3: "consumer_group_metadata",
    4: "consumer_group_partition_metadata",
    5: "consumer_group_member_metadata",
    6: "consumer_group_target_assignment_metadata",
    7: "consumer_group_target_assignment_member",
    8: "consumer_group_current_member_assignment",
    16: "consumer_group_regular_expressions",
}
# share (9-15) and streams (17-23) records: the struct column of share/streams_group_records
SHARE_COLUMNS = {
    9: "partition_metadata",
    10: "member_metadata",
    11: "metadata",
    12: "target_assignment_metadata",
    13: "target_assignment_member",
    14: "current_member_assignment",
    15: "state_partition_metadata",
}
STREAMS_COLUMNS = {
    17: "metadata",
    18: "partition_metadata",
    19: "member_metadata",
    20: "target_assignment_metadata",
    21: "target_assignment_member",
    22: "current_member_assignment",
    23: "topology",
}
# value fields whose snake_case name would collide with a silver column
RENAMES = {16: {"timestamp": "resolved_at"}}

DECODER_FORMAT = "silver1"  # bump when the mapping of decoded fields to columns changes


@dataclass(frozen=True)
class DecodePlan:
    """Everything an executor needs to decode: the wide Arrow schema, the decoder version, and each
    table's declared columns with their Arrow types (the rows a task hands to each table's write)."""

    schema: pa.Schema
    decoder_version: str
    tables: dict[str, pa.Schema] = field(default_factory=dict)

    def struct(self, table: str) -> pa.StructType:
        return self.schema.field(table).type


def payload_columns(specs: dict[str, Any], table: str) -> list[Any]:
    """A table's columns minus the envelope: the fields of its struct in the wide row."""
    return [c for c in specs[table].columns if c.name not in ENVELOPE_COLUMNS]


def build_plan(decoder_version_text: str | None = None) -> DecodePlan:
    # local: runtime.tables loads Spark and Delta, and this module stays Spark-free (it is what
    # the Python workers import to decode)
    from pipelines.runtime.tables import load_specs

    specs = load_specs()["silver"]
    envelope_types = {c.name: c.type for c in specs["offset_commits"].columns}
    fields = [pa.field(name, arrow_type(envelope_types[name])) for name in ENVELOPE_COLUMNS]
    for table in RECORD_TABLES:
        sub = [pa.field(c.name, arrow_type(c.type)) for c in payload_columns(specs, table)]
        if table == "group_metadata":
            member = pa.struct([pa.field(c.name, arrow_type(c.type)) for c in payload_columns(specs, MEMBER_TABLE)])
            sub.append(pa.field(MEMBERS, pa.list_(pa.field("element", member))))
        fields.append(pa.field(table, pa.struct(sub)))
    tables = {
        name: pa.schema([pa.field(c.name, arrow_type(c.type)) for c in specs[name].columns])
        for name in (*RECORD_TABLES, MEMBER_TABLE, "version_inventory", "topic_ids")
    }
    return DecodePlan(pa.schema(fields), decoder_version_text or decoder_version(), tables)


def decoder_version() -> str:
    """``silver1-<hash>``: changes whenever a record declaration, the codec, this module or the
    contract (its list of record tables) changes.

    Quarantine rows carry it, so ``redecode`` can tell which decoder gave up on a record.
    """
    h = hashlib.sha256(DECODER_FORMAT.encode())
    root = schemas_dir()
    files = sorted((root / "records").glob("*.yaml")) + sorted((root / "embedded").glob("*.yaml"))
    codec = Path(__file__).resolve().parents[1] / "codec"
    here = Path(__file__).resolve()
    files += [*sorted(codec.glob("*.py")), here, here.with_name("contract.py")]
    for path in files:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{DECODER_FORMAT}-{h.hexdigest()[:12]}"


# -- per-record mapping ----------------------------------------------------------------------------
def _tags(value: dict[str, Any]) -> list[dict[str, Any]] | None:
    extra = value.get(UNKNOWN_TAGS)
    if not extra:
        return None
    return [{"tag": tag, "data": data} for tag, data in extra]


def _offset_commit(t: int, version: int, key: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    topic_id = value.get("topic_id")
    return {
        "record_type": t,
        "value_version": version,
        "group_id": key["group"],
        "topic": key["topic"],
        "partition": key["partition"],
        "committed_offset": value["offset"],
        "leader_epoch": value.get("leader_epoch", -1),
        "metadata": value["metadata"],
        "commit_timestamp": value["commit_timestamp"],
        "expire_timestamp": value.get("expire_timestamp", -1),
        "topic_id": None if topic_id is None or topic_id == P.ZERO_UUID else topic_id,
        "unknown_tags": _tags(value) if version >= 4 else None,
    }


def _group_metadata(version: int, key: dict[str, Any], value: dict[str, Any], warnings: list[str] | None) -> dict:
    group = key["group"]
    generation = value["generation"]
    protocol_type = value["protocol_type"]
    consumer = protocol_type == "consumer"
    errors: dict[int, list[str]] = {}
    for w in warnings or ():
        # "members[3].subscription: truncated at byte 7: ..." (pipelines/codec/records.py)
        if w.startswith("members["):
            errors.setdefault(int(w[8 : w.index("]")]), []).append(w[w.index(".") + 1 :])
    members = []
    for i, m in enumerate(value["members"]):
        row = {
            "record_type": 2,
            "value_version": version,
            "group_id": group,
            "member_index": i,
            "generation": generation,
            "protocol_type": protocol_type,
            "member_id": m["member_id"],
            "group_instance_id": m["group_instance_id"],
            "client_id": m["client_id"],
            "client_host": m["client_host"],
            "rebalance_timeout_ms": m["rebalance_timeout"],
            "session_timeout_ms": m["session_timeout"],
        }
        failed = errors.get(i)
        sub = m["subscription_info"]
        if sub is not None:
            row["subscription_version"] = sub["version"]
            row["subscribed_topics"] = sub["topics"]
            row["owned_partitions"] = sub["owned_partitions"]
            row["subscription_generation_id"] = sub["generation_id"]
            row["rack_id"] = sub["rack_id"]
            row["subscription_user_data"] = sub["user_data"]
        else:
            row["subscription"] = m["subscription"]
        asg = m["assignment_info"]
        if asg is not None:
            row["assignment_version"] = asg["version"]
            row["assigned_partitions"] = asg["assigned_partitions"]
            row["assignment_user_data"] = asg["user_data"]
        elif consumer and not any(e.startswith("assignment") for e in failed or ()):
            row["assigned_partitions"] = []  # a zero-length assignment: no assignment
        else:
            row["assignment"] = m["assignment"]
        if failed:
            row["protocol_error"] = "; ".join(failed)
        members.append(row)
    return {
        "record_type": 2,
        "value_version": version,
        "group_id": group,
        "protocol_type": protocol_type,
        "generation": generation,
        "protocol": value["protocol"],
        "leader": value["leader"],
        "current_state_timestamp": value["current_state_timestamp"],
        "member_count": len(members),
        "unknown_tags": _tags(value) if version >= 4 else None,
        MEMBERS: members,
    }


def _consumer(t: int, version: int, layout: str | None, key: dict[str, Any], value: dict[str, Any]) -> dict:
    row = dict(value)
    for old, new in RENAMES.get(t, {}).items():
        row[new] = row.pop(old)
    row.update(key)
    row["record_type"] = t
    row["value_version"] = version
    row["layout"] = layout
    row["unknown_tags"] = _tags(value)
    return row


def _share_streams(t: int, version: int, layout: str | None, key: dict[str, Any], value: dict[str, Any]) -> dict:
    column = SHARE_COLUMNS.get(t) or STREAMS_COLUMNS[t]
    return {
        "record_type": t,
        "record_type_name": TYPE_NAMES[t],
        "value_version": version,
        "layout": layout,
        "group_id": key["group_id"],
        "member_id": key.get("member_id"),
        column: value,
        "unknown_tags": _tags(value),
    }


def _tombstone(t: int, key: dict[str, Any]) -> dict[str, Any]:
    return {
        "record_type": t,
        "record_type_name": TYPE_NAMES[t],
        "group_id": key["group"] if "group" in key else key["group_id"],
        "topic": key.get("topic"),
        "partition": key.get("partition"),
        "member_id": key.get("member_id"),
        "regular_expression": key.get("regular_expression"),
    }


def table_of(record_type: int) -> str:
    """The silver table a decoded (non-tombstone) record of this type goes to."""
    if record_type in (0, 1):
        return "offset_commits"
    if record_type == 2:
        return "group_metadata"
    if record_type in CONSUMER_TABLES:
        return CONSUMER_TABLES[record_type]
    if record_type in SHARE_COLUMNS:
        return "share_group_records"
    if record_type in STREAMS_COLUMNS:
        return "streams_group_records"
    raise KeyError(f"record type {record_type} has no silver table")


_TABLE_OF = {t: table_of(t) for t in TYPE_NAMES}


# -- one Arrow batch -----------------------------------------------------------------------------
def decode_one(key: bytes | None, value: bytes | None, control: bool, decoder_version: str) -> tuple[str, dict]:
    """``(silver table, payload)`` for one bronze record. Never raises for bad bytes.

    A quarantine payload lacks ``source_uri`` and ``batch_position`` (the caller has them).
    """
    if control:
        try:
            ctype, cversion, epoch = decode_control(key, value)
        except DecodeError as exc:
            return "quarantine", _quarantined(
                key, value, True, exc.reason.value, "key", exc.position, exc.detail, None, decoder_version
            )
        return "transaction_markers", {
            "control_type": CONTROL_TYPES.get(ctype, "UNKNOWN"),
            "control_type_id": ctype,
            "control_version": cversion,
            "coordinator_epoch": epoch,
        }
    d = decode_record(key, value)
    if d.reason is not None:
        reason = d.reason.value
        return "quarantine", _quarantined(
            key, value, False, reason, d.error_part, d.error_position, d.error_detail, d, decoder_version
        )
    t = d.record_type
    if d.tombstone:
        return "tombstones", _tombstone(t, d.key)
    if t <= 1:
        return "offset_commits", _offset_commit(t, d.value_version, d.key, d.value)
    table = _TABLE_OF[t]
    if t == 2:
        return table, _group_metadata(d.value_version, d.key, d.value, d.warnings)
    if table in ("share_group_records", "streams_group_records"):
        return table, _share_streams(t, d.value_version, d.layout, d.key, d.value)
    return table, _consumer(t, d.value_version, d.layout, d.key, d.value)


def _quarantined(
    key: bytes | None,
    value: bytes | None,
    control: bool,
    reason: str,
    part: str | None,
    position: int | None,
    detail: str | None,
    d: Any,
    decoder_version: str,
) -> dict[str, Any]:
    decoded_key = d.key if d is not None else None
    return {
        "control": control,
        "record_type": d.record_type if d is not None else None,
        "value_version": d.value_version if d is not None else None,
        "group_id": None if decoded_key is None else decoded_key.get("group", decoded_key.get("group_id")),
        "reason": reason,
        "error_part": part,
        "error_position": position,
        "error_detail": detail,
        "raw_key": key,
        "raw_value": value,
        "decoder_version": decoder_version,
    }


def decode_batch(
    batch: pa.RecordBatch, plan: DecodePlan, columnar: bool = True, small_groups_per_record: bool = True
) -> list[pa.RecordBatch]:
    """Bronze rows -> wide decoded rows, exactly one per input row. Never raises for bad bytes.

    Keys and values are decoded column-wise (:func:`pipelines.codec.columnar.decode_columns`);
    offset commits and tombstones — nearly all of a log — become their silver columns without a
    Python object per record, other decoded records go through the per-record mapping, and what
    the columnar path leaves (control records, layout variants, undecodable bytes) through the
    per-record decoder, the reference. One output batch per silver table that received rows (its
    struct column set, the others null). Row order therefore follows the tables, not the input.
    ``columnar=False`` decodes every record the per-record way (the reference the tests compare
    with); ``small_groups_per_record`` is :func:`decode_columns`' policy.
    """
    n = batch.num_rows
    names = batch.schema.names
    col = {name: batch.column(i) for i, name in enumerate(names)}
    controls = col["control"].to_numpy(zero_copy_only=False).astype(bool)
    ignore = controls if columnar else np.ones(n, bool)
    result = decode_columns(col["key"], col["value"], ignore=ignore, small_groups_per_record=small_groups_per_record)
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in RECORD_TABLES}
    where: dict[str, list[int]] = {t: [] for t in RECORD_TABLES}
    arrays: dict[str, list[tuple[np.ndarray, pa.StructArray]]] = {t: [] for t in RECORD_TABLES}
    for group in result.groups:
        t = group.record_type
        if group.tombstone:
            arrays["tombstones"].append((group.rows, _tombstone_columns(plan, t, group.key)))
        elif t <= 1:
            arrays["offset_commits"].append((group.rows, _offset_commit_columns(plan, t, group)))
        else:
            table = _TABLE_OF[t]
            keys, values = group.key.to_pylist(), group.value.to_pylist()  # type: ignore[union-attr]
            for i, k, v in zip(group.rows.tolist(), keys, values, strict=True):
                payload = _mapped(t, group.value_version, k, v)  # type: ignore[arg-type]
                rows[table].append(payload)
                where[table].append(i)
    reference = np.flatnonzero(result.fallback | ignore).tolist()
    keys = col["key"].take(reference).to_pylist() if reference else []
    values = col["value"].take(reference).to_pylist() if reference else []
    version = plan.decoder_version
    for i, key, value in zip(reference, keys, values, strict=True):
        table, payload = decode_one(key, value, bool(controls[i]), version)
        if table == "quarantine":
            payload["source_uri"] = _value(col, "source_uri", i)
            payload["batch_position"] = _value(col, "batch_position", i)
        rows[table].append(payload)
        where[table].append(i)
    out = []
    for table in RECORD_TABLES:
        parts = arrays[table]
        if rows[table]:
            parts = [*parts, (np.asarray(where[table], np.int64), pa.array(rows[table], type=plan.struct(table)))]
        if parts:
            at = np.concatenate([p for p, _ in parts])
            struct = pa.concat_arrays([s for _, s in parts]) if len(parts) > 1 else parts[0][1]
            out.append(_table_batch(plan, col, table, struct, at, n))
    return out


def _mapped(t: int, version: int, key: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    """The silver payload of a decoded data record that is not an offset commit (current layout)."""
    if t == 2:
        return _group_metadata(version, key, value, None)
    if t in SHARE_COLUMNS or t in STREAMS_COLUMNS:
        return _share_streams(t, version, None, key, value)
    return _consumer(t, version, None, key, value)


def _struct(plan: DecodePlan, table: str, n: int, columns: dict[str, pa.Array]) -> pa.StructArray:
    """A table's struct column from Arrow columns by name (fields it lacks are null)."""
    stype = plan.struct(table)
    fields = [columns[f.name].cast(f.type) if f.name in columns else pa.nulls(n, f.type) for f in stype]
    return pa.StructArray.from_arrays(fields, fields=list(stype))


def _offset_commit_columns(plan: DecodePlan, t: int, group: Any) -> pa.StructArray:
    """:func:`_offset_commit`, column-wise."""
    key, value, n = group.key, group.value, len(group.rows)
    topic_id = value.field("topic_id") if "topic_id" in value.type.names else pa.nulls(n, pa.string())
    topic_id = pc.if_else(pc.equal(topic_id, P.ZERO_UUID), pa.scalar(None, pa.string()), topic_id)
    columns = {
        "record_type": pa.array(np.full(n, t, np.int32)),
        "value_version": pa.array(np.full(n, group.value_version, np.int32)),
        "group_id": key.field("group"),
        "topic": key.field("topic"),
        "partition": key.field("partition"),
        "committed_offset": value.field("offset"),
        "topic_id": topic_id,
    }
    for name, default in (
        ("leader_epoch", -1),
        ("expire_timestamp", -1),
        ("metadata", None),
        ("commit_timestamp", None),
    ):
        columns[name] = value.field(name) if name in value.type.names else pa.array([default] * n)
    return _struct(plan, "offset_commits", n, columns)


def _tombstone_columns(plan: DecodePlan, t: int, key: pa.StructArray) -> pa.StructArray:
    """:func:`_tombstone`, column-wise."""
    n = len(key)
    names = key.type.names
    columns: dict[str, pa.Array] = {
        "record_type": pa.array(np.full(n, t, np.int32)),
        "record_type_name": pa.array([TYPE_NAMES[t]] * n, pa.string()),
        "group_id": key.field("group" if "group" in names else "group_id"),
    }
    for name in ("topic", "partition", "member_id", "regular_expression"):
        if name in names:
            columns[name] = key.field(name)
    return _struct(plan, "tombstones", n, columns)


def _value(col: dict[str, pa.Array], name: str, i: int) -> Any:
    arr = col.get(name)
    return None if arr is None else arr[i].as_py()


def _table_batch(
    plan: DecodePlan, col: dict[str, pa.Array], table: str, struct: pa.StructArray, where: np.ndarray, n: int
) -> pa.RecordBatch:
    """The wide rows of one table: the envelope taken from the input rows ``where``, its struct,
    nulls elsewhere."""
    m = len(where)
    take = None if m == n and bool((where == np.arange(n)).all()) else pa.array(where, type=pa.int64())
    arrays = []
    for silver, bronze in ENVELOPE:
        target = plan.schema.field(silver).type
        arr = col.get(bronze)
        if arr is None:
            arrays.append(pa.nulls(m, target))
            continue
        if take is not None:
            arr = arr.take(take)
        arrays.append(arr if arr.type == target else arr.cast(target))
    for name in RECORD_TABLES:
        arrays.append(struct if name == table else pa.nulls(m, plan.struct(name)))
    return pa.RecordBatch.from_arrays(arrays, schema=plan.schema)


def decode_table(batch: pa.RecordBatch, plan: DecodePlan) -> pa.Table:
    """:func:`decode_batch` as one table (rows grouped by silver table, not in input order)."""
    return pa.Table.from_batches(decode_batch(batch, plan), schema=plan.schema)


def decode_batches(batches: Iterable[pa.RecordBatch], plan: DecodePlan) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function body."""
    for batch in batches:
        yield from decode_batch(batch, plan)
