"""Two hosts, one lakehouse on an object store (docs/object-storage.md): each host runs the job of
its own Kafka cluster, both at once, round after round, writing the same bronze, silver and gold
tables. A "host" is a process with a host name of its own (a UTS namespace), its own local disk
(temporary files, Spark's scratch space) and its own jobs.yaml; what they share is the store
(moto's S3 server behind a proxy, tests/support/store.py).

Every run ends 0 — concurrent commits are coordinated by the store's conditional writes, and a
stage whose transaction lost a race runs again — or is refused with exit code 4 when the same job
already runs on the other host. After the last round, gold equals each generator's expected
state, and no record is missing or doubled in bronze and silver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.common import gold_differences, split_log
from pipelines.generate import generate
from pipelines.runtime.tables import Tables
from tests.support.jvm import SHORT_RUN_YAML
from tests.support.store import Store, as_host, host_env, moto_store, session_conf

REPO = Path(__file__).resolve().parents[2]
BUCKET = "shared"
ROOT = f"s3a://{BUCKET}/lakehouse"
SEEDS = {"a": 41, "b": 42}
# the share of each log held back before each round (here: half of it, then all of it; the long
# tier's tests/long/test_store_rounds.py runs five rounds with a quality run of the whole lakehouse
# and an SQL reader beside the last four — here they would cost the e2e tier two JVMs more; the
# spark tier's tests/spark/test_quality_beside_jobs.py shows what they found, deterministically)
ROUNDS = (50, 0)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with moto_store(tmp_path_factory.mktemp("store")) as running:
        running.bucket(BUCKET)
        yield running


def write_jobs(host: Path) -> Path:
    """A host's jobs.yaml: the shared root, a job per cluster, Spark's scratch on its own disk."""
    config = host / "jobs.yaml"
    sources = "\n".join(
        f'  {c}: {{kind: segments, cluster: {c}, paths: ["s3://{BUCKET}/logs/{c}"], offsets_partitions: 3}}'
        for c in SEEDS
    )
    jobs = "\n".join(f"  job-{c}: {{sources: [{c}], stages: [bronze, silver, gold]}}" for c in SEEDS)
    config.write_text(f"""
lakehouse: {{root: "{ROOT}", lock_lease_seconds: 30}}
spark:
  master: local[2]
  conf: {{spark.sql.shuffle.partitions: "2", spark.ui.enabled: "false", spark.local.dir: "{host / "tmp"}",
         {SHORT_RUN_YAML}}}
sources:
{sources}
jobs:
{jobs}
""")
    return config


def start(store: Store, host: Path, job: str, *command: str) -> subprocess.Popen[str]:
    """``run JOB`` on ``host`` (or ``command``: another CLI command with its arguments)."""
    args = list(command) or ["run", job, "--json"]
    cmd = [sys.executable, "-m", "pipelines.cli.main", *args, "-c", str(host / "jobs.yaml")]
    return subprocess.Popen(
        as_host(host.name, cmd, host),
        cwd=host,
        env=host_env(store, host),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def held_by(store: Store, job: str) -> dict | None:
    """The holder recorded in ``job``'s lease, or None when nobody holds it."""
    client = store.client()
    try:
        body = client.get_object(Bucket=BUCKET, Key=f"lakehouse/_locks/{job}.lock")["Body"].read()
    except client.exceptions.NoSuchKey:
        return None
    return json.loads(body) if body else None


def upload_round(store: Store, logs: Path, work: Path, cluster: str, held_back: int, sent: dict[Path, bytes]) -> None:
    """Put the cluster's log as it was before its last ``held_back`` % on the store; only the
    files that changed since the previous round (a broker's segments grow and roll)."""
    source = logs
    if held_back:
        source = work / f"{cluster}-{held_back}"
        split_log(logs, source, held_back)
    changed = []
    for path in sorted(source.rglob("*")):
        if path.is_file() and sent.get(path.relative_to(source)) != (data := path.read_bytes()):
            sent[path.relative_to(source)] = data
            changed.append(path)
    store.upload(source, f"s3://{BUCKET}/logs/{cluster}", only=changed)


def test_two_hosts_write_one_lakehouse_round_after_round(spark, store: Store, tmp_path: Path) -> None:
    two_hosts(spark, store, tmp_path, ROUNDS)


# the reader beside the jobs: what an analyst asks while they write (it must answer, from the
# last committed version of each table)
READER_SQL = (
    "SELECT count(*) AS n FROM gold.current_offsets o JOIN silver.offset_commits c "
    "ON o.cluster = c.cluster AND o.offsets_partition = c.offsets_partition AND o.record_offset = c.record_offset"
)


def two_hosts(spark, store: Store, tmp_path: Path, rounds: tuple[int, ...], beside: tuple[int, ...] = ()) -> None:
    """Each host's job in every round (held back: ``rounds``), both at once; in the second round the
    same job from the other host too, refused; in the rounds ``beside``, a quality run of the
    whole lakehouse and an SQL reader on a third host at the same time. Then gold, bronze and
    silver checked."""
    logs = {
        c: generate(tmp_path / f"logs-{c}", 2400, seed=s, partitions=3, segment_bytes=8 * 1024)
        for c, s in SEEDS.items()
    }
    hosts = {c: tmp_path / f"host-{c}" for c in SEEDS}
    for host in hosts.values():
        (host / "tmp").mkdir(parents=True)
        write_jobs(host)
    sent: dict[str, dict[Path, bytes]] = {c: {} for c in SEEDS}
    retried: list[str] = []
    for round_no, held_back in enumerate(rounds):
        for c in SEEDS:
            upload_round(store, logs[c].out, tmp_path, c, held_back, sent[c])
        runs = {c: start(store, hosts[c], f"job-{c}") for c in SEEDS}
        others = {}
        if round_no in beside:  # on a third host: every table validated, and read, while the jobs write
            reader = tmp_path / "host-r"
            if not (reader / "jobs.yaml").exists():
                (reader / "tmp").mkdir(parents=True)
                write_jobs(reader)
            others = {
                "quality": start(store, reader, "", "quality", "--json"),
                "reader": start(store, reader, "", "sql", READER_SQL, "--format", "json"),
            }
        if round_no == 1:
            # the same job from the other host while it runs: refused, naming the holder
            deadline = time.monotonic() + 120
            while (holder := held_by(store, "job-a")) is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert holder is not None, "job-a never took its lease"
            second = start(store, hosts["b"], "job-a")
            out, err = second.communicate(timeout=120)
            assert second.returncode == 4, err
            lines = err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: job job-a is already running (pid "), err
            if os.geteuid() == 0:
                assert "on host host-a" in lines[0], lines[0]
            assert f"lock s3://{BUCKET}/lakehouse/_locks/job-a.lock" in lines[0] and out == ""
        for c, proc in runs.items():
            out, err = proc.communicate(timeout=900)
            assert proc.returncode == 0, f"round {round_no}, job-{c}:\n{err[-3000:]}"
            report = json.loads(out)
            assert report["status"] == "ok"
            retried += [
                f"round {round_no} job-{c} {s['stage']}: {n}"
                for s in report["stages"]
                for n in s.get("conflicts_retried", [])
            ]
        for what, proc in others.items():
            out, err = proc.communicate(timeout=900)
            assert proc.returncode == 0, f"round {round_no}, {what}:\n{err[-3000:]}"
            if what == "reader":
                assert int(json.loads(out.splitlines()[0])["n"]) > 0, out  # gold is there from round 0
            else:
                report = json.loads(out)
                assert report["status"] == "ok" and report["stages"], report
        assert held_by(store, "job-a") is None and held_by(store, "job-b") is None, "a lease was left held"
    print("conflicts absorbed by running a stage again:", retried or "none")

    # what both hosts wrote, read back here
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in session_conf(store, BUCKET).items():
        hadoop.set(key, value)
    saved = {k: os.environ.get(k) for k in store.env()}
    os.environ.update(store.env())
    try:
        for db in ("bronze", "silver", "gold", "quality"):
            spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
        tables = Tables(spark, ROOT)
        for c, result in logs.items():
            assert gold_differences(spark, tables, result.out / "expected-state.json", cluster=c) == [], c
        bronze = spark.read.format("delta").load(tables.path("bronze", "offsets_records"))
        counts = {
            r["cluster"]: r["n"] for r in bronze.groupBy("cluster").count().withColumnRenamed("count", "n").collect()
        }
        assert counts == {c: r.records for c, r in logs.items()}  # every record once
        assert bronze.select("cluster", "partition", "offset").distinct().count() == sum(counts.values())
        commits = spark.read.format("delta").load(tables.path("silver", "offset_commits"))
        assert commits.count() == commits.select("cluster", "offsets_partition", "record_offset").distinct().count() > 0
    finally:
        for key in session_conf(store, BUCKET):
            hadoop.unset(key)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
