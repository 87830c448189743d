"""Arrow IPC blobs carried through a Spark checkpoint: how silver's decode and gold's replay hand
each table its rows.

A Python task (``mapInArrow``) returns, per table, that table's rows as one Arrow IPC stream in a
binary column; the driver checkpoints that frame once, and each table's write unpacks only its
own blobs (:func:`frame`). Unpacking runs in Python tasks, and each task has a fixed cost that
dwarfs a small table's rows (measured on 2 cores: unpacking one table's blobs from 8 checkpoint
partitions took 1.1 s, from one 0.27 s), so a write gets as few tasks as its rows need.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["DATA", "ROWS_PER_TASK", "collect", "frame", "ipc", "scans", "table", "tasks", "unpack", "unpacked"]

DATA = "data"  # the binary column holding the IPC streams
# rows one unpacking task takes before a write gets another (the frame's own partitions are the cap)
ROWS_PER_TASK = 250_000


def ipc(table: pa.Table) -> bytes:
    """``table`` as one Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def table(blob: bytes) -> pa.Table:
    """The rows of one IPC stream (:func:`ipc`'s inverse)."""
    return pa.ipc.open_stream(blob).read_all()


def collect(blobs: DataFrame, *columns: str) -> pa.Table:
    """``columns`` of ``blobs`` on the driver, as Arrow. Spark sends each partition's rows as Arrow
    batches as its task ends, where ``collect()`` holds the whole result in the driver JVM three
    times (as bytes, as rows, as pickles): beside large writes and the checkpoint's cached blocks,
    that ran a 4 GB heap out at 30M records (docs/performance.md)."""
    return blobs.select(*columns).toArrow()


def scans(sizes: dict[str, int], limit: int) -> dict[str, tuple[str, ...]]:
    """Tables (name -> bytes of their blobs) grouped for collecting to the driver together, each
    group at most ``limit`` bytes (a table over it alone): a table -> its group. A scan of a
    checkpoint reads every blob to find the ones it wants, so one scan per group, not per table."""
    out: dict[str, tuple[str, ...]] = {}
    group: list[str] = []
    size = 0
    for name in sorted(sizes, key=lambda t: (sizes[t], t)):
        if group and size + sizes[name] > limit:
            out.update(dict.fromkeys(group, tuple(group)))
            group, size = [], 0
        group.append(name)
        size += sizes[name]
    out.update(dict.fromkeys(group, tuple(group)))
    return out


def unpack(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: the rows of the IPC streams in the :data:`DATA` column."""
    for batch in batches:
        for blob in batch.column(DATA).to_pylist():
            if blob:
                yield from pa.ipc.open_stream(blob)


def unpacked(
    batches: Iterable[pa.RecordBatch], fill: Callable[[pa.Table], pa.Table] | None = None
) -> Iterator[pa.Table]:
    """:func:`unpack`'s rows as tables, each passed through ``fill`` where given: what a task
    writing a table's files itself makes of its blobs (:func:`pipelines.runtime.lake.append_from_tasks`)."""
    for batch in unpack(batches):
        rows = pa.Table.from_batches([batch])
        yield fill(rows) if fill is not None else rows


def tasks(blobs: DataFrame, rows: int | None = None) -> DataFrame:
    """``blobs``' :data:`DATA` in as few partitions as their ``rows`` need (when known):
    ``ceil(rows / ROWS_PER_TASK)``, at least one, at most the partitions ``blobs`` has."""
    if rows is not None:
        blobs = blobs.coalesce(max(1, math.ceil(rows / ROWS_PER_TASK)))
    return blobs.select(DATA)


def frame(blobs: DataFrame, ddl: str, rows: int | None = None) -> DataFrame:
    """The rows of ``blobs``' IPC streams as a DataFrame with columns ``ddl``, unpacked in the
    tasks :func:`tasks` gives them (``rows``: how many they hold, when known)."""
    return tasks(blobs, rows).mapInArrow(unpack, ddl)
