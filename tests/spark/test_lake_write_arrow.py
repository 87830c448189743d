"""lake.write_arrow: the small commits the driver writes with delta-rs are read back by Spark as
if Spark had written them — rows, NOT NULL columns, the change data feed silver's readers use, the
commit metadata gold's plan reads — and what delta-rs cannot write is left to Spark."""

from __future__ import annotations

import pyarrow as pa
import pytest

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
