"""lake.data_files: the data files delta-rs lists from a Delta log equal the ones Spark's snapshot
lists, file by file with partition values and statistics, and pyarrow reads of them equal Spark's
reads — across checkpoints, overwrites, old versions and partition values that need escaping."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.errors import UnsupportedTable
from pipelines.runtime import lake
from pipelines.runtime.files import read_parquet

pytestmark = pytest.mark.spark

PART = ("cluster", "offsets_partition")
# names a partition directory must escape (Hive escaping) and an add action must URI-encode
CLUSTERS = ("plain", "a b:c", "per%cent", "ünï/code=x")


def _rows(spark, n: int, start: int) -> object:
    return spark.createDataFrame(
        [(CLUSTERS[i % len(CLUSTERS)], i % 3, start + i, None if i % 5 == 0 else f"v{i}") for i in range(n)],
        "cluster string, offsets_partition int, record_offset bigint, note string",
    )


@pytest.fixture(scope="module")
def table(spark, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("lake-files") / "t")
    _rows(spark, 40, 0).write.format("delta").partitionBy(*PART).save(path)
    for k in range(1, 12):  # past Delta's checkpoint interval (10): a checkpoint and commits after it
        _rows(spark, 8, 1000 * k).write.format("delta").mode("append").save(path)
    # an overwrite of one partition: its earlier files are removed
    lake.replace_where(_rows(spark, 8, 90_000).where("offsets_partition = 1"), path, "offsets_partition = 1")
    return path


def _by_spark(spark, path: str) -> dict:
    files = lake._files_by_spark(spark, {"t": path}, PART, ("record_offset", "note"))["t"]
    return {f.uri: f for f in files}


def _by_delta_rs(path: str, version: int | None = None) -> dict:
    files = lake._files_by_delta_rs(path, PART, ("record_offset", "note"), version)
    return {f.uri: f for f in files}


def test_delta_rs_lists_exactly_the_files_spark_lists(spark, table: str) -> None:
    assert Path(table, "_delta_log", "00000000000000000010.checkpoint.parquet").exists()
    want, got = _by_spark(spark, table), _by_delta_rs(table)
    assert got == want
    assert len(want) > 40
    assert {f.partition[0] for f in want.values()} == set(CLUSTERS)
    assert all(Path(uri).is_file() for uri in got)  # escaped names resolve to the files on disk


def test_reading_the_listed_files_gives_spark_s_rows(spark, table: str) -> None:
    import pyarrow as pa

    schema = pa.schema([("record_offset", pa.int64()), ("note", pa.string())])
    files = lake.data_files(spark, {"t": table}, PART, ("record_offset",))["t"]
    got = {}
    for f in files:
        for r in read_parquet([f.uri], schema).to_pylist():
            got[r["record_offset"]] = (f.partition[0], int(f.partition[1]), r["note"])
    want = {r[2]: (r[0], r[1], r[3]) for r in spark.read.format("delta").load(table).collect()}
    assert got == want and len(want) > 80


def test_an_old_version_lists_the_files_of_that_version(spark, table: str) -> None:
    at_three = _by_delta_rs(table, 3)
    rows = spark.read.format("delta").option("versionAsOf", 3).load(table).count()
    assert sum(f.rows for f in at_three.values()) == rows == 40 + 3 * 8
    assert set(at_three) < set(_by_delta_rs(table, 11))


def test_ranges_per_partition_equal_spark_s_aggregate(spark, table: str) -> None:
    """Rows and the bounds of a column per partition, from the log's statistics (a checkpoint, later
    commits and an overwritten partition included), equal what Spark computes from the rows."""
    from pyspark.sql import functions as F

    got = lake.ranges_per_partition(table, PART, ["record_offset"])
    assert got is not None
    want = (
        spark.read.format("delta")
        .load(table)
        .groupBy(*PART)
        .agg(F.count("*").alias("n"), F.min("record_offset").alias("lo"), F.max("record_offset").alias("hi"))
        .collect()
    )
    assert len(want) > 8  # every cluster, several partitions each
    assert {
        (r["cluster"], r["offsets_partition"], r["records"], r["min_record_offset"], r["max_record_offset"])
        for r in got.to_pylist()
    } == {(r[PART[0]], r[PART[1]], r["n"], r["lo"], r["hi"]) for r in want}


def test_no_table_is_no_files(spark, tmp_path: Path) -> None:
    assert lake.data_files(spark, {"x": str(tmp_path / "nothing")}, PART) == {"x": []}


def test_deletion_vectors_are_refused_with_how_to_switch_them_off(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "dv")
    _rows(spark, 240, 0).write.format("delta").partitionBy(*PART).save(path)
    lake.set_property(spark, path, "delta.enableDeletionVectors", "true")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE record_offset = 4")
    with pytest.raises(UnsupportedTable, match="enableDeletionVectors"):
        lake.data_files(spark, {"t": path}, PART)
    # the files' row counts include the deleted rows: counts from the log are not given
    assert spark.read.format("delta").load(path).count() < 240
    assert lake.row_count(path) is None and lake.rows_per_partition(path, PART) is None
    assert lake.ranges_per_partition(path, PART, ["record_offset"]) is None  # nor bounds over deleted rows


def test_an_empty_read_becomes_an_empty_frame_with_its_schema(spark) -> None:
    """delta-rs returns an empty read as columns without chunks, from which pyspark cannot build a
    frame ("cannot construct ChunkedArray from empty vector"); spark_frame keeps the schema."""
    import pyarrow as pa

    schema = pa.schema([("cluster", pa.string()), ("offsets", pa.list_(pa.int64()))])
    empty = pa.Table.from_batches([], schema)
    with pytest.raises(Exception, match="empty vector"):
        spark.createDataFrame(empty)
    frame = lake.spark_frame(spark, empty)
    assert frame.dtypes == [("cluster", "string"), ("offsets", "array<bigint>")] and frame.count() == 0
