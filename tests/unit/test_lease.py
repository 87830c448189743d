"""The job lock on an object-store root: a lease kept in the store by conditional writes
(pipelines/runtime/lock.py, docs/operations.md), against moto's S3 server on loopback.

Runs on "another host" are other holders of the same lease object: what a host adds is only its
name in the holder's description, so the tests take the lease from threads and processes here."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipelines.errors import ConfigError, JobRunning
from pipelines.runtime.lock import _Lease, job_lock, lease, lock_configured_job
from pipelines.runtime.storage import S3Settings, check_conditional_writes

REPO = Path(__file__).resolve().parents[2]
BUCKET = "lakehouse"


@pytest.fixture(scope="module")
def store() -> Iterator[dict[str, str]]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "test-key",
        "AWS_SECRET_ACCESS_KEY": "test-secret",
        "AWS_REGION": "us-east-1",
    }
    S3Settings.resolve({}, env).client().create_bucket(Bucket=BUCKET)
    yield env
    server.stop()


@pytest.fixture()
def client(store: dict[str, str]) -> Any:
    return S3Settings.resolve({}, store).client()


def body(client: Any, key: str) -> bytes:
    return client.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def test_lease_names_its_holder_and_release_empties_it(client: Any, request: pytest.FixtureRequest) -> None:
    key = f"{request.node.name}/_locks/demo.lock"
    with lease(client, f"s3://{BUCKET}/{key}", "demo", "run-1", 30) as me:
        doc = json.loads(body(client, key))
        assert doc["pid"] == os.getpid() and doc["host"] == socket.gethostname() and doc["run_id"] == "run-1"
        assert doc["started_at"] == me.started_at and doc["lease_seconds"] == 30
    assert body(client, key) == b""  # released: the next run takes it at once
    with lease(client, f"s3://{BUCKET}/{key}", "demo", "run-2", 30):
        assert json.loads(body(client, key))["run_id"] == "run-2"


def test_a_live_holder_refuses_the_next_run_naming_itself(client: Any, request: pytest.FixtureRequest) -> None:
    uri = f"s3://{BUCKET}/{request.node.name}/_locks/demo.lock"
    with (
        lease(client, uri, "demo", "run-first", 30),
        pytest.raises(JobRunning) as refused,
        lease(client, uri, "demo", "run-second", 30),
    ):
        pytest.fail("a live lease was taken")
    msg = str(refused.value)
    assert msg.startswith("job demo is already running (pid ")
    assert "run run-first" in msg and f"lock {uri}" in msg and "lease renewed" in msg
    assert refused.value.exit_code == 4


def test_renewals_keep_a_lease_beyond_its_duration(client: Any, request: pytest.FixtureRequest) -> None:
    uri = f"s3://{BUCKET}/{request.node.name}/_locks/demo.lock"
    lost: list[str] = []
    with lease(client, uri, "demo", "run-long", 2, on_lost=lost.append):
        time.sleep(5)  # two and a half leases: only renewals keep it
        with pytest.raises(JobRunning), lease(client, uri, "demo", "run-other", 2):
            pass
    assert lost == []


def test_a_lapsed_lease_is_taken_over_and_its_holder_learns_it(
    client: Any, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """A holder that stopped renewing (a dead host, a frozen process) loses the lease once it
    lapses: the next run takes it over and says so; the old holder's next renewal is refused."""
    key = f"{request.node.name}/_locks/demo.lock"
    stale = _Lease(client, BUCKET, key, _holder("run-dead", host="another-host"), 2)
    stale.acquire("demo")
    with pytest.raises(JobRunning):  # still within its lease
        _Lease(client, BUCKET, key, _holder("run-early"), 2).acquire("demo")
    time.sleep(3.5)  # the store's clock has 1 s resolution: a margin beyond the 2 s lease
    caplog.set_level(logging.WARNING, logger="offsets_lakehouse")
    with lease(client, f"s3://{BUCKET}/{key}", "demo", "run-next", 30):
        assert json.loads(body(client, key))["run_id"] == "run-next"
        assert stale.renew() is False  # the old holder finds out at its next renewal
    taken = [r.getMessage() for r in caplog.records if "taken over" in r.getMessage()]
    assert len(taken) == 1 and "run run-dead" in taken[0] and "another-host" in taken[0], taken


def test_two_runs_taking_over_one_lapsed_lease_one_wins(client: Any, request: pytest.FixtureRequest) -> None:
    key = f"{request.node.name}/_locks/demo.lock"
    _Lease(client, BUCKET, key, _holder("run-dead", host="another-host"), 2).acquire("demo")
    time.sleep(3.5)
    outcomes: list[str] = []
    start = threading.Barrier(4)

    def take(run_id: str) -> None:
        contender = _Lease(S3Settings.resolve({}, _env(client)).client(), BUCKET, key, _holder(run_id), 30)
        start.wait()
        try:
            contender.acquire("demo")
            outcomes.append(f"won {run_id}")
        except JobRunning:
            outcomes.append("refused")

    threads = [threading.Thread(target=take, args=(f"run-{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if o.startswith("won")]
    assert len(winners) == 1 and outcomes.count("refused") == 3, outcomes
    assert json.loads(body(client, key))["run_id"] == winners[0].split()[1]


def test_the_holder_stops_its_run_when_another_took_the_lease(client: Any, request: pytest.FixtureRequest) -> None:
    key = f"{request.node.name}/_locks/demo.lock"
    lost = threading.Event()
    messages: list[str] = []

    def on_lost(message: str) -> None:
        messages.append(message)
        lost.set()

    with lease(client, f"s3://{BUCKET}/{key}", "demo", "run-mine", 2, on_lost=on_lost):
        client.put_object(Bucket=BUCKET, Key=key, Body=b'{"someone": "else"}')  # e.g. an operator
        assert lost.wait(10), "the renewal did not notice"
    assert len(messages) == 1 and "another run took it over" in messages[0]


def test_an_unreachable_store_stops_the_run_before_the_lease_lapses(
    store: dict[str, str], request: pytest.FixtureRequest
) -> None:
    key = f"{request.node.name}/_locks/demo.lock"
    client = S3Settings.resolve({}, store).client()
    messages: list[str] = []
    lost = threading.Event()
    held = _Lease(client, BUCKET, key, _holder("run-cut"), 8)
    held.acquire("demo")
    with socket.socket() as s:  # an address nobody listens on: the store is gone
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    held.client = S3Settings.resolve({}, {**store, "AWS_ENDPOINT_URL": dead}).client()

    from pipelines.runtime.lock import _Renewer

    renewer = _Renewer(held, lambda m: (messages.append(m), lost.set()))
    t0 = time.monotonic()
    renewer.start()
    assert lost.wait(15)
    renewer.stopped.set()
    # the cause, as every other client's unreachable store is reported (tests/e2e/test_store_faults.py)
    port = dead.rsplit(":", 1)[1]
    assert messages[0].startswith(
        f"the object store at 127.0.0.1:{port} could not be reached: Connection refused (at s3://{BUCKET}/{key})"
    ), messages[0]
    assert time.monotonic() - t0 < 8, "stopped after the lease lapsed: another run could already hold it"


def test_a_lost_answer_to_our_own_write_is_our_success(client: Any, request: pytest.FixtureRequest) -> None:
    """The SDK retries a write whose answer was lost; the retry is refused by the object the
    first attempt wrote. Finding its own bytes there, the holder knows the write landed."""
    key = f"{request.node.name}/_locks/demo.lock"
    mine = _Lease(client, BUCKET, key, _holder("run-retried"), 30)
    client.put_object(Bucket=BUCKET, Key=key, Body=mine.body())  # the first attempt, answer lost
    mine.acquire("demo")  # the retry: refused by If-None-Match, then recognised
    assert mine.etag is not None
    assert mine.renew() is True


def test_job_lock_on_an_object_store_root(
    store: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in store.items():
        monkeypatch.setenv(name, value)
    config = tmp_path / "jobs.yaml"
    config.write_text(f"""
lakehouse: {{root: "s3a://{BUCKET}/lh-cli", lock_lease_seconds: 30}}
sources:
  s: {{kind: segments, cluster: c, paths: [/nowhere]}}
jobs:
  demo: {{sources: [s]}}
""")
    client = S3Settings.resolve({}, store).client()
    holder = textwrap.dedent(f"""
        import sys, time
        from pipelines.runtime.lock import lock_configured_job
        with lock_configured_job({str(config)!r}, "demo", "run-elsewhere"):
            print("held", flush=True)
            time.sleep(120)
    """)
    env = {**os.environ, **store, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        assert json.loads(body(client, "lh-cli/_locks/demo.lock"))["run_id"] == "run-elsewhere"
        out = subprocess.run(
            [sys.executable, "-m", "pipelines.cli.main", "run", "demo", "-c", str(config)],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            timeout=120,
        )
        assert out.returncode == 4, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: job demo is already running (pid "), out.stderr
        assert f"pid {proc.pid} " in lines[0] and f"lock s3://{BUCKET}/lh-cli/_locks/demo.lock" in lines[0]
        # a killed holder on this host is taken over at once: its pid is gone
        proc.kill()
        proc.wait()
        with lock_configured_job(config, "demo", "run-after") as me:
            assert json.loads(body(client, "lh-cli/_locks/demo.lock"))["run_id"] == me.run_id == "run-after"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_store_that_ignores_conditional_writes_is_refused() -> None:
    class Careless:  # an S3 API that accepts every write, conditions or not
        def put_object(self, **kwargs: Any) -> dict[str, str]:
            return {"ETag": '"x"'}

        def delete_object(self, **kwargs: Any) -> None:
            pass

    with pytest.raises(ConfigError, match="ignores conditional writes \\(If-None-Match, If-Match\\)"):
        check_conditional_writes(Careless(), "careless-bucket", "lh")


def test_the_real_store_passes_the_probe(store: dict[str, str]) -> None:
    client = S3Settings.resolve({}, store).client()
    check_conditional_writes(client, BUCKET, "probe-test")
    assert not client.list_objects_v2(Bucket=BUCKET, Prefix="probe-test/").get("Contents")  # cleaned up


def test_lock_dir_keeps_a_local_file_lock_for_an_object_store_root(tmp_path: Path) -> None:
    with job_lock("s3a://nowhere/lh", "demo", "run-local", tmp_path / "locks") as me:
        assert json.loads((tmp_path / "locks" / "demo.lock").read_text())["run_id"] == me.run_id


def _holder(run_id: str, host: str | None = None) -> Any:
    from pipelines.runtime.lock import Holder

    return Holder(os.getpid(), host or socket.gethostname(), run_id, "2026-11-27T00:00:00Z")


def _env(client: Any) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": client.meta.endpoint_url,
        "AWS_ACCESS_KEY_ID": "test-key",
        "AWS_SECRET_ACCESS_KEY": "test-secret",
        "AWS_REGION": "us-east-1",
    }
