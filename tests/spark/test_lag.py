"""Consumer lag (docs/lag.md) from a generated log and end-offset snapshot files, against the
generator's own records: current_lag against its expected state, lag_history against the
reference replay stopped at the positions the generator's event log says were written by each
observation's time — never against gold itself."""

from __future__ import annotations

import csv
import itertools
import json
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from pipelines.bronze.end_offsets import ingest_end_offsets
from pipelines.bronze.ingest import ingest_segments
from pipelines.generate import generate
from pipelines.gold.build import run_gold
from pipelines.gold.lag import (
    HISTORY_COLUMNS,
    KEYS,
    OBSERVATION_COLUMNS,
    OFFSET_COLUMNS,
    current_lag,
    current_lag_arrow,
    lag_history,
    lag_history_arrow,
    lag_history_pairs,
)
from pipelines.runtime import lake
from pipelines.runtime.config import DumpSource, EndOffsetsFile, SegmentsSource
from pipelines.runtime.tables import Tables
from pipelines.silver.ingest import run_silver
from tests.support.lag import events as lag_events
from tests.support.lag import expected_lag_history, lag_history_rows

CLUSTER = "c1"


def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


def _observation_times(events: list[dict]) -> list[int]:
    """Instants strictly between two event times (never on a commit's own timestamp), after the
    magic-0 eras (whose records carry no timestamp), plus one after the last event."""
    timed = sorted({e["ts"] for e in events if e["era"] not in ("0.8.2", "0.9")})
    picks = [timed[int(len(timed) * q)] for q in (0.35, 0.6, 0.85)]
    out = []
    for ts in picks:
        nxt = timed[timed.index(ts) + 1]
        out.append((ts + nxt) // 2 if nxt - ts > 1 else ts)  # ts itself only if nothing lies between
    return [*out, timed[-1] + 60_000]


@pytest.fixture(scope="module")
def lag(spark, tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("lag")
    root = base / "logs"
    generate(root, 3000, seed=33, partitions=4, segment_bytes=24 * 1024)
    events = lag_events(root)
    assert all(a["ts"] <= b["ts"] for a, b in itertools.pairwise(events)), "the clock must not step back"
    expected = json.loads((root / "expected-state.json").read_text())
    live = {(o["group"], o["topic"], o["partition"]): o for o in expected["offsets"]}
    pairs = sorted({(t, p) for _, t, p in live})
    observed = pairs[::2]  # some partitions get observations, the others stay unknown
    assert len(observed) >= 3 and len(pairs) - len(observed) >= 3
    times = _observation_times(events)
    obs: list[tuple[str, int, int, int]] = []  # topic, partition, end_offset, observed_at ms
    for i, (t, p) in enumerate(observed):
        highest = max(o["offset"] for (_, tt, pp), o in live.items() if (tt, pp) == (t, p))
        for k, ts in enumerate(times):
            end = 50 * (k + 1) + i
            if ts == times[-1]:
                # the latest: past every commit, except one partition whose snapshot predates its
                # last commit (a negative lag, kept as measured)
                end = highest - 3 if i == 1 else highest + 7 * i + 1
            obs.append((t, p, end, ts))
    files = base / "snapshots"
    files.mkdir()
    jsonl, csv_path = files / "ends.jsonl", files / "ends.csv"
    with jsonl.open("w") as f:  # ISO timestamps, the cluster named
        for t, p, end, ts in obs[::2]:
            at = _at(ts).isoformat()
            row = {"cluster": CLUSTER, "topic": t, "partition": p, "end_offset": end, "observed_at": at}
            f.write(json.dumps(row) + "\n")
    with csv_path.open("w", newline="") as f:  # epoch milliseconds, the cluster from the source
        w = csv.writer(f)
        w.writerow(["topic", "partition", "end_offset", "observed_at"])
        for t, p, end, ts in obs[1::2]:
            w.writerow([t, p, end, ts])

    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    tables = Tables(spark, str(base / "lakehouse"))
    segments = SegmentsSource(kind="segments", cluster=CLUSTER, paths=[str(root)])
    ingest_segments(spark, tables, "gen", segments, "r0-bronze", "/")
    run_silver(spark, tables, "r0-silver")
    first = run_gold(spark, tables, "r0-gold")
    source = DumpSource(
        kind="dump",
        cluster=CLUSTER,
        format="jsonl",
        paths=["unused"],
        end_offsets=EndOffsetsFile(kind="file", paths=["snapshots/*.jsonl", "snapshots/ends.csv"]),
    )
    ingested = ingest_end_offsets(spark, tables, "snap", source, "r1-bronze", str(base))
    second = run_gold(spark, tables, "r1-gold")
    return {
        "root": root,
        "events": events,
        "live": live,
        "obs": obs,
        "times": times,
        "tables": tables,
        "source": source,
        "base": base,
        "first": first,
        "ingested": ingested,
        "second": second,
    }


def test_current_lag_is_end_minus_committed_and_null_where_unknown(spark, lag):
    latest: dict[tuple[str, int], tuple[int, int]] = {}
    for t, p, end, ts in lag["obs"]:
        if (t, p) not in latest or ts > latest[(t, p)][1]:
            latest[(t, p)] = (end, ts)
    want = {}
    for (g, t, p), o in lag["live"].items():
        end, ts = latest.get((t, p), (None, None))
        lag_value = None if end is None else end - o["offset"]
        want[(g, t, p)] = (o["offset"], o["commit_timestamp"], end, ts, lag_value)
    rows = spark.read.format("delta").load(lag["tables"].path("gold", "current_lag")).collect()
    got = {
        (r["group_id"], r["topic"], r["partition"]): (
            r["committed_offset"],
            r["commit_timestamp"],
            r["end_offset"],
            None if r["end_offset_observed_at"] is None else _ms(r["end_offset_observed_at"]),
            r["lag"],
        )
        for r in rows
    }
    assert len(rows) == len(got) and {r["cluster"] for r in rows} == {CLUSTER}
    assert got == want
    values = [v[4] for v in want.values()]
    assert None in values and any(v is not None and v < 0 for v in values) and any(v and v > 0 for v in values)
    # before any end offset was configured or observed, gold skipped lag and made no lag table
    assert lag["first"].lag["skipped"] and lag["first"].lag["written"] == []
    assert "current_lag" in lag["second"].lag["written"]


def test_lag_history_uses_the_offset_committed_as_of_each_observation(spark, lag):
    want = expected_lag_history(lag["root"], lag["obs"])
    rows = spark.read.format("delta").load(lag["tables"].path("gold", "lag_history")).collect()
    assert lag_history_rows(rows) == want
    # the history is not just the current state: some group's committed offset changed between
    # observations, and some observation predates a group's first commit
    by_key: dict[tuple, set] = {}
    for (g, t, p, _), (_, committed, _) in want.items():
        by_key.setdefault((g, t, p), set()).add(committed)
    assert any(len({c for c in v if c is not None}) > 1 for v in by_key.values())
    assert any(None in v for v in by_key.values())


def test_reading_the_snapshots_again_adds_nothing(spark, lag):
    tables = lag["tables"]
    assert (lag["ingested"].observations, lag["ingested"].inserted) == (len(lag["obs"]), len(lag["obs"]))
    path = tables.path("bronze", "end_offsets")
    before = {t: lake.version(spark, tables.path("gold", t)) for t in ("current_lag", "lag_history")}
    again = ingest_end_offsets(spark, tables, "snap", lag["source"], "r2-bronze", str(lag["base"]))
    assert (again.observations, again.inserted) == (len(lag["obs"]), 0)
    assert spark.read.format("delta").load(path).count() == len(lag["obs"])
    rerun = run_gold(spark, tables, "r2-gold")
    assert rerun.lag["skipped"]
    assert {t: lake.version(spark, tables.path("gold", t)) for t in before} == before


def test_the_analyst_guides_lag_query(spark, lag):
    """docs/analyst-guide.md's lag-per-group query, against the lag worked out from the expected
    state and the snapshot files (not from gold.current_lag)."""
    from tests.spark.test_analyst_guide import fill, guide_queries

    per_group: dict[str, list[int | None]] = {}
    latest: dict[tuple[str, int], tuple[int, int]] = {}
    for t, p, end, ts in lag["obs"]:
        if (t, p) not in latest or ts > latest[(t, p)][1]:
            latest[(t, p)] = (end, ts)
    for (g, t, p), o in lag["live"].items():
        end = latest.get((t, p), (None, None))[0]
        per_group.setdefault(g, []).append(None if end is None else end - o["offset"])
    want = []
    for g, lags in per_group.items():
        known = [x for x in lags if x is not None]
        want.append((g, sum(known) if known else None, max(known) if known else None, len(lags) - len(known)))
    want.sort(key=lambda r: (r[2] is None, -(r[2] or 0), r[0]))
    lag["tables"].register_existing()
    rows = spark.sql(fill(guide_queries()["lag-per-group"])).collect()
    assert [tuple(r) for r in rows] == want
    assert any(r[3] for r in want) and any(r[2] is not None for r in want)


def _rows(table: pa.Table, columns: list[str]) -> list[tuple]:
    def order(row: tuple) -> tuple:  # an instant's order, whatever time zone it is shown in
        return tuple((v is None, v.timestamp() if isinstance(v, datetime) else str(v)) for v in row)

    return sorted((tuple(r[c] for c in columns) for r in table.to_pylist()), key=order)


def _same(spark, arrow: pa.Table, frame, columns: list[str]) -> list[tuple]:
    got, want = _rows(arrow, columns), _rows(frame.toArrow(), columns)
    assert got == want
    return got


def test_the_driver_computes_what_spark_computes(spark, lag):
    """The driver's lag (small inputs: what the other tests' lakehouse got) equals Spark's on the
    same inputs: this module's lakehouse, and made-up rows with a clock that steps back, states
    without a timestamp, a deleted state, an observation before every state, observations at the
    same instant, a sub-millisecond observation time and a partition never observed."""
    tables = lag["tables"]
    read = {
        "history": lake.read_arrow(spark, tables.path("gold", "offset_history"), HISTORY_COLUMNS),
        "observations": lake.read_arrow(spark, tables.path("bronze", "end_offsets"), OBSERVATION_COLUMNS),
        "offsets": lake.read_arrow(spark, tables.path("gold", "current_offsets"), OFFSET_COLUMNS),
    }
    at = _ms(datetime(2026, 1, 1, tzinfo=timezone.utc))
    made = {
        "history": pa.table(
            {
                "cluster": ["c"] * 6,
                "topic": ["t"] * 6,
                "partition": pa.array([0, 0, 0, 0, 0, 1], pa.int32()),
                "group_id": ["a", "a", "a", "a", "b", "a"],
                "valid_from_offset": pa.array([10, 20, 30, 40, 15, 5], pa.int64()),
                "valid_from_timestamp": pa.array([None, at + 1000, at + 900, at + 2000, at + 1500, at], pa.int64()),
                "committed_offset": pa.array([5, 7, 8, 8, 3, 1], pa.int64()),
                "deleted": [False, False, False, True, False, False],
            }
        ),
        "observations": pa.table(
            {
                "cluster": ["c"] * 7,
                "topic": ["t"] * 7,
                "partition": pa.array([0, 0, 0, 0, 0, 0, 1], pa.int32()),
                "observed_at": pa.array(
                    [round((at + ms) * 1000) for ms in (500, 950, 1200, 1500.7, 2500, 2500, 100)],
                    pa.timestamp("us", "UTC"),
                ),
                "end_offset": pa.array([20, 30, 40, 50, 60, 61, 9], pa.int64()),
            }
        ),
        "offsets": pa.table(
            {
                "cluster": ["c"] * 4,
                "group_id": ["a", "b", "d", "e"],
                "topic": ["t", "t", "t", "t"],
                "partition": pa.array([0, 0, 2, 0], pa.int32()),
                "committed_offset": pa.array([8, 3, 4, 2], pa.int64()),
                "commit_timestamp": pa.array([at + 900, at + 1500, at, at], pa.int64()),
                "deleted": [False, False, False, True],
            }
        ),
    }
    history_columns = [*KEYS["lag_history"], "end_offset", "committed_offset", "lag"]
    current_columns = [*KEYS["current_lag"], "committed_offset", "end_offset", "end_offset_observed_at", "lag"]
    for inputs in (read, made):
        frames = {name: spark.createDataFrame(rows) for name, rows in inputs.items()}
        history = _same(
            spark,
            lag_history_arrow(inputs["history"], inputs["observations"]),
            lag_history(frames["history"], frames["observations"]),
            history_columns,
        )
        current = _same(
            spark,
            current_lag_arrow(inputs["offsets"], inputs["observations"]),
            current_lag(frames["offsets"], frames["observations"]),
            current_columns,
        )
        assert len(history) == lag_history_pairs(inputs["history"], inputs["observations"])
    # the made-up rows: committed offsets as of each observation (group a, then b, per instant)
    committed = {(r[1], r[3], round(r[4].timestamp() * 1000 - at, 1)): r[6] for r in history}
    assert committed == {
        ("a", 0, 500): 5, ("b", 0, 500): None,  # a's state without a timestamp; b had none yet
        ("a", 0, 950): 8, ("b", 0, 950): None,  # a's offset-30 state, timestamped before offset 20's
        ("a", 0, 1200): 8, ("b", 0, 1200): None,
        ("a", 0, 1500.7): 8, ("b", 0, 1500.7): 3,  # 1500.7 ms: b's state at 1500 counts
        ("a", 0, 2500): None, ("b", 0, 2500): 3,  # a deleted (two observations at 2500)
        ("a", 1, 100): 1,
    }  # fmt: skip
    assert [(r[1], r[4], r[5]) for r in current] == [("a", 8, 61), ("b", 3, 61), ("d", 4, None)]
