"""Reading the lakehouse from outside a job (docs/sql.md): `serve` over JDBC (beeline) and Spark
Connect, `sql --format`, `tables`, and gold read without Spark by delta-rs and Polars.

A copy of the spark tier's shared lakehouse (two generated logs through bronze, silver and gold,
tests/spark/shared_lakehouse.py); every answer is compared with what this process's own Spark
session reads from the same tables, or with the files on disk and the declarations.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pipelines.cli.main import cli
from pipelines.runner import Context
from pipelines.runtime.jars import pyspark_jars_dir
from pipelines.runtime.tables import load_specs, load_views
from tests.spark.shared_lakehouse import SharedLakehouse
from tests.support.rows import sorted_rows, spark_rows
from tests.support.serve import ready_line

OFFSETS_QUERY = (
    "SELECT group_id, topic, `partition`, committed_offset, metadata, deleted, delete_cause "
    "FROM gold.current_offsets ORDER BY group_id, topic, `partition`"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lakehouse(spark, shared_lakehouse: SharedLakehouse, tmp_path_factory: pytest.TempPathFactory) -> Context:
    """A copy of the tier's shared lakehouse (a test here creates a table in it), registered in
    this process's session."""
    config = shared_lakehouse.copy_to(tmp_path_factory.mktemp("serve"))
    ctx = Context(config)
    ctx._spark = spark
    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    ctx.tables.register_existing()
    return ctx


def delta_dirs(root: str, layer: str) -> set[str]:
    """Tables of a layer as the files say: directories with a Delta log."""
    layer_dir = Path(root) / layer
    return {p.name for p in layer_dir.iterdir() if (p / "_delta_log").is_dir()} if layer_dir.is_dir() else set()


# --- serve --------------------------------------------------------------------------------------


class Served:
    def __init__(self, proc: subprocess.Popen, thrift: int, connect: int, ready: str) -> None:
        self.proc, self.thrift, self.connect, self.ready = proc, thrift, connect, ready


@pytest.fixture(scope="module")
def served(lakehouse: Context) -> Iterator[Served]:
    thrift, connect = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k != "OFFSETS_SPARK_MASTER"}
    stderr = open(lakehouse.base_dir / "serve.stderr", "w")  # noqa: SIM115 (open while the server runs)
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "pipelines.cli.main", "serve", "-c", str(lakehouse.config_path)),
            *("--protocol", "both", "--port", str(thrift), "--connect-port", str(connect), "--refresh", "2"),
        ],
        cwd=lakehouse.base_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )
    ready = ready_line(proc, lakehouse.base_dir / "serve.stderr")
    yield Served(proc, thrift, connect, ready)
    if proc.poll() is None:
        proc.kill()
    stderr.close()


_PROMPT = re.compile(r"^(?:\d+: jdbc:hive2://\S+> )+")


def beeline(port: int, query: str) -> subprocess.CompletedProcess:
    """Hive's own JDBC client (hive-jdbc and beeline ship in the pyspark wheel), CSV output."""
    cmd = ["java", "-cp", f"{pyspark_jars_dir()}/*", "org.apache.hive.beeline.BeeLine"]
    cmd += ["-u", f"jdbc:hive2://127.0.0.1:{port}", "-n", "analyst", "--silent=true", "--outputformat=csv2"]
    return subprocess.run([*cmd, "-e", query], capture_output=True, text=True, timeout=180)


def beeline_rows(port: int, query: str) -> list[list[str]]:
    """Header and rows; beeline echoes its prompt in front of the header."""
    proc = beeline(port, query)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    text = _PROMPT.sub("", proc.stdout.lstrip())
    return [row for row in csv.reader(io.StringIO(text)) if row]


def jdbc_text(value: Any) -> str:
    """How a JDBC client shows a value in CSV: NULL, true/false, the number or string."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def test_ready_line_names_the_endpoints_and_counts_tables_and_views(served: Served, lakehouse: Context) -> None:
    open_ = r"\(loopback only, no authentication\)"
    m = re.fullmatch(
        rf"serving the lakehouse at (\S+) {open_} and (\S+) {open_} \(tables: (\d+); read-only\)", served.ready
    )
    assert m, served.ready
    assert m.group(1) == f"jdbc:hive2://127.0.0.1:{served.thrift}"
    assert m.group(2) == f"sc://127.0.0.1:{served.connect}"
    layers = ("bronze", "silver", "gold", "quality")
    tables = {(layer, t) for layer in layers for t in delta_dirs(lakehouse.root, layer)}
    usable = set(tables)  # a view is registered when what it reads is: tables, or views before it
    for v in load_views():
        if all((v.layer, r) in usable for r in re.findall(r"{(\w+)}", v.sql)):
            usable.add((v.layer, v.name))
    assert int(m.group(3)) == len(usable)


def test_jdbc_lists_gold_tables_and_views(served: Served, lakehouse: Context) -> None:
    rows = beeline_rows(served.thrift, "SHOW TABLES IN gold")
    assert rows[0] == ["namespace", "tableName", "isTemporary"]
    expected = delta_dirs(lakehouse.root, "gold") | {v.name for v in load_views() if v.layer == "gold"}
    assert {r[1] for r in rows[1:]} == expected


def test_jdbc_query_returns_what_spark_reads(served: Served, spark) -> None:
    rows = beeline_rows(served.thrift, OFFSETS_QUERY)
    want = spark.sql(OFFSETS_QUERY).collect()
    assert len(want) > 50  # a real answer, not an empty one
    assert rows[0] == ["group_id", "topic", "partition", "committed_offset", "metadata", "deleted", "delete_cause"]
    assert rows[1:] == [[jdbc_text(v) for v in r] for r in want]


CONNECT_CLIENT = """
import json, sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
for row in spark.sql(sys.argv[2]).collect():
    print(json.dumps(row.asDict()))
spark.stop()
"""


def test_spark_connect_client_in_another_process_gets_the_same_rows(served: Served, spark) -> None:
    query = "SELECT group_id, protocol, generation, deleted FROM gold.current_groups ORDER BY group_id, protocol"
    proc = subprocess.run(
        [sys.executable, "-c", CONNECT_CLIENT, f"sc://127.0.0.1:{served.connect}", query],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = [json.loads(line) for line in proc.stdout.splitlines()]
    want = [r.asDict() for r in spark.sql(query).collect()]
    assert want and got == want


def test_a_table_created_after_start_becomes_queryable(served: Served, lakehouse: Context) -> None:
    assert "results" not in delta_dirs(lakehouse.root, "quality")  # the job had no quality stage
    probe = "SELECT * FROM quality.results LIMIT 0"
    assert beeline(served.thrift, probe).returncode != 0  # not there yet
    lakehouse.tables.ensure("quality", "results")  # as a first quality run would create it
    deadline = time.monotonic() + 120
    while True:
        proc = beeline(served.thrift, probe)
        if proc.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    header = next(csv.reader(io.StringIO(_PROMPT.sub("", proc.stdout.lstrip()))))
    assert header == [c.name for c in load_specs()["quality"]["results"].columns]


def _cli(lakehouse: Context, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli.main", *args, "-c", str(lakehouse.config_path)],
        cwd=lakehouse.base_dir,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_sql_uses_the_running_serve_and_answers_as_a_session_of_its_own(
    served: Served, lakehouse: Context, run_cli
) -> None:
    state = json.loads((Path(lakehouse.root) / "_serve" / "connect.json").read_text())
    assert (state["port"], state["root"]) == (served.connect, lakehouse.root)
    assert (state["token"], state["tls"]) == (False, False)  # what a client needs to bring, never a secret
    query = OFFSETS_QUERY
    via_serve = _cli(lakehouse, "sql", "--json", query)
    assert via_serve.returncode == 0, via_serve.stderr[-3000:]
    assert f"sql: answered by the running serve at sc://127.0.0.1:{served.connect} " in via_serve.stderr
    # the self-started path in this process, on this module's session (no second JVM start)
    own = run_cli("sql", "--json", "--no-serve", query)
    assert len(own.splitlines()) > 50 and via_serve.stdout == own
    # through the serve a statement only reads, as it does in a session of its own
    write = _cli(lakehouse, "sql", "DROP TABLE gold.current_offsets")
    assert write.returncode != 0 and "only reads" in write.stderr, write.stderr[-2000:]
    assert "answered by the running serve" in write.stderr


def test_status_uses_the_running_serve(served: Served, lakehouse: Context, spark) -> None:
    from pipelines.status import collect_status

    done = _cli(lakehouse, "status", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"status: answered by the running serve at sc://127.0.0.1:{served.connect} " in done.stderr
    got = json.loads(done.stdout)
    want = json.loads(json.dumps(collect_status(lakehouse), default=str))
    for part in ("tables", "watermarks", "silver", "kafka_positions", "notes"):
        assert got[part] == want[part], part
    assert len(got["tables"]) > 20 and got["watermarks"]


def test_sigint_stops_the_server_with_exit_code_0(served: Served, lakehouse: Context) -> None:
    # SIGINT rather than SIGTERM: pyspark installs its own SIGINT handler, which serve must replace
    # (both end in the same handler; SIGTERM is checked by hand, docs/sql.md)
    served.proc.send_signal(signal.SIGINT)
    assert served.proc.wait(timeout=120) == 0
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", served.thrift)) != 0  # the port is closed
    assert not (Path(lakehouse.root) / "_serve" / "connect.json").exists(), "a stopped serve leaves no state file"


# --- sql --format and tables (in this process, on this session) ----------------------------------


@pytest.fixture()
def run_cli(lakehouse: Context, spark, monkeypatch: pytest.MonkeyPatch):
    # the command's Context gets this module's session instead of starting a JVM of its own
    monkeypatch.setattr("pipelines.runner.build_session", lambda *a, **k: spark)

    def run(*args: str) -> str:
        result = CliRunner().invoke(cli, [*args, "-c", str(lakehouse.config_path)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout

    return run


def test_sql_json_prints_one_object_per_row(run_cli, spark) -> None:
    want = [r.asDict() for r in spark.sql(OFFSETS_QUERY).collect()]
    for flags in (["--format", "json"], ["--json"]):
        got = [json.loads(line) for line in run_cli("sql", OFFSETS_QUERY, *flags).splitlines()]
        assert got == want


def test_sql_csv_has_a_header_and_every_row(run_cli, spark) -> None:
    df = spark.sql(OFFSETS_QUERY)
    want = [["" if v is None else str(v) for v in r] for r in df.collect()]
    # --limit is for the table format: csv prints every row
    rows = list(csv.reader(io.StringIO(run_cli("sql", OFFSETS_QUERY, "--format", "csv", "--limit", "5"))))
    assert rows[0] == df.columns
    assert rows[1:] == want and len(want) > 5


def test_sql_table_shows_the_rows(run_cli, spark) -> None:
    query = "SELECT offsets_partition, count(*) AS offsets FROM gold.current_offsets GROUP BY 1 ORDER BY 1"
    want = spark.sql(query).collect()
    lines = run_cli("sql", query, "--format", "table").splitlines()
    cells = [re.findall(r"[\w]+", line) for line in lines]
    assert ["offsets_partition", "offsets"] in cells
    data = [c for c in cells if c and c[0].isdigit()]
    assert data == [[str(r[0]), str(r[1])] for r in want]


def test_tables_lists_names_and_locations(run_cli, lakehouse: Context) -> None:
    docs = [json.loads(line) for line in run_cli("tables", "--json").splitlines()]
    on_disk = {
        f"{layer}.{t}": f"{lakehouse.root}/{layer}/{t}"
        for layer in ("bronze", "silver", "gold", "quality")
        for t in delta_dirs(lakehouse.root, layer)
    }
    assert {d["name"]: d["location"] for d in docs} == on_disk
    assert all(d["exists"] for d in docs)


# --- gold without Spark -------------------------------------------------------------------------


def test_every_gold_table_reads_the_same_with_delta_rs(lakehouse: Context, spark) -> None:
    from deltalake import DeltaTable

    gold = sorted(delta_dirs(lakehouse.root, "gold"))
    assert set(gold) == set(load_specs()["gold"])  # every declared gold table was built
    partitioned = [t for t in gold if load_specs()["gold"][t].partitioned_by]
    assert partitioned  # partition columns come from the Delta log, not the files: covered
    for table in gold:
        path = f"{lakehouse.root}/gold/{table}"
        arrow = DeltaTable(path).to_pyarrow_table()
        columns, want = spark_rows(spark, path)
        assert arrow.column_names == columns, table
        assert sorted_rows(arrow.to_pylist()) == want, table


def test_polars_reads_gold_like_spark(lakehouse: Context, spark) -> None:
    import polars as pl

    path = f"{lakehouse.root}/gold/current_offsets"
    frame = pl.read_delta(path)
    columns, want = spark_rows(spark, path)
    assert frame.columns == columns
    assert sorted_rows(frame.to_dicts()) == want
    # the docs' example: live offsets per group, lazily, with a filter pushed into the scan
    lag = (
        pl.scan_delta(path)
        .filter(~pl.col("deleted"))
        .group_by("group_id")
        .agg(pl.len().alias("partitions"))
        .sort("group_id")
        .collect()
    )
    q = "SELECT group_id, count(*) AS partitions FROM delta.`{}` WHERE NOT deleted GROUP BY 1 ORDER BY 1"
    assert lag.rows() == [tuple(r) for r in spark.sql(q.format(path)).collect()]
