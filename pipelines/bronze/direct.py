"""Bronze's large reads, written by the tasks that read them.

Spark's read of segment files (the ``kafka_segments`` data source) hands every record to the JVM,
which keeps the read persisted, then encodes it again as Parquet: at 10M records that read and
write took 73-84 s and 54-62 s on 2 cores (docs/performance.md). Here each task reads its byte
ranges (:func:`~pipelines.bronze.segments_source.read_range`, as the data source's tasks do) and
writes the records as bronze's Parquet files itself (:mod:`pipelines.runtime.taskwrite`); only the
ranges' progress and issue rows, and the files' add actions, come back to the driver.

The files are committed only when the append is exactly what the sink's MERGE would insert: no
file changed under the reader, no position repeats among the records, and bronze holds nothing
where they lie (:func:`~pipelines.bronze.sink.may_hold`), which the driver knows only after the
read. Otherwise (a re-read of what bronze holds, overlapping copies of a segment) the files are
dropped and the caller reads again through the sink's MERGE. The shared steps of the driver's
read (:func:`sides`, :func:`run_columns`) live here too.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.bronze import file_log
from pipelines.bronze.segments_source import (
    FILE_CHANGED,
    PROGRESS_COLUMNS,
    ByteRange,
    arrow_schema,
    cluster_for,
    pack,
    read_range,
)
from pipelines.runtime import blobs, faults, taskwrite
from pipelines.runtime.files import filesystem

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.bronze.sink import IngestResult
    from pipelines.runtime.config import SegmentsSource
    from pipelines.runtime.tables import Tables

log = logging.getLogger(__name__)

PROGRESS_ROW = ("cluster", "partition", "source_uri", *PROGRESS_COLUMNS)
# the read's columns a read issue is recorded with, as bronze.read_issues names them
ISSUE_COLUMNS = {
    "cluster": "cluster",
    "partition": "partition",
    "source_uri": "source_uri",
    "batch_position": "position",
    "issue_length": "length",
    "issue_kind": "kind",
    "issue_reason": "reason",
    "issue_detail": "detail",
    "last_segment": "last_segment",
}
# what a reading task returns: its files' add actions, then one row holding its progress and
# issue rows as an Arrow IPC stream
OUT_DDL = f"{taskwrite.ADD_DDL}, side binary"


# -- steps shared with the driver's read -------------------------------------------------------------------
def found(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], set[str]]:
    """The ranges' progress rows and the files that changed under the reader, from the read's
    progress rows and ``file_changed`` issues. A file that is not the one listed any more: nothing
    read of it is kept (file_log keeps its previous row, so the next run plans it afresh, as if the
    change came before this run)."""
    changed = {r["source_uri"] for r in rows if r["row_kind"] == "issue"}
    return [r for r in rows if r["row_kind"] == "progress" and r["source_uri"] not in changed], changed


def sides(raw: pa.Table, run_id: str) -> tuple[list[dict[str, Any]], set[str], pa.Table]:
    """From a read's rows (records may be among them): the ranges' progress rows, the files that
    changed under the reader, and the issues to record (bronze.read_issues' columns but
    ``detected_at``; those of a changed file only its ``file_changed`` issue)."""
    kind = raw["row_kind"]
    wanted = pc.or_(pc.equal(kind, "progress"), pc.fill_null(pc.equal(raw["issue_kind"], FILE_CHANGED), False))
    progress, changed = found(raw.filter(wanted).select(["row_kind", *PROGRESS_ROW]).to_pylist())
    from_changed = pc.is_in(raw["source_uri"], pa.array(sorted(changed), pa.string()))
    issue = pc.and_(pc.equal(kind, "issue"), pc.or_(pc.equal(raw["issue_kind"], FILE_CHANGED), pc.invert(from_changed)))
    issues = raw.filter(issue).select(list(ISSUE_COLUMNS)).rename_columns(list(ISSUE_COLUMNS.values()))
    return progress, changed, issues.append_column("run_id", pa.repeat(pa.scalar(run_id), issues.num_rows))


def run_columns(records: pa.Table, run_id: str, now: datetime) -> pa.Table:
    """Record rows of a segments read with the columns bronze adds: not resolved by a broker,
    their source kind, the run and the time that ingested them."""
    n = records.num_rows
    return (
        records.append_column("resolved_by_broker", pa.repeat(pa.scalar(False), n))
        .append_column("source_kind", pa.repeat(pa.scalar("segments"), n))
        .append_column("run_id", pa.repeat(pa.scalar(run_id), n))
        .append_column("ingested_at", pa.repeat(pa.scalar(now, pa.timestamp("us", tz="UTC")), n))
    )


# -- in the tasks ------------------------------------------------------------------------------------------
def read_task(
    batches: Iterable[pa.RecordBatch],
    target: taskwrite.Target,
    cluster: str,
    pattern: str | None,
    run_id: str,
    now: datetime,
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: read the byte ranges of the task (a ``ranges`` column of JSON lists),
    write their records as bronze files, return the files' add actions and the other rows."""
    schema = arrow_schema()
    side: list[pa.RecordBatch] = []

    def records(inputs: Iterable[pa.RecordBatch]) -> Iterator[pa.Table]:
        for batch in inputs:
            for task in batch.column("ranges").to_pylist():
                for item in json.loads(task):
                    r = ByteRange(**item)
                    for read in read_range(r, cluster_for(r.uri, cluster, pattern)):
                        record = pc.equal(read.column("row_kind"), "record")
                        if not pc.all(record).as_py():
                            side.append(read.filter(pc.invert(record)))
                            read = read.filter(record)
                        if read.num_rows:
                            yield run_columns(pa.Table.from_batches([read]), run_id, now)

    out = pa.schema([*_ADD_FIELDS, pa.field("side", pa.binary())])
    for actions in taskwrite.write_files(batches, target, records):
        yield pa.RecordBatch.from_arrays([*actions.columns, pa.nulls(actions.num_rows, pa.binary())], schema=out)
    blob = blobs.ipc(pa.Table.from_batches(side, schema))
    yield pa.RecordBatch.from_arrays([pa.nulls(1, f.type) for f in _ADD_FIELDS] + [pa.array([blob])], schema=out)


_ADD_FIELDS = list(taskwrite.ADD_SCHEMA)


# -- on the driver -----------------------------------------------------------------------------------------
def read_and_write(
    spark: SparkSession,
    tables: Tables,
    name: str,
    source: SegmentsSource,
    run_id: str,
    ranges: list[ByteRange],
    result: IngestResult,
) -> tuple[list[dict[str, Any]], set[str]] | None:
    """Read the byte ranges in Spark's tasks, which write the records as bronze files; commit them
    when that append is what the sink would write (module docstring). Returns the ranges' progress
    rows and the files that changed under the reader; None when bronze's files must be written by
    the sink instead (nothing committed, the files written dropped): the caller reads again."""
    from pipelines.bronze.sink import may_hold, record_issues  # the sink writes bronze; this module feeds it

    tables.ensure("bronze", "offsets_records")
    tables.ensure("bronze", "conflicts")
    path = tables.path("bronze", "offsets_records")
    opened = taskwrite.opened(path)
    if opened is None:
        return None
    table, goal = opened
    faults.point("bronze.before_write")
    tasks = [(json.dumps([asdict(r) for r in task]),) for task in pack(ranges, source.split_bytes)]
    frame = spark.sparkContext.parallelize(tasks, len(tasks)).toDF("ranges string")
    read = functools.partial(
        read_task,
        target=goal,
        cluster=source.cluster,
        pattern=source.cluster_from_path,
        run_id=run_id,
        now=datetime.now(timezone.utc),
    )
    with result.steps("read"):
        out = frame.mapInArrow(read, OUT_DDL).toArrow()
    actions = out.filter(pc.is_valid(out["path"])).drop_columns(["side"])
    raw = pa.concat_tables(
        [blobs.table(b) for b in out["side"].to_pylist() if b is not None] or [arrow_schema().empty_table()]
    )
    progress, changed, issues = sides(raw, run_id)
    coverage = file_log.coverage(progress)
    if changed or not coverage.unique or may_hold(spark, path, coverage):
        why = "files changed under the reader" if changed else "bronze may hold these records already"
        log.info("bronze: %s; the sink writes the records instead", why)
        _discard(goal.root, actions)
        return None
    record_issues(spark, tables, result, issues)
    result.rows_read = coverage.records
    if coverage.records:
        meta = {"run_id": run_id, "source": name, "kind": "segments"}
        with result.steps("write"):
            faults.point("bronze.after_write_before_commit")  # the tasks' files are there, uncommitted
            result.rows_inserted, result.conflicts = taskwrite.commit(table, goal, actions, meta), 0
            faults.point("bronze.after_commit")
    return progress, changed


def _discard(root: str, actions: pa.Table) -> None:
    """Delete the files the tasks wrote and nothing commits (best effort: left over, they are what
    a killed writer leaves, which no reader sees and VACUUM removes)."""
    for relative in actions["path"].to_pylist():
        try:
            filesys, path = filesystem(f"{root}/{relative}")
            filesys.delete_file(path)
        except OSError as exc:
            log.debug("bronze: could not delete %s (%s)", relative, exc)
