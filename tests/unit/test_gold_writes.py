"""The commit gold makes per table (pipelines.gold.build.table_writes): which rows of the replay's
output it writes and which rows of the table they replace. One commit per table a run changed;
history already written is never in what a commit replaces."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipelines.gold import build
from pipelines.gold.build import ALL, CLOSED, GOLD_TABLES, OPEN, _output_batches, table_writes
from pipelines.gold.plan import Plan
from pipelines.runtime import taskwrite

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def plan(full: list[tuple[str, int]] = (), resumed: list[tuple[str, int]] = (), written=()) -> Plan:
    """A plan recomputing ``full`` and resuming ``resumed``; ``written``: partitions with progress
    rows (gold wrote them before, or marked them in flight)."""
    p = Plan("test", {}, None)
    p.why = {pair: "test" for pair in full}
    p.incremental_from = {pair: 10 for pair in resumed}
    p.progress = {pair: {"applied_offset": 10} for pair in [*written, *resumed]}
    return p


def test_a_first_run_appends_and_writes_only_tables_with_rows() -> None:
    changed = {("current_offsets", ALL): [A0, A1], ("offset_history", OPEN): [A0, A1]}
    changed[("offset_history", CLOSED)] = [A0, A1]
    nonempty = {("current_offsets", ALL): [A0, A1], ("offset_history", CLOSED): [A0], ("offset_history", OPEN): [A1]}
    writes = table_writes(plan(full=[A0, A1]), changed, nonempty)
    assert set(writes) == {"current_offsets", "offset_history"}
    assert writes["current_offsets"].where is None
    assert writes["current_offsets"].parts == {ALL: [A0, A1]}
    assert writes["current_offsets"].beyond == {}  # no predicate: one append
    assert writes["offset_history"].where is None
    assert writes["offset_history"].parts == {CLOSED: [A0], OPEN: [A1]}


def test_a_resumed_partition_replaces_current_rows_and_only_open_intervals() -> None:
    changed = {(t, p): [A0] for t in GOLD_TABLES for p in (ALL, CLOSED, OPEN)}
    nonempty = {("current_offsets", ALL): [A0], ("offset_history", CLOSED): [A0], ("offset_history", OPEN): [A0]}
    writes = table_writes(plan(resumed=[A0]), changed, nonempty)
    assert writes["current_offsets"].where == "(cluster = 'a' AND offsets_partition IN (0))"
    # the closed intervals the run made are added; the ones written before are not replaced
    assert writes["offset_history"].where == "(((cluster = 'a' AND offsets_partition IN (0))) AND is_current = true)"
    assert writes["offset_history"].parts == {CLOSED: [A0], OPEN: [A0]}
    # ... which lie outside that predicate (a writer checking rows against it adds them apart)
    assert writes["offset_history"].beyond == {CLOSED: [A0]}
    assert writes["current_offsets"].beyond == {}


def test_a_partition_a_run_emptied_is_cleared_in_the_same_commit() -> None:
    changed = {("pending_transactions", ALL): [A0, B0], ("group_generations", OPEN): [A0]}
    nonempty = {("pending_transactions", ALL): [B0]}
    writes = table_writes(plan(resumed=[A0, B0]), changed, nonempty)
    assert writes["pending_transactions"].parts == {ALL: [B0]}
    assert writes["pending_transactions"].where == (
        "(cluster = 'a' AND offsets_partition IN (0)) OR (cluster = 'b' AND offsets_partition IN (0))"
    )
    assert writes["group_generations"].parts == {CLOSED: [], OPEN: []}
    assert writes["group_generations"].where == "(((cluster = 'a' AND offsets_partition IN (0))) AND is_current = true)"


def test_a_recomputed_partition_replaces_all_its_intervals() -> None:
    changed = {("offset_history", OPEN): [A0, A1], ("offset_history", CLOSED): [A0, A1]}
    nonempty = {("offset_history", CLOSED): [A0, A1], ("offset_history", OPEN): [A0]}
    # a0 was written before (a full refresh, late data, a killed run); a1 was not
    writes = table_writes(plan(full=[A0, A1], written=[A0]), changed, nonempty)
    assert writes["offset_history"].where == "(cluster = 'a' AND offsets_partition IN (0))"
    assert writes["offset_history"].parts == {CLOSED: [A0, A1], OPEN: [A0]}
    # a0's rows match the predicate; a1's, a first write, lie outside it
    assert writes["offset_history"].beyond == {CLOSED: [A1]}


def test_mixed_resumed_and_recomputed_partitions() -> None:
    changed = {("group_generations", OPEN): [A0, A1]}
    nonempty = {("group_generations", OPEN): [A0, A1]}
    writes = table_writes(plan(full=[A1], resumed=[A0], written=[A1]), changed, nonempty)
    assert writes["group_generations"].where == (
        "(((cluster = 'a' AND offsets_partition IN (0))) AND is_current = true) "
        "OR (cluster = 'a' AND offsets_partition IN (1))"
    )
    assert writes["group_generations"].beyond == {}


def test_a_partition_gold_never_wrote_lies_beyond_the_predicate() -> None:
    changed = {("current_offsets", ALL): [A0, A1]}
    nonempty = {("current_offsets", ALL): [A0, A1]}
    writes = table_writes(plan(full=[A1], resumed=[A0]), changed, nonempty)
    assert writes["current_offsets"].where == "(cluster = 'a' AND offsets_partition IN (0))"
    assert writes["current_offsets"].beyond == {ALL: [A1]}


def test_a_table_no_partition_changed_is_not_written() -> None:
    assert table_writes(plan(resumed=[A0]), {}, {}) == {}


def test_the_replays_output_comes_in_bounded_blobs_and_batches() -> None:
    """Each (table, part) of a replayed partition in blobs of at most ``blob_bytes`` (in Arrow),
    every row once and in order; an empty one still gets its (empty) blob, and no batch holds more
    bytes. 8 bytes per row: 80 bytes are 10 rows."""

    def rows(n: int, start: int = 0) -> pa.Table:
        return pa.table({"x": pa.array(range(start, start + n), pa.int64())})

    parts = [
        ("offset_history", CLOSED, rows(23), True),
        ("offset_history", OPEN, rows(0), False),
        ("current_offsets", ALL, rows(5, 100), True),
        ("progress", ALL, rows(1), True),
    ]
    batches = list(_output_batches("a", 3, 0, parts, blob_bytes=80))
    out = pa.Table.from_batches(batches)
    assert all(sum(b.column("rows").to_pylist()) <= 10 for b in batches)
    assert set(out.column("offsets_partition").to_pylist()) == {3}
    for table, part, expected, changed in parts:
        mine = [r for r in out.to_pylist() if (r["table"], r["part"]) == (table, part)]
        assert all(r["changed"] is changed and r["rows"] <= 10 for r in mine)
        got = pa.concat_tables([pa.ipc.open_stream(r["data"]).read_all() for r in mine])
        assert got.column("x").to_pylist() == expected.column("x").to_pylist(), (table, part)
        assert len(mine) == max(1, -(-expected.num_rows // 10))  # 23 rows: 3 blobs; none: 1


def existing(cluster: str, current: bool | None, low: int | None, high: int | None) -> taskwrite.Existing:
    """A gold file of ``cluster`` (in the ``is_current`` partition ``current``, for an interval
    table) whose statistics bound its offsets partitions by ``low`` and ``high``."""
    values = {"cluster": cluster} | ({} if current is None else {"is_current": "true" if current else "false"})
    return taskwrite.Existing(f"{cluster}-{current}-{low}-{high}", "uri", 1, values,
                              {"offsets_partition": low}, {"offsets_partition": high})  # fmt: skip


def test_a_replace_removes_only_files_whose_every_row_it_replaces() -> None:
    """What a replace written by tasks (files removed whole, none rewritten) may do with each
    existing file: remove it, keep it, or give up when the file holds both kinds of rows."""
    changed = {("offset_history", OPEN): [A0, A1, B0], ("current_offsets", ALL): [A0, A1]}
    nonempty = {("offset_history", OPEN): [A0, A1, B0], ("current_offsets", ALL): [A0, A1]}
    writes = table_writes(plan(full=[B0], resumed=[A0, A1], written=[B0]), changed, nonempty)
    held = {"a01": {0, 1}, "a0": {0}, "a012": {0, 1, 2}, "b0": {0}}

    def verdict(table: str, f: taskwrite.Existing, uri: str) -> bool | None:
        read: list[str] = []

        def present(u: str) -> set[int]:
            read.append(u)
            return held[uri]

        got = writes[table].removes(present)(f)
        assert read in ([], ["uri"])
        return got

    history = "offset_history"
    # a's open intervals: every partition a file's statistics allow is resumed -> removed whole,
    # without reading the file
    assert writes[history].removes(lambda u: pytest.fail("read"))(existing("a", True, 0, 1)) is True
    assert writes[history].removes(lambda u: pytest.fail("read"))(existing("a", True, 0, 0)) is True
    # statistics that allow partition 2, which this run keeps: the file is read to tell
    assert verdict(history, existing("a", True, 0, 2), "a01") is True
    # a file also holding partition 2's open intervals: only Spark can rewrite it
    assert verdict(history, existing("a", True, 0, 2), "a012") is None
    # a's closed history is never replaced by a resumed partition
    assert verdict(history, existing("a", False, 0, 1), "a01") is False
    # b0 is recomputed: its closed and open intervals both go
    assert verdict(history, existing("b", False, 0, 0), "b0") is True
    assert verdict(history, existing("b", True, 0, 0), "b0") is True
    # statistics that exclude every replaced partition: kept without reading the file
    assert writes["current_offsets"].removes(lambda u: pytest.fail("read"))(existing("a", None, 5, 9)) is False
    assert writes["current_offsets"].removes(lambda u: pytest.fail("read"))(existing("b", None, 0, 0)) is False
    # no statistics: the file is read to tell
    assert verdict("current_offsets", existing("a", None, None, None), "a01") is True
    assert verdict("current_offsets", existing("a", None, None, None), "a012") is None


# -- reading the persisted state back: each partition's rows as slices of a file ---------------------
def _file(partitions: list[int]) -> pa.Table:
    return pa.table({"offsets_partition": pa.array(partitions, pa.int32()), "row": list(range(len(partitions)))})


def _rows_of(rows: pa.Table, at: dict[int, list[tuple[int, int]]], part: int) -> list[int]:
    return [r for a, b in at.get(part, ()) for r in rows.column("row").to_pylist()[a:b]]


@pytest.mark.parametrize(
    "layout",
    [
        [0, 0, 1, 1, 1, 2],  # written by the driver: in partition order
        [2, 2, 0, 1, 1, 0],  # by a task in its own order, 0 in two runs
        [1, 0, 1, 0, 2, 1, 0, 2, 1, 0, 1, 2, 0, 1, 0, 2, 1, 0, 1, 2, 0] * 3,  # cut finer: sorted instead
    ],
)
def test_each_partitions_rows_are_found_whatever_the_files_order(layout: list[int], monkeypatch) -> None:
    monkeypatch.setattr(build, "MAX_RUNS_PER_PARTITION", 4)
    table = _file(layout)
    rows, at = build.partition_slices(table, pa.array([0, 1, 2], pa.int32()))
    for part in (0, 1, 2):
        expected = [i for i, p in enumerate(layout) if p == part]
        assert _rows_of(rows, at, part) == expected  # every row, in the file's order
    if len(layout) > 4 * 3:  # too many runs: sorted, one run each
        assert all(len(runs) == 1 for runs in at.values())
    else:  # slices of the file as it was: no copy
        assert rows is table


def test_a_task_replaying_few_of_a_files_partitions_keeps_only_their_rows() -> None:
    layout = [3, 3, 0, 1, 1, 0, 2, 2, 2, 4]
    rows, at = build.partition_slices(_file(layout), pa.array([0, 4], pa.int32()))
    assert rows.num_rows == 3  # partitions 0 and 4: three of ten rows copied, the rest let go
    assert _rows_of(rows, at, 0) == [2, 5] and _rows_of(rows, at, 4) == [9]
    assert at.get(1) is None
