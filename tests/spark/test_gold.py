"""Gold equals the generator's expected state (its independent intent, checked by the reference
replay when it was generated): in one run, in incremental runs, and when earlier segments
arrive after later ones (late data recomputes the partition). Re-running changes nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipelines.bronze.ingest import ingest_segments
from pipelines.generate import generate
from pipelines.gold.build import run_gold
from pipelines.runtime.config import SegmentsSource
from pipelines.silver.ingest import run_silver


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gold") / "logs"
    generate(out, 6000, seed=33, partitions=4, segment_bytes=24 * 1024)
    return out


def expected(root: Path) -> dict:
    exp = json.loads((root / "expected-state.json").read_text())
    return {
        "live": {(o["group"], o["topic"], o["partition"]): (o["offset"], o["metadata"]) for o in exp["offsets"]},
        "deleted": {
            (d["group"], d["topic"], d["partition"]): (d["record_offset"], d["cause"]) for d in exp["deleted_offsets"]
        },
        "pending": sorted(
            (p["offsets_partition"], p["producer_id"], p["group"], p["topic"], p["partition"], p["offset"])
            for p in exp["pending_transactions"]
        ),
        "classic": {g["group"]: g["generation"] for g in exp["classic_groups"]},
    }


def gold(spark, tables) -> dict:
    offs = spark.read.format("delta").load(tables.path("gold", "current_offsets")).collect()
    pend = spark.read.format("delta").load(tables.path("gold", "pending_transactions")).collect()
    groups = spark.read.format("delta").load(tables.path("gold", "current_groups")).collect()
    return {
        "live": {
            (r["group_id"], r["topic"], r["partition"]): (r["committed_offset"], r["metadata"])
            for r in offs
            if not r["deleted"]
        },
        "deleted": {
            (r["group_id"], r["topic"], r["partition"]): (r["deleted_offset"], r["delete_cause"])
            for r in offs
            if r["deleted"]
        },
        "pending": sorted(
            (r["offsets_partition"], r["producer_id"], r["group_id"], r["topic"], r["partition"], r["committed_offset"])
            for r in pend
        ),
        "classic": {r["group_id"]: r["generation"] for r in groups if r["protocol"] == "classic" and not r["deleted"]},
    }


def ingest(spark, tables, paths: list[Path], run: str) -> None:
    src = SegmentsSource(kind="segments", cluster="c1", paths=[str(p) for p in paths])
    ingest_segments(spark, tables, "gen", src, f"{run}-bronze", "/")
    run_silver(spark, tables, f"{run}-silver")


def versions(spark, tables) -> dict[str, int]:
    from delta.tables import DeltaTable

    return {
        t: DeltaTable.forPath(spark, tables.path("gold", t)).history(1).collect()[0]["version"]
        for t in ("current_offsets", "pending_transactions", "current_groups", "partition_progress")
    }


def test_gold_equals_expected_state_and_reruns_change_nothing(spark, tables, generated):
    ingest(spark, tables, [generated], "r1")
    res = run_gold(spark, tables, "g1")
    assert res.partitions_recomputed == 4 and res.events > 0
    want = expected(generated)
    assert want["live"] and want["deleted"] and want["classic"]
    assert gold(spark, tables) == want
    before = versions(spark, tables)
    again = run_gold(spark, tables, "g2")
    assert again.events == 0 and versions(spark, tables) == before
    live = spark.sql("SELECT count(*) AS n FROM gold.live_offsets").collect()[0]["n"]
    assert live == len(want["live"])


def test_incremental_runs_and_late_segments(spark, tables, generated, tmp_path):
    """Each partition's log arrives in three slices: the middle segments, then the last ones
    (incremental: only new events are applied), then the first ones (late data at or below the
    applied offset: the partition is recomputed). The end state equals one run over everything."""
    slices = {name: tmp_path / name for name in ("middle", "last", "first")}
    for part_dir in sorted(generated.glob("__consumer_offsets-*")):
        logs = sorted(part_dir.glob("*.log"))
        assert len(logs) >= 3, part_dir
        third = max(1, len(logs) // 3)
        chosen = {"first": logs[:third], "middle": logs[third : 2 * third], "last": logs[2 * third :]}
        for name, files in chosen.items():
            (slices[name] / part_dir.name).mkdir(parents=True)
            for f in files:
                shutil.copy(f, slices[name] / part_dir.name / f.name)
    runs = []
    for i, name in enumerate(("middle", "last", "first")):
        ingest(spark, tables, [slices[name]], f"r{i}")
        runs.append(run_gold(spark, tables, f"g{i}"))
    assert (runs[0].partitions_incremental, runs[0].partitions_recomputed) == (0, 4)
    assert (runs[1].partitions_incremental, runs[1].partitions_recomputed) == (4, 0)
    assert runs[2].partitions_recomputed == 4 and all("late data" in w for w in runs[2].recomputed), runs[2].recomputed
    assert gold(spark, tables) == expected(generated)
