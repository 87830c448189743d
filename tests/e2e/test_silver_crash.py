"""A silver run killed by SIGKILL (driver and JVM) mid-write, then re-run, gives the silver tables a
decode of everything in one go gives. The runs are real ``offsets-lakehouse run`` processes; the
spark tier covers the named fault points in-process (tests/spark/test_silver_generated.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.generate import generate
from pipelines.runtime.tables import Tables
from pipelines.silver.ingest import progress_state, run_silver
from tests.support.silver import census, snapshot

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("silver-crash") / "logs"
    generate(out, 3000, seed=4, partitions=2, segment_bytes=16 * 1024)
    return out


def jobs_file(tmp_path: Path, logs: Path) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(f"""
lakehouse: {{root: {tmp_path / "lakehouse"}}}
spark:
  master: local[2]
  conf: {{spark.sql.shuffle.partitions: "4", spark.ui.enabled: "false"}}
sources:
  s: {{kind: segments, cluster: crash, paths: [{logs}]}}
jobs:
  j: {{sources: [s], stages: [bronze, silver]}}
""")
    return path


def run(config: Path, *extra: str, kill_on: str | None = None, kill_after: float = 0.0) -> int:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("OFFSETS_FAULT", None)
    cmd = [sys.executable, "-m", "pipelines.cli.main", "run", "j", "-c", str(config), "--json", *extra]
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    if kill_on is None:
        proc.communicate(timeout=900)
        return proc.returncode
    deadline = time.time() + 600
    for line in proc.stderr:  # wait until silver is under way, then kill driver and JVM
        if kill_on in line or time.time() > deadline:
            break
    time.sleep(kill_after)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    return proc.returncode


def test_sigkill_mid_silver_then_rerun(spark, logs: Path, tmp_path: Path) -> None:
    config = jobs_file(tmp_path, logs)
    # bronze completes, silver is decoding or writing its tables when the process group dies
    code = run(config, kill_on="silver: decoding", kill_after=12.0)
    assert code == -signal.SIGKILL
    tables = Tables(spark, str(tmp_path / "lakehouse"))
    assert progress_state(spark, tables)[1] is None, "killed before silver completed"
    assert run(config) == 0
    after_kill = snapshot(spark, tables)
    expected = sum(p["records"] - p["control"] - p["tombstones"] for p in census(logs).values())
    data = ("offset_commits", "group_metadata", "share_group_records", "streams_group_records")
    consumer = [t for t in after_kill if t.startswith("consumer_group_")]
    assert sum(len(after_kill.get(t, [])) for t in (*data, *consumer)) == expected, "each record once"
    # the same tables as decoding everything in one go
    assert run_silver(spark, tables, "refresh", full_refresh=True).mode == "full_refresh"
    assert snapshot(spark, tables) == after_kill
