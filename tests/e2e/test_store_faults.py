"""The object store goes away in the middle of a run (docs/object-storage.md): at a fault point of
each layer — bronze's data files written but not committed, silver's first table committed and
the others not, gold's first table committed and the others not — the run's process tells the
proxy in front of the store (tests/support/store.py) to cut every connection, and carries on.
The run must fail with one clear ``error:`` line and exit code 1; with the store back, the next
run must complete to exactly the tables of a run the store never left.

Every lakehouse starts as a copy of one template (a first run on the first half of the log); the
incremental run over the whole log is made once uninterrupted, then once per fault point. The
runs killed at a point are independent (a proxy each), so they run at once, as do the runs after
them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bench.common import split_log
from pipelines.generate import generate
from pipelines.runtime.tables import locations
from tests.e2e.fault_cases import RUN_COLUMNS, RUN_LOGS
from tests.support.jvm import SHORT_RUN_YAML
from tests.support.store import FAST_FAILING_S3A, Store, StoreProxy, host_env, moto_store

REPO = Path(__file__).resolve().parents[2]
BUCKET = "faults"
POINTS = ("bronze.after_write_before_commit", "silver.after_first_table", "gold.between_merges")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with moto_store(tmp_path_factory.mktemp("store")) as running:
        running.bucket(BUCKET)
        yield running


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


def run(store: Store, config: Path, endpoint: str | None = None, fault: str | None = None, hook: int | None = None):
    env = host_env(store, config.parent)
    if endpoint:
        env["AWS_ENDPOINT_URL"] = endpoint
    if fault:
        env |= {"OFFSETS_FAULT": fault, "OFFSETS_FAULT_HOOK": f"127.0.0.1:{hook}"}
    cmd = [sys.executable, "-m", "pipelines.cli.main", "run", "j", "-c", str(config), "--json"]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


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
        if t.layer == "quality" or (t.layer, t.table) in RUN_LOGS:
            continue
        try:
            data = DeltaTable(t.location, storage_options=options).to_pyarrow_table()
        except Exception:  # not created in this lakehouse
            continue
        data = data.drop_columns([c for c in data.column_names if c in RUN_COLUMNS])
        out[t.name] = sorted(json.dumps(r, default=str, sort_keys=True) for r in data.to_pylist())
    return out


def test_the_store_gone_mid_commit_fails_the_run_and_the_next_run_completes(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in store.env(direct=True).items():  # locations() looks for tables with pyarrow
        monkeypatch.setenv(key, value)
    logs = generate(tmp_path / "logs", 2400, seed=51, partitions=3, segment_bytes=8 * 1024).out
    early = tmp_path / "early"
    split_log(logs, early, 50)
    store.upload(early, f"s3://{BUCKET}/logs")
    template = run(store, write_jobs(tmp_path / "template" / "jobs.yaml", "template"))
    assert template.returncode == 0, template.stderr[-3000:]
    store.upload(logs, f"s3://{BUCKET}/logs")  # the rest of the log arrives

    lakehouses = ["clean", *(p.replace(".", "-") for p in POINTS)]
    for name in lakehouses:
        copy_prefix(store, "template", name)
    configs = {name: write_jobs(tmp_path / name / "jobs.yaml", name) for name in lakehouses}
    proxies = {point: StoreProxy(int(store.direct.rsplit(":", 1)[1])) for point in POINTS}
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            clean = pool.submit(run, store, configs["clean"])
            failing = {
                point: pool.submit(
                    run,
                    store,
                    configs[point.replace(".", "-")],
                    f"http://127.0.0.1:{proxies[point].port}",
                    point,
                    proxies[point].hook_port,
                )
                for point in POINTS
            }
            assert clean.result().returncode == 0, clean.result().stderr[-3000:]
            for point, future in failing.items():
                result = future.result()
                assert proxies[point].hooked == [point], (point, result.stderr[-2000:])
                assert result.returncode == 1, (point, result.returncode, result.stderr[-3000:])
                errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
                assert len(errors) == 1, (point, result.stderr[-3000:])
                assert re.search(r"127\.0\.0\.1:\d+|[Cc]onnect|refused|[Uu]nable to execute HTTP", errors[0]), errors[0]
                assert "Traceback" not in result.stderr, result.stderr[-3000:]
            for proxy in proxies.values():
                proxy.up()  # the store is back
            after = {
                point: pool.submit(
                    run, store, configs[point.replace(".", "-")], f"http://127.0.0.1:{proxies[point].port}"
                )
                for point in POINTS
            }
            for point, future in after.items():
                assert future.result().returncode == 0, (point, future.result().stderr[-3000:])
    finally:
        for proxy in proxies.values():
            proxy.close()

    want = contents(store, "clean")
    assert {"bronze.offsets_records", "silver.offset_commits", "gold.current_offsets"} <= set(want)
    for point in POINTS:
        got = contents(store, point.replace(".", "-"))
        assert got == want, (point, sorted(k for k in want if got.get(k) != want[k]))
