"""Every suite's frame built on the driver (local_frames.py) equals the one Spark builds
(frames.py), row for row and column for column, and gives the same outcomes.

On the tier's two shared lakehouses: the generated one (two clusters with known partition counts,
rebalances, deletions, a hanging transaction, KIP-848 and share groups, lag) and the 268 real
files (69 clusters, unknown partition counts, kafka-go members whose bytes do not decode,
generations restarted without a tombstone). The rules' violations are checked both ways, with
counts worked out by hand, by tests/spark/test_quality_rules.py (lag's flags only there: neither
lakehouse has end offsets).
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pytest

from pipelines.quality.frames import Frame, Inputs, fits_driver, load_frame
from pipelines.quality.stage import evaluate_suite, params_of
from pipelines.quality.suites import load_suites
from pipelines.runtime.config import QualitySettings
from pipelines.truth import TruthSnapshot

NOW = 1_800_000_000_000  # 2027: after every commit of both lakehouses


def rows_of(frame: Frame) -> tuple[list[str], list[str], list[tuple[Any, ...]]]:
    """A frame's column names, Arrow types (timestamps as their integers, as both sides compare
    them) and rows, sorted: row order is not defined by either builder."""
    table = frame.df if isinstance(frame.df, pa.Table) else frame.df.toArrow()
    columns = [pa.compute.cast(c, pa.int64()) if pa.types.is_timestamp(c.type) else c for c in table.columns]
    table = pa.table(columns, names=table.column_names)
    rows = [tuple(_plain(v) for v in row.values()) for row in table.to_pylist()]
    return table.column_names, [str(t) for t in table.schema.types], sorted(rows, key=repr)


def _plain(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


def compare_every_suite(spark, tables, inputs: Inputs, requirements: set[str]) -> set[str]:
    """Both frames of every suite equal, and their outcomes; returns the suites compared with rows."""
    settings = QualitySettings()
    params = params_of(settings)
    with_rows = set()
    for suite in load_suites():
        assert fits_driver(spark, tables, suite.frame, settings.local_max_rows), suite.name
        on_spark = load_frame(suite.frame, spark, tables, inputs)
        on_driver = load_frame(suite.frame, spark, tables, inputs, local=True)
        assert (on_driver.missing, on_driver.skipped, on_driver.notes) == (
            on_spark.missing,
            on_spark.skipped,
            on_spark.notes,
        ), suite.name
        if on_spark.df is None:
            assert on_driver.df is None, suite.name
            continue
        names, types, rows = rows_of(on_spark)
        assert rows_of(on_driver) == (names, types, rows), suite.name
        with_rows |= {suite.name} if rows else set()
        outcomes = [
            evaluate_suite(suite, f, params, "frames-test", requirements=requirements,
                           local_max_rows=settings.local_max_rows, docs=False)[0]
            for f in (on_spark, on_driver)
        ]  # fmt: skip
        assert [_comparable(o) for o in outcomes[0]] == [_comparable(o) for o in outcomes[1]], suite.name
    return with_rows


def _comparable(outcome) -> tuple[Any, ...]:
    samples = outcome.details.get("partial_unexpected_list")
    return (
        outcome.expectation,
        outcome.evaluated,
        outcome.success,
        outcome.element_count,
        outcome.unexpected_count,
        outcome.unexpected_percent,
        outcome.observed_value,
        outcome.details.get("missing_count"),
        None if samples is None else sorted(map(repr, samples)),
    )


def test_generated_lakehouse_frames_equal(spark, shared_lakehouse) -> None:
    tables = shared_lakehouse.register(spark)
    # a truth snapshot that agrees on some keys, not on others, and misses one
    live = spark.read.format("delta").load(tables.path("gold", "current_offsets")).where("cluster = 'c1'")
    keys = [r for r in live.where("NOT deleted").orderBy("group_id", "topic", "partition").collect()]
    assert len(keys) > 3
    groups: dict[str, list[dict[str, Any]]] = {}
    for i, r in enumerate(keys[1:]):
        offset = r["committed_offset"] + (1 if i % 3 == 0 else 0)
        groups.setdefault(r["group_id"], []).append(
            {"topic": r["topic"], "partition": r["partition"], "offset": offset}
        )
    truth = TruthSnapshot(
        cluster="c1",
        captured_at="2026-12-01T00:00:00Z",
        offsets_topic_end_offsets={p: 10**9 for p in range(4)},
        groups=[{"group_id": g, "offsets": o} for g, o in groups.items()],
    )
    inputs = Inputs(NOW, {"c1": 4, "c2": 2}, truth)
    compared = compare_every_suite(spark, tables, inputs, {"truth_snapshot"})
    # the suites of what this lakehouse holds had rows to compare (it has no end offsets: no lag)
    assert {"bronze.offsets_records", "silver.group_members", "gold.consumer_group_members",
            "gold.pending_transactions", "gold.truth_snapshot", "gold.offset_history"} <= compared  # fmt: skip


def test_real_files_frames_equal(spark, real_lakehouse) -> None:
    tables = real_lakehouse.register(spark)
    compared = compare_every_suite(spark, tables, Inputs(NOW, {}), set())
    assert {"bronze.offsets_records", "silver.group_members", "gold.group_generations"} <= compared


@pytest.mark.parametrize("partitions", [{"c1": 4}, {}])
def test_partition_rule_notes_equal(spark, shared_lakehouse, partitions) -> None:
    """Clusters with and without a known partition count: the same rule skipped or noted both ways."""
    tables = shared_lakehouse.register(spark)
    for name in ("silver.offset_commits", "silver.group_metadata", "silver.tombstones"):
        on_spark = load_frame(name, spark, tables, Inputs(NOW, partitions))
        on_driver = load_frame(name, spark, tables, Inputs(NOW, partitions), local=True)
        assert (on_driver.skipped, on_driver.notes) == (on_spark.skipped, on_spark.notes)
        assert on_spark.skipped or on_spark.notes
        assert rows_of(on_driver) == rows_of(on_spark)


def test_one_suite_on_both_engines_in_turn(spark) -> None:
    """A process validates a suite on GX's pandas engine, then on Spark, then on pandas again (a
    stage whose frames go both ways): each engine's validation definition shares the suite GX
    stores by name, and one made for the other engine must not be taken for current."""
    suite = load_suites()["silver.transaction_markers"]
    markers = spark.createDataFrame(
        [("c1", 0, 10, "COMMIT", 7, 0), ("c1", 0, 11, "LEADER_CHANGE", 7, 0)],
        "cluster string, offsets_partition int, record_offset bigint, control_type string, producer_id bigint, "
        "coordinator_epoch int",
    )
    settings = QualitySettings()
    seen = []
    for local_max_rows in (settings.local_max_rows, 0, settings.local_max_rows):
        outcomes, _ = evaluate_suite(
            suite, Frame(markers), params_of(settings), "engines-test", local_max_rows=local_max_rows, docs=False
        )
        seen.append({o.expectation: (o.success, o.unexpected_count) for o in outcomes})
    assert seen[0]["control_type_commit_or_abort"] == (False, 1)
    assert seen[0] == seen[1] == seen[2]
