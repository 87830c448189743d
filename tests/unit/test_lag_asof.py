"""The lag rules of pipelines/gold/asof.py against a plain-Python reading of docs/lag.md's rule
(written here from the docs, sharing no code with the module), on made-up rows with a clock that
steps back, states without a timestamp, deletions, observations at one instant and before every
state; and on random rows."""

from __future__ import annotations

import random
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from pipelines.gold import asof

AT = int(datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)


def _states(rows: list[tuple]) -> pa.Table:
    """(cluster, topic, partition, group, position, timestamp ms or None, committed, deleted)."""
    names = asof.STATE_COLUMNS
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in names]
    types = [pa.string(), pa.string(), pa.int32(), pa.string(), pa.int64(), pa.int64(), pa.int64(), pa.bool_()]
    return pa.table({n: pa.array(c, t) for n, c, t in zip(names, cols, types, strict=True)})


def _observations(rows: list[tuple]) -> pa.Table:
    """(cluster, topic, partition, observed_at µs, end offset)."""
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in range(5)]
    return pa.table(
        {
            "cluster": pa.array(cols[0], pa.string()),
            "topic": pa.array(cols[1], pa.string()),
            "partition": pa.array(cols[2], pa.int32()),
            "observed_at": pa.array(cols[3], pa.timestamp("us", "UTC")),
            "end_offset": pa.array(cols[4], pa.int64()),
        }
    )


def oracle(states: list[tuple], observations: list[tuple]) -> set[tuple]:
    """The rule as docs/lag.md states it, by brute force: per observation instant (the larger end
    of two at one instant) and group with a state for the partition, the state of the highest log
    position among those timestamped at or before the observation's millisecond (untimed ones
    count as before every time); a row when it is not a deletion."""
    ends: dict[tuple, int] = {}
    for c, t, p, us, end in observations:
        ends[(c, t, p, us)] = max(end, ends.get((c, t, p, us), end))
    out = set()
    for (c, t, p, us), end in ends.items():
        ms = us // 1000
        groups = {s[3] for s in states if s[:3] == (c, t, p)}
        for g in groups:
            before = [s for s in states if s[:4] == (c, t, p, g) and (s[5] is None or s[5] <= ms)]
            if not before:
                continue
            state = max(before, key=lambda s: s[4])
            if not state[7]:
                out.add((c, g, t, p, us, end, state[6], end - state[6]))
    return out


def _got(table: pa.Table) -> set[tuple]:
    rows = set()
    for r in table.to_pylist():
        us = int(r["observed_at"].timestamp() * 1_000_000)
        rows.add(
            (
                r["cluster"],
                r["group_id"],
                r["topic"],
                r["partition"],
                us,
                r["end_offset"],
                r["committed_offset"],
                r["lag"],
            )
        )
    assert len(rows) == table.num_rows, "two rows with one key"
    return rows


MADE_STATES = [
    ("c", "t", 0, "a", 10, None, 5, False),  # untimed: before every timestamp
    ("c", "t", 0, "a", 20, AT + 1000, 7, False),
    ("c", "t", 0, "a", 30, AT + 900, 8, False),  # later in the log, earlier by the clock
    ("c", "t", 0, "a", 40, AT + 2000, 8, True),  # deleted
    ("c", "t", 0, "b", 15, AT + 1500, 3, False),
    ("c", "t", 1, "a", 5, AT, 1, False),
]
MADE_OBSERVATIONS = [
    ("c", "t", 0, (AT + ms) * 1000 + extra, end)
    for ms, extra, end in ((500, 0, 20), (950, 0, 30), (1200, 0, 40), (1500, 700, 50), (2500, 0, 60), (2500, 0, 61))
] + [("c", "t", 1, (AT + 100) * 1000, 9), ("c", "t", 2, AT * 1000, 4)]


def test_the_made_up_rows():
    got = _got(asof.lag_rows(_states(MADE_STATES), _observations(MADE_OBSERVATIONS)))
    assert got == oracle(MADE_STATES, MADE_OBSERVATIONS)
    committed = {(g, p, us // 1000 - AT): c for _, g, _, p, us, _, c, _ in got}
    assert committed == {
        ("a", 0, 500): 5,  # a's untimed state; b had none yet: no row
        ("a", 0, 950): 8,  # a's offset-30 state, timestamped before offset 20's
        ("a", 0, 1200): 8,
        ("a", 0, 1500): 8, ("b", 0, 1500): 3,  # 1500.7 ms: b's state at 1500 counts
        ("b", 0, 2500): 3,  # a deleted: no row; two observations at 2500, the larger end
        ("a", 1, 100): 1,
    }  # fmt: skip
    assert {end for _, g, _, p, us, end, _, _ in got if us // 1000 - AT == 2500} == {61}


def test_needed_states_are_enough():
    """Given only the states :func:`asof.needed` keeps for the earliest observation, the rows are
    those of every state (the interval ends come from the states' successors)."""
    rng = random.Random(5)
    for _ in range(50):
        states, observations = _random(rng)
        table = _with_intervals(states)
        since = min(us // 1000 for *_, us, _ in observations) if observations else None
        kept = table.filter(asof.needed(since))
        got = _got(asof.lag_rows(kept.select(asof.STATE_COLUMNS), _observations(observations)))
        assert got == oracle(states, observations)


@pytest.mark.parametrize("seed", range(30))
def test_random_rows_equal_the_oracle(seed, monkeypatch):
    rng = random.Random(seed)
    states, observations = _random(rng)
    monkeypatch.setattr(asof, "PAIRS_PER_CHUNK", rng.choice([1, 3, 1000]))  # chunks of any size
    assert _got(asof.lag_rows(_states(states), _observations(observations))) == oracle(states, observations)


def test_latest_ends():
    got = asof.latest_ends(_observations(MADE_OBSERVATIONS)).to_pylist()
    assert [(r["partition"], r["end_offset"], int(r["observed_at"].timestamp() * 1000) - AT) for r in got] == [
        (0, 61, 2500),
        (1, 9, 100),
        (2, 4, 0),
    ]


def _random(rng: random.Random) -> tuple[list[tuple], list[tuple]]:
    states = []
    for c in ("c1", "c2")[: rng.randint(1, 2)]:
        for p in range(rng.randint(1, 3)):
            for g in "abcd"[: rng.randint(1, 4)]:
                position = rng.randint(0, 5)
                for _ in range(rng.randint(1, 6)):
                    position += rng.randint(1, 10)
                    ts = None if rng.random() < 0.1 else AT + rng.randint(-50, 400)  # steps back too
                    states.append((c, "t", p, g, position, ts, rng.randint(0, 99), rng.random() < 0.2))
    observations = [
        (c, "t", rng.randint(0, 3), (AT + rng.randint(-100, 500)) * 1000 + rng.randint(0, 999), rng.randint(0, 200))
        for c in ("c1", "c2")
        for _ in range(rng.randint(0, 12))
    ]
    return states, observations


def _with_intervals(states: list[tuple]) -> pa.Table:
    """The states as offset_history rows: each valid until its key's next state by position."""
    rows = sorted(states, key=lambda s: (s[:4], s[4]))
    to_ts, current = [], []
    for i, s in enumerate(rows):
        nxt = rows[i + 1] if i + 1 < len(rows) and rows[i + 1][:4] == s[:4] else None
        to_ts.append(None if nxt is None else nxt[5])
        current.append(nxt is None)
    table = _states(rows)
    return table.append_column("valid_to_timestamp", pa.array(to_ts, pa.int64())).append_column(
        "is_current", pa.array(current, pa.bool_())
    )
