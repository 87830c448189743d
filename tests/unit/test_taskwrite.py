"""Files written by tasks and committed by the driver (pipelines/runtime/taskwrite.py), without a JVM:
the rows read back by delta-rs equal delta-rs's own write of the same rows, and every file's
statistics bound its rows as the Delta log requires (checked against the rows, not the code)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, Schema, write_deltalake

from pipelines.runtime import taskwrite

WEIRD = "we ird/é%=#"  # a cluster name Hive must escape in a directory name
LONG = "x" * 40  # longer than the log's string statistics

SCHEMA = pa.schema(
    [
        pa.field("cluster", pa.string(), nullable=False),
        pa.field("offsets_partition", pa.int32(), nullable=False),
        pa.field("record_offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("note", pa.string()),
        pa.field("transactional", pa.bool_()),
        pa.field("tags", pa.list_(pa.struct([("tag", pa.int64()), ("data", pa.binary())]))),
    ]
)
PARTITIONS = ["cluster", "offsets_partition"]
START = datetime(2024, 5, 1, tzinfo=timezone.utc)


def rows(n: int = 3000) -> pa.Table:
    """Rows over two clusters and three offsets partitions: sub-millisecond timestamps (some
    null), strings longer than the statistics keep, nested lists."""
    return pa.table(
        {
            "cluster": [WEIRD if i % 2 else "plain" for i in range(n)],
            "offsets_partition": pa.array([i % 3 for i in range(n)], pa.int32()),
            "record_offset": pa.array([(i * 7919) % 100_003 for i in range(n)], pa.int64()),
            "timestamp": [
                None if i % 11 == 0 else START + timedelta(microseconds=i * 1_234_567 + 321) for i in range(n)
            ],
            "group_id": [f"group-{i % 37}" for i in range(n)],
            "note": [None if i % 5 == 0 else (LONG + str(i) if i % 4 == 0 else f"n{i % 13}") for i in range(n)],
            "transactional": [i % 3 == 1 for i in range(n)],
            "tags": [[{"tag": i, "data": b"\x00\x01"}] if i % 9 == 0 else None for i in range(n)],
        },
        schema=SCHEMA,
    )


def new_table(path: Path, configuration: dict[str, str] | None = None) -> DeltaTable:
    return DeltaTable.create(
        str(path), Schema.from_arrow(SCHEMA), partition_by=PARTITIONS, configuration=configuration or None
    )


def write(path: Path, data: pa.Table, chunk: int = 700) -> tuple[int, pa.Table]:
    """``data`` written by :func:`taskwrite.write_files` (two tasks' worth of batches, as two
    tasks would write them) and committed; the rows committed and the add actions."""
    found = taskwrite.opened(str(path))
    assert found is not None
    table, goal = found
    half = data.num_rows // 2
    actions = pa.concat_tables(
        pa.Table.from_batches(list(taskwrite.write_files(part.to_batches(chunk), goal, lambda b: b)))
        for part in (data.slice(0, half), data.slice(half))
    )
    return taskwrite.commit(table, goal, actions, {"run": "r1"}), actions


def sort(t: pa.Table) -> pa.Table:
    return t.select(SCHEMA.names).sort_by([("cluster", "ascending"), ("record_offset", "ascending")])


def test_rows_read_back_as_delta_rs_writes_them(tmp_path: Path) -> None:
    data = rows()
    new_table(tmp_path / "tasks")
    new_table(tmp_path / "rs")
    committed, actions = write(tmp_path / "tasks", data)
    write_deltalake(str(tmp_path / "rs"), data, mode="append")

    assert committed == data.num_rows == pc.sum(actions["rows"]).as_py()
    # two tasks, each one file per (cluster, offsets_partition) it met
    assert actions.num_rows == 2 * 6
    ours = DeltaTable(str(tmp_path / "tasks"))
    got = sort(ours.to_pyarrow_table())
    assert got.num_rows == data.num_rows
    assert got.cast(SCHEMA).equals(sort(DeltaTable(str(tmp_path / "rs")).to_pyarrow_table()).cast(SCHEMA))
    assert got.cast(SCHEMA).equals(sort(data))
    # the commit carries its metadata, as Spark's userMetadata
    assert json.loads(ours.history(1)[0]["userMetadata"]) == {"run": "r1"}


def test_files_lie_in_hive_escaped_partition_directories(tmp_path: Path) -> None:
    new_table(tmp_path / "t")
    write(tmp_path / "t", rows(600))
    dirs = {p.parent.relative_to(tmp_path / "t").as_posix() for p in (tmp_path / "t").rglob("*.parquet")}
    assert "cluster=we ird%2Fé%25%3D%23/offsets_partition=1" in dirs
    assert "cluster=plain/offsets_partition=0" in dirs
    goal = taskwrite.target(DeltaTable(str(tmp_path / "t")), str(tmp_path / "t"))
    assert taskwrite.partition_dir(goal, (None, 3)) == "cluster=__HIVE_DEFAULT_PARTITION__/offsets_partition=3"
    # partition columns are not in the files, as Spark writes them
    one = next((tmp_path / "t").rglob("*.parquet"))
    assert pq.read_schema(one).names == [n for n in SCHEMA.names if n not in PARTITIONS]


def test_statistics_bound_every_file_s_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # several row groups per file: the statistics must cover all of them, not the last
    monkeypatch.setattr(taskwrite, "ROW_GROUP_ROWS", 64)
    data = rows()
    new_table(tmp_path / "t")
    write(tmp_path / "t", data, chunk=100)
    adds = pa.table(DeltaTable(str(tmp_path / "t")).get_add_actions(flatten=True)).to_pylist()
    log = [json.loads(line)["add"] for f in sorted((tmp_path / "t" / "_delta_log").glob("*.json"))
           for line in f.read_text().splitlines() if '"add"' in line]  # fmt: skip
    assert len(log) == len(adds) == 12
    groups = cut = 0
    for add in log:
        stats = json.loads(add["stats"])
        part = add["partitionValues"]
        # the file's own rows, read back from it, and the rows of its partition in the input
        mine = pq.ParquetFile(tmp_path / "t" / _decoded(add["path"]))
        groups += mine.num_row_groups
        got = mine.read()
        assert stats["numRecords"] == got.num_rows
        of_part = data.filter(
            pc.and_(
                pc.equal(data["cluster"], part["cluster"]),
                pc.equal(data["offsets_partition"], int(part["offsets_partition"])),
            )
        )
        assert got.num_rows < of_part.num_rows  # the other task wrote the rest
        offsets = got["record_offset"].to_pylist()
        assert stats["minValues"]["record_offset"] == min(offsets)
        assert stats["maxValues"]["record_offset"] == max(offsets)
        assert stats["nullCount"]["timestamp"] == got["timestamp"].null_count
        times = [t for t in got["timestamp"].to_pylist() if t is not None]
        low = datetime.fromisoformat(stats["minValues"]["timestamp"].replace("Z", "+00:00"))
        high = datetime.fromisoformat(stats["maxValues"]["timestamp"].replace("Z", "+00:00"))
        # the log holds milliseconds: still a lower and an upper bound, at most 1 ms away
        assert low <= min(times) < low + timedelta(milliseconds=1)
        assert high - timedelta(milliseconds=1) < max(times) <= high
        notes = [n for n in got["note"].to_pylist() if n is not None]
        assert stats["minValues"]["note"] == min(notes)
        if len(max(notes)) > 32:  # a maximum the log cannot hold is left out
            assert "note" not in stats["maxValues"]
            cut += 1
        else:
            assert stats["maxValues"]["note"] == max(notes)
        assert stats["minValues"]["group_id"] == min(got["group_id"].to_pylist())
        assert stats["maxValues"]["group_id"] == max(got["group_id"].to_pylist())
        assert stats["nullCount"]["note"] == got["note"].null_count
        # an array has a null count, as Spark keeps it, and no bounds
        assert "tags" not in stats["minValues"] and stats["nullCount"]["tags"] == got["tags"].null_count
    assert groups > len(log)
    assert 0 < cut < len(log)


def _decoded(path: str) -> str:
    """A data file's path as the log writes it, on disk."""
    from urllib.parse import unquote

    return unquote(path)


def test_a_long_string_s_minimum_is_its_prefix() -> None:
    values = pa.table({"s": [LONG + "b", LONG + "a", None]})
    stats = taskwrite.file_stats(values, ["s"])
    # a prefix sorts before every string it starts: still a lower bound
    assert stats["minValues"] == {"s": LONG[:32]} and stats["maxValues"] == {}
    assert stats["nullCount"] == {"s": 1} and stats["numRecords"] == 3
    short = taskwrite.file_stats(pa.table({"s": ["b", "a"]}), ["s"])
    assert short["minValues"] == {"s": "a"} and short["maxValues"] == {"s": "b"}


def test_a_column_of_nulls_has_no_bounds() -> None:
    stats = taskwrite.file_stats(pa.table({"n": pa.array([None, None], pa.int64())}), ["n"])
    assert stats == {"numRecords": 2, "minValues": {}, "maxValues": {}, "nullCount": {"n": 2}}


def test_statistics_only_on_the_listed_columns(tmp_path: Path) -> None:
    new_table(tmp_path / "t", {"delta.dataSkippingStatsColumns": "record_offset,timestamp"})
    _, actions = write(tmp_path / "t", rows(300))
    for stats in actions["stats"].to_pylist():
        parsed = json.loads(stats)
        assert set(parsed["nullCount"]) == {"record_offset", "timestamp"}
        assert set(parsed["minValues"]) == {"record_offset", "timestamp"}


def test_a_null_in_a_not_null_column_fails_the_task(tmp_path: Path) -> None:
    new_table(tmp_path / "t")
    bad = rows(50).set_column(4, pa.field("group_id", pa.string()), pa.array([None] * 50, pa.string()))
    found = taskwrite.opened(str(tmp_path / "t"))
    assert found is not None
    with pytest.raises(ValueError, match="NOT NULL constraint violated for column: group_id"):
        list(taskwrite.write_files(bad.to_batches(), found[1], lambda b: b))
    assert not list((tmp_path / "t").rglob("*.parquet"))


def test_nothing_written_commits_nothing(tmp_path: Path) -> None:
    new_table(tmp_path / "t")
    table, goal = taskwrite.opened(str(tmp_path / "t"))  # type: ignore[misc]
    empty = pa.Table.from_batches(
        list(taskwrite.write_files(rows(0).to_batches(), goal, lambda b: b)), taskwrite.ADD_SCHEMA
    )
    assert taskwrite.commit(table, goal, empty) == 0
    assert DeltaTable(str(tmp_path / "t")).version() == 0


def test_tables_the_tasks_must_not_write_are_left_to_spark(tmp_path: Path) -> None:
    new_table(tmp_path / "plain")
    assert taskwrite.writable(DeltaTable(str(tmp_path / "plain"))) is None
    new_table(tmp_path / "checked").alter.add_constraint({"positive": "record_offset >= 0"})
    assert taskwrite.opened(str(tmp_path / "checked")) is None
    assert taskwrite.opened(str(tmp_path / "missing")) is None


def replace(path: Path, data: pa.Table, removes) -> int:
    """``data`` written by one task and committed as a replace of the files ``removes`` picks."""
    table, goal = taskwrite.opened(str(path))  # type: ignore[misc]
    removed = taskwrite.removed_files(taskwrite.existing(table, goal.root, ["record_offset"]), removes)
    assert removed is not None
    actions = pa.Table.from_batches(list(taskwrite.write_files(data.to_batches(), goal, lambda b: b)),
                                    taskwrite.ADD_SCHEMA)  # fmt: skip
    return taskwrite.commit(table, goal, actions, None, removed)


def test_a_replace_removes_the_files_it_replaces_in_the_same_commit(tmp_path: Path) -> None:
    new_table(tmp_path / "t")
    data = rows(600)
    write(tmp_path / "t", data)
    weird = pc.equal(data["cluster"], WEIRD)
    # the escaped cluster's rows of partitions 0 and 1 replaced by new ones; partition 2 and the
    # other cluster kept
    replaced = pc.and_(weird, pc.less(data["offsets_partition"], 2))
    new = data.filter(replaced).slice(0, 40)
    offsets = pa.array(range(10**6, 10**6 + new.num_rows), pa.int64())
    new = new.set_column(2, SCHEMA.field("record_offset"), offsets)
    seen: list[dict] = []

    def removes(f: taskwrite.Existing) -> bool:
        seen.append(f.partition_values)
        assert f.minimum["record_offset"] <= f.maximum["record_offset"]  # the bounds asked for
        assert Path(f.uri.removeprefix("file://")).is_file()  # where the file is, unescaped
        return f.partition_values["cluster"] == WEIRD and f.partition_values["offsets_partition"] in ("0", "1")

    before = DeltaTable(str(tmp_path / "t")).version()
    assert replace(tmp_path / "t", new, removes) == 40
    assert len(seen) == 12  # every file of the version was asked about
    table = DeltaTable(str(tmp_path / "t"))
    assert table.version() == before + 1  # one commit adds and removes
    expected = pa.concat_tables([data.filter(pc.invert(replaced)), new])
    assert sort(table.to_pyarrow_table()).cast(SCHEMA).equals(sort(expected).cast(SCHEMA))
    log = (tmp_path / "t" / "_delta_log" / f"{before + 1:020d}.json").read_text().splitlines()
    removes = [json.loads(line)["remove"] for line in log if '"remove"' in line]
    # two partitions, a file of each of the two tasks that wrote them
    assert len(removes) == 4 and all(r["dataChange"] for r in removes)


def test_a_replace_that_is_not_file_aligned_is_refused(tmp_path: Path) -> None:
    new_table(tmp_path / "t")
    write(tmp_path / "t", rows(60))
    table, goal = taskwrite.opened(str(tmp_path / "t"))  # type: ignore[misc]
    files = taskwrite.existing(table, goal.root)
    # one file the caller cannot tell about: nothing may be removed, nothing written
    verdicts = iter([True, None] + [False] * len(files))
    assert taskwrite.removed_files(files, lambda f: next(verdicts)) is None
    assert taskwrite.removed_files(files, lambda f: False) == []
    # a replace that removes every file and adds nothing: an empty table, still one commit
    assert taskwrite.commit(table, goal, taskwrite.ADD_SCHEMA.empty_table(), None, files) == 0
    after = DeltaTable(str(tmp_path / "t"))
    assert after.version() == 2 and after.to_pyarrow_table().num_rows == 0
