"""Buckets: one offsets partition's replay split by group, so that a task's memory stays bounded.

The replay holds a partition's events and state in a Python worker (:mod:`pipelines.gold.engine`:
a dict entry per key, a handle per event, the rows it writes), so its memory follows the
partition's size, and one partition can hold most of a cluster (the partition is the hash of the
group id: a few large consumer fleets can land in one). A partition larger than
:data:`ROWS_PER_BUCKET` is therefore replayed as ``buckets`` independent units, each taking the
groups whose id hashes (CRC-32, unrelated to Kafka's partitioner) to its index:

* every rule of the replay is per group or per key, and a key belongs to one group: the offsets,
  pending transactional offsets, group records, generations, members and offsets-only groups of a
  group are replayed by one bucket, in log order, exactly as in a whole-partition replay;
* a transaction marker names no group: every bucket reads every marker and applies it to the
  pending offsets it holds (a producer's marker ends its pending offsets of every group);
* what is the partition's, not a group's, is taken from all of its events while they are read
  (:class:`PartitionFacts`): the events count, the applied offset (the last event), the log time
  the soft-delete retention is measured against (the latest event), and the position and time of
  the last event of each batch (the engine dates a batch's changes by its last event, which may
  be another bucket's).

A partition of at most :data:`READ_ONCE_ROWS` rows is replayed by one task that reads its files
once (:func:`read_buckets`: its rows as Arrow, split by bucket) and replays the buckets one after
another, so the task holds the partition's rows but one bucket's replay at a time. A larger one (a
skewed partition) gets a task per bucket: each reads the partition's files itself (silver's above
the applied offset and, for an incremental run, its persisted gold rows) in chunks of
:data:`CHUNK_ROWS` rows, keeping only its groups' rows, so it holds about ``1 / buckets`` of the
partition, plus one chunk and the batch facts (four integers per batch). The price is that each
file of such a partition is read once per bucket; those buckets run in parallel tasks. The floor
is one group: a group is never split, so the largest bucket holds at least the largest group.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.gold.events import MEMBERS_TABLE, SOURCES, selected
from pipelines.runtime.files import filesystem, floor_ms

__all__ = ["ALL_BUCKETS", "CHUNK_ROWS", "READ_ONCE_ROWS", "ROWS_PER_BUCKET", "PartitionFacts", "bucket_index",
           "buckets_for", "iter_parquet", "keep_bucket", "read_bucket", "read_buckets", "reads_once",
           "split_buckets"]  # fmt: skip

# rows of a partition (silver rows to replay, plus the events applied before when it resumes: the
# size of its persisted state) per bucket: a bucket's Python worker then peaks near 1 GiB (measured,
# docs/performance.md#skew-and-cardinality)
ROWS_PER_BUCKET = 250_000
CHUNK_ROWS = 65_536  # rows read from a Parquet file at a time by a bucket
# a bucketed partition of at most this many rows is replayed by one task that reads its files once
# and replays its buckets one after another (:func:`read_buckets`), holding the partition's rows as
# Arrow (some 150 MB per million) and one bucket's replay at a time. A task per bucket reads every
# file once per bucket: at 30M records each partition held 600k rows, made 3 buckets and was read 3
# times (gold's replay 4.3 x the 10M build's; docs/performance.md). Larger partitions (skew) keep a
# task per bucket: their rows would not fit, and their buckets replay in parallel.
READ_ONCE_ROWS = 2_000_000
ALL_BUCKETS = -1  # a task's bucket index when it replays every bucket of its partition
_NO_TIME = np.iinfo(np.int64).min  # a null timestamp in the batch facts
GROUP_RECORDS = "group_metadata"  # the source whose records group_members' rows belong to


def buckets_for(rows: int) -> int:
    """How many buckets a partition of ``rows`` rows is replayed in."""
    return max(1, math.ceil(rows / ROWS_PER_BUCKET))


def reads_once(rows: int) -> bool:
    """Whether a bucketed partition of ``rows`` rows is replayed by one task that reads it once
    (:data:`READ_ONCE_ROWS`), not by a task per bucket."""
    return rows <= READ_ONCE_ROWS


def bucket_index(groups: pa.Array | pa.ChunkedArray, buckets: int) -> np.ndarray:
    """Per row, the bucket of its group id (a null id: bucket 0)."""
    if isinstance(groups, pa.ChunkedArray):
        groups = groups.combine_chunks()
    if not len(groups):
        return np.zeros(0, np.int64)
    encoded = pc.dictionary_encode(groups)
    of_value = np.array(
        [0 if g is None else zlib.crc32(g.encode()) % buckets for g in encoded.dictionary.to_pylist()], np.int64
    )
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    valid = pc.is_valid(encoded.indices).to_numpy(zero_copy_only=False)
    return np.where(valid, of_value[np.where(valid, indices, 0).astype(np.int64)] if len(of_value) else 0, 0)


def iter_parquet(
    uris: Sequence[str],
    schema: pa.Schema,
    after: tuple[str, int] | None = None,
    timestamps_as_ms: Sequence[str] = (),
    equal: tuple[str, int] | None = None,
) -> Iterator[pa.Table]:
    """:func:`pipelines.runtime.files.read_parquet`, in chunks of at most :data:`CHUNK_ROWS` rows:
    the same columns, types and filters, never a whole file in memory."""
    for uri in uris:
        filesys, path = filesystem(uri)
        with filesys.open_input_file(path) as fh:
            pf = pq.ParquetFile(fh, coerce_int96_timestamp_unit="us")
            present = set(pf.schema_arrow.names)
            wanted = [n for n in schema.names if n in present]
            if equal is not None and equal[0] in present and equal[0] not in wanted:
                wanted.append(equal[0])
            for batch in pf.iter_batches(batch_size=CHUNK_ROWS, columns=wanted):
                table = pa.Table.from_batches([batch])
                if equal is not None and equal[0] in present and table.num_rows:
                    table = table.filter(pc.equal(table.column(equal[0]), equal[1]))
                if after is not None and table.num_rows:
                    table = table.filter(pc.greater(table.column(after[0]), after[1]))
                if not table.num_rows:
                    continue
                cols = []
                for f in schema:
                    if f.name not in present:
                        cols.append(pa.nulls(table.num_rows, f.type))
                        continue
                    col = table.column(f.name)
                    if f.name in timestamps_as_ms and pa.types.is_timestamp(col.type):
                        col = floor_ms(col)
                    cols.append(col if col.type == f.type else col.cast(f.type))
                yield pa.Table.from_arrays(cols, schema=schema)


@dataclass
class PartitionFacts:
    """What a bucket needs to know of its whole partition's events (not only its own groups'):
    counted over every event row as the bucket reads it."""

    events: int = 0
    last_offset: int | None = None  # the last event's position: the partition's applied offset
    log_now: int | None = None  # the latest event time: the soft-delete retention's clock
    # per batch seen so far: batch id -> (last event offset, its time or _NO_TIME, events)
    _ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    _last: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    _time: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    _count: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def add(self, rows: pa.Table) -> None:
        """Count event rows (with ``record_offset``, ``batch_base_offset``, ``timestamp`` in ms)."""
        n = rows.num_rows
        if not n:
            return
        offsets = rows.column("record_offset").to_numpy(zero_copy_only=False).astype(np.int64)
        ids = offsets
        if "batch_base_offset" in rows.column_names:
            ids = pc.coalesce(rows.column("batch_base_offset"), rows.column("record_offset"))
            ids = ids.to_numpy(zero_copy_only=False).astype(np.int64)
        times = np.full(n, _NO_TIME, np.int64)
        if "timestamp" in rows.column_names:
            ts = rows.column("timestamp")
            times = pc.fill_null(ts, _NO_TIME).to_numpy(zero_copy_only=False).astype(np.int64)
            latest = pc.max(ts).as_py()
            if latest is not None:
                self.log_now = latest if self.log_now is None else max(self.log_now, latest)
        self.events += n
        top = int(offsets.max())
        self.last_offset = top if self.last_offset is None else max(self.last_offset, top)
        self._merge(ids, offsets, times, np.ones(n, np.int64))

    def _merge(self, ids: np.ndarray, last: np.ndarray, times: np.ndarray, count: np.ndarray) -> None:
        ids = np.concatenate([self._ids, ids])
        last = np.concatenate([self._last, last])
        times = np.concatenate([self._time, times])
        count = np.concatenate([self._count, count])
        order = np.lexsort((last, ids))  # by batch, then position: a batch's last event ends its run
        ids, last, times, count = ids[order], last[order], times[order], count[order]
        ends = np.flatnonzero(np.append(ids[1:] != ids[:-1], True))
        starts = np.concatenate([[0], ends[:-1] + 1])
        self._ids, self._last, self._time = ids[ends], last[ends], times[ends]
        self._count = np.add.reduceat(count, starts) if len(count) else count

    def batch_last(self, events: pa.Table) -> tuple[list[int], list[int | None]]:
        """Per event of a bucket (``batch_id``, ``record_offset``, ``timestamp_ms``): the position and
        time of its batch's last event in the whole partition."""
        own_offset = events.column("record_offset").to_pylist()
        own_time = events.column("timestamp_ms").to_pylist()
        if not events.num_rows or not len(self._ids):
            return own_offset, own_time
        ids = events.column("batch_id").to_numpy(zero_copy_only=False).astype(np.int64)
        at = np.clip(np.searchsorted(self._ids, ids), 0, len(self._ids) - 1)
        found = self._ids[at] == ids
        last = np.where(found, self._last[at], np.asarray(own_offset, np.int64)).tolist()
        times = self._time[at].tolist()
        return last, [
            (None if t == _NO_TIME else t) if hit else own for t, hit, own in zip(times, found, own_time, strict=True)
        ]


def read_bucket(
    chunks: Callable[[str], Iterable[pa.Table]], buckets: int, index: int
) -> tuple[Callable[[str], pa.Table | None], PartitionFacts]:
    """Read a partition's silver rows (``chunks(table)``: its rows above the applied offset, in
    chunks) keeping those of bucket ``index`` of ``buckets``, and count the partition's facts on the
    way. Returns a reader of the kept rows for :func:`pipelines.gold.events.partition_events`."""
    facts = PartitionFacts()
    kept: dict[str, pa.Table | None] = {}
    for source in SOURCES:
        parts = []
        for chunk in chunks(source.table):
            rows = selected(chunk, source)
            facts.add(rows)
            if "group_id" in rows.column_names:  # transaction markers name no group: every bucket
                rows = rows.filter(pa.array(bucket_index(rows.column("group_id"), buckets) == index))
            if rows.num_rows:
                parts.append(rows)
        kept[source.table] = pa.concat_tables(parts) if parts else None
    # the members of the bucket's classic group records (group_members rows name their record)
    records = kept.get(GROUP_RECORDS)
    at = pa.array([], pa.int64()) if records is None else records.column("record_offset").combine_chunks()
    members = [c.filter(pc.is_in(c.column("record_offset"), at)) for c in chunks(MEMBERS_TABLE)] if len(at) else []
    members = [m for m in members if m.num_rows]
    kept[MEMBERS_TABLE] = pa.concat_tables(members) if members else None
    return kept.get, facts


def read_buckets(
    chunks: Callable[[str], Iterable[pa.Table]], buckets: int
) -> tuple[list[Callable[[str], pa.Table | None]], PartitionFacts]:
    """:func:`read_bucket` for every bucket of the partition, reading its rows once: per bucket, a
    reader of exactly the rows :func:`read_bucket` keeps for it, in the same order."""
    facts = PartitionFacts()
    kept: list[dict[str, pa.Table | None]] = [{} for _ in range(buckets)]
    for source in SOURCES:
        parts = []
        for chunk in chunks(source.table):
            rows = selected(chunk, source)
            facts.add(rows)
            if rows.num_rows:
                parts.append(rows)
        rows = pa.concat_tables(parts) if parts else None
        if rows is not None and "group_id" not in rows.column_names:  # transaction markers: every bucket
            mine = [rows] * buckets
        else:
            mine = split_buckets(rows, buckets)
        for i in range(buckets):
            kept[i][source.table] = mine[i]
    # the members of each bucket's classic group records (group_members rows name their record)
    ats = [b[GROUP_RECORDS].column("record_offset").combine_chunks() if b.get(GROUP_RECORDS) else None for b in kept]
    members = None
    if any(at is not None for at in ats):
        parts = [c for c in chunks(MEMBERS_TABLE) if c.num_rows]
        members = pa.concat_tables(parts) if parts else None
    for i, at in enumerate(ats):
        mine = None if members is None or at is None else members.filter(pc.is_in(members.column("record_offset"), at))
        kept[i][MEMBERS_TABLE] = mine if mine is not None and mine.num_rows else None
    return [b.get for b in kept], facts


def split_buckets(rows: pa.Table | None, buckets: int) -> list[pa.Table | None]:
    """Per bucket, its rows of ``rows`` (a ``group_id`` column), in their order; None for none."""
    if rows is None or not rows.num_rows:
        return [None] * buckets
    index = bucket_index(rows.column("group_id"), buckets)
    out: list[pa.Table | None] = []
    for i in range(buckets):
        mine = rows.filter(pa.array(index == i))
        out.append(mine if mine.num_rows else None)
    return out


def keep_bucket(chunks: Iterable[pa.Table], buckets: int, index: int) -> pa.Table | None:
    """The rows of bucket ``index`` of ``chunks`` (tables with a ``group_id`` column), joined."""
    parts = []
    for chunk in chunks:
        rows = chunk.filter(pa.array(bucket_index(chunk.column("group_id"), buckets) == index))
        if rows.num_rows:
            parts.append(rows)
    return pa.concat_tables(parts) if parts else None
