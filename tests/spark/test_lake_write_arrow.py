"""lake.write_arrow: the small commits the driver writes with delta-rs are read back by Spark as
if Spark had written them — rows, NOT NULL columns, the change data feed silver's readers use, the
commit metadata gold's plan reads — and what delta-rs cannot write is left to Spark."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame

from pipelines.runtime import lake

pytestmark = pytest.mark.spark

DDL = "cluster STRING NOT NULL, offsets_partition INT NOT NULL, record_offset BIGINT NOT NULL, note STRING"
SCHEMA = pa.schema(
    [("cluster", pa.string()), ("offsets_partition", pa.int32()), ("record_offset", pa.int64()), ("note", pa.string())]
)


def _rows(cluster: str, part: int, offsets: range, note: str | None = "x") -> pa.Table:
    n = len(offsets)
    return pa.table(
        {"cluster": [cluster] * n, "offsets_partition": [part] * n, "record_offset": list(offsets), "note": [note] * n},
        schema=SCHEMA,
    )


def _create(spark, path: str, properties: str = "'delta.enableChangeDataFeed' = 'true'") -> None:
    spark.sql(f"CREATE TABLE delta.`{path}` ({DDL}) USING delta PARTITIONED BY (cluster) TBLPROPERTIES ({properties})")


def _spark_rows(spark, path: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())


def test_appends_and_replaces_read_back_by_spark_with_change_feed_and_metadata(spark, tmp_path) -> None:
    path = str(tmp_path / "t")
    _create(spark, path)
    assert lake.write_arrow(_rows("a", 0, range(0, 5)), path)  # append
    assert lake.write_arrow(_rows("b", 1, range(0, 3), None), path)
    # replace partition 0 of cluster a on a data column: the rows of b stay
    where = "cluster = 'a' AND offsets_partition IN (0)"
    assert lake.write_arrow(_rows("a", 0, range(10, 12), "y"), path, where, metadata={"silver_versions": {"t": 7}})
    want = [("a", 0, 10, "y"), ("a", 0, 11, "y")] + [("b", 1, o, None) for o in range(3)]
    assert _spark_rows(spark, path) == sorted(want)
    assert lake.latest_metadata(spark, path) == {"silver_versions": {"t": 7}}
    # Spark's change data feed over the delta-rs commits: inserts, then the replace's delete and insert
    feed = lake.changes(spark, path, 1, lake.version(spark, path)).where("cluster = 'a'")
    kinds = sorted((r[0], r[1]) for r in feed.select("record_offset", "_change_type").collect())
    assert kinds == sorted([(o, "insert") for o in (0, 1, 2, 3, 4, 10, 11)] + [(o, "delete") for o in range(5)])
    # "true" replaces every row
    assert lake.write_arrow(_rows("c", 2, range(1)), path, "true")
    assert _spark_rows(spark, path) == [("c", 2, 0, "x")]
    # and Spark writes on after delta-rs
    lake.append(spark.createDataFrame([("c", 2, 1, None)], DDL), path)
    assert _spark_rows(spark, path) == [("c", 2, 0, "x"), ("c", 2, 1, None)]


def test_rows_outside_the_predicate_and_nulls_in_not_null_columns_are_refused(spark, tmp_path) -> None:
    path = str(tmp_path / "t")
    _create(spark, path)
    assert lake.write_arrow(_rows("a", 0, range(3)), path)
    before = lake.version(spark, path)
    with pytest.raises(Exception, match=r"(?i)invalid|predicate|validation"):
        lake.write_arrow(_rows("a", 1, range(3)), path, "cluster = 'a' AND offsets_partition IN (0)")
    nulls = pa.table({"cluster": [None], "offsets_partition": [0], "record_offset": [9], "note": ["n"]}, schema=SCHEMA)
    with pytest.raises(Exception, match=r"(?i)null"):
        lake.write_arrow(nulls, path)
    assert lake.version(spark, path) == before
    assert _spark_rows(spark, path) == [("a", 0, o, "x") for o in range(3)]


def test_a_table_delta_rs_cannot_write_is_left_to_spark(spark, tmp_path) -> None:
    path = str(tmp_path / "dv")
    _create(spark, path, "'delta.enableDeletionVectors' = 'true'")  # a writer feature delta-rs lacks
    before = lake.version(spark, path)
    assert not lake.write_arrow(_rows("a", 0, range(3)), path)
    assert lake.version(spark, path) == before
    assert not lake.write_arrow(_rows("a", 0, range(3)), str(tmp_path / "missing"))  # no table there
    # an object store's commits are coordinated for Spark's log store: Spark writes there
    assert not lake.write_arrow(_rows("a", 0, range(3)), "s3a://bucket/lakehouse/silver/t")


def test_write_rows_carries_the_metadata_of_the_context_it_runs_in(spark, tmp_path) -> None:
    """A caller inside lake.commit_metadata (a Spark session setting) gets it on the commit whichever
    writer makes it: quality's memo of what it validated rides on its results' commit."""
    path = str(tmp_path / "t")
    _create(spark, path)
    schema = spark.createDataFrame([], DDL).schema
    with lake.commit_metadata(spark, {"validated": {"silver": 3}}):
        lake.write_rows(spark, _rows("a", 0, range(2)), path, schema)
    assert lake.latest_metadata(spark, path) == {"validated": {"silver": 3}}
    lake.write_rows(spark, _rows("a", 0, range(2, 3)), path, schema, metadata={"validated": {"silver": 4}})
    assert lake.latest_metadata(spark, path) == {"validated": {"silver": 4}}
    assert len(_spark_rows(spark, path)) == 3


# -- lake.append_from_tasks: large appends whose files the tasks write ----------------------------------
TASK_DDL = (
    "cluster STRING NOT NULL, offsets_partition INT NOT NULL, record_offset BIGINT NOT NULL, "
    "timestamp TIMESTAMP, note STRING, tags ARRAY<STRUCT<tag: BIGINT, data: BINARY>>"
)


def _task_rows(batches):
    """A task's rows, made of its input (task numbers): 40 rows per task over two clusters and
    two offsets partitions, sub-millisecond timestamps, a NOT NULL column the caller can break."""
    start = datetime(2024, 5, 1, tzinfo=timezone.utc)
    for batch in batches:
        for task in batch.column("task").to_pylist():
            n = range(task * 40, task * 40 + 40)
            yield pa.table(
                {
                    "cluster": ["a b/c" if i % 2 else "plain" for i in n],
                    "offsets_partition": pa.array([i % 4 // 2 for i in n], pa.int32()),
                    "record_offset": [None if task < 0 else i * 3 for i in n],
                    "timestamp": [None if i % 7 == 0 else start + timedelta(microseconds=i * 1_001_001) for i in n],
                    "note": [None if i % 5 == 0 else f"note-{i % 9}" for i in n],
                    "tags": [[{"tag": i, "data": b"\x01"}] if i % 3 == 0 else None for i in n],
                }
            )


def _tasks_frame(spark, tasks: list[int]):
    return spark.createDataFrame([(t,) for t in tasks], "task INT").repartition(len(tasks))


def _file_stats(spark, path: str) -> dict:
    """(cluster, offsets_partition) -> the statistics Delta's log holds for its one file, as Spark reads them."""
    files = DataFrame(lake._snapshot(spark, path).allFiles().toDF(), spark).select("partitionValues", "stats")
    out = {}
    for r in files.collect():
        key = (r["partitionValues"]["cluster"], r["partitionValues"]["offsets_partition"])
        assert key not in out
        out[key] = json.loads(r["stats"])
    return out


def test_appends_from_tasks_read_back_by_spark_with_spark_s_statistics(spark, tmp_path) -> None:
    ours, theirs = str(tmp_path / "tasks"), str(tmp_path / "spark")
    for path in (ours, theirs):
        spark.sql(f"CREATE TABLE delta.`{path}` ({TASK_DDL}) USING delta PARTITIONED BY (cluster, offsets_partition) "
                  "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")  # fmt: skip
    with lake.commit_metadata(spark, {"silver_versions": {"t": 3}}):
        assert lake.append_from_tasks(spark, _tasks_frame(spark, [0]), ours, _task_rows) == 40
    # the same rows written by Spark, in one task too: one file per partition on both sides
    rows = pa.concat_tables(_task_rows([pa.record_batch({"task": [0]})]))
    spark.createDataFrame(rows.to_pandas(), TASK_DDL).coalesce(1).write.format("delta").mode("append").save(theirs)
    assert _spark_rows(spark, ours) == _spark_rows(spark, theirs)
    assert lake.latest_metadata(spark, ours) == {"silver_versions": {"t": 3}}
    # the statistics Spark's data skipping reads: as Spark's own, the timestamps' maximum rounded
    # up where Spark's is rounded down (both bound the values; Spark adds the millisecond when reading)
    got, want = _file_stats(spark, ours), _file_stats(spark, theirs)
    assert set(got) == set(want) and len(got) == 4
    for key, stats in want.items():
        assert got[key]["numRecords"] == stats["numRecords"] == 10
        assert got[key]["nullCount"] == stats["nullCount"]  # none for the nested column, as Spark
        for bound in ("minValues", "maxValues"):
            mine = {k: v for k, v in got[key][bound].items() if k != "timestamp"}
            assert mine == {k: v for k, v in stats[bound].items() if k != "timestamp"}, (key, bound)
        assert got[key]["minValues"]["timestamp"] == stats["minValues"]["timestamp"]
        assert got[key]["maxValues"]["timestamp"] >= stats["maxValues"]["timestamp"]
    # a filter Spark answers by skipping files on those statistics
    assert spark.read.format("delta").load(ours).where("record_offset BETWEEN 30 AND 33").count() == 2
    # the change data feed shows the append as inserts; then more tasks append beside Spark
    feed = lake.changes(spark, ours, 1, 1).select("_change_type").distinct().collect()
    assert [r[0] for r in feed] == ["insert"]
    assert lake.append_from_tasks(spark, _tasks_frame(spark, [1, 2]), ours, _task_rows) == 80
    assert len(_spark_rows(spark, ours)) == 120


def test_appends_from_tasks_refuse_what_spark_would_and_leave_what_they_cannot_write(spark, tmp_path) -> None:
    path = str(tmp_path / "t")
    spark.sql(f"CREATE TABLE delta.`{path}` ({TASK_DDL}) USING delta PARTITIONED BY (cluster)")
    before = lake.version(spark, path)
    # a task whose rows break NOT NULL fails the write, and nothing is committed
    with pytest.raises(Exception, match="NOT NULL constraint violated for column: record_offset"):
        lake.append_from_tasks(spark, _tasks_frame(spark, [0, -1]), path, _task_rows)
    assert lake.version(spark, path) == before
    # a CHECK constraint is Spark's to enforce: the tasks write nothing, the caller appends with Spark
    spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT positive CHECK (record_offset >= 0)")
    before = lake.version(spark, path)
    assert lake.append_from_tasks(spark, _tasks_frame(spark, [0]), path, _task_rows) is None
    assert lake.version(spark, path) == before and not _spark_rows(spark, path)


def test_rows_held_on_the_driver_reach_spark_whole_with_empty_batches_among_them(spark) -> None:
    # what a replay on the driver hands Spark's writer: its partitions' rows, some of them none
    rows = pa.concat_tables([_rows("a", 0, range(10)), _rows("a", 1, range(0)), _rows("a", 2, range(20))])
    assert [b.num_rows for b in rows.to_batches()] == [10, 0, 20]
    frame = lake.spark_frame(spark, rows)
    assert sorted(tuple(r) for r in frame.collect()) == sorted(tuple(r.values()) for r in rows.to_pylist())
    assert lake.spark_frame(spark, rows, DDL).count() == 30
    assert lake.spark_frame(spark, SCHEMA.empty_table()).columns == SCHEMA.names
