"""The per-job run lock (pipelines/runtime/lock.py, docs/operations.md): held by one process at a
time, the holder named to the refused one, released by the kernel when the holder is killed."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.errors import JobRunning
from pipelines.runtime.lock import hold, lock_configured_job, lock_path

REPO = Path(__file__).resolve().parents[2]

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from pipelines.runtime.lock import hold
    with hold(Path(sys.argv[1]), "demo", sys.argv[2]):
        print("held", flush=True)
        time.sleep(120)
""")


def start_holder(path: Path, run_id: str) -> subprocess.Popen[str]:
    """Another process holding the lock at ``path`` (it says so on stdout once it does)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), run_id], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture()
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    path = tmp_path / "lh" / "_locks" / "demo.lock"
    proc = start_holder(path, "run-other")
    yield proc, path
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_acquire_writes_the_holder_and_release_clears_it(tmp_path: Path) -> None:
    path = tmp_path / "demo.lock"
    with hold(path, "demo", "run-1") as me:
        doc = json.loads(path.read_text())
        assert doc == {"pid": os.getpid(), "host": socket.gethostname(), "run_id": "run-1", "started_at": me.started_at}
    assert path.read_text() == ""  # released cleanly: nothing for the next run to take over
    with hold(path, "demo", "run-2"):  # and it can be taken again
        assert json.loads(path.read_text())["run_id"] == "run-2"


def test_second_acquirer_is_refused_naming_the_holder(holder) -> None:
    proc, path = holder
    with pytest.raises(JobRunning) as refused, hold(path, "demo", "run-mine"):
        pytest.fail("the lock is held by another process")
    msg = str(refused.value)
    assert msg.startswith("job demo is already running (")
    assert f"pid {proc.pid} on host {socket.gethostname()}" in msg and "run run-other" in msg
    assert refused.value.exit_code == 4
    assert proc.poll() is None  # the holder was not disturbed


def test_cli_run_exits_4_with_one_line_before_spark(holder, tmp_path: Path) -> None:
    proc, _path = holder
    config = tmp_path / "jobs.yaml"
    config.write_text(f"""
lakehouse: {{root: {tmp_path / "lh"}}}
sources:
  s: {{kind: segments, cluster: c, paths: [{tmp_path}]}}
jobs:
  demo: {{sources: [s]}}
""")
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "pipelines.cli.main", "run", "demo", "-c", str(config), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    elapsed = time.monotonic() - t0
    assert out.returncode == 4, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: job demo is already running (pid "), out.stderr
    assert f"pid {proc.pid} " in lines[0] and "run run-other" in lines[0]
    assert out.stdout == ""
    # no Spark, no runner import: a refused run is quick even on a loaded machine
    assert elapsed < 20, elapsed
    assert "pyspark" not in out.stderr


def test_a_killed_holder_does_not_block_and_is_reported_as_taken_over(holder, caplog) -> None:
    proc, path = holder
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    caplog.set_level(logging.WARNING, logger="offsets_lakehouse")
    with hold(path, "demo", "run-next"):
        assert json.loads(path.read_text())["run_id"] == "run-next"
    taken = [r.getMessage() for r in caplog.records if "taken over" in r.getMessage()]
    assert len(taken) == 1 and f"pid {proc.pid} " in taken[0] and "run run-other" in taken[0], taken
    assert "no longer running" in taken[0]


def test_lock_places(tmp_path: Path) -> None:
    assert lock_path("/data/lh", "demo") == Path("/data/lh/_locks/demo.lock")
    assert lock_path("file:///data/lh", "demo") == Path("/data/lh/_locks/demo.lock")
    assert lock_path("s3a://bucket/prefix", "demo", tmp_path / "x") == tmp_path / "x" / "demo.lock"
    # jobs.yaml: lakehouse.lock_dir (relative to jobs.yaml) keeps the locks of an object-store root
    # in a local directory; without it they are leases in the store (tests/unit/test_lease.py)
    config = tmp_path / "jobs.yaml"
    config.write_text("""
lakehouse: {root: "s3a://bucket/prefix", lock_dir: run/locks}
sources:
  s: {kind: segments, cluster: c, paths: [/nowhere]}
jobs:
  demo: {sources: [s]}
""")
    with lock_configured_job(config, "demo", "run-s3") as me:
        assert json.loads((tmp_path / "run/locks/demo.lock").read_text())["run_id"] == me.run_id == "run-s3"


def test_a_stage_lock_makes_the_second_run_wait_for_the_first(tmp_path: Path, caplog) -> None:
    """Lakehouse-wide stages run one at a time: the second run of silver waits until the first
    one's silver ends, then runs (it is not refused)."""
    from pipelines.runtime.lock import stage_lock

    root = str(tmp_path / "lh")
    order: list[str] = []
    first_in = threading.Event()
    release_first = threading.Event()

    def first() -> None:
        with stage_lock(root, "silver", "run-1", poll_seconds=0.05):
            order.append("first in")
            first_in.set()
            release_first.wait(10)
            order.append("first out")

    t = threading.Thread(target=first)
    t.start()
    assert first_in.wait(10)
    caplog.set_level(logging.INFO, logger="offsets_lakehouse")
    threading.Timer(0.5, release_first.set).start()
    with stage_lock(root, "silver", "run-2", poll_seconds=0.05):
        order.append("second in")
    t.join()
    assert order == ["first in", "first out", "second in"]
    waited = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    assert len(waited) == 1 and "the silver stage of another run is already running" in waited[0]
    assert "run run-1" in waited[0]


def test_a_stage_lock_gives_up_after_its_wait_and_never_retries_the_work(tmp_path: Path) -> None:
    from pipelines.errors import StageBusy
    from pipelines.runtime.lock import stage_lock

    root = str(tmp_path / "lh")
    with (
        stage_lock(root, "gold", "run-1"),
        pytest.raises(StageBusy, match="the gold stage of another run is already running"),
        stage_lock(root, "gold", "run-2", wait_seconds=0.3, poll_seconds=0.05),
    ):
        pytest.fail("the lock was held")
    calls = []
    # a JobRunning from the work itself is the work's, not a wait
    with pytest.raises(JobRunning), stage_lock(root, "gold", "run-3"):
        calls.append(1)
        raise JobRunning("from inside")
    assert calls == [1]
