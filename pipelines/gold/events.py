"""The silver rows gold replays, declared once: which table, which rows, which event kind, which
columns. The event frame (:func:`events_frame`), the scan the plan falls back on
(:func:`positions_frame`) and the change data feed the plan reads (:data:`SOURCE_TABLES`) all
follow this declaration, so they always agree on what an event is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.gold import engine as E
from pipelines.runtime import lake
from pipelines.runtime.tables import Tables

__all__ = ["SOURCES", "SOURCE_TABLES", "Source", "events_frame", "positions_frame"]

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


@dataclass(frozen=True)
class Source:
    """Rows of one silver table as events: ``where`` selects them, ``kind`` (SQL) names each
    one's event kind, ``columns`` are taken by name, ``exprs`` computed (event column -> SQL over
    the silver row). Event columns neither names are null. ``record_type`` None: the table's own
    column. One source per table: each is one scan."""

    table: str
    kind: str
    where: str | None = None
    columns: tuple[str, ...] = ()
    exprs: dict[str, str] = field(default_factory=dict)
    record_type: str | None = None


def _kind(name: str) -> str:
    return f"'{name}'"


# tombstones of every record type gold replays, by type: offsets, classic groups, the group and
# target assignment epochs of the new protocols, KIP-848 members
_TOMBSTONE_KIND = (
    f"CASE WHEN record_type IN (0, 1) THEN {_kind(E.OFFSET_TOMBSTONE)} "
    f"WHEN record_type = 2 THEN {_kind(E.GROUP_TOMBSTONE)} "
    f"WHEN record_type IN (3, 6, 11, 17) THEN {_kind(E.NEW_GROUP_TOMBSTONE)} "
    f"ELSE {_kind(E.MEMBER_TOMBSTONE)} END"
)

SOURCES = (
    Source("offset_commits", _kind(E.COMMIT), None, _COMMIT),
    Source(
        "tombstones",
        _TOMBSTONE_KIND,
        "record_type IN (0, 1, 2, 3, 5, 6, 7, 8, 11, 17)",
        ("group_id", "topic", "partition", "member_id"),
    ),
    Source("group_metadata", _kind(E.GROUP), None, _CLASSIC, {"assignor": "protocol", "leader": "leader"}),
    Source("consumer_group_metadata", _kind(E.NEW_GROUP), None, ("group_id",), {"generation": "epoch"}),
    Source(
        "consumer_group_target_assignment_metadata",
        _kind(E.NEW_GROUP),
        None,
        ("group_id",),
        {"generation": "assignment_epoch"},
    ),
    Source(
        "share_group_records",
        _kind(E.NEW_GROUP),
        "metadata IS NOT NULL",
        ("group_id",),
        {"generation": "metadata.epoch"},
    ),
    Source(
        "streams_group_records",
        _kind(E.NEW_GROUP),
        "metadata IS NOT NULL",
        ("group_id",),
        {"generation": "metadata.epoch"},
    ),
    Source(
        "transaction_markers", _kind(E.MARKER), "control_type_id IN (0, 1)", ("control_type_id",), record_type="NULL"
    ),
    Source("consumer_group_member_metadata", _kind(E.MEMBER), None, _MEMBER_5),
    Source(
        "consumer_group_target_assignment_member",
        _kind(E.MEMBER),
        None,
        ("group_id", "member_id"),
        {"target_partitions": "topic_partitions"},
    ),
    Source("consumer_group_current_member_assignment", _kind(E.MEMBER), None, _MEMBER_8),
)
# the silver tables gold reads (group_members: the members of classic group records)
SOURCE_TABLES = tuple(dict.fromkeys([*(s.table for s in SOURCES), "group_members"]))
_TYPES = dict(E.EVENT_COLUMNS)


def _rows(spark: SparkSession, tables: Tables, source: Source, where: str) -> DataFrame | None:
    df = lake.read(spark, tables.path("silver", source.table), where)  # partition columns first: files pruned
    if df is None or source.where is None:
        return df
    return df.where(source.where)


def positions_frame(spark: SparkSession, tables: Tables) -> DataFrame | None:
    """(cluster, offsets_partition, record_offset) of every event: a narrow scan."""
    frames = [df.select(*PART, "record_offset") for s in SOURCES if (df := _rows(spark, tables, s, "true")) is not None]
    out = None
    for f in frames:
        out = f if out is None else out.unionByName(f)
    return out


def _members(spark: SparkSession, tables: Tables, where: str, after: DataFrame | None) -> DataFrame | None:
    """The members of each classic group record, as group_generations.members holds them."""
    members = lake.read(spark, tables.path("silver", "group_members"), where)
    if members is None:
        return None
    if after is not None:
        members = _after(members, after)
    return members.groupBy(*PART, "record_offset").agg(
        F.array_sort(F.collect_list(F.struct(*_MEMBER_STRUCT))).alias("members")
    )


def _after(rows: DataFrame, after: DataFrame) -> DataFrame:
    """The rows above their partition's offset in ``after`` (cluster, offsets_partition, after)."""
    return rows.join(F.broadcast(after), list(PART)).where(F.col("record_offset") > F.col("_after")).drop("_after")


def events_frame(
    spark: SparkSession, tables: Tables, where: str = "true", after: list[tuple[str, int, int]] | None = None
) -> DataFrame:
    """The events satisfying ``where`` (over cluster, offsets_partition and record_offset) and, when
    ``after`` is given, above their partition's offset in it (and only of its partitions), one row
    each in :data:`pipelines.gold.engine.EVENT_COLUMNS`, with the batch each came in (a record from
    the Kafka source is its own batch)."""
    marks = None
    if after is not None:
        marks = spark.createDataFrame(after, "cluster string, offsets_partition int, _after bigint")
    members = _members(spark, tables, where, marks)
    parts = []
    for source in SOURCES:
        df = _rows(spark, tables, source, where)
        if df is None:
            continue
        if marks is not None:
            df = _after(df, marks)
        if source.table == "group_metadata" and members is not None:
            df = df.join(members, [*PART, "record_offset"], "left")
        present = set(df.columns)
        exprs: dict[str, Column] = {
            "kind": F.expr(source.kind),
            "batch_id": F.coalesce("batch_base_offset", "record_offset"),
            "timestamp_ms": F.unix_millis("timestamp"),
            "record_type": F.expr(source.record_type or "record_type"),
        }
        for name in ("record_offset", "producer_id", "transactional", "value_version", "members"):
            if name in present:
                exprs[name] = F.col(name)
        exprs |= {name: F.col(name) for name in source.columns}
        exprs |= {name: F.expr(sql) for name, sql in source.exprs.items()}
        cols = [(exprs.get(name, F.lit(None))).cast(ddl).alias(name) for name, ddl in E.EVENT_COLUMNS]
        parts.append(df.select(*PART, *cols))
    if not parts:
        ddl = ", ".join(f"{n} {t}" for n, t in [("cluster", "string"), ("offsets_partition", "int"), *E.EVENT_COLUMNS])
        return spark.createDataFrame([], ddl)
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out
