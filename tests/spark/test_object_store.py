"""The lakehouse on an S3-compatible object store (docs/object-storage.md), against moto's S3
server on loopback behind a proxy (tests/support/store.py): the tier's store, whose settings this
tier's Spark session started with, as a job's does.

A job whose root is ``s3a://`` and whose segment files are on the store too: a first run, an
increment, a no-op run, gold equal to the reference replay of what was read after each; the
commands that read the lakehouse (status, sql, quality report, tables, report) on it; delta-rs
reading every gold table from the store as Spark does. Then the commit coordination itself:
three writers — this JVM, another JVM and delta-rs — appending to one table at once lose no
commit and double none, and a commit whose answer was lost is not committed twice."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from bench.common import gold_differences, split_log
from pipelines.cli.main import cli
from pipelines.generate import generate
from pipelines.reference.replay import replay_paths
from pipelines.runner import Context, run_job
from pipelines.runtime import lake
from pipelines.runtime.tables import Tables, load_specs
from tests.support.jvm import SHORT_RUN_YAML
from tests.support.rows import sorted_rows, spark_rows
from tests.support.store import Store

REPO = Path(__file__).resolve().parents[2]
BUCKET = "lakehouse"


@pytest.fixture(scope="module")
def store(tier_store: Store) -> Store:
    """The tier's store (this tier's session started with its settings, tests/spark/conftest.py)."""
    tier_store.bucket(BUCKET)
    return tier_store


def jobs_yaml(path: Path, root: str, logs: str) -> Path:
    path.write_text(f"""
lakehouse: {{root: "{root}"}}
spark:
  master: local[2]
  conf: {{spark.sql.shuffle.partitions: "2", spark.ui.enabled: "false", {SHORT_RUN_YAML}}}
sources:
  s: {{kind: segments, cluster: onstore, paths: ["{logs}"], offsets_partitions: 4}}
jobs:
  j: {{sources: [s], stages: [bronze, silver, gold, quality]}}
  first: {{sources: [s], stages: [bronze, silver, gold]}}
""")
    return path


def run(config: Path, job: str = "j") -> None:
    """The job in this process, as `offsets-lakehouse run` would run it: this tier's session
    started with the store's settings in its environment (tests/spark/conftest.py)."""
    for db in ("bronze", "silver", "gold", "quality"):  # names follow this job's root
        SparkSession.getActiveSession().sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    report = run_job(Context(config), job)
    assert report.status == "ok", report.to_json()


def gold_versions(spark, tables: Tables) -> dict[str, int | None]:
    return {t: lake.version(spark, tables.path("gold", t)) for t in load_specs()["gold"]}


def test_a_job_on_the_store_first_run_increment_and_no_op(spark, store: Store, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    generate(logs, 6000, seed=29, partitions=4, segment_bytes=16 * 1024)
    source = tmp_path / "source"
    split = split_log(logs, source, 10)  # the log as it was before its last 10 %
    store.upload(source, f"s3://{BUCKET}/job/logs")
    root = f"s3a://{BUCKET}/job/lakehouse"
    config = jobs_yaml(tmp_path / "jobs.yaml", root, f"s3://{BUCKET}/job/logs")

    tables = Tables(spark, root)

    def differences(expected: Path) -> list[str]:
        return gold_differences(spark, tables, expected)

    run(config, "first")  # bronze, silver and gold; quality with the increment
    first = tmp_path / "first-state.json"
    first.write_text(json.dumps(replay_paths([str(source)]).snapshot()))
    assert differences(first) == []

    split.grow()  # the active segments grew and new ones rolled: only those are uploaded again
    store.upload(source, f"s3://{BUCKET}/job/logs", only=[*split.grown, *split.new])
    run(config)
    assert differences(logs / "expected-state.json") == []
    before = gold_versions(spark, tables)

    run(config)  # nothing new: no gold commit, the same state
    assert gold_versions(spark, tables) == before
    assert differences(logs / "expected-state.json") == []

    # -- the commands that read the lakehouse, on the store ---------------------------------------
    runner = CliRunner()

    def cli_json(*args: str) -> list[dict]:
        out = runner.invoke(cli, [*args, "-c", str(config)], catch_exceptions=False)
        assert out.exit_code == 0, out.output
        return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]

    (status,) = cli_json("status", "--json")
    assert status["root"] == root
    counts = {t["table"]: t["rows"] for t in status["tables"]}
    assert counts["bronze.offsets_records"] == json.loads((logs / "generator-manifest.json").read_text())["records"]
    live = spark.read.format("delta").load(f"{root}/gold/current_offsets").where("NOT deleted").count()
    (row,) = cli_json("sql", "SELECT count(*) AS n FROM gold.current_offsets WHERE NOT deleted", "--json")
    assert row == {"n": live} and live == len(json.loads((logs / "expected-state.json").read_text())["offsets"])
    (quality,) = cli_json("quality", "report", "--json")
    assert quality["status"] in ("ok", "failed") and quality["suites"]
    assert quality["data_docs"] == f"{root}/quality/data_docs/{quality['run_id']}/index.html"
    docs = store.client().get_object(
        Bucket=BUCKET, Key=f"job/lakehouse/quality/data_docs/{quality['run_id']}/index.html"
    )
    assert b"offsets-lakehouse-quality-summary" in docs["Body"].read()
    latest = store.client().get_object(Bucket=BUCKET, Key="job/lakehouse/quality/data_docs/LATEST")
    assert latest["Body"].read().decode().strip() == quality["run_id"]
    report = runner.invoke(cli, ["report", "-c", str(config)], catch_exceptions=False)
    assert report.exit_code == 0 and report.stdout.strip() == f"report: {root}/report/index.html", report.output
    assert store.client().head_object(Bucket=BUCKET, Key="job/lakehouse/report/index.html")["ContentLength"] > 0

    # -- gold without Spark: delta-rs with what `tables` prints, credentials from the environment -----
    from deltalake import DeltaTable

    tables = {d["name"]: d for d in cli_json("tables", "--json")}
    gold = [n for n in tables if n.startswith("gold.")]
    assert {n.split(".", 1)[1] for n in gold} == set(load_specs()["gold"])
    for name in gold:
        doc = tables[name]
        assert doc["storage_options"] == {
            "AWS_ENDPOINT_URL": store.endpoint,
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }
        assert "AWS_SECRET_ACCESS_KEY" not in json.dumps(doc) and "test-secret-key" not in json.dumps(doc)
        arrow = DeltaTable(doc["location"].replace("s3a://", "s3://"), storage_options=doc["storage_options"])
        columns, want = spark_rows(spark, doc["location"])
        got = arrow.to_pyarrow_table()
        assert got.column_names == columns, name
        assert sorted_rows(got.to_pylist()) == want, name


# -- the commit coordination --------------------------------------------------------------------
APPENDER = textwrap.dedent("""
    import sys
    from pipelines.runtime.spark import build_session
    from pipelines.runtime.config import SparkSettings
    from pipelines.runtime.storage import S3Settings
    from tests.support.jvm import SHORT_RUN_CONF
    spark = build_session(SparkSettings(master="local[1]", conf={"spark.ui.enabled": "false", **SHORT_RUN_CONF}),
                          store=S3Settings.resolve({}))
    path, n = sys.argv[1], int(sys.argv[2])
    print("ready", flush=True)
    sys.stdin.readline()  # start together
    for i in range(n):
        spark.createDataFrame([("jvm-2", i)], "writer string, i int").write.format("delta").mode("append").save(path)
    print("done", flush=True)
""")


def test_three_writers_on_one_table_lose_no_commit_and_double_none(spark, store: Store, tmp_path: Path) -> None:
    """This JVM, another JVM and delta-rs append to one table on the store at the same time; every
    commit of each is in the table, once, and the store refused some commit files (the writers
    really raced for the same versions and Delta/delta-rs retried at the next one)."""
    import pyarrow as pa

    path = f"s3a://{BUCKET}/race/table"
    spark.createDataFrame([("init", 0)], "writer string, i int").write.format("delta").save(path)
    n = 8
    other = subprocess.Popen(
        [sys.executable, "-c", APPENDER, path, str(n)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert other.stdout is not None and other.stdin is not None
    assert other.stdout.readline().strip() == "ready"
    errors: list[BaseException] = []

    def spark_appends() -> None:
        try:
            for i in range(n):
                spark.createDataFrame([("jvm-1", i)], "writer string, i int").write.format("delta").mode("append").save(
                    path
                )
        except BaseException as exc:
            errors.append(exc)

    def rust_appends() -> None:
        try:
            for i in range(n):
                assert lake.write_arrow(pa.table({"writer": ["delta-rs"], "i": [i]}), path)
        except BaseException as exc:
            errors.append(exc)

    store.proxy.reset_counts()
    threads = [threading.Thread(target=spark_appends), threading.Thread(target=rust_appends)]
    other.stdin.write("go\n")
    other.stdin.flush()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert other.stdout.readline().strip() == "done"
    assert other.wait(timeout=120) == 0
    assert errors == []

    rows = sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())
    want = sorted([("init", 0)] + [(w, i) for w in ("jvm-1", "jvm-2", "delta-rs") for i in range(n)])
    assert rows == want  # nothing lost, nothing twice
    assert lake.version(spark, path) == 3 * n  # one commit each: none overwritten, none repeated
    commits = [p for m, p in store.proxy.paths if m == "PUT" and re.search(r"/_delta_log/\d{20}\.json$", p)]
    assert len(commits) > 3 * n, "every commit file was created at its first try: the writers never raced"


def test_a_commit_whose_answer_was_lost_is_committed_once(spark, store: Store) -> None:
    """S3A retries a commit whose answer never came; the store refuses the retry (the first try
    did create the file). The log store recognises its own write and reports success: without
    that, Delta would take it for another writer's commit and commit the same rows again."""
    path = f"s3a://{BUCKET}/lost-answer/table"
    spark.createDataFrame([(0,)], "i int").write.format("delta").save(path)
    store.proxy.lose_answer(r"/lost-answer/table/_delta_log/0+1\.json$")
    spark.createDataFrame([(1,)], "i int").write.format("delta").mode("append").save(path)
    assert store.proxy.lost == ["PUT /" + BUCKET + "/lost-answer/table/_delta_log/00000000000000000001.json"]
    assert sorted(r[0] for r in spark.read.format("delta").load(path).collect()) == [0, 1]
    assert lake.version(spark, path) == 1  # one commit, not a second copy at version 2
    store.proxy.reset_counts()


def test_delta_rs_fails_rather_than_commits_twice_when_an_answer_is_lost(spark, store: Store) -> None:
    """delta-rs would retry the lost commit, be refused by its own file and commit the same
    actions again at the next version (the change data feed would show its rows twice); the
    lakehouse's delta-rs writes do not retry, so the write fails and the commit is there once."""
    import pyarrow as pa

    path = f"s3a://{BUCKET}/lost-answer-rs/table"
    from delta.tables import DeltaTable

    DeltaTable.create(spark).location(path).addColumn("i", "INT").property(
        "delta.enableChangeDataFeed", "true"
    ).execute()
    spark.createDataFrame([(0,)], "i int").write.format("delta").mode("append").save(path)
    store.proxy.lose_answer(r"/lost-answer-rs/table/_delta_log/0+2\.json$")
    with pytest.raises(OSError):
        lake.write_arrow(pa.table({"i": [1]}), path)
    assert len(store.proxy.lost) == 1
    store.proxy.reset_counts()
    assert sorted(r[0] for r in spark.read.format("delta").load(path).collect()) == [0, 1]
    assert lake.version(spark, path) == 2
    assert sorted(r["i"] for r in lake.changes(spark, path, 1, 2).collect()) == [0, 1]  # each row inserted once
