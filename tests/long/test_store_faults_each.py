"""The object store goes away in the middle of a run (long tier, on SeaweedFS; the e2e tier's
tests/e2e/test_store_faults.py is the quicker chained variant on moto): at a fault point of each
layer — bronze's data files written but not committed, silver's first table committed and
the others not, gold's first table committed and the others not — the run's process tells the
proxy in front of the store (tests/support/store.py) to cut every connection, and carries on.
The run must fail with one clear ``error:`` line and exit code 1; with the store back, the next
run must complete to exactly the tables of a run the store never left.

Every lakehouse starts as a copy of one template (a first run on the first half of the log); the
incremental run over the whole log is made once uninterrupted, then once per fault point. The
runs killed at a point are independent (a proxy each), so they run at once, as do the runs after
them."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bench.common import split_log
from pipelines.generate import generate
from tests.e2e.test_store_faults import assert_failed_clearly, contents, copy_prefix, run, write_jobs
from tests.support.seaweedfs import seaweedfs_store
from tests.support.store import Store, StoreProxy

BUCKET = "faults"
POINTS = ("bronze.after_write_before_commit", "silver.after_first_table", "gold.between_merges")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with seaweedfs_store(tmp_path_factory.mktemp("store")) as running:
        running.bucket(BUCKET)
        yield running


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
                assert_failed_clearly(point, result)
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
