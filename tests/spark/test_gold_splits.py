"""Gold equals the reference replay for random incremental splits of the log, through the whole
pipeline (bronze, silver, gold in Spark). Hypothesis draws an order of the segment files and cuts
it into runs, so files arrive out of order across runs (a file below a partition's applied offset
makes gold recompute that partition) and some runs re-deliver files of an earlier run (a replay:
nothing may change twice). After every run gold equals the reference replay of the files ingested
so far (live keys, soft deletes with cause, pending transactions, classic generations), and after
the last one the generator's expected state.

A fixed seed and few examples in CI; ``OFFSETS_GOLD_SPLIT_EXAMPLES`` raises the count (the long
tier runs 25)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.generate import generate
from pipelines.gold.build import run_gold
from pipelines.reference.replay import replay_paths
from pipelines.runtime.tables import Tables
from tests.spark.test_gold import expected_from, gold, ingest

EXAMPLES = int(os.environ.get("OFFSETS_GOLD_SPLIT_EXAMPLES", "2"))


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("splits") / "logs"
    # small segments: each of the 3 partitions has several files to deal out
    generate(out, 2500, seed=7, partitions=3, segment_bytes=12 * 1024)
    return out


def fresh_tables(spark, root: Path) -> Tables:
    shutil.rmtree(root, ignore_errors=True)
    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    return Tables(spark, str(root))


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # a fixed seed: CI runs the same splits every time
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_random_splits_replays_and_late_files_equal_the_reference(spark, log, tmp_path, data):
    files = sorted(log.glob("__consumer_offsets-*/*.log"))
    assert len(files) >= 9, "too few segments to split"
    order = data.draw(st.permutations(files), label="arrival order")
    cuts = data.draw(st.lists(st.integers(1, len(files) - 1), min_size=1, max_size=2, unique=True), label="cuts")
    bounds = [0, *sorted(cuts), len(files)]
    runs = [order[lo:hi] for lo, hi in itertools.pairwise(bounds)]
    tables = fresh_tables(spark, tmp_path / "lakehouse")
    seen: list[Path] = []
    late = 0
    for i, batch in enumerate(runs):
        replayed = data.draw(st.sampled_from([[], *runs[:i]]), label=f"run {i} re-delivers") if i else []
        ingest(spark, tables, [*batch, *replayed], f"r{i}")
        result = run_gold(spark, tables, f"g{i}")
        late += sum("late data" in w for w in result.recomputed)
        seen += batch
        ref = replay_paths([str(f) for f in seen]).snapshot()
        assert gold(spark, tables) == expected_from(ref), f"after run {i} ({len(seen)} of {len(files)} files)"
    again = run_gold(spark, tables, "g-again")
    assert again.events == 0 and not again.recomputed
    assert gold(spark, tables) == expected_from(json.loads((log / "expected-state.json").read_text()))
    # a file that arrived after a later one of its partition must have been seen as late data
    earliest_later = any(
        a.parent == b.parent and a.name > b.name
        for r, run in enumerate(runs)
        for a in run
        for b in (f for later in runs[r + 1 :] for f in later)
    )
    assert late > 0 or not earliest_later
