"""A segment file that changes between bronze's listing and its read (docs/bronze.md, "Files that
change under the reader"): deleted, swapped by the log cleaner, truncated, or grown. Each byte
range compares the file it opens with the file listed (fs.ListedFile); a changed file ends its
range with a ``file_changed`` issue row instead of records of another file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipelines.bronze.fs import FileChanged, ListedFile, list_segments
from pipelines.bronze.segments_source import FILE_CHANGED, ByteRange, plan_ranges, read_range
from pipelines.codec.errors import Reason
from pipelines.codec.reader import Record
from pipelines.codec.writer import encode_v2_batch


def commits(first: int, n: int) -> list[Record]:
    return [Record(o, 1000 + o, b"k%d" % o, b"v%d" % o) for o in range(first, first + n)]


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    part = tmp_path / "__consumer_offsets-3"
    part.mkdir()
    path = part / "00000000000000000000.log"
    path.write_bytes(encode_v2_batch(commits(0, 3)) + encode_v2_batch(commits(3, 2), base_offset=3))
    return path


def listed(path: Path) -> ByteRange:
    [r] = plan_ranges([str(path.parent)], 1 << 30)
    assert (r.size, r.identity) == (path.stat().st_size, f"{path.stat().st_dev}:{path.stat().st_ino}")
    return r


def rows(r: ByteRange) -> tuple[list[dict], list[dict], dict]:
    out = [row for batch in read_range(r, "c1") for row in batch.to_pylist()]
    [progress] = [row for row in out if row["row_kind"] == "progress"]
    assert out[-1] is progress, "the progress row ends the range"
    return [x for x in out if x["row_kind"] == "record"], [x for x in out if x["row_kind"] == "issue"], progress


def changed_issue(issues: list[dict], r: ByteRange, reason: Reason) -> None:
    assert [(i["issue_kind"], i["issue_reason"], i["batch_position"], i["issue_length"]) for i in issues] == [
        (FILE_CHANGED, reason.value, r.start, r.end - r.start)
    ]


def test_a_stable_file_is_read_whole(segment: Path) -> None:
    records, issues, progress = rows(listed(segment))
    assert [r["offset"] for r in records] == [0, 1, 2, 3, 4] and not issues
    assert progress["size_seen"] == segment.stat().st_size


def test_deleted_after_listing(segment: Path) -> None:
    r = listed(segment)
    segment.unlink()  # retention, or the cleaner removing a segment it merged into another
    records, issues, progress = rows(r)
    assert not records and progress["records"] == 0 and progress["consumed"] is None
    changed_issue(issues, r, Reason.FILE_DELETED)


def test_swapped_for_a_compacted_copy_after_listing(segment: Path) -> None:
    r = listed(segment)
    # the cleaner's steps: write .cleaned, rename it .swap, rename the old .log .deleted, the .swap .log
    cleaned = segment.with_name(segment.name + ".cleaned")
    cleaned.write_bytes(encode_v2_batch(commits(3, 2), base_offset=3))
    swap = cleaned.rename(segment.with_name(segment.name + ".swap"))
    segment.rename(segment.with_name(segment.name + ".deleted"))
    swap.rename(segment)
    records, issues, _ = rows(r)
    assert not records
    changed_issue(issues, r, Reason.FILE_REPLACED)
    # and the next listing sees only the new .log (not its .deleted predecessor)
    [seg] = list_segments([str(segment.parent)])
    assert seg.size == segment.stat().st_size and seg.identity != r.identity


def test_a_swap_of_the_same_size_is_still_told_apart(segment: Path) -> None:
    r = listed(segment)
    data = segment.read_bytes()
    fresh = segment.with_name(segment.name + ".swap")
    fresh.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # same size, other bytes
    os.replace(fresh, segment)
    changed_issue(rows(r)[1], r, Reason.FILE_REPLACED)


def test_truncated_after_listing(segment: Path) -> None:
    r = listed(segment)
    with segment.open("r+b") as fh:  # a broker truncating its log to the new leader's offsets
        fh.truncate(len(encode_v2_batch(commits(0, 3))))
    records, issues, _ = rows(r)
    assert not records
    changed_issue(issues, r, Reason.FILE_TRUNCATED)


def test_grown_after_listing_is_read_up_to_the_listed_size(segment: Path) -> None:
    r = listed(segment)
    with segment.open("ab") as fh:  # the active segment keeps being appended to
        fh.write(encode_v2_batch(commits(5, 4), base_offset=5))
    records, issues, progress = rows(r)
    assert [x["offset"] for x in records] == [0, 1, 2, 3, 4] and not issues
    assert progress["consumed"] == r.size < progress["size_seen"] == segment.stat().st_size


def test_an_open_file_reads_what_was_listed_even_if_swapped_or_deleted_meanwhile(segment: Path) -> None:
    r = listed(segment)
    original = segment.read_bytes()
    src = ListedFile(r.uri, r.size, r.mtime_ns, r.identity)
    try:
        segment.unlink()
        segment.write_bytes(b"\0" * 10)  # another file under the name
        src.check()  # the descriptor still reads the listed file: consistent, not a change
        assert src.read_at(0, len(original)) == original
    finally:
        src.close()


def test_a_truncation_while_the_file_is_read_is_caught(segment: Path) -> None:
    r = listed(segment)
    src = ListedFile(r.uri, r.size, r.mtime_ns, r.identity)
    try:
        with segment.open("r+b") as fh:
            fh.truncate(10)
        with pytest.raises(FileChanged) as caught:
            src.check()
        assert caught.value.reason is Reason.FILE_TRUNCATED
    finally:
        src.close()


def test_a_read_not_from_a_listing_compares_with_nothing(segment: Path) -> None:
    src = ListedFile(str(segment))  # inspect-style ad hoc read: no listed size to hold it to
    try:
        src.check()
        assert src.size == segment.stat().st_size
    finally:
        src.close()
