"""The segments source on an S3-compatible object store (moto's standalone server on loopback).

A generated log directory and one real broker log directory are uploaded to a bucket; the real
``offsets-lakehouse run`` reads them from ``s3://`` (endpoint and credentials from the ``AWS_*``
environment, as in production) and must produce the same bronze rows as ingesting the same
files from local disk, with per-partition counts equal to ``inspect``'s.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from pipelines.bronze.fs import list_segments
from pipelines.bronze.ingest import ingest_segments
from pipelines.codec.segments import discover
from pipelines.generate import generate
from pipelines.inspect import inspect_segment
from pipelines.runtime.config import SegmentsSource
from tests.conftest import real_segments_dir
from tests.support.jvm import SHORT_RUN_CONF

BUCKET = "offsets-backup"
PREFIX = "copy"
# 12 segments in 9 partitions, several partitions with more than one segment, .index files
REAL = "NikhilDighe9975__kafka_setup"


@dataclass
class Store:
    env: dict[str, str]
    generated: Path
    real: Path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    generated = tmp_path_factory.mktemp("s3gen") / "logs"
    generate(generated, 3000, seed=11, partitions=4, segment_bytes=16 * 1024)
    real = real_segments_dir() / REAL
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ACCESS_KEY_ID": "test-key",
        "AWS_SECRET_ACCESS_KEY": "test-secret",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    client = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        region_name=env["AWS_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )
    client.create_bucket(Bucket=BUCKET)
    for name, root in (("gen", generated), ("real", real)):
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{name}/{path.relative_to(root)}", Body=path.read_bytes())
    try:
        yield Store(env, generated, real)
    finally:
        server.stop()


def _relative(segments, root: str) -> list[tuple]:
    out = []
    for s in segments:
        assert s.uri.startswith(root), (s.uri, root)
        index = s.index_uri[len(root) :] if s.index_uri else None
        out.append((s.uri[len(root) :], s.size, s.partition, s.base_offset, s.is_last, index))
    return out


def test_listing_over_s3_equals_local(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in store.env.items():
        monkeypatch.setenv(key, value)
    base = f"s3://{BUCKET}/{PREFIX}"
    local_gen = _relative(list_segments([str(store.generated)]), str(store.generated))
    local_real = _relative(list_segments([str(store.real)]), str(store.real))
    assert max(Counter(p for _, _, p, *_ in local_gen).values()) >= 3, "want several segments per partition"
    assert _relative(list_segments([f"{base}/gen"]), f"{base}/gen") == local_gen
    assert all(s.mtime_ns for s in list_segments([f"{base}/gen"])), "the ingestion log compares modification times"
    assert _relative(list_segments([f"{base}/real"]), f"{base}/real") == local_real
    # s3a:// is an alias; globs naming log directories and partition directories
    assert _relative(list_segments([f"s3a://{BUCKET}/{PREFIX}/gen/"]), f"s3://{BUCKET}/{PREFIX}/gen") == local_gen
    assert len(list_segments([f"{base}/*"])) == len(local_gen) + len(local_real)
    assert len(list_segments([f"s3://{BUCKET}/*"])) == len(local_gen) + len(local_real)  # the bucket's top
    assert _relative(list_segments([f"{base}/*n"]), f"{base}/gen") == local_gen  # a glob naming log directories
    assert _relative(list_segments([f"{base}/g?n/__consumer_offsets-*"]), f"{base}/gen") == local_gen
    with pytest.raises(FileNotFoundError, match="no-such-prefix"):  # the CLI's exit 2
        list_segments([f"{base}/no-such-prefix"])


def test_unreachable_endpoint_is_not_a_missing_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """An endpoint nobody listens on is a failure (the CLI's exit 1), not "no such file" (exit 2)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    with pytest.raises(OSError) as err:
        list_segments([f"s3://{BUCKET}/{PREFIX}"])
    assert not isinstance(err.value, FileNotFoundError)
    assert f"127.0.0.1:{port}" in str(err.value)


def _inspect_counts(root: Path, cluster: str) -> Counter:
    counts: Counter = Counter()
    for seg in discover([root]):
        counts[(cluster, seg.partition)] += inspect_segment(seg).records
    return counts


def _rows(spark, path: str) -> list[tuple]:
    df = spark.read.format("delta").load(path)
    return [tuple(r) for r in df.select("cluster", "partition", "offset", "key", "value").collect()]


def test_bronze_from_s3_equals_local_disk(spark, tables, store: Store, tmp_path: Path) -> None:
    config = {
        "lakehouse": {"root": str(tmp_path / "s3-lakehouse")},
        "spark": {
            "master": "local[2]",
            "conf": {
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "4",
                "spark.driver.memory": "1g",
                **SHORT_RUN_CONF,
            },
        },
        "sources": {
            "backup": {
                "kind": "segments",
                "cluster": "unused",
                "paths": [f"s3://{BUCKET}/{PREFIX}"],
                # small ranges: most tasks start mid-file and locate a batch with the .index read from S3
                "split_bytes": 8192,
                "cluster_from_path": rf"^s3://{BUCKET}/{PREFIX}/(?P<cluster>gen|real)/",
            }
        },
        "jobs": {"from-s3": {"sources": ["backup"], "stages": ["bronze"]}},
    }
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "OFFSETS_SPARK_MASTER"}
    env.update(store.env)
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli.main", "run", "from-s3", "--config", str(jobs), "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout)
    (detail,) = report["stages"][0]["details"]

    expected = _inspect_counts(store.generated, "gen") + _inspect_counts(store.real, "real")
    assert detail["rows_read"] == sum(expected.values())
    assert detail["rows_inserted"] == sum(expected.values()) and detail["conflicts"] == 0

    # the same files from local disk, through the same data source
    local_issues = []
    for cluster, root in (("gen", store.generated), ("real", store.real)):
        src = SegmentsSource(kind="segments", cluster=cluster, paths=[str(root)])
        local_issues += ingest_segments(spark, tables, cluster, src, "local-run", "/").issues

    s3_rows = _rows(spark, str(tmp_path / "s3-lakehouse" / "bronze" / "offsets_records"))
    local_rows = _rows(spark, tables.path("bronze", "offsets_records"))
    assert len(s3_rows) == len(set(s3_rows)) == sum(expected.values())
    assert set(s3_rows) == set(local_rows)
    assert Counter((c, p) for c, p, *_ in s3_rows) == expected
    sources = spark.read.format("delta").load(str(tmp_path / "s3-lakehouse" / "bronze" / "offsets_records"))
    assert {r[0] for r in sources.select("source_uri").distinct().collect()} == {
        f"s3://{BUCKET}/{PREFIX}/{name}/{seg.path.relative_to(root)}"
        for name, root in (("gen", store.generated), ("real", store.real))
        for seg in discover([root])
        if inspect_segment(seg).records
    }
    s3_issues = {(i["cluster"], i["partition"], i["kind"], i["position"]) for i in detail["issues"]}
    assert s3_issues == {(i["cluster"], i["partition"], i["kind"], i["position"]) for i in local_issues}
