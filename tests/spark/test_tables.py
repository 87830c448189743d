"""Tables.ensure and Tables.register: a job's ensure creates a table by delta-rs as declared
without registering its name; a name follows the root of the Tables that registers it; properties
and nullable columns a newer declaration adds reach tables created before it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException

from pipelines.runtime import lake
from pipelines.runtime.tables import Tables


def test_ensure_creates_the_declared_table_without_registering_its_name(spark, tmp_path) -> None:
    tables = Tables(spark, str(tmp_path / "lake"))
    spark.sql("DROP TABLE IF EXISTS silver.tombstones")
    tables.ensure("silver", "tombstones")
    spec = tables.spec("silver", "tombstones")
    path = tables.path("silver", "tombstones")
    assert not spark.catalog.tableExists("silver.tombstones")  # a job reads and writes by path
    log = (Path(path) / "_delta_log" / "00000000000000000000.json").read_text()
    assert '"engineInfo":"delta-rs' in log  # created from the driver, not by Spark SQL
    # Spark sees the declaration: columns, NOT NULLs, comments, partitioning, properties, description
    spark.sql("CREATE SCHEMA IF NOT EXISTS silver")
    spark.sql(f"CREATE TABLE silver.tombstones USING DELTA LOCATION '{path}'")
    fields = {f.name: f for f in spark.table("silver.tombstones").schema.fields}
    assert list(fields) == [c.name for c in spec.columns]
    assert {n for n, f in fields.items() if not f.nullable} == {c.name for c in spec.columns if not c.nullable}
    assert all(fields[c.name].metadata.get("comment", "") == c.comment for c in spec.columns)
    detail = spark.sql("DESCRIBE DETAIL silver.tombstones").collect()[0]
    assert detail["partitionColumns"] == list(spec.partitioned_by)
    assert detail["description"] == spec.comment
    assert detail["properties"]["delta.enableChangeDataFeed"] == "true"
    spark.sql("DROP TABLE silver.tombstones")


def test_a_name_follows_the_root_that_registers_it(spark, tmp_path) -> None:
    first, second = Tables(spark, str(tmp_path / "one")), Tables(spark, str(tmp_path / "two"))
    first.register("gold", "partition_progress")
    spark.sql("INSERT INTO gold.partition_progress VALUES ('c', 1, 5, 5, 'r', false, NULL)")
    second.register("gold", "partition_progress")
    assert spark.sql("SELECT count(*) AS n FROM gold.partition_progress").collect()[0]["n"] == 0
    first.register("gold", "partition_progress")
    assert spark.sql("SELECT count(*) AS n FROM gold.partition_progress").collect()[0]["n"] == 1
    spark.sql("DROP TABLE gold.partition_progress")  # no other test in this session meets this root


def test_properties_added_to_a_declaration_reach_existing_tables(spark, tmp_path) -> None:
    tables = Tables(spark, str(tmp_path / "lake"))
    spark.sql("DROP TABLE IF EXISTS gold.partition_progress")
    tables.ensure("gold", "partition_progress")
    path = tables.path("gold", "partition_progress")
    spec = tables.specs["gold"]["partition_progress"]
    newer = dataclasses.replace(spec, properties={**spec.properties, "delta.logRetentionDuration": "interval 60 days"})
    tables.specs["gold"]["partition_progress"] = newer
    tables.ensure("gold", "partition_progress")  # the upgrade: delta-rs sees the property missing, Spark sets it
    props = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0]["properties"]
    assert props.get("delta.logRetentionDuration") == "interval 60 days"
    version = lake.version(spark, path)
    spark.sql("DROP TABLE IF EXISTS gold.partition_progress")  # a new session: the name is not registered
    tables.ensure("gold", "partition_progress")  # nothing left to add: no new version
    assert lake.version(spark, path) == version


def test_columns_added_to_a_declaration_reach_existing_tables(spark, tmp_path) -> None:
    """An upgrade that adds a nullable column: the existing table gets it (old rows null) and the
    new writer's rows land beside the old ones; a non-nullable addition is refused clearly."""
    import pytest

    from pipelines.errors import ConfigError

    tables = Tables(spark, str(tmp_path / "lake"))
    spec = tables.specs["gold"]["partition_progress"]
    older = dataclasses.replace(spec, columns=tuple(c for c in spec.columns if c.name != "in_flight_run"))
    tables.specs["gold"]["partition_progress"] = older
    spark.sql("DROP TABLE IF EXISTS gold.partition_progress")
    tables.ensure("gold", "partition_progress")
    path = tables.path("gold", "partition_progress")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES ('c', 1, 5, 5, 'r', false)")
    tables.specs["gold"]["partition_progress"] = spec
    tables.ensure("gold", "partition_progress")  # the upgrade: delta-rs sees the column missing, Spark adds it
    spark.sql(f"INSERT INTO delta.`{path}` VALUES ('c', 2, 7, 7, 'r2', false, 'run-x')")
    rows = {r["offsets_partition"]: r["in_flight_run"] for r in spark.read.format("delta").load(path).collect()}
    assert rows == {1: None, 2: "run-x"}
    required = dataclasses.replace(
        spec, columns=(*spec.columns, dataclasses.replace(spec.columns[0], name="must_have", nullable=False))
    )
    tables.specs["gold"]["partition_progress"] = required
    spark.sql("DROP TABLE gold.partition_progress")
    with pytest.raises(ConfigError, match="non-nullable columns \\['must_have'\\]"):
        tables.ensure("gold", "partition_progress")


# -- the lakehouse I/O module (pipelines/runtime/lake.py) ---------------------------------------------------
def _kv(spark, rows):
    return spark.createDataFrame(rows, "cluster string, offsets_partition int, k int, v string")


def test_lake_reads_what_exists_and_nothing_else(spark, tmp_path) -> None:
    path = str(tmp_path / "t")
    assert not lake.exists(spark, path)
    assert lake.read(spark, path) is None
    assert lake.version(spark, path) is None
    lake.append(_kv(spark, [("a", 0, 1, "x"), ("a", 1, 2, "y")]), path)
    assert lake.exists(spark, path)
    assert lake.version(spark, path) == 0
    assert lake.last_commit(spark, path)["operation"] == "WRITE"
    assert [r["k"] for r in lake.read(spark, path, "offsets_partition = 1").collect()] == [2]


def test_lake_insert_new_inserts_each_key_once_within_the_given_partitions(spark, tmp_path) -> None:
    path = str(tmp_path / "t")
    lake.append(_kv(spark, [("a", 0, 1, "x")]), path)
    batch = _kv(spark, [("a", 0, 1, "changed"), ("a", 0, 2, "new")])
    assert lake.insert_new(spark, path, batch, ["cluster", "offsets_partition", "k"], [("a", 0)]) == 1
    assert lake.insert_new(spark, path, batch, ["cluster", "offsets_partition", "k"], [("a", 0)]) == 0
    assert lake.version(spark, path) == 1  # inserting nothing writes no version
    assert sorted((r["k"], r["v"]) for r in lake.read(spark, path).collect()) == [(1, "x"), (2, "new")]


def test_lake_replace_if_changed_writes_only_a_difference(spark, tmp_path) -> None:
    path = str(tmp_path / "t")
    key, columns = ["cluster", "offsets_partition", "k"], ["cluster", "offsets_partition", "k", "v"]
    lake.append(_kv(spark, [("a", 0, 1, "x"), ("a", 1, 1, "other partition")]), path)
    where = "cluster = 'a' AND offsets_partition = 0"
    same = _kv(spark, [("a", 0, 1, "x")])
    assert lake.replace_if_changed(spark, path, same, where, key, columns) == (False, False)
    assert lake.version(spark, path) == 0
    assert lake.replace_if_changed(spark, path, _kv(spark, [("a", 0, 1, "y")]), where, key, columns) == (True, False)
    grown = _kv(spark, [("a", 0, 1, "y"), ("a", 0, 2, "z")])
    assert lake.replace_if_changed(spark, path, grown, where, key, columns) == (True, True)
    assert lake.version(spark, path) == 2
    rows = sorted((r["offsets_partition"], r["k"], r["v"]) for r in lake.read(spark, path).collect())
    assert rows == [(0, 1, "y"), (0, 2, "z"), (1, 1, "other partition")]
    lake.replace_partitions(_kv(spark, [("a", 1, 5, "p")]), path, [("a", 1)])
    assert sorted(r["k"] for r in lake.read(spark, path, "offsets_partition = 1").collect()) == [5]


def test_lake_commit_metadata_is_read_back_newest_first(spark, tmp_path) -> None:
    path = str(tmp_path / "t")
    lake.append(_kv(spark, [("a", 0, 1, "x")]), path)
    with lake.commit_metadata(spark, {"run": 1}):
        lake.append(_kv(spark, [("a", 0, 2, "x")]), path)
    assert spark.conf.get(lake.METADATA_CONF, None) is None  # not left on the session
    frame = _kv(spark, [])
    lake.commit_empty(spark, path, frame.schema, {"run": 2})  # no rows, still a commit
    assert [(v, meta) for v, _, meta in lake.tagged_commits(spark, path)] == [(2, {"run": 2}), (1, {"run": 1})]
    assert list(lake.tagged_commits(spark, str(tmp_path / "none"))) == []


def test_a_create_killed_before_its_first_commit_does_not_block_the_next(spark, tmp_path) -> None:
    """A process SIGKILLed while creating a table leaves ``_delta_log`` with only the temporary
    file of commit 0 (seen in tests/e2e/test_silver_crash.py); the next ``ensure`` creates the
    table. A location holding anything else is left alone and the create fails."""
    tables = Tables(spark, str(tmp_path / "lakehouse"))
    path = Path(tables.path("silver", "tombstones"))
    (path / "_delta_log" / "_staged_commits").mkdir(parents=True)
    (path / "_delta_log" / ".00000000000000000000.json.23cedbac.tmp").write_bytes(b"")
    tables.ensure("silver", "tombstones")
    assert lake.exists(spark, str(path)) and lake.version(spark, str(path)) == 0

    other = Path(tables.path("silver", "transaction_markers"))
    (other / "_delta_log").mkdir(parents=True)
    (other / "part-00000.parquet").write_bytes(b"not ours to delete")
    with pytest.raises(AnalysisException, match="DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION"):
        tables.ensure("silver", "transaction_markers")
    assert (other / "part-00000.parquet").read_bytes() == b"not ours to delete"
