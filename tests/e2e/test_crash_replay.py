"""A bronze run killed at any point and re-run gives the table an uninterrupted run gives.

Each run is a real `offsets-lakehouse run` process (its own JVM). Faults are injected at the
named points of pipelines/runtime/faults.py, and once by a real SIGKILL of the whole process
group (Python driver and JVM) while it ingests.
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
from pipelines.runtime import faults

REPO = Path(__file__).resolve().parents[2]
COLUMNS = ["cluster", "partition", "offset", "key", "value", "control", "content_hash", "source_uri"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("crash") / "logs"
    generate(out, 4000, seed=21, partitions=4, segment_bytes=16 * 1024)
    return out


def jobs_file(tmp_path: Path, logs: Path) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(f"""
lakehouse: {{root: {tmp_path / "lakehouse"}}}
spark:
  master: local[2]
  conf: {{spark.sql.shuffle.partitions: "4", spark.ui.enabled: "false"}}
sources:
  s: {{kind: segments, cluster: crash, paths: [{logs}], split_bytes: 65536}}
jobs:
  j: {{sources: [s], stages: [bronze]}}
""")
    return path


def run(config: Path, fault: str | None = None, kill_after: float | None = None) -> int:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("OFFSETS_FAULT", None)
    if fault:
        env["OFFSETS_FAULT"] = fault
    cmd = [sys.executable, "-m", "pipelines.cli.main", "run", "j", "-c", str(config), "--json"]
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    if kill_after is None:
        proc.communicate(timeout=600)
        return proc.returncode
    deadline = time.time() + 300
    for line in proc.stderr:  # wait until the ingest is under way, then kill driver and JVM
        if "bronze: ingesting source" in line or time.time() > deadline:
            break
    time.sleep(kill_after)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    return proc.returncode


def table(spark, root: Path) -> set:
    df = spark.read.format("delta").load(str(root / "lakehouse" / "bronze" / "offsets_records"))
    return {tuple(r) for r in df.select(*COLUMNS).collect()}


@pytest.fixture(scope="module")
def reference(spark, logs: Path, tmp_path_factory: pytest.TempPathFactory) -> set:
    root = tmp_path_factory.mktemp("reference")
    assert run(jobs_file(root, logs)) == 0
    rows = table(spark, root)
    assert len(rows) >= 4000
    return rows


@pytest.mark.parametrize("fault", sorted(p for p in faults.POINTS if p.startswith("bronze.")))
def test_fault_point_then_rerun(spark, logs: Path, reference: set, tmp_path: Path, fault: str) -> None:
    config = jobs_file(tmp_path, logs)
    assert run(config, fault=fault) == faults.EXIT_CODE
    assert run(config) == 0
    assert table(spark, tmp_path) == reference


def test_sigkill_mid_ingest_then_rerun(spark, logs: Path, reference: set, tmp_path: Path) -> None:
    config = jobs_file(tmp_path, logs)
    code = run(config, kill_after=3.0)
    assert code == -signal.SIGKILL
    assert run(config) == 0
    assert table(spark, tmp_path) == reference
