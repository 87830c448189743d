"""A bronze run SIGKILLed while it ingests (the whole process group: Python driver and JVM) and
re-run gives the table an uninterrupted run gives. The killed run is a real `offsets-lakehouse run`
process; the re-run and the reference run use this process's Spark (tests/e2e/jobrun.py). The
named fault points of every layer are in tests/e2e/test_fault_points.py.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from pipelines.generate import generate
from tests.e2e.jobrun import jobs_file, run, run_here

COLUMNS = ["cluster", "partition", "offset", "key", "value", "control", "content_hash", "source_uri"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("crash") / "logs"
    generate(out, 4000, seed=21, partitions=4, segment_bytes=16 * 1024)
    return out


def config(tmp_path: Path, logs: Path) -> Path:
    return jobs_file(tmp_path, logs, ["bronze"], split_bytes=65536)


def table(spark, root: Path) -> set:
    df = spark.read.format("delta").load(str(root / "lakehouse" / "bronze" / "offsets_records"))
    rows = [tuple(r) for r in df.select(*COLUMNS).collect()]
    assert len(rows) == len({r[:3] for r in rows}), "one row per log position: nothing inserted twice"
    return set(rows)


@pytest.fixture(scope="module")
def reference(spark, logs: Path, tmp_path_factory: pytest.TempPathFactory) -> set:
    root = tmp_path_factory.mktemp("reference")
    run_here(config(root, logs))
    rows = table(spark, root)
    assert len(rows) >= 4000
    return rows


def test_sigkill_mid_ingest_then_rerun(spark, logs: Path, reference: set, tmp_path: Path) -> None:
    cfg = config(tmp_path, logs)
    # bronze's new data files are in the table directory, its commit not yet made
    code = run(cfg, kill_at="bronze.after_write_before_commit")
    assert code == -signal.SIGKILL
    run_here(cfg)
    assert table(spark, tmp_path) == reference
