"""Tables.ensure on existing lakehouses: a name follows the root of the Tables that ensures it,
and properties and nullable columns a newer declaration adds reach tables created before it (when a
session first registers them)."""

from __future__ import annotations

import dataclasses

from pipelines.runtime.tables import Tables


def test_a_name_follows_the_root_that_ensures_it(spark, tmp_path) -> None:
    first, second = Tables(spark, str(tmp_path / "one")), Tables(spark, str(tmp_path / "two"))
    first.ensure("gold", "partition_progress")
    spark.sql("INSERT INTO gold.partition_progress VALUES ('c', 1, 5, 5, 'r', false, NULL)")
    second.ensure("gold", "partition_progress")
    assert spark.sql("SELECT count(*) AS n FROM gold.partition_progress").collect()[0]["n"] == 0
    first.ensure("gold", "partition_progress")
    assert spark.sql("SELECT count(*) AS n FROM gold.partition_progress").collect()[0]["n"] == 1


def test_properties_added_to_a_declaration_reach_existing_tables(spark, tmp_path) -> None:
    tables = Tables(spark, str(tmp_path / "lake"))
    tables.ensure("gold", "partition_progress")
    spec = tables.specs["gold"]["partition_progress"]
    newer = dataclasses.replace(spec, properties={**spec.properties, "delta.logRetentionDuration": "interval 60 days"})
    tables.specs["gold"]["partition_progress"] = newer
    spark.sql("DROP TABLE gold.partition_progress")  # a new session: the name is not registered yet
    tables.ensure("gold", "partition_progress")
    props = spark.sql("DESCRIBE DETAIL gold.partition_progress").collect()[0]["properties"]
    assert props.get("delta.logRetentionDuration") == "interval 60 days"
    version = spark.sql("DESCRIBE HISTORY gold.partition_progress").collect()[0]["version"]
    tables.ensure("gold", "partition_progress")  # nothing left to add: no new version
    assert spark.sql("DESCRIBE HISTORY gold.partition_progress").collect()[0]["version"] == version


def test_columns_added_to_a_declaration_reach_existing_tables(spark, tmp_path) -> None:
    """An upgrade that adds a nullable column: the existing table gets it (old rows null) and the
    new writer's rows land beside the old ones; a non-nullable addition is refused clearly."""
    import pytest

    from pipelines.errors import ConfigError

    tables = Tables(spark, str(tmp_path / "lake"))
    spec = tables.specs["gold"]["partition_progress"]
    older = dataclasses.replace(spec, columns=tuple(c for c in spec.columns if c.name != "in_flight_run"))
    tables.specs["gold"]["partition_progress"] = older
    tables.ensure("gold", "partition_progress")
    spark.sql("INSERT INTO gold.partition_progress VALUES ('c', 1, 5, 5, 'r', false)")
    tables.specs["gold"]["partition_progress"] = spec
    spark.sql("DROP TABLE gold.partition_progress")  # a new session after the upgrade
    tables.ensure("gold", "partition_progress")
    spark.sql("INSERT INTO gold.partition_progress VALUES ('c', 2, 7, 7, 'r2', false, 'run-x')")
    rows = {r["offsets_partition"]: r["in_flight_run"] for r in spark.table("gold.partition_progress").collect()}
    assert rows == {1: None, 2: "run-x"}
    required = dataclasses.replace(
        spec, columns=(*spec.columns, dataclasses.replace(spec.columns[0], name="must_have", nullable=False))
    )
    tables.specs["gold"]["partition_progress"] = required
    spark.sql("DROP TABLE gold.partition_progress")
    with pytest.raises(ConfigError, match="non-nullable columns \\['must_have'\\]"):
        tables.ensure("gold", "partition_progress")
