"""A silver run killed by SIGKILL (driver and JVM) between its tables' commits, then re-run, gives
the silver tables a decode of everything in one go gives. The runs are real ``offsets-lakehouse run`` processes; the
spark tier covers the named fault points in-process (tests/spark/test_silver_generated.py).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from pipelines.generate import generate
from pipelines.runtime.tables import Tables
from pipelines.silver.ingest import run_silver
from pipelines.silver.progress import progress_state
from tests.e2e.jobrun import jobs_file, run, run_here
from tests.support.silver import census, snapshot


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("silver-crash") / "logs"
    generate(out, 3000, seed=4, partitions=2, segment_bytes=16 * 1024)
    return out


def test_sigkill_mid_silver_then_rerun(spark, logs: Path, tmp_path: Path) -> None:
    config = jobs_file(tmp_path, logs, ["bronze", "silver"])
    # bronze completes; silver has committed its first table, not the others, when the process
    # group (driver and JVM) dies
    code = run(config, kill_at="silver.after_first_table")
    assert code == -signal.SIGKILL
    tables = Tables(spark, str(tmp_path / "lakehouse"))
    assert progress_state(spark, tables)[1] is None, "killed before silver completed"
    run_here(config)
    after_kill = snapshot(spark, tables)
    expected = sum(p["records"] - p["control"] - p["tombstones"] for p in census(logs).values())
    data = ("offset_commits", "group_metadata", "share_group_records", "streams_group_records")
    consumer = [t for t in after_kill if t.startswith("consumer_group_")]
    assert sum(len(after_kill.get(t, [])) for t in (*data, *consumer)) == expected, "each record once"
    # the same tables as decoding everything in one go
    assert run_silver(spark, tables, "refresh", full_refresh=True).mode == "full_refresh"
    assert snapshot(spark, tables) == after_kill
