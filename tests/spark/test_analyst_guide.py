"""Every query of docs/analyst-guide.md runs on a lakehouse built from a generated log (the spark
tier's shared one: a second cluster sits beside the one queried), and its rows equal what the
generator says happened: its event log (what the workload did, with the log positions and times
it wrote), its expected state (the coordinator state it meant to leave) and its manifest. Nothing
expected here is read from gold or silver.

Groups that ever used a transaction are left out of the per-commit checks (their commits apply
at a marker, so the event of a commit is not the moment it applies): the checks say so where
they filter.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter, defaultdict
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from pipelines.codec.segments import discover
from pipelines.inspect import inspect_segment, totals
from tests.spark.gold_marts_check import rebalances_per_day
from tests.spark.shared_lakehouse import SharedLakehouse
from tests.support.generated import Generated

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "analyst-guide.md"
CLUSTER = "c1"
HOUR = 3_600_000
MARKED = re.compile(r"^<!-- query: ([a-z0-9-]+) -->\s*```sql\n(.*?)```", re.S | re.M)


def guide_queries() -> dict[str, str]:
    text = GUIDE.read_text()
    found = MARKED.findall(text)
    markers = re.findall(r"^<!-- query:", text, re.M)
    assert len(found) == len(markers), "a query marker without a ```sql block right after it"
    names = [n for n, _ in found]
    assert len(names) == len(set(names)), f"duplicate query names: {names}"
    return dict(found)


def fill(sql: str, **params: Any) -> str:
    """Replace ``${name}`` placeholders; every placeholder must be given and every given one used."""
    used = set(re.findall(r"\$\{(\w+)\}", sql))
    assert used == set(params) | {"cluster"}, f"placeholders {sorted(used)}, given {sorted(params)}"
    for name, value in {"cluster": CLUSTER, **params}.items():
        sql = sql.replace("${" + name + "}", str(value))
    return sql


def ts_literal(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def ms(value: datetime) -> int:
    """Epoch ms of a timestamp Spark returned (a naive datetime in the Python process's zone)."""
    return round(value.timestamp() * 1000)


def day_of(ms: int | None) -> date | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=timezone.utc).date()


# -- the generated lakehouse ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def lake(spark, shared_lakehouse: SharedLakehouse) -> Generated:
    """The tier's shared lakehouse (tests/spark/shared_lakehouse.py), read only: cluster c1's log
    has rebalances, resets, group deletions, a transaction left hanging and KIP-848 churn; a
    second cluster beside it means every query must keep to the cluster it is given."""
    shared_lakehouse.register(spark)
    return Generated(shared_lakehouse.logs(CLUSTER))


@pytest.fixture(scope="module")
def queries() -> dict[str, str]:
    return guide_queries()


def rows(spark, queries: dict[str, str], name: str, **params: Any) -> list[dict]:
    return [r.asDict() for r in spark.sql(fill(queries[name], **params)).collect()]


# -- the checks, one per query --------------------------------------------------------------------


def check_offset_as_of(spark, queries, gen: Generated) -> None:
    states = gen.key_states()
    by_group: dict[str, dict] = defaultdict(dict)
    for (g, t, p), seq in states.items():
        by_group[g][(t, p)] = seq
    # moments: timed commits of the three busiest groups that moved an offset, and the
    # millisecond before each
    busiest = sorted(by_group, key=lambda g: -sum(len(s) for s in by_group[g].values()))[:3]
    checked = changed = 0
    for g in busiest:
        moments = sorted(
            {
                b[0]
                for seq in by_group[g].values()
                for a, b in itertools.pairwise(seq)
                if b[0] is not None and (b[1], b[2]) != (a[1], a[2])
            }
        )
        for ts in moments[len(moments) // 3 :: max(1, len(moments) // 4)]:
            answers = []
            for x in (ts - 1, ts):
                want = {}
                for tp, seq in by_group[g].items():
                    before = [s for s in seq if s[0] is None or s[0] <= x]
                    # the last state by then; one written without log time has no interval to match
                    if before and before[-1][0] is not None and not before[-1][2]:
                        want[tp] = before[-1][1]
                got = rows(spark, queries, "offset-as-of", group=g, as_of=ts_literal(x))
                assert {(r["topic"], r["partition"]): r["committed_offset"] for r in got} == want, (g, x)
                assert len(got) == len(want)
                answers.append(want)
                checked += bool(want)
            changed += answers[0] != answers[1]
    assert checked >= 6 and changed >= 3


def check_rewinds(spark, queries, gen: Generated) -> None:
    states = gen.key_states()
    timed = sorted(ts for seq in states.values() for ts, _, _ in seq if ts is not None)
    since = timed[len(timed) // 10]
    want: dict[tuple, list] = {}
    for k, seq in states.items():
        for (_, before, was_deleted), (ts, offset, deleted) in itertools.pairwise(seq):
            if not deleted and offset < before and ts is not None and ts >= since:
                w = want.setdefault(k, [0, 0, 0, 0, 0])
                w[0] += 1
                w[1] += before - offset
                w[2] = max(w[2], before - offset)
                w[3] += was_deleted
                w[4] = max(w[4], ts)
    assert want, "the workload must rewind some key after `since`"
    got = {
        (r["group_id"], r["topic"], r["partition"]): [
            r["rewinds"],
            r["total_rewound"],
            r["largest_rewind"],
            r["after_deletion"],
            ms(r["last_rewind_at"]),
        ]
        for r in rows(spark, queries, "rewinds", since=ts_literal(since))
        if r["group_id"] not in gen.txn_groups
    }
    assert got == want


def check_deleted_offsets(spark, queries, gen: Generated) -> None:
    want: dict[tuple, list] = {}
    for d in gen.expected["deleted_offsets"]:
        w = want.setdefault((d["group"], d["cause"]), [0, set(), None])
        w[0] += 1
        w[1].add(d["topic"])
        if d["timestamp"] is not None:
            w[2] = max(w[2] or 0, d["timestamp"])
    assert want, "the workload must leave deleted offsets"
    got = {
        (r["group_id"], r["delete_cause"]): [
            r["deleted_keys"],
            set(r["topics"]),
            None if r["last_deleted_at"] is None else ms(r["last_deleted_at"]),
        ]
        for r in rows(spark, queries, "deleted-offsets")
    }
    assert got == {k: [n, t, ts] for k, (n, t, ts) in want.items()}


def check_groups_per_topic(spark, queries, gen: Generated) -> None:
    groups: dict[str, set] = defaultdict(set)
    keys: Counter = Counter()
    for o in gen.expected["offsets"]:
        groups[o["topic"]].add(o["group"])
        keys[o["topic"]] += 1
    want = [(t, len(groups[t]), keys[t], sorted(groups[t])) for t in sorted(groups, key=lambda t: (-len(groups[t]), t))]
    got = [
        (r["topic"], r["groups"], r["committed_partitions"], r["group_ids"])
        for r in rows(spark, queries, "groups-per-topic")
    ]
    assert got == want


def check_commit_cadence(spark, queries, gen: Generated) -> None:
    # record batches (magic 2) only: before them an uncompressed message set has no batch
    # boundary, and every message counts as one commit request (docs/analyst-guide.md)
    commits = [
        e
        for e in gen.events
        if e["event"] in ("commit", "reset") and e["group"] not in gen.txn_groups and gen.magic(e) == 2
    ]
    group = Counter(e["group"] for e in commits).most_common(1)[0][0]
    mine = [e for e in commits if e["group"] == group]
    hours = sorted({e["ts"] // HOUR * HOUR for e in mine})
    start, end = hours[len(hours) // 4], hours[3 * len(hours) // 4]
    want: dict[int, list] = {}
    for e in mine:
        hour = e["ts"] // HOUR * HOUR
        if start <= hour < end:
            keys = (
                list(e["offsets"])
                if e["event"] == "commit"
                else [f"{r.key['topic']}:{r.key['partition']}" for r in gen.records(e)]
            )
            w = want.setdefault(hour, [0, 0, set()])
            w[0] += 1
            w[1] += len(keys)
            w[2] |= set(keys)
    assert len(want) >= 3
    got = {
        ms(r["hour"]): [
            r["commit_batches"],
            r["offsets_committed"],
            r["partitions"],
        ]
        for r in rows(
            spark, queries, "commit-cadence", group=group, **{"from": ts_literal(start), "to": ts_literal(end)}
        )
    }
    assert got == {h: [b, n, len(k)] for h, (b, n, k) in want.items()}


def check_stale_groups(spark, queries, gen: Generated) -> None:
    last: dict[str, int | None] = {}
    count: Counter = Counter()
    for o in gen.expected["offsets"]:
        ts = gen.time_at(o["offsets_partition"], o["record_offset"])
        count[o["group"]] += 1
        if ts is not None:
            last[o["group"]] = max(last.get(o["group"]) or 0, ts)
    now = max(last.values())
    idle = {g: (now - ts) / 60000 for g, ts in last.items()}
    threshold = round(sorted(idle.values())[len(idle) // 2], 3)  # about half the groups are stale
    want = {g: (count[g], round(m, 3)) for g, m in idle.items() if m >= threshold}
    assert 0 < len(want) < len(count)
    got = {
        r["group_id"]: (r["live_offsets"], round(float(r["idle_minutes"]), 3))
        for r in rows(spark, queries, "stale-groups", idle_minutes=threshold)
    }
    assert got == want


def check_hanging_transactions(spark, queries, gen: Generated) -> None:
    ended = {e["producer_id"] for e in gen.events if e["event"] in ("txn_commit", "txn_abort")}
    # deleting or expiring a group writes tombstones for its keys: they cancel its pending offsets
    gone: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(gen.events):
        if e["event"] in ("delete_group", "expire"):
            gone[e["group"]].append(i)
    want = {
        (e["producer_id"], e["group"], e["partition"]): (e["last_offset"] - e["first_offset"] + 1, e["ts"])
        for i, e in enumerate(gen.events)
        if e["event"] == "txn_begin" and e["producer_id"] not in ended and not any(j > i for j in gone[e["group"]])
    }
    assert want, "the generator leaves a transaction open"
    assert {k[0] for k in want} == {p["producer_id"] for p in gen.expected["pending_transactions"]}
    got = {
        (r["producer_id"], r["group_id"], r["offsets_partition"]): (
            r["pending_offsets"],
            ms(r["opened_at"]),
        )
        for r in rows(spark, queries, "hanging-transactions", min_age_minutes=15)
    }
    assert got == want


def check_rebalance_storms(spark, queries, gen: Generated) -> None:
    per_day = rebalances_per_day(gen.root)
    threshold = 3
    want = {k: n for k, n in per_day.items() if n >= threshold}
    assert 0 < len(want) < len(per_day)
    got = {
        (r["group_id"], r["day"]): r["rebalances"]
        for r in rows(spark, queries, "rebalance-storms", min_rebalances=threshold)
    }
    assert got == want


def generations(gen: Generated, group: str) -> list[tuple[int, int, str | None, int | None]]:
    """(generation, members, end reason, start time) of a classic group, from its events."""
    out: list[list] = []
    for e in gen.events:
        if e["group"] != group:
            continue
        if e["event"] in ("rebalance", "empty"):
            if out and out[-1][2] is None:
                out[-1][2] = "next_generation"
            out.append([e["generation"], e["members"] if e["event"] == "rebalance" else 0, None, gen.log_time(e)])
        elif e["event"] in ("delete_group", "expire") and out and out[-1][2] is None:
            out[-1][2] = "group_deleted"  # both write the classic group's tombstone
    return [tuple(x) for x in out]


def check_generation_timeline(spark, queries, gen: Generated) -> None:
    classic = sorted({e["group"] for e in gen.events if e["group"].startswith(("classic-", "connect-"))})
    timelines = {g: generations(gen, g) for g in classic}
    busiest = max(timelines, key=lambda g: len(timelines[g]))
    deleted = [g for g in classic if any(r[2] == "group_deleted" for r in timelines[g])]
    assert deleted, "the workload must delete a classic group"
    for g in {busiest, deleted[0]}:
        got = [
            (
                r["generation"],
                r["member_count"],
                r["end_reason"],
                None if r["started_at"] is None else ms(r["started_at"]),
            )
            for r in rows(spark, queries, "generation-timeline", group=g)
        ]
        assert got == timelines[g], g
    assert len(timelines[busiest]) >= 5


def check_groups_by_state(spark, queries, gen: Generated) -> None:
    want: dict[tuple, list] = {}
    for g in gen.expected["groups"]:
        w = want.setdefault((g["type"], g["state"]), [0, 0])
        w[0] += 1
        w[1] += g["exists_because"] == "offsets"
    assert len(want) >= 3
    got = {
        (r["protocol"], r["state"]): [r["groups"], r["offsets_only"]] for r in rows(spark, queries, "groups-by-state")
    }
    assert got == want


def check_kip848_member_churn(spark, queries, gen: Generated) -> None:
    want: dict[tuple, list] = {}
    members: dict[str, int] = {}
    for e in gen.events:
        if e.get("kind") != "consumer":
            continue
        w = want.setdefault((e["group"], day_of(e["ts"])), [0, 0])
        if e["event"] == "member_join":
            w[0] += 1
        elif e["event"] == "member_leave":
            w[1] += 1
        elif e["event"] == "delete_group":  # every member's metadata is tombstoned
            w[1] += members.get(e["group"], 0)
        members[e["group"]] = 0 if e["event"] == "delete_group" else e["members"]
    want = {k: v for k, v in want.items() if v != [0, 0]}
    assert sum(v[1] for v in want.values()) > 0
    got = {(r["group_id"], r["day"]): [r["joined"], r["departed"]] for r in rows(spark, queries, "kip848-member-churn")}
    assert got == want


def check_share_streams_members(spark, queries, gen: Generated) -> None:
    """Every member of the expected state's share and streams groups (the reference replay's,
    members as the coordinator holds them), with its epoch and what its current assignment owns."""

    def owned(parts: list | None) -> int:
        return sum(len(p["partitions"]) for p in parts or [])

    want = {}
    for kind in ("share", "streams"):
        for g in gen.expected[f"{kind}_groups"]:
            for m in g["members"]:
                meta, cur = m["metadata"] or {}, m["current"] or {}
                work = owned(cur.get("assigned_partitions" if kind == "share" else "active_tasks"))
                standby = owned(cur.get("standby_tasks")) if kind == "streams" else None
                want[(kind, g["group"], m["member_id"])] = (
                    meta.get("client_id"),
                    cur.get("member_epoch"),
                    work,
                    standby,
                    meta.get("process_id"),
                )
    assert want, "the workload leaves share or streams members"
    got = {
        (r["type"], r["group_id"], r["member_id"]): (
            r["client_id"],
            r["member_epoch"],
            r["owned"],
            r["standby"],
            r["process_id"],
        )
        for r in rows(spark, queries, "share-streams-members")
    }
    assert got == want


def check_hot_coordinator_partitions(spark, queries, gen: Generated) -> None:
    records = {int(p): n for p, n in gen.manifest["records_per_partition"].items()}
    live_offsets = Counter(o["offsets_partition"] for o in gen.expected["offsets"])
    live_groups = Counter(g["offsets_partition"] for g in gen.expected["groups"])
    top = sorted(records, key=lambda p: (-records[p], p))[:3]
    want = [(p, records[p], live_groups[p], live_offsets[p]) for p in top]
    got = [
        (r["offsets_partition"], r["records"], r["live_groups"], r["live_offsets"])
        for r in rows(spark, queries, "hot-coordinator-partitions", top_n=3)
    ]
    assert got == want


def check_version_inventory(spark, queries, gen: Generated) -> None:
    census = totals([inspect_segment(s) for s in discover([gen.root])])
    want = {("control", None, None): census["control_records"]}
    for tv, n in census["by_type_version"].items():
        t, v = tv.split("/")
        kind = "tombstone" if v == "null" else "data"
        want[(kind, int(t), None if v == "null" else int(v))] = n
    assert sum(want.values()) == gen.manifest["records"]
    got = {}
    for r in rows(spark, queries, "version-inventory"):
        assert r["status"] == "decoded", r
        got[(r["record_kind"], r["record_type"], r["value_version"])] = r["records"]
    assert got == want


CHECKS = {
    "offset-as-of": check_offset_as_of,
    "rewinds": check_rewinds,
    "deleted-offsets": check_deleted_offsets,
    "groups-per-topic": check_groups_per_topic,
    "commit-cadence": check_commit_cadence,
    "stale-groups": check_stale_groups,
    "hanging-transactions": check_hanging_transactions,
    "rebalance-storms": check_rebalance_storms,
    "generation-timeline": check_generation_timeline,
    "groups-by-state": check_groups_by_state,
    "kip848-member-churn": check_kip848_member_churn,
    "share-streams-members": check_share_streams_members,
    "hot-coordinator-partitions": check_hot_coordinator_partitions,
    "version-inventory": check_version_inventory,
}


# queries checked by another module, on a lakehouse that has what they need
CHECKED_ELSEWHERE = {"lag-per-group": "tests/spark/test_lag.py"}


def test_every_marked_query_has_a_check(queries) -> None:
    assert len(queries) >= 12
    assert set(queries) == set(CHECKS) | set(CHECKED_ELSEWHERE)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_query_answers_what_the_generator_did(spark, lake, queries, name) -> None:
    CHECKS[name](spark, queries, lake)
