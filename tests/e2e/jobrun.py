"""Running jobs for the crash tests: a real ``offsets-lakehouse run`` process that a fault point or
SIGKILL ends, and the re-run after it in this process (the spark fixture's JVM: a re-run reads
only what the dead process left on disk, and it saves a JVM start per test)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.support.jvm import SHORT_RUN_YAML

REPO = Path(__file__).resolve().parents[2]


def jobs_file(
    tmp_path: Path,
    logs: Path,
    stages: list[str],
    name: str = "jobs.yaml",
    split_bytes: int | None = None,
    root: Path | None = None,
) -> Path:
    """``tmp_path/name``: job ``j`` over ``logs`` into the lakehouse at ``root`` (``tmp_path/lakehouse``)."""
    split = f", split_bytes: {split_bytes}" if split_bytes else ""
    path = tmp_path / name
    path.write_text(f"""
lakehouse: {{root: {root or tmp_path / "lakehouse"}}}
spark:
  master: local[2]
  conf: {{spark.sql.shuffle.partitions: "4", spark.ui.enabled: "false", {SHORT_RUN_YAML}}}
sources:
  s: {{kind: segments, cluster: crash, paths: [{logs}]{split}}}
jobs:
  j: {{sources: [s], stages: [{", ".join(stages)}]}}
""")
    return path


def run(
    config: Path,
    fault: str | None = None,
    kill_on: str | None = None,
    kill_after: float = 0.0,
    *extra: str,
    command: str = "run",
    kill_at: str | None = None,
) -> int:
    """Run job ``j`` of ``config`` (``offsets-lakehouse <command> j``) in a new process group;
    returns its exit code. ``fault``: the fault point that ends it; ``kill_at``: the fault point
    where the whole group (driver and JVM) is SIGKILLed, the run paused there (runtime/faults.py's
    hook) so the kill lands exactly there; ``kill_on``: SIGKILL the group ``kill_after`` seconds
    after that text appears in its log (timing: the long tier's kill loop)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("OFFSETS_FAULT", None)
    env.pop("OFFSETS_FAULT_HOOK", None)
    if fault:
        env["OFFSETS_FAULT"] = fault
    cmd = [sys.executable, "-m", "pipelines.cli.main", command, "j", "-c", str(config), "--json", *extra]
    if kill_on is not None:  # the stages' start lines are DEBUG: --verbose shows them
        cmd.append("--verbose")
    if kill_at is not None:
        return _kill_at(cmd, env, kill_at, config.parent / "killed-run.log")
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    if kill_on is None:
        _, err = proc.communicate(timeout=900)
        if proc.returncode not in (0, 86):
            print(err[-3000:], file=sys.stderr)
        return proc.returncode
    deadline = time.time() + 600
    assert proc.stderr is not None
    for line in proc.stderr:  # wait until the stage is under way, then kill driver and JVM
        if kill_on in line or time.time() > deadline:
            break
    time.sleep(kill_after)
    with contextlib.suppress(ProcessLookupError):  # it may have finished on its own meanwhile
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    return proc.returncode


def _kill_at(cmd: list[str], env: dict[str, str], point: str, log: Path) -> int:
    with socket.create_server(("127.0.0.1", 0)) as server, log.open("w") as out:
        env = {**env, "OFFSETS_FAULT": point, "OFFSETS_FAULT_HOOK": f"127.0.0.1:{server.getsockname()[1]}"}
        # output to a file: a pipe nobody reads while the run waits at the point could fill up
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=out, start_new_session=True)
        server.settimeout(300)
        try:
            conn, _ = server.accept()
        except TimeoutError:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"the run never reached {point}:\n{log.read_text()[-3000:]}") from None
        with conn:
            assert conn.makefile().readline().strip() == point
            os.killpg(proc.pid, signal.SIGKILL)  # while it waits for the answer, mid-stage
        proc.wait(timeout=60)
    return proc.returncode


def run_here(config: Path) -> None:
    """Run job ``j`` of ``config`` in this process (the test session's Spark)."""
    from pyspark.sql import SparkSession

    from pipelines.runner import Context, run_job

    spark = SparkSession.getActiveSession()
    if spark is not None:  # table names belong to the session: point them at this job's root
        for db in ("bronze", "silver", "gold", "quality"):
            spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    report = run_job(Context(config), "j")
    assert report.status == "ok", report.to_json()
