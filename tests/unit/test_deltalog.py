"""What a range of commits added and removed (pipelines/runtime/deltalog.py), on tables delta-rs
writes here: appends, an overwrite by predicate, a compaction (no data change), a schema change,
and an expired commit file."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from pipelines.runtime import deltalog

SCHEMA = pa.schema([("cluster", pa.string()), ("n", pa.int64())])


def _rows(cluster: str, *values: int) -> pa.Table:
    return pa.table({"cluster": [cluster] * len(values), "n": list(values)}, SCHEMA)


def _values(table: pa.Table) -> list[tuple[str, int]]:
    return sorted(zip(table["cluster"].to_pylist(), table["n"].to_pylist(), strict=True))


@pytest.fixture
def table(tmp_path: Path) -> str:
    path = str(tmp_path / "t")
    write_deltalake(path, _rows("a", 1, 2), partition_by=["cluster"])  # version 0
    write_deltalake(path, _rows("b", 3), mode="append")  # 1
    write_deltalake(path, _rows("a", 4), mode="append")  # 2
    return path


def test_appends_between_versions(table: str):
    changes = deltalog.changed_files(table, 0, 2)
    assert changes is not None and not changes.removed
    assert _values(deltalog.read_rows(changes.added, SCHEMA)) == [("a", 4), ("b", 3)]
    assert deltalog.changed_files(table, 2, 2) == deltalog.RangeChanges((), ())


def test_a_compaction_changes_no_data(table: str):
    DeltaTable(table).optimize.compact()  # 3: rewrites a's two files as one, dataChange false
    changes = deltalog.changed_files(table, 2, 3)
    assert changes is not None and changes.empty
    assert _values(deltalog.read_rows(deltalog.changed_files(table, 1, 3).added, SCHEMA)) == [("a", 4)]


def test_an_overwrite_removes_and_adds(table: str):
    write_deltalake(table, _rows("a", 9), mode="overwrite", predicate="cluster = 'a'")  # 3
    changes = deltalog.changed_files(table, 2, 3)
    assert _values(deltalog.read_rows(changes.removed, SCHEMA)) == [("a", 1), ("a", 2), ("a", 4)]
    assert _values(deltalog.read_rows(changes.added, SCHEMA)) == [("a", 9)]
    # a file added and removed inside the range is in neither list
    changes = deltalog.changed_files(table, 1, 3)
    assert _values(deltalog.read_rows(changes.removed, SCHEMA)) == [("a", 1), ("a", 2)]
    assert _values(deltalog.read_rows(changes.added, SCHEMA)) == [("a", 9)]


def test_what_the_log_cannot_tell(table: str):
    wider = pa.table({"cluster": ["a"], "n": [5], "extra": ["x"]})
    write_deltalake(table, wider, mode="append", schema_mode="merge")  # 3: a metadata change
    assert deltalog.changed_files(table, 2, 3) is None
    (Path(table) / "_delta_log" / f"{1:020d}.json").unlink()  # expired
    assert deltalog.changed_files(table, 0, 2) is None
