"""Decoding on Spark: bronze-shaped rows decoded once into what each silver table receives.

:func:`decode_frame` runs :func:`pipelines.silver.split.decode_blobs` in Spark tasks and keeps its
output — per bronze batch and table, that table's rows as an Arrow IPC stream — in a local
checkpoint (:class:`Decoded`). Each table's write then reads only its own blobs and converts
them to Spark rows in exactly its columns; the run's counts, version census and topic ids come
from the same pass, without scanning the decoded rows again.
"""

from __future__ import annotations

import functools
import json
import math
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from pipelines.errors import UnsupportedTable
from pipelines.runtime import blobs as ipc_blobs
from pipelines.runtime import lake
from pipelines.runtime.files import read_parquet
from pipelines.silver.contract import KEY, MEMBER_TABLE, RECORD_TABLES
from pipelines.silver.decode import INPUT_COLUMNS, DecodePlan
from pipelines.silver.inventory import combine_census
from pipelines.silver.split import BLOB_DDL, BLOB_SCHEMA, INVENTORY, RESOLVABLE, TOPIC_IDS, decode_blobs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.runtime.tables import Tables

# bronze rows per Arrow batch handed to the decoder: the columnar decoder has a fixed cost per
# (record type, version) and call, so larger batches decode faster (docs/performance.md)
DECODE_BATCH_ROWS = 50_000
# bronze rows one task decodes, at least, when it reads bronze's files itself (decode_files)
DECODE_TASK_ROWS = 1_000_000
# at most this many bronze rows are read (by delta-rs) and decoded on the driver: Spark's read,
# its Python workers and its checkpoint cost seconds whatever the size (5-9 s of the 200k-record
# demo's silver, where the driver takes about 1 s; docs/performance.md)
LOCAL_DECODE_ROWS = 250_000


@dataclass
class Decoded:
    """The decoded rows of one silver run, checkpointed: per table, Arrow IPC blobs."""

    spark: SparkSession
    blobs: DataFrame | None  # None: decoded on the driver, the blobs are in ``local``
    counts: dict[str, Any] = field(default_factory=dict)
    local: pa.Table | None = None  # the blobs, when decoded on the driver (decode_arrow)
    inventory: pa.Table | None = None  # the census of the decoded bronze rows (version_inventory columns)
    topics: pa.Table | None = None  # (cluster, topic_id, topic_name, first_seen) the rows carry
    sizes: dict[str, int] = field(default_factory=dict)  # per table, the bytes of its IPC blobs
    # tables whose blobs one scan of the checkpoint collects together (:meth:`prefetch`), and the
    # blobs collected and not yet taken
    _scans: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _fetched: dict[str, pa.Table] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def table(self, tables: Tables, name: str) -> DataFrame:
        """The rows of one silver table, in its declared columns (unpacked in as few tasks as
        their count needs: :func:`pipelines.runtime.blobs.frame`)."""
        ddl = tables.spec("silver", name).ddl_columns()
        if self.blobs is None:
            return lake.spark_frame(self.spark, self.arrow(name), ddl)
        return ipc_blobs.frame(self.blobs.where(F.col("table") == name), ddl, self.counts.get(name))

    def tasks(self, name: str) -> DataFrame | None:
        """The checkpointed blobs of one table, in the tasks its rows need (:func:`ipc_blobs.tasks`):
        what tasks writing the table's files themselves read; None when decoded on the driver."""
        if self.blobs is None:
            return None
        return ipc_blobs.tasks(self.blobs.where(F.col("table") == name), self.counts.get(name))

    def prefetch(self, names: Sequence[str]) -> None:
        """Collect the blobs of the tables ``names`` (each to be written from the driver) in as few
        scans of the checkpoint as :data:`lake.LOCAL_WRITE_BYTES` allows, not a scan per table:
        each scan reads every table's blobs to find its own (at 10M records 442 MiB, 2.5-4 s of
        task time on 2 cores, and a build made one per table; docs/performance.md). The scans run when
        :meth:`arrow` first asks for one of their tables."""
        self._scans.update(ipc_blobs.scans({t: self.sizes.get(t, 0) for t in names}, lake.LOCAL_WRITE_BYTES))

    def arrow(self, name: str) -> pa.Table:
        """The rows of one silver table that received rows, on the driver, in its declared
        columns: for a write small enough to skip Spark (:func:`pipelines.runtime.lake.write_arrow`)."""
        if self.local is not None:
            mine = self.local.filter(pc.equal(self.local["table"], name))
        else:
            with self._lock:  # one scan per group, whichever writer asks first
                if name not in self._fetched:
                    scan = self._scans.get(name, (name,))
                    got = ipc_blobs.collect(self.blobs.where(F.col("table").isin(list(scan))), "table", ipc_blobs.DATA)
                    for table in scan:
                        self._fetched[table] = got.filter(pc.equal(got["table"], table))
                mine = self._fetched.pop(name)
        return pa.Table.from_batches(list(ipc_blobs.unpack(mine.to_batches())))

    def topic_pairs_table(self) -> pa.Table:
        """The topic id pairs of these rows, each with its earliest record time."""
        pairs = self.topics
        if pairs is None or not pairs.num_rows:
            return pairs if pairs is not None else pa.table({})
        pairs = pairs.group_by(["cluster", "topic_id", "topic_name"], use_threads=False).aggregate(
            [("first_seen", "min")]
        )
        return pairs.rename_columns(["cluster", "topic_id", "topic_name", "first_seen"])

    def released_keys(self, tables: Tables) -> DataFrame:
        """(cluster, offsets_partition, record_offset, _released) of every decoded row: released
        unless it landed in the quarantine (redecode)."""
        out = None
        for name in RECORD_TABLES:
            if not self.counts.get(name):
                continue
            keys = self.table(tables, name).select(*KEY, F.lit(name != "quarantine").alias("_released"))
            out = keys if out is None else out.unionByName(keys)
        if out is None:
            return self.spark.createDataFrame([], "cluster string, offsets_partition int, record_offset bigint, "
                                              "_released boolean")  # fmt: skip
        return out

    def unpersist(self) -> None:
        if self.blobs is not None:
            self.blobs.unpersist()


def decode_frame(rows: DataFrame, plan: DecodePlan) -> Decoded:
    """Decode bronze-shaped rows in Spark tasks, once: the blobs checkpointed, their counts read."""
    spark = rows.sparkSession
    present = [c for c in INPUT_COLUMNS if c in rows.columns]
    with lake.session_conf(spark, "spark.sql.execution.arrow.maxRecordsPerBatch", str(DECODE_BATCH_ROWS)):
        blobs = (
            rows.select(*present)
            .mapInArrow(functools.partial(decode_blobs, plan=plan), BLOB_DDL)
            .localCheckpoint(eager=True, storageLevel=lake.CHECKPOINT_LEVEL)
        )
    return _listed(spark, blobs, plan)


def decode_files(spark: SparkSession, path: str, version: int, plan: DecodePlan) -> Decoded | None:
    """:func:`decode_frame` of bronze's snapshot at ``version``, its data files read by the decoding
    tasks themselves with pyarrow (the file list from the Delta log, :func:`lake.data_files`),
    balanced by their rows: Spark's reader turned every row into a JVM row and back into Arrow for
    the Python tasks (a 10M-record snapshot decoded in 70.4 s that way, 48.1 s this way on 2 cores;
    docs/performance.md). None when the files cannot be read this way (deletion vectors): the
    caller reads the snapshot with Spark."""
    try:
        listed = lake.data_files(spark, {"bronze": path}, ("cluster", "partition"), (), {"bronze": version})["bronze"]
    except UnsupportedTable:
        return None
    schema = lake.arrow_schema(path, version)
    if schema is None:
        return None
    columns = pa.schema([f for f in schema if f.name in INPUT_COLUMNS])
    rows = sum(f.rows or 0 for f in listed)
    count = max(1, min(len(listed), max(spark.sparkContext.defaultParallelism, math.ceil(rows / DECODE_TASK_ROWS))))
    tasks: list[list[tuple[str, str | None, str | None]]] = [[] for _ in range(count)]
    load = [0] * count
    for f in sorted(listed, key=lambda f: -(f.rows or 0)):  # the largest first, each to the lightest task
        i = load.index(min(load))
        tasks[i].append((f.uri, *f.partition))
        load[i] += f.rows or 0
    frame = spark.sparkContext.parallelize([(json.dumps(t),) for t in tasks], count).toDF("files string")
    decode = functools.partial(decode_bronze_files, plan=plan, schema=columns)
    blobs = frame.mapInArrow(decode, BLOB_DDL).localCheckpoint(eager=True, storageLevel=lake.CHECKPOINT_LEVEL)
    return _listed(spark, blobs, plan)


def decode_bronze_files(
    batches: Iterable[pa.RecordBatch], plan: DecodePlan, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body of :func:`decode_files`: each (uri, cluster, partition) of the task's
    ``files`` read and decoded (``schema``: bronze's input columns; the partition columns, which
    the files do not hold, from the Delta log's partition values)."""
    stored = pa.schema([f for f in schema if f.name not in ("cluster", "partition")])
    for batch in batches:
        for task in batch.column("files").to_pylist():
            for uri, cluster, partition in json.loads(task):
                rows = read_parquet([uri], stored)
                n = rows.num_rows
                rows = rows.append_column(schema.field("cluster"), pa.repeat(pa.scalar(cluster, pa.string()), n))
                rows = rows.append_column(
                    schema.field("partition"), pa.repeat(pa.scalar(int(partition), pa.int32()), n)
                )
                yield from decode_blobs(rows.select(schema.names).to_batches(max_chunksize=DECODE_BATCH_ROWS), plan)


def _listed(spark: SparkSession, blobs: DataFrame, plan: DecodePlan) -> Decoded:
    """The :class:`Decoded` of checkpointed ``blobs``."""
    # one scan of the checkpoint: every blob's table, rows and bytes, and the census and topic id
    # blobs themselves (each scan reads every blob)
    small = F.when(F.col("table").isin(INVENTORY, TOPIC_IDS), F.col(ipc_blobs.DATA)).alias(ipc_blobs.DATA)
    got = ipc_blobs.collect(blobs.select("table", "rows", F.length(ipc_blobs.DATA).alias("bytes"), small),
                            "table", "rows", "bytes", ipc_blobs.DATA)  # fmt: skip
    listing = list(zip(got["table"].to_pylist(), got["rows"].to_pylist(), got["bytes"].to_pylist(), strict=True))
    census = got.filter(pc.is_in(got["table"], pa.array([INVENTORY, TOPIC_IDS])))
    pairs = list(zip(census["table"].to_pylist(), census[ipc_blobs.DATA].to_pylist(), strict=True))
    return _counted(Decoded(spark, blobs), listing, pairs, plan)


def decode_arrow(spark: SparkSession, rows: pa.Table, plan: DecodePlan) -> Decoded:
    """:func:`decode_frame` on the driver, for bronze rows read as Arrow (at most
    :data:`LOCAL_DECODE_ROWS`): the same blobs, kept on the driver; a table's Spark frame is made
    from its Arrow rows only when a Spark write needs one."""
    present = [c for c in INPUT_COLUMNS if c in rows.column_names]
    batches = rows.select(present).to_batches(max_chunksize=DECODE_BATCH_ROWS)
    local = pa.Table.from_batches(list(decode_blobs(batches, plan)), BLOB_SCHEMA)
    sizes = pc.binary_length(local[ipc_blobs.DATA]).to_pylist()
    listing = list(zip(local["table"].to_pylist(), local["rows"].to_pylist(), sizes, strict=True))
    small = local.filter(pc.is_in(local["table"], pa.array([INVENTORY, TOPIC_IDS])))
    pairs = list(zip(small["table"].to_pylist(), small[ipc_blobs.DATA].to_pylist(), strict=True))
    return _counted(Decoded(spark, None, local=local), listing, pairs, plan)


def _counted(
    decoded: Decoded, listing: list[tuple[str, int, int]], small: list[tuple[str, bytes]], plan: DecodePlan
) -> Decoded:
    """``decoded`` with its counts, sizes, census and topic ids, from its blobs' (table, rows,
    bytes) listing and the census and topic id blobs."""
    counts: dict[str, Any] = {t: 0 for t in (*RECORD_TABLES, MEMBER_TABLE)}
    for table, rows, size in listing:
        counts[table] = counts.get(table, 0) + rows
        decoded.sizes[table] = decoded.sizes.get(table, 0) + (size or 0)
    inventory = [ipc_blobs.table(data) for table, data in small if table == INVENTORY]
    topics = [ipc_blobs.table(data) for table, data in small if table == TOPIC_IDS]
    decoded.inventory = combine_census(inventory, plan.tables["version_inventory"])
    decoded.topics = pa.concat_tables(topics) if topics else plan.tables["topic_ids"].empty_table()
    inv = decoded.inventory
    counts["_rows"] = int(pc.sum(inv.column("records")).as_py() or 0) if inv.num_rows else 0
    counts["_pairs"] = sorted(set(zip(inv.column("cluster").to_pylist(), inv.column("offsets_partition").to_pylist(),
                                      strict=True)))  # fmt: skip
    counts["_topic_carriers"] = decoded.topics.num_rows
    counts["_topic_ids_to_resolve"] = counts.pop(RESOLVABLE, 0)
    decoded.counts = counts
    return decoded
