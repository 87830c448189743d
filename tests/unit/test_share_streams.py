"""Share and streams groups: the three implementations of their rules, compared at every batch that
touches them.

The spec oracle (tests/support/spec_oracle.py, decision 9), the reference replay
(pipelines/reference/replay.py) and gold's engine (pipelines/gold/engine.py with
pipelines/gold/modern.py) share no code. Each generated log of tests/support/oracle_logs.py is
replayed partition by partition; at the end of every batch that holds a share- or streams-group
record:

* the oracle equals the reference replay's share and streams groups (epochs, state, members with
  their metadata, target and held current assignment, streams topology and validated epoch) and
  the state it lists them in;
* the oracle equals gold's engine, run once per such batch on the rows its previous run returned
  (restored, as gold runs), in share_group_members, streams_group_members,
  streams_group_topologies and the share/streams rows of current_groups, field by field.

A final end-state comparison alone would see few of the states these groups pass through (the
generator's groups end wherever their last write left them), so the guards count every group
state and lifecycle step the compared positions held. Three broken rules of the engine's member
module are each caught by the same comparison.
"""

from __future__ import annotations

import inspect
import textwrap
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipelines.codec.segments import discover
from pipelines.gold import engine as ge
from pipelines.gold import modern
from pipelines.reference.replay import Entry, Replay, iter_batches
from tests.support.gold_events import event_rows, topic_names
from tests.support.oracle_compare import Comparison, compare_with_gold, compare_with_snapshot
from tests.support.oracle_logs import SEEDS, generated
from tests.support.spec_oracle import ClusterModel, LogBatch, PartitionModel, apply_batch, batches_of_files

FAMILY_TYPES = set(range(10, 15)) | set(range(17, 24))  # share (10-14; 15 is not group state) and streams
GOLD_TABLES = ("share_group_members", "streams_group_members", "streams_group_topologies", "current_groups")
CURRENT = ("current_offsets", "pending_transactions", "current_groups", "consumer_group_members",
           "share_group_members", "streams_group_members", "streams_group_topologies")  # fmt: skip


@dataclass
class Seen:
    """What the compared positions held, and how much was compared."""

    positions: int = 0
    states: Counter[tuple[str, str]] | None = None
    rows: Counter[str] | None = None
    fenced: int = 0  # member rows with epoch -1 (a current assignment tombstone, member kept)
    set_aside: int = 0  # deleted group rows of a tombstoned type of a group listed as another
    differences: list[str] | None = None

    def __post_init__(self) -> None:
        self.states, self.rows, self.differences = Counter(), Counter(), []


class EngineRuns:
    """One partition's gold rows, replayed by the engine run after run on its own output."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.tables: dict[str, pa.Table | None] = dict.fromkeys([*CURRENT, "offset_history", "group_generations"])
        self.applied: int | None = None
        self.runs = 0

    def _open(self, table: str, column: str) -> pa.Table | None:
        t = self.tables[table]
        return None if t is None else t.filter(pc.is_null(t.column(column)))

    def run(self, events: list[dict[str, Any]]) -> None:
        inp = ge.PartitionInput(
            "c",
            self.partition,
            pa.Table.from_pylist(events, schema=ge.event_schema()),
            offsets=self.tables["current_offsets"],
            pending=self.tables["pending_transactions"],
            groups=self.tables["current_groups"],
            history=self._open("offset_history", "valid_to_offset"),
            generations=self._open("group_generations", "ended_offset"),
            members=self.tables["consumer_group_members"],
            share_members=self.tables["share_group_members"],
            streams_members=self.tables["streams_group_members"],
            topologies=self.tables["streams_group_topologies"],
            applied_offset=self.applied,
        )
        out = ge.PartitionReplay(inp, f"run{self.runs}").run()
        self.runs += 1
        self.tables.update(out.tables)  # interval tables: only their open rows are read back
        self.applied = out.applied_offset

    def rows(self) -> dict[str, list[dict[str, Any]]]:
        return {
            t: [{"offsets_partition": self.partition, **r} for r in self.tables[t].to_pylist()]  # type: ignore[union-attr]
            for t in GOLD_TABLES
            if self.tables[t] is not None
        }


def _replay_batches(root: Any) -> dict[int, list[list[Entry]]]:
    out: dict[int, list[list[Entry]]] = {}
    for entries in iter_batches(discover([root])):
        if entries:
            out.setdefault(entries[0].partition, []).append(entries)
    return out


def _touches_groups(batch: LogBatch) -> bool:
    return any(r.type in FAMILY_TYPES for r in batch.records)


def _positions(
    partition: int, batches: list[LogBatch], entries: list[list[Entry]], names: dict[str, str]
) -> Iterator[tuple[PartitionModel, Replay, EngineRuns]]:
    """The three implementations of one partition, stopped at the end of every batch that holds a
    share- or streams-group record."""
    model, replay, engine = PartitionModel(partition), Replay(), EngineRuns(partition)
    events = event_rows(batches, names)
    replayed = ran = 0
    for batch in batches:
        apply_batch(model, batch)
        if not _touches_groups(batch):
            continue
        end = model.applied_offset
        assert end is not None
        while replayed < len(entries) and entries[replayed][-1].offset <= end:
            replay.apply_batch(entries[replayed])
            replayed += 1
        upto = ran
        while upto < len(events) and events[upto]["record_offset"] <= end:
            upto += 1
        engine.run(events[ran:upto])
        ran = upto
        yield model, replay, engine


def _replay_view(replay: Replay) -> dict[str, Any]:
    groups = [g for g in replay.listed_groups() if g["type"] in ("share", "streams")]
    return {"share_groups": replay.family_groups(11), "streams_groups": replay.family_groups(17), "groups": groups}


# the oracle's seeds, and a log of few partitions whose groups each get many writes
LOGS = (*((seed, 20_000, 50) for seed in SEEDS), (5, 30_000, 3))


def compare_positions(log: tuple[int, int, int]) -> Seen:
    """The oracle against the replay and the engine at every share/streams batch end of a
    generated log ((seed, records, partitions))."""
    seed = log[0]
    root = generated(*log)
    batches = batches_of_files([root])
    entries = _replay_batches(root)
    names = topic_names(b for bs in batches.values() for b in bs)
    seen = Seen()
    for part, bs in sorted(batches.items()):
        if not any(_touches_groups(b) for b in bs):
            continue
        for model, replay, engine in _positions(part, bs, entries[part], names):
            cluster = ClusterModel({part: model})
            at = f"seed {seed} partition {part} at {model.applied_offset}"
            listed = {k: v for k, v in model.listed_groups().items() if k[1] in ("share", "streams")}
            # the oracle's listing holds every group of the partition: the replay's view the share/streams ones
            cmp = compare_with_snapshot(cluster, _replay_view(replay), ("share_groups", "streams_groups"))
            _record(seen, cmp, at)
            theirs = {(g["group"], g["type"]): g["state"] for g in _replay_view(replay)["groups"]}
            ours = {k: v["state"] for k, v in listed.items()}
            if ours != theirs:
                seen.differences.append(f"{at}: listed states, oracle {ours} != replay {theirs}")  # type: ignore[union-attr]
            gold = engine.rows()
            # set aside, counted: a share/streams tombstone of a group listed under another type
            # (the generator deletes a never-converted group so): gold marks that type deleted, the
            # oracle lists the group once (decision 6)
            live = {g for (g, _), v in model.groups.items() if not v["deleted"]}
            aside = [
                r
                for r in gold.get("current_groups", [])
                if r["deleted"] and (r["group_id"], r["protocol"]) not in model.groups and r["group_id"] in live
            ]
            seen.set_aside += len(aside)
            gold["current_groups"] = [r for r in gold.get("current_groups", []) if r not in aside]
            cmp = compare_with_gold(_light(model), gold, tables=GOLD_TABLES, names=names)
            _record(seen, cmp, at)
            seen.positions += 1
            for (_, protocol), row in listed.items():
                seen.states[(protocol, row["state"])] += 1  # type: ignore[index]
            seen.fenced += sum(
                1
                for t in ("share_group_members", "streams_group_members")
                for r in gold.get(t, [])
                if r["member_epoch"] == -1
            )
    return seen


def _light(model: PartitionModel) -> ClusterModel:
    """What the compared tables are built from (live records, members, the group table): the
    oracle's other tables, history above all, are not built at every position."""
    copy = PartitionModel(model.partition)
    copy.live, copy.family_members, copy.topic_names = model.live, model.family_members, model.topic_names
    copy.groups = model.groups
    return ClusterModel({model.partition: copy})


def _record(seen: Seen, cmp: Comparison, at: str) -> None:
    seen.differences += [f"{at}: {d}" for d in cmp.differences]  # type: ignore[operator]
    # differences the oracle comparison sets aside (tests/support/oracle_compare.py; docs/testing.md):
    # a deletion dated by the last record gold replays in the same batch, a group listed twice
    known = ("the same batch", "gold keeps it live beside")
    seen.differences += [f"{at}: set aside: {a}" for a in cmp.accepted if not any(k in a for k in known)]  # type: ignore[operator]
    seen.rows.update(cmp.rows)  # type: ignore[union-attr]


@cache
def compared(log: tuple[int, int, int]) -> Seen:
    return compare_positions(log)


@pytest.mark.parametrize("log", LOGS, ids=[f"seed{s}-{n}-{p}" for s, n, p in LOGS])
def test_the_three_implementations_agree_at_every_share_and_streams_batch(log: tuple[int, int, int]) -> None:
    seen = compared(log)
    assert not seen.differences, "\n".join(seen.differences[:20])  # type: ignore[index]
    # (seed 28's log, one share and two streams groups, has 24 positions since the generator
    # deletes never-converted groups as classic ones; the guards over all logs are below)
    assert seen.positions >= 20 and seen.rows["current_groups"] >= 30, (seen.positions, seen.rows)


def test_the_compared_positions_hold_every_state_and_lifecycle_step() -> None:
    """Vacuity guards over the seeds: every state of both group types, fenced members, target
    assignments, topologies and the group rows were compared, many times."""
    states: Counter[tuple[str, str]] = Counter()
    rows: Counter[str] = Counter()
    fenced = positions = 0
    for log in LOGS:
        seen = compared(log)
        states.update(seen.states)
        rows.update(seen.rows)
        fenced += seen.fenced
        positions += seen.positions
    for state in ("Empty", "Stable"):
        assert states[("share", state)] >= 10, states
    for state in ("Empty", "NotReady", "Assigning", "Reconciling", "Stable"):
        assert states[("streams", state)] >= 5, states
    assert fenced >= 20, fenced
    assert rows["share_group_members"] >= 250 and rows["streams_group_members"] >= 150, rows
    assert rows["streams_group_topologies"] >= 100 and rows["current_groups"] >= 300, rows
    assert rows["share_groups"] >= 100 and rows["streams_groups"] >= 100, rows
    assert positions >= 200, positions


# -- broken rules of the engine's member module must be caught -------------------------------------------
def mutant(owner: type, method: str, old: str, new: str) -> Callable[..., Any]:
    """``owner.<method>`` with ``old`` (which must occur once) replaced by ``new``."""
    src = textwrap.dedent(inspect.getsource(getattr(owner, method)))
    assert src.count(old) == 1, f"{owner.__name__}.{method} no longer contains {old!r}: update the mutant"
    namespace = dict(vars(inspect.getmodule(owner)))
    exec(compile(src.replace(old, new), f"<mutant of {owner.__name__}.{method}>", "exec"), namespace)
    return namespace[method]


MUTANTS = [
    (
        "a current assignment tombstone removes the member",
        modern.FamilyMembers,
        "apply",
        "slots[3] = offset",
        "slots[METADATA] = slots[CURRENT] = slots[3] = None",
    ),
    (
        "a member metadata tombstone keeps the member",
        modern.FamilyMembers,
        "apply",
        "slots[METADATA] = slots[CURRENT] = slots[3] = None",
        "pass",
    ),
    (
        "a current assignment tombstone keeps what the member owned",
        modern.FamilyMembers,
        "table",
        "columns[name] = pc.if_else(tombed, pa.scalar([], self.types[name]), columns[name])",
        "pass",
    ),
    (
        "a streams topology record does not move the group's topology epoch",
        ge.PartitionReplay,
        "_batch",
        "self.topology_epoch[g] = epoch",
        "pass",
    ),
]


@pytest.mark.parametrize(("name", "owner", "method", "old", "new"), MUTANTS, ids=[m[0] for m in MUTANTS])
def test_a_broken_member_rule_is_caught(
    monkeypatch: pytest.MonkeyPatch, name: str, owner: type, method: str, old: str, new: str
) -> None:
    log = LOGS[1]  # fenced, removed members and topology changes at many compared positions
    assert not compared(log).differences  # the engine as it is: no difference
    monkeypatch.setattr(owner, method, mutant(owner, method, old, new))
    assert compare_positions(log).differences, f"mutant not caught: {name}"
