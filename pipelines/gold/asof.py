"""The lag rules on Arrow tables, vectorised with numpy: no Spark, no I/O (docs/lag.md).

* :func:`latest_ends`: the latest observation per topic partition (two at one instant: the larger
  end offset).
* :func:`lag_rows`: for each observation of a topic partition and each group, the state the group
  had as of the observation's time — of its states in ``gold.offset_history`` that took effect at
  or before that time in log time (``valid_from_timestamp``; a null one, written by a magic-0
  record, counts as before every timestamped one), the one of the highest log position — and a
  row where that state is a live commit.

The highest log position among the states up to a time, rather than the latest by time, keeps
one answer when log time steps back (clock skew between coordinators). It also says which states
a computation needs: the state ``s`` in effect at ``t`` is superseded (by log position) only by a
state timestamped after ``t``, so ``s`` is current or its interval ends after ``t``
(:func:`needed`). Observation times are compared in whole milliseconds, rounded down.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.runtime.files import floor_ms

__all__ = ["LAG_COLUMNS", "PARTITION_KEY", "STATE_COLUMNS", "lag_rows", "latest_ends", "needed", "no_rows"]

PARTITION_KEY = ["cluster", "topic", "partition"]
STATE_COLUMNS = [*PARTITION_KEY, "group_id", "valid_from_offset", "valid_from_timestamp", "committed_offset", "deleted"]
LAG_COLUMNS = ["cluster", "group_id", "topic", "partition", "observed_at", "end_offset", "committed_offset", "lag"]
# pairs (observation x group) computed at once: bounds the driver's memory on a first build
PAIRS_PER_CHUNK = 2_000_000

_LAG_SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("group_id", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("observed_at", pa.timestamp("us", "UTC")),
        ("end_offset", pa.int64()),
        ("committed_offset", pa.int64()),
        ("lag", pa.int64()),
    ]
)


def no_rows() -> pa.Table:
    """:func:`lag_rows`' columns, no row."""
    return _LAG_SCHEMA.empty_table()


def needed(since_ms: int | None) -> pc.Expression:
    """Which of offset_history's rows can be in effect at some time at or after ``since_ms`` (None:
    any time): the current ones, and those whose interval ends after it (see the module's
    docstring). An interval closed by a state without a timestamp ends before every time."""
    current = pc.field("is_current")
    if since_ms is None:
        return pc.scalar(True)
    return current | (pc.field("valid_to_timestamp") > pa.scalar(since_ms, pa.int64()))


def _ids(keys: pa.Table, universe: pa.Table) -> np.ndarray:
    """The row number in ``universe`` (distinct rows) of each row of ``keys`` (every one is there)."""
    names = keys.column_names
    numbered = universe.append_column("_id", pa.array(np.arange(universe.num_rows, dtype=np.int64)))
    probe = keys.select(names).append_column("_row", pa.array(np.arange(keys.num_rows, dtype=np.int64)))
    joined = probe.join(numbered, names, join_type="inner")
    order = np.argsort(joined["_row"].to_numpy())
    if len(order) != keys.num_rows:
        raise AssertionError("a key missing from its universe")
    return joined["_id"].to_numpy()[order]


def _nullable(table: pa.Table) -> pa.Table:
    """``table`` with every field nullable: tables read from Delta declare some not null, rows
    built here do not, and Arrow joins and concatenations want equal schemas."""
    schema = pa.schema([f.with_nullable(True) for f in table.schema])
    return table if schema.equals(table.schema) else table.cast(schema)


def _distinct(table: pa.Table, names: list[str]) -> pa.Table:
    return table.select(names).group_by(names, use_threads=False).aggregate([])


def _unique_observations(observations: pa.Table) -> pa.Table:
    """One observation per topic partition and instant: the larger end offset."""
    obs = _nullable(observations.select([*PARTITION_KEY, "observed_at", "end_offset"]))
    if obs.num_rows == 0:
        return obs
    return (
        obs.group_by([*PARTITION_KEY, "observed_at"], use_threads=False)
        .aggregate([("end_offset", "max")])
        .rename_columns([*PARTITION_KEY, "observed_at", "end_offset"])
    )


def latest_ends(observations: pa.Table) -> pa.Table:
    """(cluster, topic, partition, end_offset, observed_at): the latest observation of each topic
    partition, at one instant the larger end offset."""
    obs = _nullable(observations.select([*PARTITION_KEY, "observed_at", "end_offset"]))
    if obs.num_rows == 0:
        return obs.select([*PARTITION_KEY, "end_offset", "observed_at"])
    ordered = obs.sort_by([(c, "ascending") for c in [*PARTITION_KEY, "observed_at", "end_offset"]])
    keys = ordered.select(PARTITION_KEY)
    last = np.ones(ordered.num_rows, dtype=bool)
    if ordered.num_rows > 1:
        same = np.ones(ordered.num_rows - 1, dtype=bool)
        for name in PARTITION_KEY:
            column = keys[name].combine_chunks()
            same &= pc.equal(column.slice(1), column.slice(0, len(column) - 1)).to_numpy(zero_copy_only=False)
        last[:-1] = ~same
    return ordered.filter(pa.array(last)).select([*PARTITION_KEY, "end_offset", "observed_at"])


def lag_rows(states: pa.Table, observations: pa.Table) -> pa.Table:
    """The lag rows of ``observations`` (cluster, topic, partition, observed_at, end_offset) with
    the groups' ``states`` (:data:`STATE_COLUMNS`; at least every state :func:`needed` names for
    the observations' earliest time). Rows in no particular order."""
    obs = _unique_observations(observations)
    if obs.num_rows == 0 or states.num_rows == 0:
        return _LAG_SCHEMA.empty_table()
    states = _nullable(states.select(STATE_COLUMNS))
    parts = _distinct(pa.concat_tables([states.select(PARTITION_KEY), obs.select(PARTITION_KEY)]), PARTITION_KEY)
    keys = _distinct(states, [*PARTITION_KEY, "group_id"])
    key_part = _ids(keys.select(PARTITION_KEY), parts)
    state_key = _ids(states.select([*PARTITION_KEY, "group_id"]), keys)
    obs_part = _ids(obs.select(PARTITION_KEY), parts)
    obs_ms = floor_ms(obs["observed_at"].combine_chunks()).to_numpy()

    # each key's states by time; at each, the state of the highest log position so far
    ts_col = states["valid_from_timestamp"].combine_chunks()
    untimed = ts_col.is_null().to_numpy(zero_copy_only=False)
    ts = ts_col.fill_null(0).to_numpy()
    timed = ts[~untimed]
    low = min(int(timed.min()) if timed.size else 0, int(obs_ms.min()))
    high = max(int(timed.max()) if timed.size else 0, int(obs_ms.max()))
    span = high - low + 2  # time 0: before every timestamp (untimed states)
    if keys.num_rows * span >= 2**62 or keys.num_rows * states.num_rows >= 2**62:
        raise OverflowError("too many keys over too long a time for one computation")
    rel = np.where(untimed, 0, ts - low + 1)
    position = states["valid_from_offset"].to_numpy()
    order = np.lexsort((position, rel, state_key))  # by key, time, position
    by_time = state_key[order] * span + rel[order]
    rank = np.empty(len(position), dtype=np.int64)
    rank[np.argsort(position, kind="stable")] = np.arange(len(position))
    best = np.maximum.accumulate(state_key[order] * states.num_rows + rank[order])  # per key: keys are sorted
    best_row = np.argsort(rank)[best - state_key[order] * states.num_rows]
    committed = states["committed_offset"].combine_chunks()
    deleted = states["deleted"].combine_chunks().to_numpy(zero_copy_only=False)

    # the keys of each partition, contiguous
    by_part = np.argsort(key_part, kind="stable")
    counts = np.bincount(key_part, minlength=parts.num_rows)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))

    out = []
    per_obs = counts[obs_part]
    bounds = np.concatenate(([0], np.cumsum(per_obs)))
    first = 0
    while first < obs.num_rows:
        last = int(np.searchsorted(bounds, bounds[first] + PAIRS_PER_CHUNK, side="right")) - 1
        last = max(last, first + 1)
        rows = np.arange(first, last)
        n = per_obs[rows]
        pair_obs = np.repeat(rows, n)
        within = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        pair_key = by_part[np.repeat(starts[obs_part[rows]], n) + within]
        t_rel = np.clip(obs_ms[pair_obs] - low + 1, 0, span - 1)
        at = np.searchsorted(by_time, pair_key * span + t_rel, side="right") - 1
        hit = at >= 0
        hit[hit] &= state_key[order][at[hit]] == pair_key[hit]
        state = best_row[at[hit]]
        live = ~deleted[state]
        pair_obs, pair_key, state = pair_obs[hit][live], pair_key[hit][live], state[live]
        out.append(_rows(obs, keys, pair_obs, pair_key, committed.take(pa.array(state))))
        first = last
    return pa.concat_tables(out) if out else _LAG_SCHEMA.empty_table()


def _rows(obs: pa.Table, keys: pa.Table, pair_obs: np.ndarray, pair_key: np.ndarray, committed: pa.Array) -> pa.Table:
    take_obs, take_key = pa.array(pair_obs), pa.array(pair_key)
    end = obs["end_offset"].take(take_obs)
    committed_array = committed.cast(pa.int64())
    return pa.Table.from_arrays(
        [
            obs["cluster"].take(take_obs),
            keys["group_id"].take(take_key),
            obs["topic"].take(take_obs),
            obs["partition"].take(take_obs),
            obs["observed_at"].take(take_obs),
            end,
            committed_array,
            pc.subtract(end, committed_array),
        ],
        schema=_LAG_SCHEMA,
    )
