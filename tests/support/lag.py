"""What consumer lag must be, from a generated log's own records (the generator's event log and
the reference replay), never from gold: shared by the lag tests and the first-run test."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from pipelines.reference.replay import replay_paths

# (group, topic, partition, observed_at ms) -> (end_offset, committed_offset, lag)
LagRows = dict[tuple[str, str, int, int], tuple[int, int | None, int | None]]


def events(root: Path) -> list[dict]:
    with gzip.open(root / "generator-events.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def committed_as_of(root: Path, log_events: list[dict], t: int) -> dict[tuple[str, str, int], int]:
    """The live offsets after every batch the generator wrote at or before ``t`` (its event log's
    positions), by the reference replay."""
    stop = {}
    for e in log_events:
        if e["ts"] <= t:
            stop[e["partition"]] = max(stop.get(e["partition"], 0), e["last_offset"] + 1)
    for p in {e["partition"] for e in log_events}:
        stop.setdefault(p, 0)
    snap = replay_paths([str(root)], stop_at=stop).snapshot()
    return {(o["group"], o["topic"], o["partition"]): o["offset"] for o in snap["offsets"]}


def expected_lag_history(root: Path, observations: list[tuple[str, int, int, int]]) -> LagRows:
    """gold.lag_history's rows for ``observations`` (topic, partition, end_offset, observed_at ms):
    each observation with every group that had a live committed offset for its partition as of
    the observation, and that offset."""
    exp = json.loads((root / "expected-state.json").read_text())
    ever = {(o["group"], o["topic"], o["partition"]) for o in exp["offsets"]}
    ever |= {(d["group"], d["topic"], d["partition"]) for d in exp["deleted_offsets"]}
    log_events = events(root)
    as_of = {ts: committed_as_of(root, log_events, ts) for ts in sorted({o[3] for o in observations})}
    want: LagRows = {}
    for t, p, end, ts in observations:
        for g, tt, pp in ever:
            if (tt, pp) == (t, p):
                committed = as_of[ts].get((g, t, p))
                if committed is not None:  # none yet, or deleted: no row
                    want[(g, t, p, ts)] = (end, committed, end - committed)
    return want


def lag_history_rows(rows: list[Any]) -> LagRows:
    """gold.lag_history's rows (Spark rows) keyed as :func:`expected_lag_history` keys them; a
    duplicate key is an error."""
    got: LagRows = {
        (r["group_id"], r["topic"], r["partition"], int(r["observed_at"].timestamp() * 1000)): (
            r["end_offset"],
            r["committed_offset"],
            r["lag"],
        )
        for r in rows
    }
    assert len(got) == len(rows), "two lag_history rows with one key"
    return got
