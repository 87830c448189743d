"""The segments source on a Spark standalone cluster (a master and two workers on loopback)
gives the same bronze table as local mode: no driver-local assumption in planning or reading."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.generate import generate
from tests.e2e.jobrun import run_here
from tests.support.jvm import SHORT_RUN_JVM_YAML

REPO = Path(__file__).resolve().parents[2]
COLUMNS = ["cluster", "partition", "offset", "key", "value", "control", "content_hash"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    port, logs = free_port(), tmp_path_factory.mktemp("standalone-logs")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    procs = [
        subprocess.Popen(
            [
                str(spark_class()),
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(free_port()),
            ],
            env=env,
            stdout=open(logs / "master.log", "w"),  # noqa: SIM115 - open for the process lifetime
            stderr=subprocess.STDOUT,
        )
    ]
    url = f"spark://127.0.0.1:{port}"
    for i in range(2):
        procs.append(
            subprocess.Popen(
                [
                    str(spark_class()),
                    "org.apache.spark.deploy.worker.Worker",
                    url,
                    "--cores",
                    "1",
                    "--memory",
                    "2g",
                    "--host",
                    "127.0.0.1",
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(logs / f"work{i}"),
                ],
                env=env,
                stdout=open(logs / f"worker{i}.log", "w"),  # noqa: SIM115
                stderr=subprocess.STDOUT,
            )
        )
    deadline = time.time() + 120
    while time.time() < deadline:
        text = (logs / "master.log").read_text()
        if text.count("Registering worker") >= 2:
            break
        if any(p.poll() is not None for p in procs):
            pytest.fail(f"standalone cluster died:\n{text[-3000:]}")
        time.sleep(1)
    else:
        pytest.fail(f"workers did not register:\n{(logs / 'master.log').read_text()[-3000:]}")
    yield url, logs
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(timeout=60)


def run_job(config: Path, master: str) -> None:
    cmd = [sys.executable, "-m", "pipelines.cli.main", "run", "j", "-c", str(config), "--master", master, "--json"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_standalone_equals_local(spark, standalone: tuple[str, Path], tmp_path: Path) -> None:
    url, cluster_logs = standalone
    logs = tmp_path / "logs"
    generate(logs, 5000, seed=33, partitions=5, segment_bytes=32 * 1024)
    tables = {}
    for label, master in (("local", "local[2]"), ("standalone", url)):
        root = tmp_path / label
        config = tmp_path / f"{label}.yaml"
        config.write_text(f"""
lakehouse: {{root: {root}}}
spark:
  conf: {{spark.sql.shuffle.partitions: "4", spark.ui.enabled: "false", spark.executor.memory: "1g",
         {SHORT_RUN_JVM_YAML}}}
sources:
  s: {{kind: segments, cluster: sa, paths: [{logs}], split_bytes: 65536}}
jobs:
  j: {{sources: [s], stages: [bronze]}}
""")
        if label == "local":
            run_here(config)  # this process's local Spark
        else:
            run_job(config, master)
        df = spark.read.format("delta").load(str(root / "bronze" / "offsets_records"))
        tables[label] = {tuple(r) for r in df.select(*COLUMNS).collect()}
    assert len(tables["local"]) >= 5000
    assert tables["standalone"] == tables["local"]
    # the job really ran on the cluster: the master registered it and both workers ran executors
    assert "Registered app offsets-lakehouse" in (cluster_logs / "master.log").read_text()
    assert all(list((cluster_logs / f"work{i}").glob("app-*/*/stderr")) for i in range(2))
