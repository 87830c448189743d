"""The segments source's ingestion log (``bronze.ingested_files``): which files were read, how far.

Like a file stream source's log: one row per (source, file) with the file's size and
modification time when it was read, the byte position right after the last complete entry read
(``consumed_bytes``) and a fingerprint of the last complete batch (its position and stored CRC).
A run lists the files and plans each from its row (:func:`plan_files`):

* **new** (no row, or the row names another cluster): read whole;
* **unchanged** (same size and modification time): not read;
* **grown** (anything else, with the fingerprinted batch still at its position): read from
  ``consumed_bytes``, a known batch boundary, so only the appended bytes and a torn tail left
  last time are read;
* **replaced** (smaller than what was consumed, or the fingerprint differs: the log cleaner
  swapped in a compacted copy): read whole again.

The data source reports per byte range what it consumed (``row_kind = 'progress'`` rows); this
module folds them into the file's new row (:func:`logged_after`) and into where the rows read lie
(:func:`coverage`), which lets the sink append instead of MERGE. The log is written after the data
commit: a run killed in between reads the same bytes again and the sink's overlap check routes
them to the insert-only MERGE, which inserts nothing twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import SparkSession

from pipelines.bronze.fs import RemoteSegment
from pipelines.bronze.segments_source import ByteRange
from pipelines.bronze.sink import Coverage, Span
from pipelines.runtime import lake

if TYPE_CHECKING:
    from pipelines.runtime.tables import TableSpec

__all__ = [
    "ACTIONS",
    "FilePlan",
    "FileState",
    "changed",
    "counts",
    "coverage",
    "load",
    "logged_after",
    "plan_files",
    "ranges",
    "save",
]

NEW, UNCHANGED, GROWN, REPLACED = "new", "unchanged", "grown", "replaced"
ACTIONS = (NEW, UNCHANGED, GROWN, REPLACED)


@dataclass(frozen=True)
class FileState:
    """A row of ``bronze.ingested_files``: what the source knows about one file."""

    source: str
    cluster: str
    file_uri: str
    partition: int
    size: int
    modified_ns: int | None
    consumed_bytes: int
    last_offset: int | None
    fingerprint_position: int | None
    fingerprint_crc: int | None
    action: str
    run_id: str
    logged_at: datetime | None = None


@dataclass(frozen=True)
class FilePlan:
    """What a run does with one listed file: read it from ``start`` (``start == size``: not at all)."""

    segment: RemoteSegment
    cluster: str
    action: str
    start: int
    previous: FileState | None = None


# -- planning (pure) -----------------------------------------------------------------------------------
def plan_files(
    listed: Iterable[tuple[RemoteSegment, str]],
    logged: dict[str, FileState],
    crc_at: Callable[[str, int], int | None],
) -> list[FilePlan]:
    """A plan per listed (file, cluster), from the file's row in the log (``logged`` by URI).
    ``crc_at(uri, position)`` reads the CRC stored at a position: called only for files that
    changed, to tell a grown file from a replaced one."""
    return [_plan(seg, cluster, logged.get(seg.uri), crc_at) for seg, cluster in listed]


def _plan(
    seg: RemoteSegment, cluster: str, prev: FileState | None, crc_at: Callable[[str, int], int | None]
) -> FilePlan:
    if prev is None or prev.cluster != cluster:
        return FilePlan(seg, cluster, NEW, 0, None)
    if seg.size == prev.size and seg.mtime_ns is not None and seg.mtime_ns == prev.modified_ns:
        return FilePlan(seg, cluster, UNCHANGED, seg.size, prev)
    if seg.size >= prev.consumed_bytes and _fingerprint_holds(seg.uri, prev, crc_at):
        return FilePlan(seg, cluster, GROWN, prev.consumed_bytes, prev)
    return FilePlan(seg, cluster, REPLACED, 0, prev)


def _fingerprint_holds(uri: str, prev: FileState, crc_at: Callable[[str, int], int | None]) -> bool:
    if prev.consumed_bytes == 0:
        return True  # nothing was consumed: reading from 0 is reading it whole anyway
    if prev.fingerprint_position is None or prev.fingerprint_crc is None:
        return False  # only corrupt entries were read: nothing to verify, so read it again
    return crc_at(uri, prev.fingerprint_position) == prev.fingerprint_crc


def ranges(plans: Iterable[FilePlan], split_bytes: int) -> list[ByteRange]:
    """The byte ranges to read: each file from its planned start, in ranges of ``split_bytes``.
    A range carries the start as a known batch boundary, so a tail's reader starts there."""
    out = []
    for p in plans:
        seg = p.segment
        assert seg.partition is not None  # checked when listed (ingest._cluster_of)
        for start in range(p.start, seg.size, split_bytes):
            end = min(start + split_bytes, seg.size)
            out.append(
                ByteRange(seg.uri, start, end, seg.partition, seg.is_last, seg.index_uri, p.start, *seg.listed_as())
            )
    return out


def counts(plans: Iterable[FilePlan]) -> dict[str, int]:
    """Files per action (every action listed, zeros included)."""
    c = Counter(p.action for p in plans)
    return {a: c[a] for a in ACTIONS}


# -- what was read (pure) ----------------------------------------------------------------------------
def logged_after(
    plans: Iterable[FilePlan],
    progress: Iterable[dict[str, Any]],
    source: str,
    run_id: str,
    changed: Collection[str] = (),
) -> list[FileState]:
    """The log's rows for this source after the run: the files listed now (rows of unchanged files
    kept as they were), each read file advanced by its ranges' progress rows. A file that changed
    after it was listed keeps its previous row (none if it had none): the next run plans it again."""
    by_uri: dict[str, list[dict[str, Any]]] = {}
    for row in progress:
        by_uri.setdefault(row["source_uri"], []).append(row)
    out = []
    for p in plans:
        if p.segment.uri in changed:
            if p.previous is not None:
                out.append(p.previous)
            continue
        out.append(_after(p, _in_file_order(by_uri.get(p.segment.uri, [])), source, run_id))
    return out


def _in_file_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: r["range_start"])


def _after(plan: FilePlan, progress: list[dict[str, Any]], source: str, run_id: str) -> FileState:
    seg, prev = plan.segment, plan.previous
    if plan.action == UNCHANGED and prev is not None:
        return prev
    # a tail read continues what was read before; a whole read starts afresh
    kept = prev if plan.action == GROWN and prev is not None else None
    consumed, last = plan.start, kept.last_offset if kept else None
    fp = (kept.fingerprint_position, kept.fingerprint_crc) if kept else (None, None)
    for row in progress:  # in file order
        if row["consumed"] is not None:
            consumed = max(consumed, row["consumed"])
        if row["last_offset"] is not None:
            last = row["last_offset"] if last is None else max(last, row["last_offset"])
        if row["fingerprint_position"] is not None:
            fp = (row["fingerprint_position"], row["fingerprint_crc"])
    assert seg.partition is not None
    return FileState(
        source, plan.cluster, seg.uri, seg.partition, seg.size, seg.mtime_ns, consumed, last, fp[0], fp[1],
        plan.action, run_id,
    )  # fmt: skip


def coverage(progress: Iterable[dict[str, Any]]) -> Coverage:
    """From the progress rows: a range's records lie in [first_offset, last_offset]; keys are
    unique when each range's offsets strictly increase and no two ranges' spans overlap (two
    copies of a segment, or a compaction caught mid-way, overlap: then the sink deduplicates)."""
    raw: dict[tuple[str, int], list[Span]] = {}
    unique, records = True, 0
    for row in progress:
        records += row["records"]
        if not row["records"]:
            continue
        unique &= bool(row["offsets_ordered"])
        raw.setdefault((row["cluster"], row["partition"]), []).append((row["first_offset"], row["last_offset"]))
    spans = {}
    for pair, found in raw.items():
        merged, disjoint = _merge(found)
        spans[pair] = merged
        unique &= disjoint
    return Coverage(spans, unique, records)


def _merge(spans: list[Span]) -> tuple[list[Span], bool]:
    """Overlapping spans merged (adjacent ones too: fewer terms in the predicate); whether none overlapped."""
    out: list[Span] = []
    disjoint = True
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1] + 1:
            disjoint &= lo > out[-1][1]
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out, disjoint


# -- the table --------------------------------------------------------------------------------------
def load(spark: SparkSession, path: str, source: str) -> dict[str, FileState]:
    """The source's rows of the log, by file URI (none before the source's first run)."""
    rows = lake.read_arrow(spark, path)  # a small table, read on the driver
    if rows is None:
        return {}
    return {r["file_uri"]: FileState(**r) for r in rows.to_pylist() if r["source"] == source}


def changed(before: dict[str, FileState], after: list[FileState]) -> bool:
    """Whether the log must be written: a file read, or one that is no longer listed."""
    return {s.file_uri: s for s in after} != before


def save(spark: SparkSession, path: str, source: str, rows: list[FileState], spec: TableSpec) -> None:
    """Replace the source's rows by ``rows`` in one commit (files no longer listed drop out: a file
    that comes back is read whole, and the sink's overlap check keeps that exact)."""
    now = datetime.now(timezone.utc)
    stamped = [asdict(r if r.logged_at is not None else replace(r, logged_at=now)) for r in rows]
    table = pa.Table.from_pylist(stamped, spec.arrow())
    lake.write_rows(spark, table, path, spec.struct(), f"source = {lake.sql_str(source)}")
