"""`serve` lets in only who authenticates, encrypts on request, and only reads (docs/security.md).

One server on a copy of the tier's shared lakehouse, both protocols, with a password file for
Thrift, a token for Spark Connect and TLS on both (a certificate made here). Through beeline (Hive's
JDBC client) and a Spark Connect client in another process: logins with a wrong password or
token are refused; every statement that writes is refused and leaves every table's Delta version
and row count, and every file under the root, as they were; reads return what Spark reads. `sql`
only reads unless told otherwise, and a bind beyond loopback without authentication is refused
before anything starts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pipelines.cli.main import cli
from pipelines.runner import Context
from pipelines.runtime import lake
from pipelines.runtime.jars import pyspark_jars_dir
from pipelines.runtime.passwords import set_user
from pipelines.runtime.tables import LAYERS, load_specs
from tests.spark.shared_lakehouse import SharedLakehouse
from tests.support.serve import ready_line
from tests.support.store import free_port
from tests.support.tls_pem import self_signed

USER, PASSWORD, TOKEN = "analyst", "a-long-enough-secret", "connect-token-3f9a"  # beeline splits at spaces

# every kind of write the issue names, writes to paths, reading outside the lakehouse, user code:
# each must be refused
WRITES = {
    "INSERT": "INSERT INTO gold.current_offsets SELECT * FROM gold.current_offsets LIMIT 1",
    "UPDATE": "UPDATE gold.current_offsets SET committed_offset = 0",
    "DELETE": "DELETE FROM gold.current_offsets",
    "MERGE": "MERGE INTO gold.current_offsets t USING gold.current_offsets s ON t.group_id = s.group_id "
    "WHEN MATCHED THEN DELETE",
    "DROP": "DROP TABLE gold.current_offsets",
    "ALTER": "ALTER TABLE gold.current_offsets SET TBLPROPERTIES ('x' = 'y')",
    "CREATE TABLE": "CREATE TABLE gold.copy AS SELECT * FROM gold.current_offsets",
    "TRUNCATE": "TRUNCATE TABLE gold.current_offsets",
    "OPTIMIZE": "OPTIMIZE gold.current_offsets",
    "VACUUM": "VACUUM gold.current_offsets RETAIN 0 HOURS",
    "RESTORE": "RESTORE TABLE gold.current_offsets TO VERSION AS OF 0",
    "write to a path": "INSERT OVERWRITE DIRECTORY '{root}/gold/current_offsets' USING parquet "
    "SELECT * FROM gold.current_offsets",
    "CREATE TABLE LOCATION": "CREATE TABLE gold.over USING delta LOCATION '{root}/gold/current_offsets'",
    "read a file outside the lakehouse": "SELECT count(*) FROM parquet.`{outside}`",
    "reflect": "SELECT reflect('java.lang.System', 'getProperty', 'user.dir')",
}


@pytest.fixture(scope="module")
def lakehouse(spark, shared_lakehouse: SharedLakehouse, tmp_path_factory: pytest.TempPathFactory) -> Context:
    config = shared_lakehouse.copy_to(tmp_path_factory.mktemp("serve-access"))
    ctx = Context(config)
    ctx._spark = spark
    return ctx


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A self-signed certificate for 127.0.0.1, its key, and a Java trust store holding it."""
    base = tmp_path_factory.mktemp("tls")
    cert, key = self_signed(base)
    paths = {"cert": cert, "key": key, "trust": base / "trust.p12"}
    keytool = ["keytool", "-importcert", "-noprompt", "-alias", "lakehouse", "-file", str(paths["cert"])]
    keytool += ["-keystore", str(paths["trust"]), "-storetype", "PKCS12", "-storepass", "changeit"]
    subprocess.run(keytool, check=True, capture_output=True)
    return paths


class Served:
    def __init__(self, thrift: int, connect: int, ready: str) -> None:
        self.thrift, self.connect, self.ready = thrift, connect, ready


@pytest.fixture(scope="module")
def served(lakehouse: Context, tls: dict[str, Path]) -> Iterator[Served]:
    passwords = lakehouse.base_dir / "passwords"
    set_user(passwords, USER, PASSWORD)
    token = lakehouse.base_dir / "token"
    token.write_text(TOKEN + "\n")
    thrift, connect = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("OFFSETS_SPARK_MASTER", "SPARK_CONNECT_AUTHENTICATE_TOKEN")}
    stderr = open(lakehouse.base_dir / "serve.stderr", "w")  # noqa: SIM115 (open while the server runs)
    cmd = [sys.executable, "-m", "pipelines.cli.main", "serve", "-c", str(lakehouse.config_path)]
    cmd += ["--protocol", "both", "--port", str(thrift), "--connect-port", str(connect)]
    cmd += ["--passwords", str(passwords), "--token-file", str(token)]
    cmd += ["--tls-cert", str(tls["cert"]), "--tls-key", str(tls["key"])]
    proc = subprocess.Popen(cmd, cwd=lakehouse.base_dir, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
    ready = ready_line(proc, lakehouse.base_dir / "serve.stderr")
    yield Served(thrift, connect, ready)
    proc.kill()
    proc.wait()
    stderr.close()


def beeline(served: Served, tls: dict[str, Path], script: str, password: str = PASSWORD) -> subprocess.CompletedProcess:
    """Hive's JDBC client over TLS, logged in as USER; every statement of ``script`` run even when
    one fails (``--force``, which holds for a script file, not for ``-e``)."""
    url = f"jdbc:hive2://127.0.0.1:{served.thrift}/;ssl=true;sslTrustStore={tls['trust']};trustStorePassword=changeit"
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
    cmd = ["java", "-cp", f"{pyspark_jars_dir()}/*", "org.apache.hive.beeline.BeeLine", "-u", url]
    cmd += ["-n", USER, "-p", password, "--silent=true", "--outputformat=csv2", "--force=true", "-f", f.name]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    finally:
        os.unlink(f.name)


CONNECT_CLIENT = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    url, statements = sys.argv[1], json.loads(sys.argv[2])
    spark = SparkSession.builder.remote(url).getOrCreate()
    out = {}
    for name, code in statements.items():
        try:
            value = eval(code, {"spark": spark})
            out[name] = {"ok": value}
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:600]}
    print(json.dumps(out, default=str))
""")


def connect(served: Served, tls: dict[str, Path], statements: dict[str, str], token: str = TOKEN) -> dict:
    """Run Python expressions over ``spark`` (a Spark Connect session over TLS with ``token``) in
    another process; each one's value or error."""
    url = f"sc://127.0.0.1:{served.connect}/;use_ssl=true;token={token}"
    env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(tls["cert"])}
    proc = subprocess.run(
        [sys.executable, "-c", CONNECT_CLIENT, url, json.dumps(statements)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def state(spark, ctx: Context) -> dict[str, tuple[int | None, int | None]]:
    """Every table's Delta version and row count (both from its Delta log, by delta-rs), and every
    file under the root with its size and modification time: a write that bypassed Delta (a file
    put into or removed from a table's directory) changes it too. The serve's own state file
    (``_serve/``) is left out."""
    out: dict[str, Any] = {}
    for layer in LAYERS:
        for table in load_specs().get(layer, {}):
            path = ctx.tables.path(layer, table)
            if (Path(path) / "_delta_log").is_dir():
                out[f"{layer}.{table}"] = (lake.version(spark, path), lake.row_count(path))
    root = Path(ctx.root)
    out["files"] = sorted(
        (str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns)
        for f in root.rglob("*")
        if f.is_file() and f.relative_to(root).parts[0] != "_serve"
    )
    return out


def test_ready_line_says_how_clients_get_in(served: Served) -> None:
    m = re.fullmatch(
        r"serving the lakehouse at jdbc:hive2://127\.0\.0\.1:(\d+) \(TLS, password\) and "
        r"sc://127\.0\.0\.1:(\d+) \(TLS, token\) \(tables: \d+; read-only\)",
        served.ready,
    )
    assert m and int(m.group(1)) == served.thrift and int(m.group(2)) == served.connect, served.ready


def test_every_write_is_refused_and_nothing_changes(spark, lakehouse: Context, served: Served, tls) -> None:
    before = state(spark, lakehouse)
    assert "gold.current_offsets" in before and before["gold.current_offsets"][1] > 0
    root = lakehouse.root
    outside = lakehouse.base_dir / "outside.parquet"  # a valid Parquet file the server could read
    spark.range(3).toPandas().to_parquet(outside)
    statements = [s.format(root=root, outside=outside) for s in WRITES.values()]
    proc = beeline(served, tls, ";\n".join(statements) + ";")
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("Error:")]
    assert len(errors) == len(WRITES), proc.stdout[-3000:] + proc.stderr[-3000:]
    for (kind, _), error in zip(WRITES.items(), errors, strict=True):
        assert "ReadOnlyViolation" in error or "this endpoint" in error, (kind, error)
    # and through Spark Connect: SQL, the DataFrame writer, user code
    got = connect(
        served,
        tls,
        {
            "DELETE": "spark.sql('DELETE FROM gold.current_offsets').collect()",
            "saveAsTable": "spark.range(1).write.saveAsTable('gold.injected')",
            "save to a path": f"spark.range(1).write.mode('overwrite').parquet({root + '/gold/current_offsets'!r})",
            "read a path": f"spark.read.parquet({str(outside)!r}).count()",
            "python udf": "spark.range(1).selectExpr('id').rdd if False else "
            "spark.range(3).mapInPandas(lambda it: it, 'id long').collect()",
        },
    )
    for kind, result in got.items():
        assert "error" in result and "this endpoint" in result["error"], (kind, result)
    assert state(spark, lakehouse) == before
    assert (Path(root) / "gold" / "current_offsets" / "_delta_log").is_dir()


def test_reads_temporary_views_and_set_still_work(spark, lakehouse: Context, served: Served, tls) -> None:
    want = spark.read.format("delta").load(lakehouse.tables.path("gold", "current_offsets")).count()
    script = (
        "SET spark.sql.shuffle.partitions=3;\n"
        "CREATE TEMPORARY VIEW live AS SELECT * FROM gold.current_offsets;\n"
        "SELECT count(*) AS n FROM live;\n"
        "DESCRIBE HISTORY gold.current_offsets;\n"
        "DROP VIEW live;"
    )
    proc = beeline(served, tls, script)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Error:" not in proc.stdout + proc.stderr
    assert f"\n{want}\n" in proc.stdout.replace("\r", ""), proc.stdout[-2000:]
    got = connect(served, tls, {"count": "spark.table('gold.current_offsets').count()"})
    assert got == {"count": {"ok": want}}


def test_wrong_passwords_and_tokens_are_refused(served: Served, tls) -> None:
    proc = beeline(served, tls, "SELECT 1;", password="not-the-password")
    assert proc.returncode != 0
    assert re.search(r"[Aa]uthentication|Peer indicated failure|password", proc.stdout + proc.stderr), proc.stderr[
        -2000:
    ]
    got = connect(served, tls, {"count": "spark.table('gold.current_offsets').count()"}, token="wrong-token")
    assert "error" in got["count"] and re.search(r"UNAUTHENTICATED|[Ii]nvalid|token", got["count"]["error"]), got


def test_sql_uses_the_serve_with_the_clients_own_token(served: Served, lakehouse: Context, tls, spark) -> None:
    """The state file says a token and TLS are needed, never which token: `sql` presents its own
    (OFFSETS_SERVE_TOKEN) and trusts the serve's certificate (OFFSETS_SERVE_CA); without a token it
    says why it does not use the serve (the fallback itself runs in the test below)."""
    doc = (Path(lakehouse.root) / "_serve" / "connect.json").read_text()
    assert TOKEN not in doc and json.loads(doc)["token"] is True and json.loads(doc)["tls"] is True
    query = "SELECT count(*) AS n FROM gold.current_offsets"
    cmd = [sys.executable, "-m", "pipelines.cli.main", "sql", "-c", str(lakehouse.config_path), "--json", query]
    env = {**os.environ, "OFFSETS_SERVE_TOKEN": TOKEN, "OFFSETS_SERVE_CA": str(tls["cert"])}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=lakehouse.base_dir, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"sql: answered by the running serve at sc://127.0.0.1:{served.connect} " in done.stderr
    want = spark.read.format("delta").load(lakehouse.tables.path("gold", "current_offsets")).count()
    assert json.loads(done.stdout) == {"n": want} and want > 0
    probe = "from pipelines.runtime import served; print(served.find(sys.argv[1]).describe('sql'))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETS_SERVE_TOKEN")}
    without = subprocess.run(
        [sys.executable, "-c", f"import sys; {probe}", lakehouse.root], capture_output=True, text=True, env=env
    )
    assert without.stdout.strip() == (
        f"sql: started a Spark session of its own (the serve at sc://127.0.0.1:{served.connect} needs a token: "
        "set OFFSETS_SERVE_TOKEN or OFFSETS_SERVE_TOKEN_FILE)"
    ), without.stderr[-2000:]


def test_binding_beyond_loopback_without_authentication_is_refused(lakehouse: Context) -> None:
    for args, why in (
        (["--protocol", "thrift"], "needs authentication (--passwords FILE"),
        (["--protocol", "connect"], "needs authentication (a token"),
    ):
        out = CliRunner().invoke(cli, ["serve", "-c", str(lakehouse.config_path), "--host", "0.0.0.0", *args])
        assert out.exit_code == 2, out.output
        assert why in out.output and "would let anyone on the network in" in out.output


def test_sql_only_reads_unless_allowed_to_write(spark, lakehouse: Context) -> None:
    """`sql` in a process of its own (its session gets the check when it starts)."""
    before = state(spark, lakehouse)

    def sql(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "pipelines.cli.main", "sql", "-c", str(lakehouse.config_path), *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=lakehouse.base_dir)

    refused = sql("DELETE FROM gold.current_offsets")
    assert refused.returncode == 1, refused.stderr[-2000:]
    assert refused.stderr.strip().splitlines()[-1].startswith("error: "), refused.stderr[-2000:]
    assert "this endpoint only reads" in refused.stderr and "--allow-writes" in refused.stderr
    assert state(spark, lakehouse) == before
