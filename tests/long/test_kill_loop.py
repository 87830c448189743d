"""Repeated kills (long tier): a bronze -> silver -> gold job SIGKILLed at random moments, again
and again, then run to completion, ends in the generator's expected state, with silver equal to a
decode of everything in one go. ``OFFSETS_KILL_LOOPS`` sets the number of kills (default 20)."""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path

from pipelines.generate import generate
from pipelines.runtime.tables import Tables
from pipelines.silver.ingest import run_silver
from tests.e2e.jobrun import jobs_file, run, run_here
from tests.support.silver import snapshot


def test_random_kills_then_completion(spark, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    generate(logs, 20_000, seed=8, partitions=4, segment_bytes=32 * 1024)
    config = jobs_file(tmp_path, logs, ["bronze", "silver", "gold"], split_bytes=65536)
    rng = random.Random(8)
    kills = int(os.environ.get("OFFSETS_KILL_LOOPS", "20"))
    stages = ["bronze: ingesting source", "silver: decoding", "gold: replaying"]
    killed = 0
    for _ in range(kills):
        code = run(config, kill_on=rng.choice(stages), kill_after=rng.uniform(0.0, 8.0))
        killed += code == -signal.SIGKILL
    assert killed >= kills // 2, "most runs must really be killed, or this loop tests nothing"
    run_here(config)
    exp = json.loads((logs / "expected-state.json").read_text())
    tables = Tables(spark, str(tmp_path / "lakehouse"))
    rows = spark.read.format("delta").load(tables.path("gold", "current_offsets")).collect()
    live = {(r["group_id"], r["topic"], r["partition"]): r["committed_offset"] for r in rows if not r["deleted"]}
    assert live == {(o["group"], o["topic"], o["partition"]): o["offset"] for o in exp["offsets"]}
    after = snapshot(spark, tables)
    run_silver(spark, tables, "refresh", full_refresh=True)
    assert snapshot(spark, tables) == after
