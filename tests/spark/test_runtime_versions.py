"""The running versions (Python packages and JVM jars) are the pinned ones."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

from pipelines.runtime import jars

REPO = Path(__file__).resolve().parents[2]


def pins() -> dict[str, str]:
    # exact pins ("name==version") in pyproject.toml's dependency list
    text = (REPO / "pyproject.toml").read_text()
    return {m.group(1).lower(): m.group(2) for m in re.finditer(r'^\s*"([\w\-]+)==([\w.]+)",', text, re.M)}


def test_python_packages_match_pins() -> None:
    p = pins()
    assert version("pyspark") == p["pyspark"]
    assert version("delta-spark") == p["delta-spark"]
    major, minor = (int(x) for x in version("great_expectations").split(".")[:2])
    assert (major, minor) >= (1, 19)


def test_pom_matches_python_pins() -> None:
    v = jars.pom_versions()
    assert v["spark.version"] == pins()["pyspark"], "spark-sql-kafka must match the pyspark version exactly"
    assert v["delta.version"] == pins()["delta-spark"]
    assert "delta-spark_4.1_2.13" in jars.POM.read_text(), "Delta artifact for Spark 4.1"


def test_session_runs_the_pinned_jvm_versions(spark) -> None:
    assert spark.version == pins()["pyspark"]
    names = {p.name for p in jars.resolve()}
    assert f"delta-spark_4.1_2.13-{pins()['delta-spark']}.jar" in names
    assert f"spark-sql-kafka-0-10_2.13-{pins()['pyspark']}.jar" in names
    jvm = spark.sparkContext._jvm

    def jar_of(cls: str) -> str:  # the jar the JVM actually loaded the class from
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()  # spark.jars live here
        return Path(loader.loadClass(cls).getProtectionDomain().getCodeSource().getLocation().getPath()).name

    assert jar_of("io.delta.tables.DeltaTable") == f"delta-spark_4.1_2.13-{pins()['delta-spark']}.jar"
    assert jar_of("org.apache.spark.sql.kafka010.KafkaSourceProvider") == (
        f"spark-sql-kafka-0-10_2.13-{pins()['pyspark']}.jar"
    )


def test_s3a_matches_the_wheels_hadoop_and_the_log_store_is_built() -> None:
    """hadoop-aws must be the release of the Hadoop client inside the pyspark wheel (S3A calls
    into hadoop-common's internals), and the log store for object stores compiles against it."""
    (client,) = [p.name for p in jars.pyspark_jars_dir().glob("hadoop-client-api-*.jar")]
    hadoop = re.fullmatch(r"hadoop-client-api-([\d.]+)\.jar", client).group(1)  # type: ignore[union-attr]
    assert f"<hadoop.version>{hadoop}</hadoop.version>" in jars.POM.read_text()
    names = {p.name for p in jars.resolve()}
    assert f"hadoop-aws-{hadoop}.jar" in names
    assert "offsets-lakehouse-jvm.jar" in names
    assert not any(n.startswith("bundle-") for n in names), "the 640 MB SDK bundle is excluded"
