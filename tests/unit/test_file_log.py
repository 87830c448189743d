"""The segments source's ingestion log without Spark: planning a run from a listing and the log
(every case), the progress a byte range reports, and folding progress into the log and into the
spans the sink restricts itself to."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.bronze.file_log import (
    FilePlan,
    FileState,
    changed,
    counts,
    coverage,
    logged_after,
    plan_files,
    ranges,
)
from pipelines.bronze.fs import RemoteSegment, crc_at
from pipelines.bronze.segments_source import ByteRange, read_range
from pipelines.bronze.sink import spans_meeting_files
from pipelines.codec.reader import Batch, BytesSource, Record, entry_crc, iter_log
from pipelines.codec.writer import encode_legacy, encode_v2_batch

URI = "/data/__consumer_offsets-3/00000000000000000000.log"


def segment(size: int, mtime: int | None = 100, uri: str = URI) -> RemoteSegment:
    return RemoteSegment(uri, size, 3, 0, True, uri[:-4] + ".index", mtime)


def state(size: int = 1000, mtime: int | None = 100, consumed: int = 1000, **kw) -> FileState:
    values = {
        "source": "s",
        "cluster": "c1",
        "file_uri": URI,
        "partition": 3,
        "size": size,
        "modified_ns": mtime,
        "consumed_bytes": consumed,
        "last_offset": 41,
        "fingerprint_position": 900,
        "fingerprint_crc": 0xABC,
        "action": "new",
        "run_id": "r0",
    }
    return FileState(**(values | kw))


class Crcs:
    """A fake ``crc_at`` that remembers what it was asked."""

    def __init__(self, crc: int | None = 0xABC) -> None:
        self.crc = crc
        self.asked: list[tuple[str, int]] = []

    def __call__(self, uri: str, position: int) -> int | None:
        self.asked.append((uri, position))
        return self.crc


def plan_one(seg: RemoteSegment, prev: FileState | None, crcs: Crcs, cluster: str = "c1") -> FilePlan:
    [plan] = plan_files([(seg, cluster)], {} if prev is None else {prev.file_uri: prev}, crcs)
    return plan


# -- planning ------------------------------------------------------------------------------------------
def test_a_file_not_in_the_log_is_read_whole() -> None:
    crcs = Crcs()
    plan = plan_one(segment(500), None, crcs)
    assert (plan.action, plan.start) == ("new", 0) and not crcs.asked
    assert ranges([plan], 200) == [
        ByteRange(URI, 0, 200, 3, True, URI[:-4] + ".index", 0, 500, 100),
        ByteRange(URI, 200, 400, 3, True, URI[:-4] + ".index", 0, 500, 100),
        ByteRange(URI, 400, 500, 3, True, URI[:-4] + ".index", 0, 500, 100),
    ]


def test_a_file_logged_under_another_cluster_is_new() -> None:
    plan = plan_one(segment(1000), state(), Crcs(), cluster="c2")
    assert (plan.action, plan.start) == ("new", 0)


def test_same_size_and_mtime_is_not_read_nor_opened() -> None:
    crcs = Crcs()
    plan = plan_one(segment(1000), state(), crcs)
    assert plan.action == "unchanged" and ranges([plan], 64) == [] and not crcs.asked


def test_a_grown_file_is_read_from_its_consumed_position() -> None:
    crcs = Crcs()
    plan = plan_one(segment(1500, mtime=200), state(), crcs)
    assert (plan.action, plan.start) == ("grown", 1000)
    assert crcs.asked == [(URI, 900)], "the fingerprinted batch is checked"
    # the tail's ranges all know where the new bytes begin: the first starts right there
    assert [(r.start, r.end, r.boundary) for r in ranges([plan], 300)] == [(1000, 1300, 1000), (1300, 1500, 1000)]


def test_a_torn_tail_is_read_again_when_the_file_changed() -> None:
    # read before up to 1000 of 1010 bytes (a torn tail): the same size, a new mtime
    plan = plan_one(segment(1010, mtime=200), state(size=1010, consumed=1000), Crcs())
    assert (plan.action, plan.start) == ("grown", 1000)
    assert [(r.start, r.end) for r in ranges([plan], 64)] == [(1000, 1010)]


def test_touched_but_not_grown_reads_nothing() -> None:
    plan = plan_one(segment(1000, mtime=200), state(), Crcs())
    assert (plan.action, plan.start) == ("grown", 1000) and ranges([plan], 64) == []


def test_without_mtimes_the_fingerprint_decides() -> None:
    crcs = Crcs()
    plan = plan_one(segment(1000, mtime=None), state(mtime=None), crcs)
    assert (plan.action, plan.start) == ("grown", 1000) and crcs.asked and ranges([plan], 64) == []


def test_a_shrunk_file_is_read_whole_without_opening_it() -> None:
    crcs = Crcs()
    plan = plan_one(segment(800, mtime=200), state(), crcs)
    assert (plan.action, plan.start) == ("replaced", 0) and not crcs.asked
    assert [(r.start, r.end, r.boundary) for r in ranges([plan], 1000)] == [(0, 800, 0)]


def test_a_replaced_file_is_read_whole() -> None:
    # bigger or not, another batch at the fingerprinted position: the log cleaner swapped it
    for size in (1000, 2000):
        plan = plan_one(segment(size, mtime=200), state(), Crcs(crc=0xDEF))
        assert (plan.action, plan.start) == ("replaced", 0)
    plan = plan_one(segment(2000, mtime=200), state(), Crcs(crc=None))  # no batch header there at all
    assert plan.action == "replaced"


def test_nothing_to_verify() -> None:
    # nothing consumed (only a torn beginning): read from 0, no fingerprint needed
    crcs = Crcs()
    plan = plan_one(segment(300, mtime=200), state(size=10, consumed=0, fingerprint_position=None), crcs)
    assert (plan.action, plan.start) == ("grown", 0) and not crcs.asked
    # consumed bytes but no batch fingerprinted (only corrupt entries): read again whole
    prev = state(fingerprint_position=None, fingerprint_crc=None)
    assert plan_one(segment(2000, mtime=200), prev, crcs).action == "replaced" and not crcs.asked


def test_counts_every_action() -> None:
    a, b = URI, URI.replace("00000000000000000000", "00000000000000000050")
    plans = plan_files([(segment(1000, uri=a), "c1"), (segment(10, uri=b), "c1")], {a: state()}, Crcs())
    assert counts(plans) == {"new": 1, "unchanged": 1, "grown": 0, "replaced": 0}


# -- what a read reports and what the log becomes ----------------------------------------------------------
def progress_row(range_start: int, consumed: int | None, first: int | None, last: int | None, **kw) -> dict:
    return {
        "cluster": "c1",
        "partition": 3,
        "source_uri": URI,
        "range_start": range_start,
        "consumed": consumed,
        "records": kw.get("records", 0 if first is None else last - first + 1),
        "first_offset": first,
        "last_offset": last,
        "offsets_ordered": kw.get("ordered", True),
        "fingerprint_position": kw.get("fp", None if consumed is None else consumed - 50),
        "fingerprint_crc": kw.get("crc", None if consumed is None else consumed),
    }


def test_logged_after_a_tail_read_continues_the_row() -> None:
    prev = state()
    plan = plan_one(segment(1600, mtime=200), prev, Crcs())
    rows = [progress_row(1300, 1550, 60, 70), progress_row(1000, 1290, 42, 59)]  # any order
    [after] = logged_after([plan], rows, "s", "r1")
    assert (after.size, after.modified_ns, after.consumed_bytes, after.last_offset) == (1600, 200, 1550, 70)
    assert (after.fingerprint_position, after.fingerprint_crc, after.action, after.run_id) == (
        1500,
        1550,
        "grown",
        "r1",
    )
    # a tail holding only a torn fragment: the position and fingerprint stay
    [torn] = logged_after([plan], [progress_row(1000, None, None, None)], "s", "r1")
    assert (torn.consumed_bytes, torn.last_offset, torn.fingerprint_position) == (1000, 41, 900)
    assert torn.size == 1600


def test_logged_after_a_whole_read_starts_afresh_and_unchanged_rows_stay() -> None:
    prev = state()
    replaced = plan_one(segment(600, mtime=200), prev, Crcs())
    [after] = logged_after([replaced], [progress_row(0, 580, 0, 20)], "s", "r1")
    assert (after.consumed_bytes, after.last_offset, after.fingerprint_position, after.action) == (
        580,
        20,
        530,
        "replaced",
    )
    [empty] = logged_after([replaced], [progress_row(0, None, None, None)], "s", "r1")  # nothing complete in it
    assert (empty.consumed_bytes, empty.last_offset, empty.fingerprint_position) == (0, None, None)
    unchanged = plan_one(segment(1000), prev, Crcs())
    assert logged_after([unchanged], [], "s", "r1") == [prev]


def test_the_log_changes_when_a_file_was_read_or_is_gone() -> None:
    prev = state()
    unchanged = plan_one(segment(1000), prev, Crcs())
    assert not changed({URI: prev}, logged_after([unchanged], [], "s", "r1"))
    assert changed({URI: prev, "/gone.log": prev}, logged_after([unchanged], [], "s", "r1"))
    grown = plan_one(segment(1000, mtime=5), prev, Crcs())
    assert changed({URI: prev}, logged_after([grown], [], "s", "r1")), "a new mtime is remembered"


def test_coverage_merges_spans_and_knows_when_keys_may_repeat() -> None:
    other = {"partition": 4}
    rows = [
        progress_row(0, 100, 0, 9),
        progress_row(100, 200, 10, 19),  # adjacent: one span, no repeat
        progress_row(300, 400, 30, 39),
        progress_row(0, 100, 5, 7) | other,
        progress_row(100, None, None, None) | other,  # nothing read in it
    ]
    cov = coverage(rows)
    assert cov.spans == {("c1", 3): [(0, 19), (30, 39)], ("c1", 4): [(5, 7)]}
    assert cov.unique and cov.records == 20 + 10 + 3
    # two copies of a batch (another copy of the segment, a compaction caught mid-way)
    assert not coverage([*rows, progress_row(0, 100, 35, 36)]).unique
    # offsets not increasing inside one range
    assert not coverage([progress_row(0, 100, 0, 9, ordered=False)]).unique
    assert coverage([]).spans == {} and coverage([]).records == 0


# -- the data source's progress row, read from real bytes -----------------------------------------------
def commits(first: int, n: int) -> list[Record]:
    return [Record(o, 1000 + o, b"k%d" % o, b"v%d" % o) for o in range(first, first + n)]


def log_file(tmp_path: Path, *batches: bytes) -> tuple[Path, list[Batch]]:
    part = tmp_path / "__consumer_offsets-3"
    part.mkdir(exist_ok=True)
    path = part / "00000000000000000000.log"
    path.write_bytes(b"".join(batches))
    return path, [b for b in iter_log(path.read_bytes()) if isinstance(b, Batch)]


def read_progress(path: Path, start: int, end: int, boundary: int = 0) -> tuple[list[int], dict]:
    out = []
    for batch in read_range(ByteRange(str(path), start, end, 3, True, None, boundary), "c1"):
        out += batch.to_pylist()
    [progress] = [r for r in out if r["row_kind"] == "progress"]
    return [r["offset"] for r in out if r["row_kind"] == "record"], progress


def test_a_range_reports_what_it_consumed(tmp_path: Path) -> None:
    path, batches = log_file(tmp_path, encode_v2_batch(commits(0, 3)), encode_v2_batch(commits(3, 2)))
    size = path.stat().st_size
    offsets, p = read_progress(path, 0, size)
    assert offsets == [0, 1, 2, 3, 4]
    assert (p["range_start"], p["consumed"], p["records"], p["first_offset"], p["last_offset"]) == (0, size, 5, 0, 4)
    assert p["offsets_ordered"] and (p["fingerprint_position"], p["fingerprint_crc"]) == (
        batches[1].position,
        batches[1].crc,
    )
    # a torn tail: consumed stops before it, so the next read starts there
    with path.open("ab") as fh:
        fh.write(encode_v2_batch(commits(5, 2))[:30])
    offsets, p = read_progress(path, 0, path.stat().st_size)
    assert offsets == [0, 1, 2, 3, 4] and p["consumed"] == size
    # the tail, from the known boundary, once it is complete
    path.write_bytes(path.read_bytes()[:size] + encode_v2_batch(commits(5, 2)))
    offsets, p = read_progress(path, size, path.stat().st_size, boundary=size)
    assert offsets == [5, 6] and (p["consumed"], p["first_offset"], p["records"]) == (path.stat().st_size, 5, 2)


def test_a_range_without_a_batch_start_reports_nothing_consumed(tmp_path: Path) -> None:
    path, _ = log_file(tmp_path, encode_v2_batch(commits(0, 50)))
    offsets, p = read_progress(path, 10, 20)  # inside the only batch
    assert offsets == [] and p["consumed"] is None and p["records"] == 0 and p["first_offset"] is None


def test_a_range_notices_offsets_that_do_not_increase(tmp_path: Path) -> None:
    path, _ = log_file(tmp_path, encode_v2_batch(commits(10, 2)), encode_v2_batch(commits(5, 2)))
    offsets, p = read_progress(path, 0, path.stat().st_size)
    assert offsets == [10, 11, 5, 6] and not p["offsets_ordered"] and (p["first_offset"], p["last_offset"]) == (5, 11)


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_entry_crc_is_the_batch_crc(tmp_path: Path, magic: int) -> None:
    data = encode_v2_batch(commits(0, 2)) if magic == 2 else encode_legacy(commits(0, 2), magic=magic)
    data += encode_v2_batch(commits(2, 1))
    batches = [b for b in iter_log(data) if isinstance(b, Batch)]
    for b in batches:
        assert entry_crc(BytesSource(data), b.position) == b.crc
    path, _ = log_file(tmp_path, data)
    assert crc_at(str(path), batches[-1].position) == batches[-1].crc
    assert entry_crc(BytesSource(data), len(data) - 5) is None  # no header there


def test_spans_meet_files_of_their_own_partition_only() -> None:
    spans = {("c1", 3): [(100, 109)], ("c1", 4): [(0, 9), (50, 59)]}
    files = [
        (("c1", "3"), 0, 99),  # below the span
        (("c1", "4"), 10, 49),  # between the spans
        (("c2", "3"), 100, 200),  # another cluster
        (("c1", "5"), 0, 1000),  # another partition
    ]
    assert spans_meeting_files(spans, files) == set()
    assert spans_meeting_files(spans, [*files, (("c1", "4"), 59, 70)]) == {("c1", 4)}
    assert spans_meeting_files(spans, [*files, (("c1", "3"), None, None)]) == {("c1", 3)}, "no statistics"
