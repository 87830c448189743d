"""The suites' frames built on the driver: the rows and derived columns of frames.py's Spark
builders, from Arrow tables that delta-rs read, for tables that fit the driver.

Why a second builder per frame: a suite's frame of a few hundred thousand rows costs Spark a few
jobs that mostly wait (its scheduler, Delta snapshots, two cores shared by four suites) — the 200k
benchmark's increment spent 13-17 s in quality, of which GX's pandas validation was 0.1-0.6 s a
suite — where the same frame is built here in tens of milliseconds. Spark stays the builder for
larger tables (``quality.local_max_rows``), for tables delta-rs cannot read, and for a session
without a JVM beside it. Each builder has the name and arguments of its Spark twin, takes and
returns Arrow tables, and keeps the twin's output columns and types;
tests/spark/test_quality_frames.py holds every one equal to its twin.

SQL's semantics are kept where pandas' differ: computations run on pandas' nullable dtypes, whose
comparisons with a null are null and whose ``&``/``|`` are Kleene's; a window's partition groups
nulls together (``groupby(dropna=False)``) while a join never matches a null key (pandas' merge
would); ``IN`` of a null is null; ``sum`` of nulls is null. Timestamps are compared as their Arrow
integers. Row order is not kept where Spark's is not defined either (joins, filters).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.codec.partitioner import partition_for
from pipelines.quality.frames import DELETE_CAUSES, Frame, partition_rule_notes
from pipelines.runtime.files import floor_ms
from pipelines.silver import KEY, QUALITY_REASON
from pipelines.silver.inventory import INVENTORY_KEY

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pipelines.truth import TruthSnapshot

_NULLABLE: dict[pa.DataType, Any] = {
    pa.int8(): pd.Int8Dtype(),
    pa.int16(): pd.Int16Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(),
    pa.bool_(): pd.BooleanDtype(),
    pa.string(): pd.StringDtype(),
    pa.large_string(): pd.StringDtype(),
    pa.float32(): pd.Float32Dtype(),
    pa.float64(): pd.Float64Dtype(),
}


# -- pandas with SQL's semantics ---------------------------------------------------------------------
def frame(table: pa.Table, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """``table`` (its ``columns``) as pandas with nullable dtypes; timestamps as their integers."""
    table = table.select(list(columns)) if columns is not None else table
    plain = [pc.cast(c, pa.int64()) if pa.types.is_timestamp(c.type) else c for c in table.columns]
    return pa.table(plain, names=table.column_names).to_pandas(types_mapper=_NULLABLE.get)


def arrow(series: pd.Series, type_: pa.DataType) -> pa.Array:
    """A computed column as Arrow of ``type_`` (an integer column may become a timestamp again)."""
    if pa.types.is_timestamp(type_):
        return pc.cast(pa.array(series, pa.int64(), from_pandas=True), type_)
    return pa.array(series, type_, from_pandas=True)


def table_of(d: pd.DataFrame, types: dict[str, pa.DataType]) -> pa.Table:
    """The columns of ``types``, in that order, from ``d``."""
    return pa.table({name: arrow(d[name], t) for name, t in types.items()})


def types_of(table: pa.Table, columns: Sequence[str] | None = None) -> dict[str, pa.DataType]:
    names = table.column_names if columns is None else columns
    return {n: table.schema.field(n).type for n in names}


def null(index: pd.Index, dtype: str) -> pd.Series:
    return pd.Series(pd.NA, index=index, dtype=dtype)


def when(condition: pd.Series, value: Any, otherwise: Any = None, dtype: str = "boolean") -> pd.Series:
    """``CASE WHEN condition THEN value ELSE otherwise END``: a null condition is not true."""
    index = condition.index
    take = condition.fillna(False).astype(bool)
    then = value if isinstance(value, pd.Series) else pd.Series(value, index=index, dtype=dtype)
    other = otherwise if isinstance(otherwise, pd.Series) else pd.Series(otherwise, index=index, dtype=dtype)
    return then.astype(dtype).where(take, other.astype(dtype))


def eq_null_safe(a: pd.Series, b: pd.Series) -> pd.Series:
    """``a <=> b``: equal, or both null; never null."""
    return ((a == b).fillna(False) | (a.isna() & b.isna())).astype("boolean")


def is_in(series: pd.Series, values: Sequence[Any]) -> pd.Series:
    """``series IN (values)``: null for a null."""
    return when(series.notna(), series.isin(list(values)).astype("boolean"))


def window(d: pd.DataFrame, by: Sequence[str], column: str, how: str) -> pd.Series:
    """An aggregate over ``PARTITION BY by`` for every row (nulls are one partition): ``count``
    (non-null values), ``size`` (rows), ``sum`` (null when every value is), ``max``, ``min``,
    ``nunique`` (``size(collect_set(...))``)."""
    grouped = d.groupby(list(by), dropna=False, sort=False)[column]
    if how == "sum":
        return grouped.transform("sum").where(grouped.transform("count") > 0)
    return grouped.transform(how)


def shifted(d: pd.DataFrame, by: Sequence[str], order: Sequence[str], column: str, lead: bool = False) -> pd.Series:
    """``lag(column)`` (``lead``: ``lead(column)``) over ``PARTITION BY by ORDER BY order``, the order
    ascending with nulls first as Spark's; aligned with ``d``'s rows. Rows equal in ``order`` come in
    their input order (Spark's order among them is not defined either)."""
    ordered = d.sort_values([*by, *order], na_position="first", kind="stable")
    moved = ordered.groupby(list(by), dropna=False, sort=False)[column].shift(-1 if lead else 1)
    return moved.reindex(d.index)


def join(left: pd.DataFrame, right: pd.DataFrame, on: Sequence[str], how: str) -> pd.DataFrame:
    """SQL's ``left`` or ``full`` outer join on ``on``: a row whose key has a null matches nothing
    (pandas' merge matches null keys with each other)."""
    on = list(on)
    left_null = left[on].isna().any(axis=1)
    right_null = right[on].isna().any(axis=1)
    merged = left[~left_null].merge(right[~right_null], on=on, how="outer" if how == "full" else how)
    parts = [merged, left[left_null]] + ([right[right_null]] if how == "full" else [])
    parts = [p for p in parts if len(p) or p is merged]
    if len(parts) == 1:
        return merged.reset_index(drop=True)
    columns = list(merged.columns)
    dtypes = merged.dtypes
    filled = [p.reindex(columns=columns).astype(dtypes.to_dict()) for p in parts]
    return pd.concat(filled, ignore_index=True)


# -- bronze ----------------------------------------------------------------------------------------
def bronze_offsets_records(bronze: pa.Table) -> pa.Table:
    d = frame(bronze, ["cluster", "partition", "offset", "source_uri", "batch_position", "control"])
    has_key = pd.Series(pc.is_valid(bronze["key"]).to_numpy(zero_copy_only=False), dtype="boolean")
    step = d["offset"] - shifted(d, ["cluster", "partition", "source_uri"], ["batch_position", "offset"], "offset")
    gap = d["offset"] - shifted(d, ["cluster", "partition"], ["offset"], "offset") - 1
    d["data_record_has_key"] = when(~d["control"], has_key)
    d["offset_step"] = step
    # greatest(gap, 0) skips a null gap: 0
    d["offset_gap"] = gap.clip(lower=0).fillna(0)
    carried = ["cluster", "partition", "offset", "source_uri", "batch_position"]
    derived = {"data_record_has_key": pa.bool_(), "offset_step": pa.int64(), "offset_gap": pa.int64()}
    return table_of(d, {**types_of(bronze, carried), **derived})


# -- silver ----------------------------------------------------------------------------------------
def with_partition_rule(records: pa.Table, partitions: dict[str, int | None]) -> Frame:
    """frames.with_partition_rule on the driver."""
    keys = list(zip(records["cluster"].to_pylist(), records["group_id"].to_pylist(), strict=True))
    pairs = set(keys)
    known = {p: partition_for(p[1], partitions[p[0]]) for p in pairs if None not in p and partitions.get(p[0])}
    d = frame(records, ["offsets_partition"])
    want = pd.Series([known.get(k) for k in keys], dtype="Int32")
    rule = when(want.notna(), d["offsets_partition"] == want)
    out = records.append_column("offsets_partition_matches_group", arrow(rule, pa.bool_()))
    result = Frame(out)
    partition_rule_notes(result, {c for c, _ in pairs}, partitions)
    return result


def silver_offset_commits(commits: pa.Table, partitions: dict[str, int | None], now_ms: int) -> Frame:
    ahead = (frame(commits, ["commit_timestamp"])["commit_timestamp"] - now_ms) / 60000.0
    with_clock = commits.append_column("commit_minutes_ahead_of_clock", arrow(ahead, pa.float64()))
    return with_partition_rule(with_clock, partitions)


def silver_group_members(members: pa.Table, groups: pa.Table) -> pa.Table:
    """frames.silver_group_members on the driver."""
    key = list(KEY)
    m = frame(members, [*key, "member_index", "group_id", "member_id", "protocol_type", "protocol_error"])
    m["member_count"] = null(m.index, "Int32")
    g = frame(groups, [*key, "group_id", "member_count"])
    for c, dtype in (("member_index", "Int32"), ("member_id", "string"), ("protocol_type", "string"),
                     ("protocol_error", "string")):  # fmt: skip
        g[c] = null(g.index, dtype)
    rows = pd.concat([m, g[m.columns]], ignore_index=True)
    index = rows["member_index"]
    n = window(rows, key, "member_index", "count")
    low = window(rows, key, "member_index", "min")
    high = window(rows, key, "member_index", "max")
    count = window(rows, key, "member_count", "max")
    complete = (
        (window(rows, key, "member_count", "count") == 1)
        & (count == n)
        & (window(rows, key, "member_index", "nunique") == n)
        & (low.fillna(0) == 0)
        & (high.fillna(-1) == n - 1)
    )
    rows["member_count"] = count
    rows["members_complete"] = complete
    rows["consumer_protocol_decoded"] = when(rows["protocol_type"] == "consumer", rows["protocol_error"].isna())
    kept = rows[(index.notna() | (n == 0)).to_numpy(dtype=bool)]
    types = {
        **types_of(members, [*key, "member_index", "group_id", "member_id"]),
        "member_count": groups.schema.field("member_count").type,
        "members_complete": pa.bool_(),
        "consumer_protocol_decoded": pa.bool_(),
    }
    return table_of(kept, types)


# the record types whose tombstone keys carry more than the group id, and the field each names
_OFFSET_TYPES = (0, 1)
_MEMBER_TYPES = (5, 7, 8, 10, 13, 14, 19, 21, 22)
_REGEX_TYPE = 16


def silver_tombstones(tombstones: pa.Table, partitions: dict[str, int | None]) -> Frame:
    d = frame(tombstones, ["record_type", "topic", "partition", "member_id", "regular_expression"])
    t = d["record_type"]
    names_key = when(
        is_in(t, _OFFSET_TYPES),
        d["topic"].notna().astype("boolean") & (d["partition"] >= 0),
        when(
            is_in(t, _MEMBER_TYPES),
            d["member_id"].notna().astype("boolean"),
            when(t == _REGEX_TYPE, d["regular_expression"].notna().astype("boolean"), True),
        ),
    )
    out = tombstones.append_column("tombstone_names_its_key", arrow(names_key.fillna(False), pa.bool_()))
    return with_partition_rule(out, partitions)


def silver_version_inventory(inventory: pa.Table, bronze: pa.Table) -> pa.Table:
    """frames.silver_version_inventory on the driver (``bronze``: records per partition)."""
    part = ["cluster", "offsets_partition"]
    inv = frame(inventory)
    inv["bronze_records"] = null(inv.index, "Int64")
    counts = frame(bronze, [*part, "records"]).rename(columns={"records": "bronze_records"})
    for c in inv.columns:
        if c not in counts.columns:
            counts[c] = null(counts.index, str(inv[c].dtype))
    rows = pd.concat([inv, counts[inv.columns]], ignore_index=True)
    records = rows["records"]
    inventory_records = window(rows, part, "records", "sum").fillna(0)
    bronze_records = window(rows, part, "bronze_records", "max").fillna(0)
    inventory_rows = window(rows, part, "records", "count")
    fits = (
        (records >= 1)
        & (rows["first_offset"] <= rows["last_offset"])
        & (records <= rows["last_offset"] - rows["first_offset"] + 1)
    )
    rows["bronze_records"] = bronze_records
    rows["inventory_records"] = inventory_records
    rows["rows_with_key"] = when(records.notna(), window(rows, INVENTORY_KEY, "records", "count"), dtype="Int64")
    rows["records_fit_offsets"] = when(records.notna(), fits)
    rows["partition_census_complete"] = inventory_records == bronze_records
    kept = rows[(records.notna() | (inventory_rows == 0)).to_numpy(dtype=bool)]
    types = {
        **types_of(inventory),
        "bronze_records": pa.int64(),
        "inventory_records": pa.int64(),
        "rows_with_key": pa.int64(),
        "records_fit_offsets": pa.bool_(),
        "partition_census_complete": pa.bool_(),
    }
    return table_of(kept, types)


def silver_topic_ids(topic_ids: pa.Table) -> pa.Table:
    d = frame(topic_ids, ["cluster", "topic_id", "topic_name"])
    names = window(d, ["cluster", "topic_id"], "topic_name", "nunique")
    rows = window(d, ["cluster", "topic_id", "topic_name"], "cluster", "size")
    return topic_ids.append_column("names_of_topic_id", arrow(names, pa.int32())).append_column(
        "rows_with_key", arrow(rows, pa.int64())
    )


def silver_quarantine(bronze: pa.Table, quarantine: pa.Table | None) -> pa.Table:
    """frames.silver_quarantine on the driver: one row per bronze record."""
    key = list(KEY)
    records = frame(bronze, ["cluster", "partition", "offset"]).rename(
        columns={"partition": "offsets_partition", "offset": "record_offset"}
    )
    key_types = {"cluster": pa.string(), "offsets_partition": pa.int32(), "record_offset": pa.int64()}
    if quarantine is None:
        records["undecodable"] = False
        records["raw_bytes_kept"] = null(records.index, "boolean")
        return table_of(records, {**key_types, "undecodable": pa.bool_(), "raw_bytes_kept": pa.bool_()})
    raw = records.assign(_key=bronze["key"].to_pylist(), _value=bronze["value"].to_pylist())
    q = frame(quarantine, [*key, "reason"]).assign(
        raw_key=quarantine["raw_key"].to_pylist(), raw_value=quarantine["raw_value"].to_pylist()
    )
    flags = join(q, raw, key, "left")
    flags["_decoder"] = ~flags["reason"].str.startswith(QUALITY_REASON).astype("boolean")
    flags["raw_bytes_kept"] = _bytes_equal(flags["raw_key"], flags["_key"]) & _bytes_equal(
        flags["raw_value"], flags["_value"]
    )
    joined = join(records, flags[[*key, "reason", "_decoder", "raw_bytes_kept"]], key, "left")
    joined["undecodable"] = joined["_decoder"].fillna(False)
    types = {**key_types, "reason": pa.string(), "undecodable": pa.bool_(), "raw_bytes_kept": pa.bool_()}
    return table_of(joined, types)


def _bytes_equal(a: pd.Series, b: pd.Series) -> pd.Series:
    """``a <=> b`` on columns of bytes (objects, None for null)."""
    return pd.Series(
        [x == y if x is not None and y is not None else x is None and y is None for x, y in zip(a, b, strict=True)],
        index=a.index,
        dtype="boolean",
    )


# -- gold ------------------------------------------------------------------------------------------
def gold_current_offsets(offsets: pa.Table) -> pa.Table:
    d = frame(offsets, ["deleted", "record_offset"])
    flag = when(~d["deleted"], d["record_offset"].notna().astype("boolean"))
    return offsets.append_column("live_row_has_position", arrow(flag, pa.bool_()))


def gold_lag(lag: pa.Table) -> pa.Table:
    d = frame(lag, ["lag", "end_offset", "committed_offset"])
    equal = eq_null_safe(d["lag"], d["end_offset"] - d["committed_offset"])
    null_iff = (d["lag"].isna() == d["end_offset"].isna()).astype("boolean")
    return lag.append_column("lag_is_end_minus_committed", arrow(equal, pa.bool_())).append_column(
        "lag_null_iff_end_unknown", arrow(null_iff, pa.bool_())
    )


def gold_current_groups(groups: pa.Table) -> pa.Table:
    d = frame(groups)
    live = ~d["deleted"]
    d["_live"] = when(live, 1, 0, dtype="Int64")
    live_rows = window(d, ["cluster", "group_id"], "_live", "sum")
    cause = when(d["deleted"], is_in(d["delete_cause"], DELETE_CAUSES).fillna(False), d["delete_cause"].isna())
    because = d["exists_because"]
    listed = (d["protocol"] == "classic") & (d["protocol_type"] == "") & d["record_offset"].isna()
    reason = when(
        because == "metadata",
        (d["record_offset"] <= d["state_offset"]).fillna(False),
        when(because == "offsets", listed.fillna(False), False),
    )
    ahead = when(live & (d["protocol"] == "consumer"), d["assignment_epoch"] <= d["generation"])
    rows = window(d, ["cluster", "group_id", "protocol"], "cluster", "size")
    derived = {
        "rows_with_key": (rows, pa.int64()),
        "live_rows_of_group": (when(live, live_rows, dtype="Int64"), pa.int64()),
        "cause_matches_deleted": (cause, pa.bool_()),
        "exists_for_its_reason": (when(live, reason), pa.bool_()),
        "assignment_epoch_not_ahead": (ahead, pa.bool_()),
    }
    return _appended(groups, derived)


def _appended(table: pa.Table, derived: dict[str, tuple[pd.Series, pa.DataType]]) -> pa.Table:
    for name, (series, type_) in derived.items():
        table = table.append_column(name, arrow(series, type_))
    return table


def gold_offset_history(history: pa.Table) -> pa.Table:
    key = ["cluster", "offsets_partition", "group_id", "topic", "partition"]
    carried = [*key, "valid_from_offset", "valid_to_offset", "valid_from_timestamp", "valid_to_timestamp", "deleted"]
    d = frame(history, [*carried, "record_offset", "deleted_offset"])
    next_from = shifted(d, key, ["valid_from_offset"], "valid_from_offset", lead=True)
    next_from_ts = shifted(d, key, ["valid_from_offset"], "valid_from_timestamp", lead=True)
    source = when(d["deleted"], d["deleted_offset"], d["record_offset"], dtype="Int64")
    derived = {
        "open_iff_latest": ((d["valid_to_offset"].isna() == next_from.isna()).astype("boolean"), pa.bool_()),
        "chains_to_next": (
            when(
                next_from.notna(),
                eq_null_safe(d["valid_to_offset"], next_from) & eq_null_safe(d["valid_to_timestamp"], next_from_ts),
            ),
            pa.bool_(),
        ),
        "time_ordered": (d["valid_from_timestamp"] <= d["valid_to_timestamp"], pa.bool_()),
        "has_source_event": ((source <= d["valid_from_offset"]).fillna(False), pa.bool_()),
    }
    return _appended(history.select(carried), derived)


def gold_group_generations(generations: pa.Table) -> pa.Table:
    key = ["cluster", "offsets_partition", "group_id"]
    carried = [*key, "generation", "started_offset", "ended_offset", "end_reason", "records", "last_record_offset"]
    d = frame(generations, carried)
    next_start = shifted(d, key, ["started_offset"], "started_offset", lead=True)
    next_generation = shifted(d, key, ["started_offset"], "generation", lead=True)
    ended, reason = d["ended_offset"], d["end_reason"]
    open_only_if_latest = when(
        next_start.isna(), ended.isna().astype("boolean") | (reason == "group_deleted"), ended.notna()
    )
    chains = when(
        ended.isna(),
        reason.isna().astype("boolean"),
        when(
            reason == "next_generation",
            (ended == next_start) & (d["generation"] != next_generation),
            when(reason == "group_deleted", next_start.isna().astype("boolean") | (ended < next_start), False),
        ),
    )
    last, start = d["last_record_offset"], d["started_offset"]
    within = (
        (d["records"] >= 1) & (start <= last) & (ended.isna().astype("boolean") | (last < ended))
        & (d["records"] <= last - start + 1)
    )  # fmt: skip
    derived = {
        "open_only_if_latest": (open_only_if_latest, pa.bool_()),
        "chains_to_next": (chains.fillna(False), pa.bool_()),
        "generation_grows": (when(reason == "next_generation", next_generation > d["generation"]), pa.bool_()),
        "records_within": (within.fillna(False), pa.bool_()),
    }
    return _appended(generations.select(carried), derived)


def _topic_partitions(lists: list[Any]) -> list[set[tuple[Any, Any]] | None]:
    """array<struct<topic_id, ..., partitions>> -> the (topic id, partition) pairs of each row;
    None where Spark's flatten is null (the array, a topic or its partitions null)."""
    out: list[set[tuple[Any, Any]] | None] = []
    for topics in lists:
        if topics is None or any(t is None or t.get("partitions") is None for t in topics):
            out.append(None)
        else:
            out.append({(t["topic_id"], p) for t in topics for p in t["partitions"]})
    return out


def gold_consumer_group_members(members: pa.Table, groups: pa.Table) -> pa.Table:
    """frames.gold_consumer_group_members on the driver."""
    g = frame(groups, ["cluster", "group_id", "generation", "deleted", "protocol"])
    live = g[(~g["deleted"] & (g["protocol"] == "consumer")).fillna(False).to_numpy(dtype=bool)]
    live = live[["cluster", "group_id", "generation"]].rename(columns={"generation": "group_epoch"})
    live["_group"] = pd.Series(True, index=live.index, dtype="boolean")
    carried = ["cluster", "offsets_partition", "group_id", "member_id", "member_epoch", "state"]
    m = frame(members, carried)
    assigned = _topic_partitions(members["assigned_partitions"].to_pylist())
    revoking = _topic_partitions(members["partitions_pending_revocation"].to_pylist())
    m["assigned_and_revoking_disjoint"] = pd.Series(
        [None if a is None or r is None else not (a & r) for a, r in zip(assigned, revoking, strict=True)],
        dtype="boolean",
    )
    joined = join(m, live, ["cluster", "group_id"], "left")
    joined["rows_with_key"] = window(joined, ["cluster", "group_id", "member_id"], "cluster", "size")
    joined["in_live_group"] = joined["_group"].fillna(False)
    joined["member_epoch_not_ahead"] = joined["member_epoch"] <= joined["group_epoch"]
    types = {
        **types_of(members, carried),
        "group_epoch": groups.schema.field("generation").type,
        "rows_with_key": pa.int64(),
        "in_live_group": pa.bool_(),
        "member_epoch_not_ahead": pa.bool_(),
        "assigned_and_revoking_disjoint": pa.bool_(),
    }
    return table_of(joined, types)


def gold_partition_progress(progress: pa.Table, inventory: pa.Table | None) -> pa.Table:
    part = ["cluster", "offsets_partition"]
    p = frame(progress)
    if inventory is None or inventory.num_rows == 0:
        last = pd.DataFrame({"cluster": pd.Series(dtype="string"), "offsets_partition": pd.Series(dtype="Int32"),
                             "silver_last_offset": pd.Series(dtype="Int64")})  # fmt: skip
    else:
        inv = frame(inventory, [*part, "last_offset"])
        last = inv.groupby(part, dropna=False, sort=False)["last_offset"].max().reset_index()
        last = last.rename(columns={"last_offset": "silver_last_offset"})
    joined = join(p, last, part, "left")
    applied, events = joined["applied_offset"], joined["events_applied"]
    joined["rows_with_key"] = window(joined, part, "cluster", "size")
    joined["events_fit_applied"] = when(applied.isna(), events == 0, (events >= 1) & (events <= applied + 1))
    joined["applied_within_silver"] = when(applied.notna(), (applied <= joined["silver_last_offset"]).fillna(False))
    types = {
        **types_of(progress),
        "silver_last_offset": pa.int64(),
        "rows_with_key": pa.int64(),
        "events_fit_applied": pa.bool_(),
        "applied_within_silver": pa.bool_(),
    }
    return table_of(joined, types)


def log_clock(bronze: pa.Table) -> pd.DataFrame:
    """(cluster, offsets_partition, log_now_ms): the latest record timestamp of each partition."""
    d = frame(bronze, ["cluster", "partition"]).rename(columns={"partition": "offsets_partition"})
    d["log_now_ms"] = pa.table({"ms": floor_ms(bronze["timestamp"])}).to_pandas(types_mapper=_NULLABLE.get)["ms"]
    return d.groupby(["cluster", "offsets_partition"], dropna=False, sort=False)["log_now_ms"].max().reset_index()


def gold_pending_transactions(pending: pa.Table, bronze: pa.Table) -> pa.Table:
    p = frame(pending)
    joined = join(p, log_clock(bronze), ["cluster", "offsets_partition"], "left")
    joined["pending_log_minutes"] = (joined["log_now_ms"] - joined["record_timestamp"]) / 60000.0
    return table_of(joined, {**types_of(pending), "pending_log_minutes": pa.float64()})


def records_per_partition(table: pa.Table, partition: str = "offsets_partition") -> pa.Table:
    """(cluster, offsets_partition, records): the rows of ``table`` per offsets partition."""
    d = frame(table, ["cluster", partition]).rename(columns={partition: "offsets_partition"})
    counts = d.groupby(["cluster", "offsets_partition"], dropna=False, sort=False).size().reset_index(name="records")
    return table_of(counts, {"cluster": pa.string(), "offsets_partition": pa.int32(), "records": pa.int64()})


def gold_reconciliation(bronze: pa.Table, silver: list[pa.Table]) -> pa.Table:
    """frames.gold_reconciliation on the driver, from :func:`records_per_partition` counts."""
    part = ["cluster", "offsets_partition"]
    b = frame(bronze, [*part, "records"]).rename(columns={"records": "bronze_records"})
    if silver:
        s = pd.concat([frame(t, [*part, "records"]) for t in silver], ignore_index=True)
        s = s.groupby(part, dropna=False, sort=False)["records"].sum(min_count=1).reset_index()
        s = s.rename(columns={"records": "silver_records"})
    else:
        s = pd.DataFrame({"cluster": pd.Series(dtype="string"), "offsets_partition": pd.Series(dtype="Int32"),
                          "silver_records": pd.Series(dtype="Int64")})  # fmt: skip
    joined = join(b, s, part, "full")
    bronze_n = joined["bronze_records"].fillna(0)
    silver_n = joined["silver_records"].fillna(0)
    joined["bronze_records"], joined["silver_records"] = bronze_n, silver_n
    joined["record_difference"] = silver_n - bronze_n
    types = {"cluster": pa.string(), "offsets_partition": pa.int32(), "bronze_records": pa.int64(),
             "silver_records": pa.int64(), "record_difference": pa.int64()}  # fmt: skip
    return table_of(joined, types)


def gold_truth_snapshot(live: pa.Table, progress: pa.Table | None, truth: TruthSnapshot) -> Frame:
    """frames.gold_truth_snapshot on the driver."""
    count = len(truth.offsets_topic_end_offsets)
    end = {int(p): int(o) for p, o in truth.offsets_topic_end_offsets.items()}
    ahead: list[int] = []
    if progress is not None:
        for r in progress.to_pylist():
            if r["cluster"] != truth.cluster or r["applied_offset"] is None:
                continue
            if r["applied_offset"] >= end.get(r["offsets_partition"], 0):
                ahead.append(int(r["offsets_partition"]))
    key = ["group_id", "topic", "partition"]
    committed = sorted(truth.committed().items())
    want = pd.DataFrame(
        [(g, t, p, o.offset) for (g, t, p), o in committed if partition_for(g, count) not in ahead],
        columns=[*key, "truth_offset"],
    ).astype({"group_id": "string", "topic": "string", "partition": "Int32", "truth_offset": "Int64"})
    have = frame(live, ["cluster", "deleted", *key, "committed_offset", "offsets_partition"])
    chosen = (have["cluster"] == truth.cluster) & ~have["deleted"]
    if ahead:
        chosen &= ~is_in(have["offsets_partition"], ahead)
    have = have[chosen.fillna(False).to_numpy(dtype=bool)][[*key, "committed_offset"]]
    joined = join(want, have.rename(columns={"committed_offset": "gold_offset"}), key, "full")
    joined["cluster"] = truth.cluster
    joined["agrees"] = (joined["truth_offset"] == joined["gold_offset"]).fillna(False)
    types = {"cluster": pa.string(), "group_id": pa.string(), "topic": pa.string(), "partition": pa.int32(),
             "truth_offset": pa.int64(), "gold_offset": pa.int64(), "agrees": pa.bool_()}  # fmt: skip
    result = Frame(table_of(joined, types))
    if ahead:
        result.notes["live_offsets_agree_with_truth"] = {"not_compared_partitions_gold_ahead": sorted(ahead)}
    return result
