"""bronze.fs.list_segments on a local directory (its own scandir walk, one stat per segment)
lists what pyarrow's recursive listing lists, under the same rules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipelines.bronze import fs as bronze_fs


def _tree(root: Path) -> None:
    for part, bases in {0: [0, 120], 7: [0], 12: [35, 400, 9000]}.items():
        d = root / "logs" / f"__consumer_offsets-{part}"
        d.mkdir(parents=True)
        for b in bases:
            (d / f"{b:020d}.log").write_bytes(b"x" * (b % 7 + 1))
            (d / f"{b:020d}.index").write_bytes(b"")
            (d / f"{b:020d}.timeindex").write_bytes(b"")
    decoys = root / "logs" / "__consumer_offsets-12"
    for name in ("00000000000000009001.log.deleted", "00000000000000009002.log.swap", "leader-epoch-checkpoint"):
        (decoys / name).write_bytes(b"y")
    (root / "logs" / "__consumer_offsets-3.abc-delete").mkdir()
    (root / "logs" / "__consumer_offsets-3.abc-delete" / f"{0:020d}.log").write_bytes(b"z")
    (root / "logs" / "other-topic-0").mkdir()
    (root / "logs" / "other-topic-0" / f"{0:020d}.log").write_bytes(b"z")
    # a partition directory reached through a symbolic link is read like one in place
    (root / "elsewhere" / "__consumer_offsets-20").mkdir(parents=True)
    (root / "elsewhere" / "__consumer_offsets-20" / f"{5:020d}.log").write_bytes(b"abc")
    os.symlink(root / "elsewhere" / "__consumer_offsets-20", root / "logs" / "__consumer_offsets-20")


@pytest.mark.parametrize("pattern", ["logs", "logs/", "logs/__consumer_offsets-1*", "*/__consumer_offsets-20"])
def test_local_walk_lists_what_pyarrow_lists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pattern: str) -> None:
    _tree(tmp_path)
    walked = bronze_fs.list_segments([str(tmp_path / pattern)])
    monkeypatch.setattr(bronze_fs, "_local_logs", lambda base: bronze_fs._listed(*_info(base)))
    listed = bronze_fs.list_segments([str(tmp_path / pattern)])
    assert walked == listed
    assert walked and all(s.identity and s.mtime_ns for s in walked)


def _info(base: str) -> tuple[object, object]:
    from pyarrow import fs

    local = fs.LocalFileSystem()
    return local, local.get_file_info(base)


def test_local_walk_applies_the_listing_rules(tmp_path: Path) -> None:
    _tree(tmp_path)
    got = [(s.partition, s.base_offset, s.size, s.is_last) for s in bronze_fs.list_segments([str(tmp_path / "logs")])]
    assert got == [
        (0, 0, 1, False),
        (0, 120, 2, True),
        (12, 35, 1, False),
        (12, 400, 2, False),
        (12, 9000, 6, True),
        (20, 5, 3, True),
        (7, 0, 1, True),
    ]
    seg = bronze_fs.list_segments([str(tmp_path / "logs" / "__consumer_offsets-7" / f"{0:020d}.log")])
    assert [(s.partition, s.base_offset) for s in seg] == [(7, 0)]
