"""A job on a Spark standalone cluster (a master and two workers on loopback) whose executors see
only the object store (docs/object-storage.md): each worker runs in a mount namespace of its own
where the test's directories — the generated log, the driver's files, the other worker's — are
hidden under an empty file system of its own, which also holds its work directory and scratch
space; the segment files are read from the store and the lakehouse is written to it. Gold must
equal the generator's expected state: no driver-local assumption anywhere in planning, reading,
decoding or replaying."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.common import gold_differences
from pipelines.generate import generate
from pipelines.runtime.tables import Tables
from tests.support import tasks_only
from tests.support.jvm import SHORT_RUN_JVM_YAML
from tests.support.store import Store, moto_store, session_conf

REPO = Path(__file__).resolve().parents[2]
BUCKET = "cluster"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with moto_store(tmp_path_factory.mktemp("store")) as running:
        running.bucket(BUCKET)
        yield running


def private_disk(cmd: list[str], hide: Path, work: Path) -> list[str]:
    """``cmd`` in a mount namespace where ``hide`` (the test run's directories) is an empty file
    system of its own holding ``work`` (as root; the command as it is otherwise)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return cmd
    script = f'mount -t tmpfs tmpfs {hide} && mkdir -p {work} && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *cmd]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    port, logs = free_port(), tmp_path_factory.mktemp("standalone-logs")
    hide = tmp_path_factory.getbasetemp().parent if os.environ.get("PYTEST_XDIST_WORKER") else logs.parent
    # no AWS_* here: the executors get the store's settings from the driver (spark.executorEnv)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
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
        work = hide / f"worker{i}"
        # an address of its own (all of 127/8 is loopback): Spark then treats the workers as the
        # different hosts they stand for, and fetches shuffle blocks from the other one's executor
        # instead of reading its disk directly (hidden here, as on another host)
        address = f"127.0.0.{2 + i}"
        cmd = [
            str(spark_class()),
            "org.apache.spark.deploy.worker.Worker",
            url,
            "--cores",
            "1",
            "--memory",
            "2g",
            "--host",
            address,
            "--webui-port",
            str(free_port()),
            "--work-dir",
            str(work / "work"),
        ]
        procs.append(
            subprocess.Popen(
                private_disk(cmd, hide, work),
                env={**env, "SPARK_LOCAL_DIRS": str(work / "scratch"), "SPARK_LOCAL_IP": address},
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


def test_a_job_from_and_to_the_store_on_two_workers(spark, store: Store, standalone, tmp_path: Path) -> None:
    url, cluster_logs = standalone
    logs = generate(tmp_path / "logs", 2500, seed=33, partitions=4, segment_bytes=16 * 1024).out
    store.upload(logs, f"s3://{BUCKET}/logs")
    root = f"s3a://{BUCKET}/lakehouse"
    config = tmp_path / "jobs.yaml"
    config.write_text(f"""
lakehouse: {{root: "{root}"}}
spark:
  conf: {{spark.sql.shuffle.partitions: "4", spark.ui.enabled: "false", spark.executor.memory: "1g",
         {SHORT_RUN_JVM_YAML}}}
sources:
  s: {{kind: segments, cluster: sa, paths: ["s3://{BUCKET}/logs"], split_bytes: 32768, offsets_partitions: 4}}
jobs:
  j: {{sources: [s], stages: [bronze, silver, gold]}}
""")
    # every read, decode, replay and large write in the executors (tests/support/tasks_only.py):
    # the bronze, silver and gold files they write go to the store, the driver commits them
    cmd = [sys.executable, "-c", tasks_only.COMMAND, "run", "j", "-c", str(config), "--master", url, "--json"]
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, **store.env()}, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]

    # the job really ran on the cluster: the master registered it and both workers ran executors
    assert "Registered app offsets-lakehouse" in (cluster_logs / "master.log").read_text()
    for i in range(2):
        assert "Asked to launch executor" in (cluster_logs / f"worker{i}.log").read_text(), i

    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in session_conf(store, BUCKET).items():
        hadoop.set(key, value)
    saved = {k: os.environ.get(k) for k in store.env()}
    os.environ.update(store.env())
    try:
        for db in ("bronze", "silver", "gold", "quality"):
            spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
        tables = Tables(spark, root)
        assert gold_differences(spark, tables, logs / "expected-state.json") == []
        bronze = spark.read.format("delta").load(tables.path("bronze", "offsets_records"))
        assert bronze.count() == json.loads((logs / "generator-manifest.json").read_text())["records"]
    finally:
        for key in session_conf(store, BUCKET):
            hadoop.unset(key)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
