"""Gold's replay engine against the reference replay, which shares no code with it.

Each partition's log is cut into runs at batch boundaries; after every run the engine's output is
written back the way gold writes it (current tables replaced, history and generation rows replacing
the open ones) and is the next run's input. Whatever the cuts, the end state must equal the
reference replay of the whole log, history must give the reference state as of any position, and
the group tables must not depend on the cuts.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.codec.segments import discover
from pipelines.generate import generate
from pipelines.gold import engine as ge
from pipelines.reference.replay import DEFAULT_RETENTION_MS, Entry, Replay, iter_batches

SCHEMA = ge.event_schema()
NAMES = SCHEMA.names  # a new list per access: event() runs per record of every example
# the tables gold replaces whole per partition (pipelines/gold/build.py writes them so)
CURRENT = ("current_offsets", "pending_transactions", "current_groups", "consumer_group_members",
           "share_group_members", "streams_group_members", "streams_group_topologies")  # fmt: skip
MEMBER_FIELDS = {
    5: ("instance_id", "rack_id", "client_id", "client_host", "subscribed_topic_names", "subscribed_topic_regex",
        "server_assignor", "rebalance_timeout_ms"),
    8: ("member_epoch", "previous_member_epoch", "state"),
    10: ("rack_id", "client_id", "client_host", "subscribed_topic_names"),
    14: ("member_epoch", "previous_member_epoch", "state"),
    19: ("instance_id", "rack_id", "client_id", "client_host", "rebalance_timeout_ms", "topology_epoch", "process_id",
         "user_endpoint", "client_tags"),
    22: ("member_epoch", "previous_member_epoch", "state"),
}  # fmt: skip


def _classic_members(value: dict) -> list[dict]:
    out = []
    for i, m in enumerate(value.get("members") or []):
        sub = m.get("subscription_info") or {}
        asg = m.get("assignment_info") or {}
        out.append(
            {
                "member_index": i,
                "member_id": m["member_id"],
                "group_instance_id": m["group_instance_id"],
                "client_id": m["client_id"],
                "client_host": m["client_host"],
                "session_timeout_ms": m["session_timeout"],
                "rebalance_timeout_ms": m["rebalance_timeout"],
                "subscribed_topics": sub.get("topics"),
                "assigned_partitions": [
                    {"topic": tp["topic"], "partitions": tp["partitions"]} for tp in asg.get("assigned_partitions", [])
                ],
            }
        )
    return out


def event(e: Entry, batch_id: int) -> dict | None:
    """An Entry (decoded by the codec) as one row of gold's event frame, or None when gold does not
    replay its record type: the test's own mapping, not build.py's."""
    row = dict.fromkeys(NAMES)
    row |= {"record_offset": e.offset, "batch_id": batch_id, "timestamp_ms": e.timestamp}
    row |= {"producer_id": e.producer_id, "transactional": e.transactional, "record_type": e.record_type}
    row |= {"value_version": e.value_version}
    v = e.value or {}
    if e.is_control:
        return row | {"kind": ge.MARKER, "control_type_id": e.control_type}
    t = e.record_type
    if t in (0, 1):
        row |= {"group_id": e.key["group"], "topic": e.key["topic"], "partition": e.key["partition"]}
        if e.value is None:
            return row | {"kind": ge.OFFSET_TOMBSTONE}
        tid = v.get("topic_id")
        return row | {
            "kind": ge.COMMIT,
            "committed_offset": v["offset"],
            "leader_epoch": v.get("leader_epoch", -1),
            "metadata": v["metadata"],
            "commit_timestamp": v["commit_timestamp"],
            "expire_timestamp": v.get("expire_timestamp", -1),
            "topic_id": None if tid in (None, "AAAAAAAAAAAAAAAAAAAAAA") else tid,
        }
    if t == 2:
        row["group_id"] = e.key["group"]
        if e.value is None:
            return row | {"kind": ge.GROUP_TOMBSTONE}
        members = _classic_members(v)
        return row | {
            "kind": ge.GROUP,
            "protocol_type": v["protocol_type"],
            "generation": v["generation"],
            "assignor": v["protocol"],
            "leader": v["leader"],
            "current_state_timestamp": v.get("current_state_timestamp", -1),
            "member_count": len(members),
            "members": members,
        }
    if t in (3, 6, 11, 12, 17, 20, 23):
        row["group_id"] = e.key["group_id"]
        if e.value is None:
            return row | {"kind": ge.NEW_GROUP_TOMBSTONE}
        if t in (6, 12, 20):
            return row | {"kind": ge.NEW_GROUP, "assignment_epoch": v["assignment_epoch"]}
        if t == 23:  # the test compares topology epochs only: subtopologies left empty
            return row | {"kind": ge.NEW_GROUP, "topology": {"epoch": v["epoch"], "subtopologies": []}}
        return row | {"kind": ge.NEW_GROUP, "generation": v["epoch"],
                      "validated_topology_epoch": v.get("validated_topology_epoch", -1)}  # fmt: skip
    if t in (5, 7, 8, 10, 13, 14, 19, 21, 22):
        row |= {"group_id": e.key["group_id"], "member_id": e.key["member_id"]}
        if e.value is None:
            return row | {"kind": ge.MEMBER_TOMBSTONE}
        row |= {f: v.get(f) for f in MEMBER_FIELDS.get(t, ())}
        return row | {"kind": ge.MEMBER}
    return None


def events_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


@pytest.fixture(scope="module")
def partitions(tmp_path_factory) -> dict[int, list[list[Entry]]]:
    out = tmp_path_factory.mktemp("gold") / "logs"
    generate(out, 30_000, seed=5, partitions=3, segment_bytes=64 * 1024)
    by_part: dict[int, list[list[Entry]]] = {}
    for batch in iter_batches(discover([out])):
        if batch:
            by_part.setdefault(batch[0].partition, []).append(batch)
    return by_part


class Lake:
    """One partition's gold tables, written as build.py writes them."""

    def __init__(self) -> None:
        self.tables: dict[str, pa.Table | None] = dict.fromkeys([*CURRENT, "offset_history", "group_generations"])
        self.applied: int | None = None
        self.runs = 0

    def open_rows(self, table: str, column: str) -> pa.Table | None:
        t = self.tables[table]
        return None if t is None else t.filter(pc.is_null(t.column(column)))

    def run(
        self, part: int, rows: list[dict], soft_delete_ms: int | None = None, replay: Callable | None = None
    ) -> ge.PartitionOutput:
        """Replay ``rows`` on the tables (``replay``: the engine's entry point, PartitionReplay's
        ``run`` by default) and write its output as build.py does."""
        inp = ge.PartitionInput(
            "c",
            part,
            events_table(rows),
            offsets=self.tables["current_offsets"],
            pending=self.tables["pending_transactions"],
            groups=self.tables["current_groups"],
            history=self.open_rows("offset_history", "valid_to_offset"),
            generations=self.open_rows("group_generations", "ended_offset"),
            members=self.tables["consumer_group_members"],
            share_members=self.tables["share_group_members"],
            streams_members=self.tables["streams_group_members"],
            topologies=self.tables["streams_group_topologies"],
            applied_offset=self.applied,
        )
        if replay is None:
            out = ge.PartitionReplay(inp, f"run{self.runs}", DEFAULT_RETENTION_MS, soft_delete_ms).run()
        else:
            out = replay(inp, f"run{self.runs}", DEFAULT_RETENTION_MS, soft_delete_ms)
        self.runs += 1
        for name in CURRENT:
            self.tables[name] = out.tables[name]
        for name, column in (("offset_history", "valid_to_offset"), ("group_generations", "ended_offset")):
            old = self.tables[name]
            if old is not None:  # replaceWhere: open rows and rows closed after the applied offset go
                closed = pc.fill_null(pc.less_equal(old.column(column), self.applied), False)
                old = old.filter(closed).select(out.tables[name].column_names).cast(out.tables[name].schema)
            self.tables[name] = out.tables[name] if old is None else pa.concat_tables([old, out.tables[name]])
        self.applied = out.applied_offset
        return out

    def rows(self, name: str) -> list[dict]:
        t = self.tables[name]
        return [] if t is None else t.to_pylist()


# a partition's events per batch, mapped once: the property tests split the same module-scoped
# batches in every example (the mapping was half of their time); the entry holds the batches, so
# their id is not reused while it is cached
_EVENTS: dict[int, tuple[list[list[Entry]], list[list[dict]]]] = {}


def events_per_batch(batches: list[list[Entry]]) -> list[list[dict]]:
    held = _EVENTS.get(id(batches))
    if held is None or held[0] is not batches:
        mapped = [[ev for e in b if (ev := event(e, b[0].offset)) is not None] for b in batches]
        held = _EVENTS[id(batches)] = (batches, mapped)
    return held[1]


def gold_events(batches: list[list[Entry]]) -> list[dict]:
    return [ev for evs in events_per_batch(batches) for ev in evs]


def run_in_chunks(part: int, batches: list[list[Entry]], cuts: Iterable[int]) -> Lake:
    events = gold_events(batches)
    lake = Lake()
    for lo, hi in itertools.pairwise([0, *sorted(set(cuts)), len(events)]):
        lake.run(part, events[lo:hi])
    return lake


def reference(batches: list[list[Entry]]) -> dict:
    r = Replay(DEFAULT_RETENTION_MS)
    for b in batches:
        r.apply_batch(b)
    snap = r.snapshot()
    return {
        "live": {
            (o["group"], o["topic"], o["partition"]): (o["offset"], o["metadata"], o["record_offset"])
            for o in snap["offsets"]
        },
        "deleted": {
            (d["group"], d["topic"], d["partition"]): (d["record_offset"], d["cause"]) for d in snap["deleted_offsets"]
        },
        "pending": sorted(
            (p["producer_id"], p["group"], p["topic"], p["partition"], p["offset"])
            for p in snap["pending_transactions"]
        ),
        "classic": {g["group"]: (g["generation"], len(g["members"])) for g in snap["classic_groups"]},
        "groups": {(g["type"], g["group"]): g["exists_because"] for g in snap["groups"]},
        "simple_groups_gone": {g["group"]: g["cause"] for g in snap["deleted_simple_groups"]},
        "consumer_members": {(g["group"], m["member_id"]) for g in snap["consumer_groups"] for m in g["members"]},
        # share and streams members as the coordinator holds them: epochs and state of the current
        # assignment (-1 after its tombstone), whether the member metadata record is there
        "family_members": {
            (kind, g["group"], m["member_id"]): (
                (m["current"] or {}).get("member_epoch"),
                (m["current"] or {}).get("previous_member_epoch"),
                (m["current"] or {}).get("state"),
                m["metadata"] is not None,
            )
            for kind in ("share", "streams")
            for g in snap[f"{kind}_groups"]
            for m in g["members"]
        },
        "family_groups": {
            (kind, g["group"]): (
                g["epoch"],
                g["assignment_epoch"],
                g.get("validated_topology_epoch"),
                (g.get("topology") or {}).get("epoch"),
            )
            for kind in ("share", "streams")
            for g in snap[f"{kind}_groups"]
        },
    }


def state_of(lake: Lake) -> dict:
    offsets = lake.rows("current_offsets")
    groups = lake.rows("current_groups")
    return {
        "live": {
            (r["group_id"], r["topic"], r["partition"]): (r["committed_offset"], r["metadata"], r["record_offset"])
            for r in offsets
            if not r["deleted"]
        },
        "deleted": {
            (r["group_id"], r["topic"], r["partition"]): (r["deleted_offset"], r["delete_cause"])
            for r in offsets
            if r["deleted"]
        },
        "pending": sorted(
            (p["producer_id"], p["group_id"], p["topic"], p["partition"], p["committed_offset"])
            for p in lake.rows("pending_transactions")
        ),
        "classic": {
            r["group_id"]: (r["generation"], r["member_count"])
            for r in groups
            if r["protocol"] == "classic" and r["exists_because"] == "metadata" and not r["deleted"]
        },
        "groups": {(r["protocol"], r["group_id"]): r["exists_because"] for r in groups if not r["deleted"]},
        "simple_groups_gone": {
            r["group_id"]: r["delete_cause"]
            for r in groups
            if r["protocol"] == "classic"
            and r["deleted"]
            and r["exists_because"] == "offsets"
            and r["delete_cause"] != "converted"
        },
        # a member the reference lists has member metadata or a current assignment (types 5 and 8)
        "consumer_members": {
            (r["group_id"], r["member_id"])
            for r in lake.rows("consumer_group_members")
            if r["record_offset_5"] is not None or r["record_offset_8"] is not None
            if (r["group_id"], "consumer") in {(g["group_id"], g["protocol"]) for g in groups if not g["deleted"]}
        },
        "family_members": {
            (kind, r["group_id"], r["member_id"]): (
                r["member_epoch"],
                r["previous_member_epoch"],
                r["state"],
                r[f"record_offset_{meta}"] is not None,
            )
            for kind, meta, current in (("share", 10, 14), ("streams", 19, 22))
            for r in lake.rows(f"{kind}_group_members")
            if r[f"record_offset_{meta}"] is not None or r[f"record_offset_{current}"] is not None
            if (r["group_id"], kind) in {(g["group_id"], g["protocol"]) for g in groups if not g["deleted"]}
        },
        "family_groups": {
            (r["protocol"], r["group_id"]): (
                r["generation"],
                r["assignment_epoch"],
                r["validated_topology_epoch"],
                r["topology_epoch"],
            )
            for r in groups
            if r["protocol"] in ("share", "streams") and not r["deleted"]
        },
    }


def batch_cuts(batches: list[list[Entry]], picks: list[int]) -> list[int]:
    """Event indexes at batch boundaries (a run never splits a batch: bronze reads a batch whole)."""
    ends = list(itertools.accumulate(len(evs) for evs in events_per_batch(batches)))
    return [ends[p % len(ends)] for p in picks]


def test_one_run_equals_reference(partitions):
    seen: dict[str, int] = {}
    for part, batches in partitions.items():
        want = reference(batches)
        assert state_of(run_in_chunks(part, batches, [])) == want, part
        for name, value in want.items():
            seen[name] = seen.get(name, 0) + len(value)
    assert all(seen.values()), seen  # every part of the state was compared on something


@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(picks=st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=6))
def test_any_split_into_runs_equals_reference(partitions, picks):
    for part, batches in partitions.items():
        assert state_of(run_in_chunks(part, batches, batch_cuts(batches, picks))) == reference(batches), part


def _group_tables(lake: Lake) -> dict:
    def strip(rows: list[dict], key: tuple[str, ...]) -> dict:
        return {tuple(r[k] for k in key): {k: v for k, v in r.items() if k != "updated_run_id"} for r in rows}

    return {
        "generations": strip(lake.rows("group_generations"), ("group_id", "started_offset")),
        "members": strip(lake.rows("consumer_group_members"), ("group_id", "member_id")),
        "share_members": strip(lake.rows("share_group_members"), ("group_id", "member_id")),
        "streams_members": strip(lake.rows("streams_group_members"), ("group_id", "member_id")),
        "topologies": strip(lake.rows("streams_group_topologies"), ("group_id", "subtopology_id")),
        "groups": strip(lake.rows("current_groups"), ("protocol", "group_id")),
        "offsets": strip(lake.rows("current_offsets"), ("group_id", "topic", "partition")),
    }


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(picks=st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=8))
def test_every_table_is_the_same_however_the_log_is_split(partitions, picks):
    """Rows of every current table and of group_generations do not depend on how the log was cut
    into runs (only updated_run_id does)."""
    for part, batches in partitions.items():
        whole = _group_tables(run_in_chunks(part, batches, []))
        assert whole["generations"] and whole["groups"] and whole["offsets"]
        assert _group_tables(run_in_chunks(part, batches, batch_cuts(batches, picks))) == whole, part


def test_generations_follow_the_classic_records(partitions):
    """Each classic group's generations: consecutive records of one generation make one row, a
    record of another generation or a tombstone ends it; the open row is the current record's."""
    for part, batches in partitions.items():
        records: dict[str, list[tuple]] = {}
        for b in batches:
            for e in b:
                if e.record_type == 2 and not e.is_control:
                    gen = None if e.value is None else e.value["generation"]
                    records.setdefault(e.key["group"], []).append((e.offset, gen))
        lake = run_in_chunks(part, batches, batch_cuts(batches, [3, 50, 400]))
        got: dict[str, list[tuple]] = {}
        for r in sorted(lake.rows("group_generations"), key=lambda r: r["started_offset"]):
            got.setdefault(r["group_id"], []).append(
                (r["generation"], r["started_offset"], r["ended_offset"], r["records"], r["end_reason"])
            )
        want: dict[str, list[tuple]] = {}
        for g, recs in records.items():
            spans: list[list] = []
            for (off, gen), prev in zip(recs, [None, *recs[:-1]], strict=True):
                if gen is None:  # tombstone: ends the open span
                    if spans and spans[-1][2] is None:
                        spans[-1][2], spans[-1][4] = off, "group_deleted"
                    continue
                if spans and spans[-1][2] is None and prev is not None and prev[1] == gen:
                    spans[-1][3] += 1
                    continue
                if spans and spans[-1][2] is None:
                    spans[-1][2], spans[-1][4] = off, "next_generation"
                spans.append([gen, off, None, 1, None])
            if spans:
                want[g] = [tuple(s) for s in spans]
        assert got == want, part
        assert any(len(v) > 1 for v in want.values())


def test_history_as_of_any_position_equals_reference_prefix(partitions):
    """As of any batch end, offset_history (written over several runs) gives exactly the reference
    replay's state of the log up to there, and each key has one open interval."""
    part, batches = next(iter(partitions.items()))
    lake = run_in_chunks(part, batches, batch_cuts(batches, [40, 41, 300, 1000]))
    history = lake.rows("offset_history")
    opens: dict[tuple, int] = {}
    for h in history:
        if h["valid_to_offset"] is None:
            k = (h["group_id"], h["topic"], h["partition"])
            opens[k] = opens.get(k, 0) + 1
    assert opens and set(opens.values()) == {1}
    r = Replay(DEFAULT_RETENTION_MS)
    checked = 0
    for i, b in enumerate(batches):
        r.apply_batch(b)
        if i % 25 and i != len(batches) - 1:
            continue
        snap = r.snapshot()
        pos = b[-1].offset
        live, deleted = {}, {}
        for h in history:
            if h["valid_from_offset"] <= pos and (h["valid_to_offset"] is None or pos < h["valid_to_offset"]):
                k = (h["group_id"], h["topic"], h["partition"])
                assert k not in live and k not in deleted, f"two intervals of {k} overlap at {pos}"
                if h["deleted"]:
                    deleted[k] = (h["deleted_offset"], h["delete_cause"])
                else:
                    live[k] = (h["committed_offset"], h["metadata"], h["record_offset"])
        assert live == {
            (o["group"], o["topic"], o["partition"]): (o["offset"], o["metadata"], o["record_offset"])
            for o in snap["offsets"]
        }, f"as of {pos}"
        assert deleted == {
            (d["group"], d["topic"], d["partition"]): (d["record_offset"], d["cause"]) for d in snap["deleted_offsets"]
        }, f"as of {pos}"
        checked += 1
    assert checked > 5


def test_unchanged_rows_keep_the_run_that_wrote_them(partitions):
    part, batches = next(iter(partitions.items()))
    events = gold_events(batches)
    # the second run starts with the batch of the log's last plain commit (it changes an offset)
    last = max(k for k, e in enumerate(events) if e["kind"] == ge.COMMIT and not e["transactional"])
    cut = min(k for k, e in enumerate(events) if e["batch_id"] == events[last]["batch_id"])
    lake = Lake()
    lake.run(part, events[:cut])
    first = {(r["group_id"], r["topic"], r["partition"]): r for r in lake.rows("current_offsets")}
    lake.run(part, events[cut:])
    second = {(r["group_id"], r["topic"], r["partition"]): r for r in lake.rows("current_offsets")}
    unchanged = [k for k in first if first[k] == second.get(k)]
    assert len(unchanged) > len(first) // 2
    assert {second[k]["updated_run_id"] for k in unchanged} == {"run0"}
    assert {r["updated_run_id"] for r in second.values()} == {"run0", "run1"}


def test_late_data_is_refused(partitions):
    part, batches = next(iter(partitions.items()))
    events = gold_events(batches)
    lake = Lake()
    lake.run(part, events[10:20])
    with pytest.raises(ValueError, match="recomputed from its start"):
        lake.run(part, events[:10])


def test_soft_deletes_older_than_the_retention_are_purged(partitions):
    part, batches = max(partitions.items(), key=lambda pb: len(reference(pb[1])["deleted"]))
    events = gold_events(batches)
    kept = Lake().run(part, events).tables["current_offsets"]
    lake = Lake()
    out = lake.run(part, events, soft_delete_ms=1)
    deleted = [r for r in kept.to_pylist() if r["deleted"]]
    now = max(e["timestamp_ms"] for e in events if e["timestamp_ms"] is not None)
    old = [r for r in deleted if r["deleted_timestamp"] is not None and r["deleted_timestamp"] < now - 1]
    assert old and out.purged == len(old)
    assert out.tables["current_offsets"].num_rows == kept.num_rows - len(old)


def _ev(offset: int, kind: str, **fields) -> dict:
    row = dict.fromkeys(SCHEMA.names)
    return row | {"record_offset": offset, "batch_id": offset, "timestamp_ms": 1000 + offset, "kind": kind, **fields}


def test_offsets_only_group_rows() -> None:
    """An assign() consumer's commit makes an offsets-only classic row; deleting its last offset
    soft-deletes it with that cause; a group tombstone with no record before it still marks the
    group deleted (the record was compacted away)."""
    commit = {"group_id": "g", "topic": "t", "partition": 0, "record_type": 1, "committed_offset": 5}
    commit |= {"leader_epoch": -1, "metadata": "", "commit_timestamp": 1000, "expire_timestamp": -1}
    lake = Lake()
    [row] = lake.run(0, [_ev(0, ge.COMMIT, **commit)]).tables["current_groups"].to_pylist()
    assert (row["protocol"], row["protocol_type"], row["exists_because"], row["deleted"]) == (
        "classic",
        "",
        "offsets",
        False,
    )
    tomb = {"group_id": "g", "topic": "t", "partition": 0, "record_type": 1}
    [row] = lake.run(0, [_ev(1, ge.OFFSET_TOMBSTONE, **tomb)]).tables["current_groups"].to_pylist()
    assert (row["exists_because"], row["deleted"], row["delete_cause"], row["state_offset"]) == (
        "offsets",
        True,
        "explicit_delete",
        1,
    )
    [row] = (
        Lake().run(0, [_ev(7, ge.GROUP_TOMBSTONE, group_id="h", record_type=2)]).tables["current_groups"].to_pylist()
    )
    assert (row["group_id"], row["protocol"], row["deleted"], row["delete_cause"]) == (
        "h",
        "classic",
        True,
        "group_deletion",
    )


def test_offset_with_pending_transactional_offsets_is_never_expired() -> None:
    """Spec 12.5: the coordinator does not expire an offset while its key has pending transactional
    offsets, so a tombstone of such a key is no expiry, however old the commit."""
    day = 86_400_000
    commit = {"group_id": "g", "topic": "t", "partition": 0, "record_type": 1, "committed_offset": 5}
    commit |= {"leader_epoch": -1, "metadata": "", "commit_timestamp": 1000, "expire_timestamp": -1}
    txn = commit | {"committed_offset": 42, "transactional": True, "producer_id": 7}
    tomb = {"group_id": "g", "topic": "t", "partition": 0, "record_type": 1, "timestamp_ms": 1000 + 8 * day}
    abort = {"transactional": True, "producer_id": 7, "control_type_id": 0}
    for events, cause in (
        (
            [_ev(0, ge.COMMIT, **commit), _ev(1, ge.COMMIT, **txn), _ev(2, ge.OFFSET_TOMBSTONE, **tomb)],
            "explicit_delete",
        ),
        (
            [
                _ev(0, ge.COMMIT, **commit),
                _ev(1, ge.COMMIT, **txn),
                _ev(2, ge.MARKER, **abort),
                _ev(3, ge.OFFSET_TOMBSTONE, **tomb),
            ],
            "expiry",  # aborted: nothing pending any more
        ),
    ):
        [row] = Lake().run(0, events).tables["current_offsets"].to_pylist()
        assert (row["deleted"], row["delete_cause"]) == (True, cause)


def test_groups_no_event_touches_pass_through_with_the_run_s_clock_and_markers(monkeypatch) -> None:
    """engine.replay replays only the groups its events touch: a group with no event still has its
    old soft deletes purged by the run's clock, and its pending transactional offsets committed by
    a marker (which names a producer, not a group) — as the whole state's replay does."""
    minute = 60_000
    commit = {"topic": "t", "partition": 0, "record_type": 1, "committed_offset": 5, "leader_epoch": -1,
              "metadata": "", "commit_timestamp": 1000, "expire_timestamp": -1}  # fmt: skip
    first = [
        _ev(0, ge.COMMIT, group_id="gone", **commit),
        _ev(1, ge.OFFSET_TOMBSTONE, group_id="gone", topic="t", partition=0, record_type=1),
        _ev(2, ge.COMMIT, group_id="txn", **commit, transactional=True, producer_id=7),
        _ev(3, ge.COMMIT, group_id="other", **commit),
        _ev(4, ge.COMMIT, group_id="waiting", **commit, transactional=True, producer_id=8),
    ]
    later = 1000 + 10 * minute
    second = [
        _ev(5, ge.COMMIT, group_id="other", **(commit | {"committed_offset": 9}), timestamp_ms=later),
        _ev(6, ge.MARKER, transactional=True, producer_id=7, control_type_id=ge.COMMIT_MARKER, timestamp_ms=later),
    ]
    lakes = []
    replayed: list[set[str]] = []  # the groups each run's PartitionReplay was given
    real = ge.PartitionReplay

    class Spy(real):  # type: ignore[misc,valid-type]
        def __init__(self, inp, *args, **kwargs):
            tables = (inp.events, inp.offsets, inp.pending)
            replayed.append({g for t in tables if t is not None for g in t.column("group_id").to_pylist() if g})
            super().__init__(inp, *args, **kwargs)

    monkeypatch.setattr(ge, "PartitionReplay", Spy)
    for replay in (None, ge.replay):
        lake = Lake()
        lake.run(0, first, soft_delete_ms=minute, replay=replay)
        out = lake.run(0, second, soft_delete_ms=minute, replay=replay)
        offsets = {r["group_id"]: (r["committed_offset"], r["deleted"]) for r in lake.rows("current_offsets")}
        pending = sorted((r["group_id"], r["producer_id"]) for r in lake.rows("pending_transactions"))
        lakes.append((offsets, pending, out.purged, out.changed, sorted(map(str, lake.rows("current_groups")))))
    assert lakes[0] == lakes[1]
    offsets, pending, purged, changed, _ = lakes[1]
    # "gone"'s soft delete is 10 minutes old: purged; "txn"'s offset committed by the marker;
    # "waiting"'s producer has no marker yet: its offset still pending
    assert offsets == {"txn": (5, False), "other": (9, False)} and purged == 1
    assert pending == [("waiting", 8)]
    assert changed["current_offsets"] and changed["pending_transactions"]
    # the whole state's replay saw every group; engine.replay the event's group and the marker's,
    # not "waiting", whose producer no marker of the run names
    assert replayed[1] == {"gone", "txn", "other", "waiting"} and replayed[3] == {"txn", "other"}


def _replayed_both_ways(monkeypatch, first: list[dict], second: list[dict]) -> tuple[list, Lake, list]:
    """Two runs (``first``, then ``second``) by the whole state's replay and by engine.replay: per
    way the tables, changed flags and events of the second run; engine.replay's Lake; the input of
    every PartitionReplay made (two per way)."""
    inputs: list[ge.PartitionInput] = []
    real = ge.PartitionReplay

    class Spy(real):  # type: ignore[misc,valid-type]
        def __init__(self, inp, *args, **kwargs):
            inputs.append(inp)
            super().__init__(inp, *args, **kwargs)

    monkeypatch.setattr(ge, "PartitionReplay", Spy)
    out = []
    for replay in (None, ge.replay):
        lake = Lake()
        lake.run(0, first, replay=replay)
        done = lake.run(0, second, replay=replay)
        out.append(({name: sorted(map(str, lake.rows(name))) for name in lake.tables}, done.changed, done.events))
    return out, lake, inputs


def _offsets_per_group(inp: ge.PartitionInput) -> dict[str, int]:
    groups = [] if inp.offsets is None else inp.offsets.column("group_id").to_pylist()
    return {g: groups.count(g) for g in set(groups)}


def test_a_group_of_plain_commits_is_replayed_by_key(monkeypatch) -> None:
    """engine.replay restores, of a group whose events are all non-transactional commits, only the
    keys they name (its other offsets pass through); a group with any other event in its batch, or
    a transactional commit, is replayed whole. The tables equal the whole state's replay's."""
    commit = {"record_type": 1, "committed_offset": 5, "leader_epoch": -1, "metadata": "",
              "commit_timestamp": 1000, "expire_timestamp": -1}  # fmt: skip
    first = [_ev(i, ge.COMMIT, group_id="big", topic="t", partition=i, **commit) for i in range(10)]
    first += [
        _ev(10, ge.COMMIT, group_id="txn", topic="t", partition=0, **commit, transactional=True, producer_id=7),
        _ev(11, ge.COMMIT, group_id="txn", topic="t", partition=1, **commit, transactional=True, producer_id=7),
        _ev(12, ge.COMMIT, group_id="mixed", topic="t", partition=0, **commit),
        _ev(13, ge.COMMIT, group_id="mixed", topic="t", partition=1, **commit),
        _ev(14, ge.COMMIT, group_id="gone", topic="t", partition=0, **commit),
    ]
    later = dict(commit, committed_offset=9)
    second = [
        _ev(20, ge.COMMIT, group_id="big", topic="t", partition=3, **later),
        # the same producer's next offset for a key it already has waiting: one pending row
        _ev(21, ge.COMMIT, group_id="txn", topic="t", partition=0, **later, transactional=True, producer_id=7),
        # a plain commit in a batch with a tombstone: its group is replayed whole
        _ev(22, ge.COMMIT, group_id="mixed", topic="t", partition=0, **later),
        _ev(23, ge.OFFSET_TOMBSTONE, group_id="gone", topic="t", partition=0, record_type=1, batch_id=22),
    ]
    tables, lake, given = _replayed_both_ways(monkeypatch, first, second)
    assert tables[0] == tables[1]
    restored = [_offsets_per_group(inp) for inp in given]
    waiting = [0 if inp.pending is None else inp.pending.num_rows for inp in given]
    # the whole replay restored every key; engine.replay one of big's ten, every key of the others
    assert restored[1] == {"big": 10, "mixed": 2, "gone": 1}
    assert restored[3] == {"big": 1, "mixed": 2, "gone": 1} and waiting[1::2] == [2, 2]
    pending = sorted((r["group_id"], r["partition"], r["committed_offset"]) for r in lake.rows("pending_transactions"))
    assert pending == [("txn", 0, 9), ("txn", 1, 5)]
    offsets = {
        (r["group_id"], r["partition"]): (r["committed_offset"], r["deleted"]) for r in lake.rows("current_offsets")
    }
    assert len(offsets) == 13 and offsets[("big", 3)] == (9, False) and offsets[("big", 4)] == (5, False)
    assert offsets[("mixed", 0)] == (9, False) and offsets[("gone", 0)] == (5, True)


def test_a_marker_replays_its_groups_by_key(monkeypatch) -> None:
    """A marker's groups with no other event are replayed by key: given their pending offsets, the
    rows of those offsets' keys and the count of their other live keys, which keeps an
    offsets-only group whose transaction aborted (it still has live offsets) and ends one left
    with nothing. The tables equal the whole state's replay's."""
    commit = {"topic": "t", "record_type": 1, "committed_offset": 5, "leader_epoch": -1, "metadata": "",
              "commit_timestamp": 1000, "expire_timestamp": -1}  # fmt: skip
    txn = {"transactional": True}
    first = [
        _ev(0, ge.COMMIT, group_id="solo", partition=0, **commit),
        _ev(1, ge.COMMIT, group_id="solo", partition=1, **commit),
        _ev(2, ge.COMMIT, group_id="solo", partition=2, **commit, **txn, producer_id=7),
        _ev(3, ge.COMMIT, group_id="lonely", partition=0, **commit, **txn, producer_id=8),
        _ev(4, ge.COMMIT, group_id="kept", partition=0, **commit),
        _ev(5, ge.COMMIT, group_id="kept", partition=1, **(commit | {"committed_offset": 0})),
        _ev(6, ge.COMMIT, group_id="kept", partition=1, **(commit | {"committed_offset": 1}), **txn, producer_id=9),
    ]
    second = [
        _ev(7, ge.MARKER, **txn, producer_id=7, control_type_id=0),  # ABORT
        _ev(8, ge.MARKER, **txn, producer_id=8, control_type_id=0),
        _ev(9, ge.MARKER, **txn, producer_id=9, control_type_id=ge.COMMIT_MARKER),
    ]
    tables, lake, inputs = _replayed_both_ways(monkeypatch, first, second)
    assert tables[0] == tables[1]
    given = [(_offsets_per_group(inp), inp.live_elsewhere) for inp in inputs]
    # solo: its pending key has no offsets row, its two live keys are counted, not given; kept: the
    # row of its pending key is given (the marker's offset is later: it applies), the other counted
    assert given[3] == ({"kept": 1}, {"solo": 2, "kept": 1})
    groups = {r["group_id"]: (r["deleted"], r["delete_cause"]) for r in lake.rows("current_groups")}
    assert groups == {"solo": (False, None), "lonely": (True, "transaction_aborted"), "kept": (False, None)}
    assert lake.rows("pending_transactions") == []
    offsets = {(r["group_id"], r["partition"]): r["committed_offset"] for r in lake.rows("current_offsets")}
    assert offsets == {("solo", 0): 5, ("solo", 1): 5, ("kept", 0): 5, ("kept", 1): 1}


def test_event_columns_match_the_gold_declarations() -> None:
    """The event frame's value columns have the types of the gold columns they are written to."""
    from pipelines.runtime.ddl import arrow_type
    from pipelines.runtime.tables import load_specs

    gold = load_specs()["gold"]
    declared = {}
    for table in ("current_offsets", "current_groups", "group_generations", "consumer_group_members"):
        declared |= {c.name: arrow_type(c.type) for c in gold[table].columns}
    compared = [f for f in SCHEMA if f.name in declared and f.name not in ("record_offset", "state")]
    assert len(compared) > 25
    for f in compared:
        assert f.type == declared[f.name], f.name


def test_a_later_group_tombstone_keeps_how_an_offsets_only_group_went() -> None:
    """A 4.x broker writes an offsets-only group's tombstone in a cleanup cycle after its last offset
    expired: the group went with that offset (cause expiry), and the tombstone, in the same run or
    a later one, leaves that row as it is (the reference replay's deleted group keeps its cause)."""
    day = 86_400_000
    commit = {"group_id": "g", "topic": "t", "partition": 0, "record_type": 1, "committed_offset": 5}
    commit |= {"leader_epoch": -1, "metadata": "", "commit_timestamp": 1000, "expire_timestamp": -1}
    tomb = {"group_id": "g", "topic": "t", "partition": 0, "record_type": 1}
    events = [
        _ev(0, ge.COMMIT, **commit),
        _ev(1, ge.OFFSET_TOMBSTONE, **tomb) | {"timestamp_ms": 1000 + 8 * day},  # 8 days: past the 7-day retention
        _ev(2, ge.GROUP_TOMBSTONE, group_id="g", record_type=2) | {"timestamp_ms": 1000 + 8 * day + 600_000},
    ]
    for cut in (3, 2, 1):
        lake = Lake()
        lake.run(0, events[:cut])
        if cut < 3:
            lake.run(0, events[cut:])
        [row] = lake.rows("current_groups")
        assert (row["deleted"], row["delete_cause"], row["exists_because"], row["state_offset"]) == (
            True,
            "expiry",
            "offsets",
            1,
        ), cut


# -- share and streams members (Kafka 4.2's member lifecycle; docs/gold.md) ---------------------------
TP = [{"topic_id": "AAAAAAAAAAAAAAAAAAAAAQ", "topic": "t", "partitions": [0, 1], "assignment_epochs": None}]


def _batch(first: int, *events: tuple[str, int, dict]) -> list[dict]:
    """Events of one batch starting at ``first``: (kind, record type, fields) each."""
    return [
        _ev(first + i, kind, record_type=rtype, group_id=fields.pop("group", "sg"), **fields) | {"batch_id": first}
        for i, (kind, rtype, fields) in enumerate(events)
    ]


def _share_log() -> list[list[dict]]:
    meta = {"rack_id": "r", "client_id": "c", "client_host": "/h", "subscribed_topic_names": ["t"]}
    current = {"member_epoch": 1, "previous_member_epoch": 0, "state": 0, "assigned_partitions": TP}
    return [
        _batch(
            0,
            (ge.MEMBER, 10, {"member_id": "m1", **meta}),
            (ge.NEW_GROUP, 11, {"generation": 1}),
            (ge.NEW_GROUP, 12, {"assignment_epoch": 1}),
            (
                ge.MEMBER,
                13,
                {
                    "member_id": "m1",
                    "target_partitions": [{k: v for k, v in TP[0].items() if k != "assignment_epochs"}],
                },
            ),
            (ge.MEMBER, 14, {"member_id": "m1", **current}),
        ),
        # the member is fenced: current and target tombstoned, the group epoch bumped
        _batch(
            5,
            (ge.MEMBER_TOMBSTONE, 14, {"member_id": "m1"}),
            (ge.MEMBER_TOMBSTONE, 13, {"member_id": "m1"}),
            (ge.NEW_GROUP, 11, {"generation": 2}),
        ),
        # tombstones of a member the group does not have
        _batch(8, (ge.MEMBER_TOMBSTONE, 14, {"member_id": "ghost"}), (ge.MEMBER_TOMBSTONE, 10, {"member_id": "ghost"})),
        # the member is removed
        _batch(10, (ge.MEMBER_TOMBSTONE, 10, {"member_id": "m1"}), (ge.NEW_GROUP, 11, {"generation": 3})),
    ]


def _member_state(lake: Lake) -> dict:
    return {
        r["member_id"]: (
            r["member_epoch"],
            r["previous_member_epoch"],
            r["state"],
            r["assigned_partitions"],
            r["target_partitions"],
            r["record_offset_10"],
            r["record_offset_14"],
        )
        for r in lake.rows("share_group_members")
    }


def test_share_member_lifecycle_by_example() -> None:
    """A current assignment tombstone leaves the member with epochs -1 and nothing assigned (state
    and metadata kept); tombstones of non-members change nothing; the metadata tombstone removes
    it. The same whether the batches come in one run or one run each (restored from the rows)."""
    tp = [{"topic_id": TP[0]["topic_id"], "topic": "t", "partitions": [0, 1]}]
    want = [
        {"m1": (1, 0, 0, tp, tp, 0, 4)},
        {"m1": (-1, -1, 0, [], None, 0, 5)},
        {"m1": (-1, -1, 0, [], None, 0, 5)},
        {},
    ]
    log = _share_log()
    split = Lake()
    for i, b in enumerate(log):
        split.run(0, b)
        assert _member_state(split) == want[i], i
        whole = Lake()
        whole.run(0, [e for bb in log[: i + 1] for e in bb])
        assert [r | {"updated_run_id": None} for r in whole.rows("share_group_members")] == [
            r | {"updated_run_id": None} for r in split.rows("share_group_members")
        ], i
    [g] = [r for r in split.rows("current_groups") if r["protocol"] == "share"]
    assert (g["generation"], g["assignment_epoch"], g["topology_epoch"], g["validated_topology_epoch"]) == (
        3,
        1,
        None,
        None,
    )


def test_streams_members_topology_and_group_columns_by_example() -> None:
    tasks = [{"subtopology_id": "0", "partitions": [0], "assignment_epochs": [1]}]
    sub = {
        "subtopology_id": "0",
        "source_topics": ["in"],
        "source_topic_regex": [],
        "state_changelog_topics": [],
        "repartition_sink_topics": [],
        "repartition_source_topics": [],
        "copartition_groups": [],
    }
    current = {
        "member_epoch": 1,
        "previous_member_epoch": 0,
        "state": 2,
        "active_tasks": tasks,
        "standby_tasks": [],
        "warmup_tasks": [],
        "active_tasks_pending_revocation": tasks,
        "standby_tasks_pending_revocation": [],
        "warmup_tasks_pending_revocation": [],
    }
    log = [
        _batch(
            0,
            (ge.NEW_GROUP, 17, {"group": "st", "generation": 2, "validated_topology_epoch": 0}),
            (
                ge.MEMBER,
                19,
                {
                    "group": "st",
                    "member_id": "m1",
                    "process_id": "p",
                    "topology_epoch": 0,
                    "user_endpoint": {"host": "h", "port": 1},
                    "client_tags": [{"key": "k", "value": "v"}],
                },
            ),
            (ge.NEW_GROUP, 20, {"group": "st", "assignment_epoch": 1}),
            (
                ge.MEMBER,
                21,
                {"group": "st", "member_id": "m1", "target_active_tasks": [{"subtopology_id": "0", "partitions": [0]}]},
            ),
            (ge.MEMBER, 22, {"group": "st", "member_id": "m1", **current}),
            (
                ge.NEW_GROUP,
                23,
                {"group": "st", "topology": {"epoch": 4, "subtopologies": [sub, sub | {"subtopology_id": "1"}]}},
            ),
        ),
        _batch(6, (ge.MEMBER_TOMBSTONE, 22, {"group": "st", "member_id": "m1"})),
    ]
    lake = Lake()
    lake.run(0, log[0])
    [m] = lake.rows("streams_group_members")
    assert (m["process_id"], m["user_endpoint"], m["client_tags"], m["topology_epoch"]) == (
        "p",
        {"host": "h", "port": 1},
        [{"key": "k", "value": "v"}],
        0,
    )
    assert (m["member_epoch"], m["state"], m["active_tasks"], m["active_tasks_pending_revocation"]) == (
        1,
        2,
        tasks,
        tasks,
    )
    assert m["target_active_tasks"] == [{"subtopology_id": "0", "partitions": [0]}]
    [g] = [r for r in lake.rows("current_groups") if r["protocol"] == "streams"]
    assert (g["generation"], g["assignment_epoch"], g["topology_epoch"], g["validated_topology_epoch"]) == (2, 1, 4, 0)
    topo = lake.rows("streams_group_topologies")
    assert [
        (r["group_id"], r["subtopology_id"], r["topology_epoch"], r["source_topics"], r["record_offset"]) for r in topo
    ] == [("st", "0", 4, ["in"], 5), ("st", "1", 4, ["in"], 5)]
    lake.run(0, log[1])
    [m] = lake.rows("streams_group_members")
    assert (m["member_epoch"], m["previous_member_epoch"], m["state"], m["record_offset_22"]) == (-1, -1, 2, 6)
    assert m["active_tasks"] == m["active_tasks_pending_revocation"] == [] and m["process_id"] == "p"
    assert len(lake.rows("streams_group_topologies")) == 2  # untouched by the run: kept as they were


def test_new_tables_come_out_in_their_declared_columns() -> None:
    """The share/streams tables the engine returns have gold.yaml's columns and types (build.py
    casts by name; a missing or renamed column would fail the write)."""
    from pipelines.runtime.ddl import arrow_type
    from pipelines.runtime.tables import load_specs

    gold = load_specs()["gold"]
    events = [e for b in _share_log() for e in b]
    out = Lake().run(0, events).tables
    compared = 0
    for table in ("share_group_members", "streams_group_members", "streams_group_topologies", "current_groups"):
        declared = [
            (c.name, arrow_type(c.type)) for c in gold[table].columns if c.name not in ("cluster", "offsets_partition")
        ]
        got = out[table].schema
        assert sorted(got.names) == sorted(n for n, _ in declared), table
        for name, typ in declared:
            assert got.field(name).type == typ, (table, name)
            compared += 1
    assert compared > 60
