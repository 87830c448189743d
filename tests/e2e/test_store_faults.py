"""The object store goes away in the middle of a run (docs/object-storage.md): at a fault point of
each layer — bronze's data files written but not committed, silver's first table committed and
the others not, gold's first table committed and the others not — the run's process tells the
proxy in front of the store (tests/support/store.py) to cut every connection, and carries on.
Each such run must fail with one clear ``error:`` line and exit code 1, and leave what it
committed whole.

Here the faults are chained on one new lakehouse: the first run meets the store cut in bronze,
the next finds the store back, redoes what the cut run left and meets the cut in silver, and so
on; the last run completes. Its tables must equal those of the same job run once, uninterrupted. The long tier
(tests/long/test_store_faults_each.py) runs each fault in a lakehouse of its own, on SeaweedFS,
each followed by a run that completes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.generate import generate
from pipelines.runner import Context, run_job
from pipelines.runtime.tables import locations
from tests.e2e.fault_cases import RUN_COLUMNS, RUN_LOGS
from tests.support.jvm import SHORT_RUN_YAML
from tests.support.store import FAST_FAILING_S3A, Store, host_env

REPO = Path(__file__).resolve().parents[2]
BUCKET = "faults"
POINTS = ("bronze.after_write_before_commit", "silver.after_first_table", "gold.between_merges")


@pytest.fixture(scope="module")
def store(tier_store: Store) -> Iterator[Store]:
    """The tier's store (this tier's session started with its settings, tests/spark/conftest.py):
    the uninterrupted run runs in this process."""
    tier_store.bucket(BUCKET)
    yield tier_store
    tier_store.proxy.up()  # whatever happened, the store is back for the tier's next tests


def write_jobs(path: Path, prefix: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fast = ", ".join(f'{k}: "{v}"' for k, v in FAST_FAILING_S3A.items())
    path.write_text(f"""
lakehouse: {{root: "s3a://{BUCKET}/{prefix}", lock_lease_seconds: 30}}
spark:
  master: local[2]
  conf: {{spark.sql.shuffle.partitions: "2", spark.ui.enabled: "false", {SHORT_RUN_YAML}, {fast}}}
sources:
  s: {{kind: segments, cluster: faults, paths: ["s3://{BUCKET}/logs"], offsets_partitions: 3}}
jobs:
  j: {{sources: [s], stages: [bronze, silver, gold]}}
""")
    return path


def run(
    store: Store, config: Path, endpoint: str | None = None, fault: str | None = None, hook: int | None = None
) -> subprocess.CompletedProcess[str]:
    """``offsets-lakehouse run j``; ``fault``: the point where the process tells the proxy whose
    hook port is ``hook`` to cut the store (``endpoint``: that proxy)."""
    env = host_env(store, config.parent)
    if endpoint:
        env["AWS_ENDPOINT_URL"] = endpoint
    if fault:
        env |= {"OFFSETS_FAULT": fault, "OFFSETS_FAULT_HOOK": f"127.0.0.1:{hook}"}
    cmd = [sys.executable, "-m", "pipelines.cli.main", "run", "j", "-c", str(config), "--json"]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


def assert_failed_clearly(point: str, result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 1, (point, result.returncode, result.stderr[-3000:])
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, (point, result.stderr[-3000:])
    # the message names what could not be reached
    assert re.match(
        r"error: the object store at 127\.0\.0\.1:\d+ could not be reached: Connection refused", errors[0]
    ), (point, errors[0], result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


def copy_prefix(store: Store, source: str, target: str) -> None:
    client = store.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{source}/"):
        for obj in page.get("Contents", []):
            key = target + obj["Key"][len(source) :]
            client.copy_object(Bucket=BUCKET, Key=key, CopySource={"Bucket": BUCKET, "Key": obj["Key"]})


def contents(store: Store, prefix: str) -> dict[str, list[str]]:
    """Every row of every bronze, silver and gold table under ``prefix``, without run ids and run
    times, read with delta-rs from the store."""
    from deltalake import DeltaTable

    options = {"AWS_ALLOW_HTTP": "true", **store.env(direct=True)}
    out = {}
    for t in locations(f"s3://{BUCKET}/{prefix}"):
        if t.layer == "quality" or (t.layer, t.table) in RUN_LOGS or not t.exists:
            continue
        data = DeltaTable(t.location, storage_options=options).to_pyarrow_table()
        data = data.drop_columns([c for c in data.column_names if c in RUN_COLUMNS])
        out[t.name] = sorted(json.dumps(r, default=str, sort_keys=True) for r in data.to_pylist())
    return out


def test_the_store_gone_mid_commit_in_each_layer_then_the_runs_complete(
    spark, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in store.env(direct=True).items():  # locations() looks for tables with pyarrow
        monkeypatch.setenv(key, value)
    logs = generate(tmp_path / "logs", 1800, seed=51, partitions=3, segment_bytes=8 * 1024).out
    store.upload(logs, f"s3://{BUCKET}/logs")
    clean, faulty = (write_jobs(tmp_path / name / "jobs.yaml", name) for name in ("clean", "faulty"))
    # the same job once, uninterrupted, in this process (before the chain cuts the store)
    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    assert run_job(Context(clean), "j").status == "ok"

    proxy = store.proxy
    for point in POINTS:
        proxy.up()  # the store is back
        result = run(store, faulty, fault=point, hook=proxy.hook_port)
        assert proxy.hooked[-1:] == [point], (point, result.stderr[-2000:])
        assert_failed_clearly(point, result)
    proxy.up()
    last = run(store, faulty)
    assert last.returncode == 0, last.stderr[-3000:]

    want = contents(store, "clean")
    assert {"bronze.offsets_records", "silver.offset_commits", "gold.current_offsets"} <= set(want)
    got = contents(store, "faulty")
    assert got == want, sorted(k for k in want if got.get(k) != want[k])
