"""Consumer lag (docs/lag.md) from a generated log and end-offset snapshot files, against the
generator's own records: current_lag against its expected state, lag_history against the
reference replay stopped at the positions the generator's event log says were written by each
observation's time — never against gold itself."""

from __future__ import annotations

import csv
import itertools
import json
from datetime import datetime, timezone

import pytest

from bench.common import split_log
from pipelines.bronze.end_offsets import ingest_end_offsets
from pipelines.bronze.ingest import ingest_segments
from pipelines.generate import generate
from pipelines.gold.build import run_gold
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


def _write_snapshots(path, rows: list[tuple[str, int, int, int]]) -> None:
    """JSON lines with ISO times and the cluster named, or CSV with epoch milliseconds and the
    cluster left to the source."""
    if path.suffix == ".jsonl":
        with path.open("w") as f:
            for t, p, end, ts in rows:
                row = {
                    "cluster": CLUSTER,
                    "topic": t,
                    "partition": p,
                    "end_offset": end,
                    "observed_at": _at(ts).isoformat(),
                }
                f.write(json.dumps(row) + "\n")
        return
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["topic", "partition", "end_offset", "observed_at"])
        for t, p, end, ts in rows:
            w.writerow([t, p, end, ts])


def _snapshot_source(*paths: str) -> DumpSource:
    return DumpSource(
        kind="dump",
        cluster=CLUSTER,
        format="jsonl",
        paths=["unused"],
        end_offsets=EndOffsetsFile(kind="file", paths=list(paths)),
    )


@pytest.fixture(scope="module")
def lag(spark, tmp_path_factory: pytest.TempPathFactory):
    """A generated log fed in two parts, with observations arriving in three: the first run of lag
    computes its tables whole; the second brings commits and observations (an increment); the
    third a late snapshot file, older than the latest observation."""
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
    by_time = {ts: [o for o in obs if o[3] == ts] for ts in times}
    _write_snapshots(files / "first.jsonl", by_time[times[0]])
    _write_snapshots(files / "then.csv", by_time[times[1]] + by_time[times[3]])
    _write_snapshots(files / "late.jsonl", by_time[times[2]])

    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    tables = Tables(spark, str(base / "lakehouse"))
    split = split_log(root, base / "source", 40)
    segments = SegmentsSource(kind="segments", cluster=CLUSTER, paths=[str(split.source)])
    ingest_segments(spark, tables, "gen", segments, "r0-bronze", "/")
    run_silver(spark, tables, "r0-silver")
    runs = [run_gold(spark, tables, "r0-gold")]
    ingested = [
        ingest_end_offsets(spark, tables, "snap", _snapshot_source("snapshots/first.jsonl"), "r1-bronze", str(base))
    ]
    runs.append(run_gold(spark, tables, "r1-gold"))
    split.grow()
    ingest_segments(spark, tables, "gen", segments, "r2-bronze", "/")
    ingested.append(
        ingest_end_offsets(spark, tables, "snap", _snapshot_source("snapshots/then.csv"), "r2-bronze", str(base))
    )
    run_silver(spark, tables, "r2-silver")
    runs.append(run_gold(spark, tables, "r2-gold"))
    ingested.append(
        ingest_end_offsets(spark, tables, "snap", _snapshot_source("snapshots/late.jsonl"), "r3-bronze", str(base))
    )
    runs.append(run_gold(spark, tables, "r3-gold"))
    return {
        "root": root,
        "events": events,
        "live": live,
        "obs": obs,
        "times": times,
        "tables": tables,
        "source": _snapshot_source("snapshots/*.jsonl", "snapshots/then.csv"),
        "base": base,
        "runs": runs,
        "ingested": ingested,
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
    first, *later = (run.lag for run in lag["runs"])
    assert first["skipped"] and first["written"] == []
    assert all("current_lag" in run["written"] for run in later)


def test_lag_history_uses_the_offset_committed_as_of_each_observation(spark, lag):
    want = expected_lag_history(lag["root"], lag["obs"])
    rows = spark.read.format("delta").load(lag["tables"].path("gold", "lag_history")).collect()
    assert lag_history_rows(rows) == want
    # the history is not just the current state: some group's committed offset changed between
    # observations, and some group had no live offset at some observation (none yet, or deleted)
    by_key: dict[tuple, set] = {}
    for (g, t, p, _), (_, committed, _) in want.items():
        by_key.setdefault((g, t, p), set()).add(committed)
    assert any(len(v) > 1 for v in by_key.values())
    assert len(want) < sum(len({g for g, tt, pp in _ever(lag) if (tt, pp) == (t, p)}) for t, p, _, _ in lag["obs"])


def _ever(lag) -> set[tuple[str, str, int]]:
    exp = json.loads((lag["root"] / "expected-state.json").read_text())
    return {(o["group"], o["topic"], o["partition"]) for o in [*exp["offsets"], *exp["deleted_offsets"]]}


def test_later_runs_compute_only_what_their_inputs_touched(spark, lag):
    """The first computation is whole; the increment (new commits and observations) and the late
    snapshot are incremental, the late one recomputing from its own time on, and each wrote fewer
    rows than the table holds."""
    _, first, increment, late = (run.lag for run in lag["runs"])
    assert first["how"] == {"topic_end_offsets": "whole", "current_lag": "whole", "lag_history": "whole"}
    for run in (increment, late):
        assert run["how"]["lag_history"] == run["how"]["topic_end_offsets"] == "incremental"
    total = spark.read.format("delta").load(lag["tables"].path("gold", "lag_history")).count()
    assert 0 < late["history_rows"] < total and 0 < increment["history_rows"] < total
    since = datetime.fromisoformat(late["recomputed_since"][CLUSTER].replace("Z", "+00:00"))
    assert _ms(since) == lag["times"][2]
    # the late file's observation is the newest no more: current lag kept the latest one
    ends = spark.read.format("delta").load(lag["tables"].path("gold", "topic_end_offsets")).collect()
    assert {_ms(r["observed_at"]) for r in ends} == {lag["times"][3]}


def test_reading_the_snapshots_again_adds_nothing(spark, lag):
    tables = lag["tables"]
    counts = [(i.observations, i.inserted) for i in lag["ingested"]]
    assert [n for n, _ in counts] == [new for _, new in counts] and sum(n for n, _ in counts) == len(lag["obs"])
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


def test_a_whole_computation_in_small_windows_gives_the_same_rows(spark, lag, monkeypatch):
    """lag_history dropped (as an older layout is) and computed whole again in windows of a few
    rows, a commit each: the same rows as the incremental runs left."""
    from pipelines.gold import lag as lag_module

    tables = lag["tables"]
    path = tables.path("gold", "lag_history")
    before = lag_history_rows(spark.read.format("delta").load(path).collect())
    version = lake.version(spark, tables.path("gold", "current_lag"))
    lake.drop(spark, path)
    monkeypatch.setattr(lag_module, "ROWS_PER_WINDOW", 7)
    again = run_gold(spark, tables, "r9-gold").lag
    assert again["how"] == {"lag_history": "whole"} and again["written"] == ["lag_history"]
    # a commit each (the first creates the table: the drop left its name in the session's catalog)
    assert again["history_windows"] > 3 and lake.version(spark, path) + 1 >= again["history_windows"]
    assert lag_history_rows(spark.read.format("delta").load(path).collect()) == before
    assert lake.version(spark, tables.path("gold", "current_lag")) == version  # its inputs did not move
