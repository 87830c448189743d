"""Topic ids and names: silver.topic_ids (only grows) and the names filled in next to topic ids."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyspark.sql import functions as F

from pipelines.runtime import lake
from pipelines.runtime.lake import sql_in_list
from pipelines.silver.contract import KEY
from pipelines.silver.store import read_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.runtime.tables import Tables
    from pipelines.silver.frames import Decoded


# array<struct<topic_id, topic, ...>> columns whose `topic` is resolved from silver.topic_ids:
# (table, struct column or None for a top-level array, array field)
TOPIC_ARRAYS = (
    ("consumer_group_target_assignment_member", None, "topic_partitions"),
    ("consumer_group_current_member_assignment", None, "assigned_partitions"),
    ("consumer_group_current_member_assignment", None, "partitions_pending_revocation"),
    ("consumer_group_current_member_assignment", None, "partitions_pending_assignment"),
    ("share_group_records", "target_assignment_member", "topic_partitions"),
    ("share_group_records", "current_member_assignment", "assigned_partitions"),
)


# -- topic ids ------------------------------------------------------------------------------------
TOPIC_ID_KEY = ("cluster", "topic_id", "topic_name")


def update_topic_ids(spark: SparkSession, tables: Tables, decoded: Decoded, overwrite: bool = False) -> set[str]:
    """Add the pairs the decoded rows carry to silver.topic_ids; returns the clusters that learnt any.

    Pairs are only ever added and ``first_seen`` only ever lowered, so applying the same rows
    again (a re-run, a re-processed range) changes nothing and the order of runs does not matter.
    The table is small (a row per topic name a cluster's log carries): it is compared and
    rewritten whole on the driver, one commit when something was learnt, none otherwise.
    """
    fresh = decoded.topic_pairs_table()
    path = tables.path("silver", "topic_ids")
    existing = None if overwrite else lake.read_arrow(spark, path)
    rows = {} if existing is None else {tuple(r[k] for k in TOPIC_ID_KEY): r for r in existing.to_pylist()}
    learnt = set()
    for r in fresh.to_pylist():
        key = tuple(r[k] for k in TOPIC_ID_KEY)
        known = rows.get(key)
        if known is None or _earlier(r["first_seen"], known["first_seen"]):
            rows[key] = r
            learnt.add(r["cluster"])
    if existing is None or learnt:
        tables.ensure("silver", "topic_ids")
        spec = tables.spec("silver", "topic_ids")
        lake.write_rows(spark, pa.Table.from_pylist(list(rows.values()), spec.arrow()), path, spec.struct(), "true")
    return learnt


def _earlier(new: Any, old: Any) -> bool:
    return new is not None and (old is None or new < old)


def named_rows_in(spark: SparkSession, tables: Tables, clusters: set[str]) -> bool:
    """Did silver hold records with topic ids (types 7, 8, 13, 14) in these clusters before this run?

    Asked of version_inventory, which this run has not updated yet.
    """
    inventory = lake.read_arrow(spark, tables.path("silver", "version_inventory"), ["cluster", "record_type"])
    if inventory is None or not clusters:
        return False
    return any(c in clusters and t in (7, 8, 13, 14) for c, t in zip(*inventory.to_pydict().values(), strict=True))


def topic_names(spark: SparkSession, tables: Tables) -> DataFrame:
    """cluster -> map(topic id -> name) for ids with exactly one name in silver.topic_ids."""
    ids = read_table(spark, tables, "topic_ids")
    if ids is None:
        ids = spark.createDataFrame([], "cluster string, topic_id string, topic_name string")
    return (
        ids.groupBy("cluster", "topic_id")
        .agg(F.count_distinct("topic_name").alias("n"), F.first("topic_name").alias("topic_name"))
        .where("n = 1")
        .groupBy("cluster")
        .agg(F.map_from_entries(F.collect_list(F.struct("topic_id", "topic_name"))).alias("_names"))
    )


def _fill_topic(x: Any) -> Any:
    return x.withField("topic", F.try_element_at(F.col("_names"), x["topic_id"]))


def named_arrays(table: str) -> list[str]:
    """The table's arrays whose ``topic`` is resolved, as :func:`fill_topic_names_arrow` names them."""
    return [array if struct is None else f"{struct}.{array}" for t, struct, array in TOPIC_ARRAYS if t == table]


def resolved_columns(table: str) -> dict[str, Any]:
    """Column -> expression with ``topic`` filled from a ``_names`` map column, for one table."""
    out: dict[str, Any] = {}
    for t, struct, array in TOPIC_ARRAYS:
        if t != table:
            continue
        resolved = F.transform(F.col(array if struct is None else f"{struct}.{array}"), _fill_topic)
        if struct is None:
            out[array] = resolved
        else:
            inner = out.get(struct, F.col(struct)).withField(array, resolved)
            out[struct] = F.when(F.col(struct).isNull(), F.lit(None)).otherwise(inner)
    return out


def topic_name_map(spark: SparkSession, tables: Tables) -> dict[tuple[str, str], str]:
    """(cluster, topic id) -> name on the driver, for ids with exactly one name in silver.topic_ids:
    what :func:`topic_names` maps, for rows filled in Arrow (:func:`fill_topic_names_arrow`)."""
    ids = lake.read_arrow(spark, tables.path("silver", "topic_ids"), ["cluster", "topic_id", "topic_name"])
    seen: dict[tuple[str, str], set[str]] = {}
    columns = [ids.column(c).to_pylist() for c in ("cluster", "topic_id", "topic_name")] if ids else [[], [], []]
    for cluster, topic_id, name in zip(*columns, strict=True):
        if name is not None:
            seen.setdefault((cluster, topic_id), set()).add(name)
    return {key: next(iter(names)) for key, names in seen.items() if len(names) == 1}


def fill_topic_names_arrow(rows: pa.Table, arrays: list[str], names: dict[tuple[str, str], str]) -> pa.Table:
    """:func:`fill_topic_names` on Arrow rows: ``topic`` in the structs of the ``arrays`` (a
    top-level column, or ``struct.field`` for an array inside a struct column) set to the name of
    their (cluster, ``topic_id``) in ``names`` (null when it has none)."""
    clusters = rows.column("cluster").combine_chunks()
    for array in arrays:
        struct_name, _, field = array.rpartition(".")
        if not struct_name:
            filled = _fill_lists(rows.column(array).combine_chunks(), clusters, names)
        else:
            outer = rows.column(struct_name).combine_chunks()
            children = [
                _fill_lists(outer.field(f.name), clusters, names) if f.name == field else outer.field(f.name)
                for f in outer.type
            ]
            filled = pa.StructArray.from_arrays(children, fields=list(outer.type), mask=outer.is_null())
            array = struct_name
        rows = rows.set_column(rows.schema.get_field_index(array), rows.schema.field(array), filled)
    return rows


def _fill_lists(lists: pa.ListArray, clusters: pa.Array, names: dict[tuple[str, str], str]) -> pa.ListArray:
    """``lists`` (one list of topic structs per row) with each struct's ``topic`` named."""
    offsets = lists.offsets.to_numpy()
    structs = lists.values.slice(offsets[0], offsets[-1] - offsets[0])  # every list's structs, in order
    parents = np.repeat(np.arange(len(lists)), np.diff(offsets))
    owners = clusters.take(pa.array(parents)).to_pylist()
    topics = pa.array(
        [names.get((c, i)) for c, i in zip(owners, structs.field("topic_id").to_pylist(), strict=True)],
        pa.string(),
    )
    fields = [topics if f.name == "topic" else structs.field(f.name) for f in structs.type]
    filled = pa.StructArray.from_arrays(fields, fields=list(structs.type), mask=structs.is_null())
    return pa.ListArray.from_arrays(
        pa.array(offsets - offsets[0], pa.int32()), filled, type=lists.type, mask=lists.is_null()
    )


def fill_topic_names(frame: DataFrame, arrays: list[str], names: DataFrame) -> DataFrame:
    """``frame`` with ``topic`` filled in the structs of its top-level ``arrays`` (each struct has
    ``topic_id`` and ``topic``) from :func:`topic_names`, same columns and order."""
    joined = frame.join(F.broadcast(names), "cluster", "left")
    filled = {a: F.transform(F.col(a), _fill_topic) for a in arrays}
    return joined.select(*[filled[c].alias(c) if c in filled else F.col(c) for c in frame.columns])


def with_topic_names(frame: DataFrame, table: str, names: DataFrame) -> DataFrame:
    """``frame`` (rows of ``table``) with topic names filled in, same columns and order."""
    columns = resolved_columns(table)
    if not columns:
        return frame
    joined = frame.join(F.broadcast(names), "cluster", "left")
    return joined.select(*[columns[c].alias(c) if c in columns else F.col(c) for c in frame.columns])


def resolve_topic_names(spark: SparkSession, tables: Tables, clusters: set[str] | None = None) -> int:
    """Set ``topic`` next to every topic id already in silver from silver.topic_ids; rows updated.

    Only rows whose arrays change are rewritten, so the outcome depends on the map alone: the
    same however rows and map arrived (incremental, refresh, re-decode, in any order).
    """
    where = "true" if clusters is None else f"cluster IN ({sql_in_list(clusters)})"
    names = topic_names(spark, tables).where(where).persist()
    updated = 0
    try:
        for table in sorted({t for t, _, _ in TOPIC_ARRAYS}):
            df = read_table(spark, tables, table)
            if df is None:
                continue
            df = df.where(where)
            new_cols = resolved_columns(table)
            base = df.join(F.broadcast(names), "cluster", "left")
            computed = base.select(
                *KEY, *[F.col(c).alias(f"_old_{c}") for c in new_cols], *[v.alias(c) for c, v in new_cols.items()]
            )
            differs = " OR ".join(f"NOT ({c} <=> _old_{c})" for c in new_cols)
            changes = computed.where(differs).select(*KEY, *new_cols).persist()
            n = changes.count()
            if n:
                lake.merge(spark, tables.path("silver", table), changes, KEY, update={c: f"s.{c}" for c in new_cols})
                updated += n
            changes.unpersist()
    finally:
        names.unpersist()
    return updated
