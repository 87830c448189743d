"""A gold run killed between its MERGEs (or before them) and re-run ends in the generator's
expected state: the in-flight mark makes the next run recompute the interrupted partitions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipelines.generate import generate
from pipelines.runtime import faults
from tests.e2e.jobrun import jobs_file, run, run_here

STAGES = ["bronze", "silver", "gold"]


@pytest.mark.parametrize("fault", ["gold.between_merges"])  # before_merge: same recovery path
def test_gold_killed_then_rerun(spark, tmp_path: Path, fault: str) -> None:
    logs = tmp_path / "logs"
    generate(logs, 3000, seed=5, partitions=3, segment_bytes=16 * 1024)
    early = tmp_path / "early"
    for part in logs.glob("__consumer_offsets-*"):
        (early / part.name).mkdir(parents=True)
        first = sorted(part.glob("*.log"))[0]
        shutil.copy(first, early / part.name / first.name)
    # run 1 applies the first segments; run 2 (all segments, incremental) dies; run 3 re-runs
    run_here(jobs_file(tmp_path, early, STAGES, "early.yaml"))
    config = jobs_file(tmp_path, logs, STAGES)
    assert run(config, fault) == faults.EXIT_CODE
    run_here(config)
    exp = json.loads((logs / "expected-state.json").read_text())
    rows = spark.read.format("delta").load(str(tmp_path / "lakehouse" / "gold" / "current_offsets")).collect()
    live = {(r["group_id"], r["topic"], r["partition"]): r["committed_offset"] for r in rows if not r["deleted"]}
    deleted = {(r["group_id"], r["topic"], r["partition"]): r["delete_cause"] for r in rows if r["deleted"]}
    assert live == {(o["group"], o["topic"], o["partition"]): o["offset"] for o in exp["offsets"]}
    assert deleted == {(d["group"], d["topic"], d["partition"]): d["cause"] for d in exp["deleted_offsets"]}
    progress = spark.read.format("delta").load(str(tmp_path / "lakehouse" / "gold" / "partition_progress")).collect()
    assert progress and all(p["in_flight_run"] is None for p in progress)
    # the interrupted run had marked its partitions in flight: the re-run recomputed them
    assert all(p["recomputed"] for p in progress)
