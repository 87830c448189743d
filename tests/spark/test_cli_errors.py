"""CLI errors that happen after Spark has started: still one ``error:`` line, no traceback, and the
documented exit code (docs/cli.md). The no-JVM cases are in tests/unit/test_cli_errors.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines.bronze.segments_source import register as register_segments_source
from pipelines.cli.main import error_message
from tests.support.jvm import SHORT_RUN_CONF

EXIT_FAILURE, EXIT_CONFIG = 1, 2  # docs/cli.md


def closed_port() -> int:
    """A loopback port nothing listens on (bound, read, released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("cli-errors")
    config = {
        "lakehouse": {"root": "lakehouse"},
        "spark": {
            "master": "local[1]",
            "conf": {"spark.ui.enabled": "false", "spark.driver.memory": "1g", **SHORT_RUN_CONF},
        },
        "sources": {
            "gone": {"kind": "segments", "cluster": "c1", "paths": [str(work / "no-such-dir")]},
            "broker": {"kind": "kafka", "cluster": "c1", "bootstrap_servers": f"127.0.0.1:{closed_port()}"},
        },
        "jobs": {
            "gone": {"sources": ["gone"], "stages": ["bronze"]},
            "broker": {"sources": ["broker"], "stages": ["bronze"]},
        },
    }
    (work / "jobs.yaml").write_text(yaml.safe_dump(config))
    return work


def cli(workdir: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OFFSETS_SPARK_MASTER"}
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli.main", *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def the_error(proc: subprocess.CompletedProcess) -> str:
    """The one ``error:`` line; it must be the last thing on stderr (Spark's start-up logs come first)."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert lines[-1] == errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    return errors[0]


def test_segments_path_that_does_not_exist(workdir: Path) -> None:
    proc = cli(workdir, "run", "gone")
    assert proc.returncode == EXIT_CONFIG, proc.stderr[-3000:]
    line = the_error(proc)
    assert str(workdir / "no-such-dir") in line and "no such file or directory" in line


def test_unreachable_broker(workdir: Path) -> None:
    config = yaml.safe_load((workdir / "jobs.yaml").read_text())
    bootstrap = config["sources"]["broker"]["bootstrap_servers"]
    proc = cli(workdir, "run", "broker", timeout=240)
    assert proc.returncode == EXIT_FAILURE, proc.stderr[-3000:]
    assert bootstrap in the_error(proc)


def test_sql_error_is_one_line(workdir: Path) -> None:
    """Spark's analysis errors carry the query plan on further lines; the terminal gets the first."""
    proc = cli(workdir, "sql", "SELECT no_such_column")
    assert proc.returncode == EXIT_FAILURE
    line = the_error(proc)
    assert "no_such_column" in line and "UNRESOLVED_COLUMN" in line


def test_spark_errors_reduce_to_their_cause(spark, tmp_path: Path) -> None:
    """Real errors from Spark, as the CLI would catch them: a Python worker's exception, a Python
    data source failing while Spark plans it, a raw Java exception through py4j."""
    import json

    from py4j.protocol import Py4JJavaError
    from pyspark.sql import functions as F

    @F.udf("int")
    def reject(value):
        raise ValueError(f"bad value {value}")

    with pytest.raises(Exception) as worker:
        spark.range(1).select(reject("id")).collect()
    assert "Traceback (most recent call last):" in str(worker.value)  # what the CLI used to print
    assert error_message(worker.value) == "ValueError: bad value 0"

    missing = tmp_path / "nothing-here"
    register_segments_source(spark)
    with pytest.raises(Exception) as planning:
        spark.read.format("kafka_segments").option("paths", json.dumps([str(missing)])).option(
            "cluster", "c1"
        ).load().count()
    assert error_message(planning.value) == f"SourceNotFound: no such file or directory: {missing}"

    with pytest.raises(Py4JJavaError) as java:
        spark.sparkContext._jvm.java.io.FileInputStream(str(missing))
    assert error_message(java.value) == f"java.io.FileNotFoundException: {missing} (No such file or directory)"
