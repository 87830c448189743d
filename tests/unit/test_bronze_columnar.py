"""Bronze's column-wise ``read_range`` gives the rows the per-record path gave, row for row.

The reference below is that per-record path as it was (a row at a time from ``iter_log``, the
progress row folded batch by batch), kept here frozen. Every test reads byte ranges of real
segments, a generated log of every magic and codec, and damaged and torn files both ways and
compares the two Arrow tables: same rows in the same order, same values, same types.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pipelines.bronze import segments_source
from pipelines.bronze.fs import ArrowFileSource, ListedFile, read_index_positions
from pipelines.bronze.segments_source import (
    PROGRESS_COLUMNS,
    TOPIC,
    ByteRange,
    arrow_schema,
    content_hash,
    content_hashes,
    plan_ranges,
    read_range,
)
from pipelines.codec.reader import Batch, ReadIssue, Record, find_batch_start, iter_log
from pipelines.codec.writer import encode_legacy, encode_v2_batch
from pipelines.generate import generate
from tests.conftest import real_segments_dir
from tests.fuzz import corpus, fix_crcs, mutate


# -- the reference: the per-record path ------------------------------------------------------------------
class ReferenceProgress:
    """Progress folded one Batch or ReadIssue at a time (the fold bronze's progress rows were made by)."""

    def __init__(self) -> None:
        self.consumed = self.first_offset = self.last_offset = None
        self.fingerprint_position = self.fingerprint_crc = self.previous = None
        self.records = 0
        self.offsets_ordered = True
        self.size_seen: int | None = None  # the file's size when read

    def batch(self, b: Batch) -> None:
        self.consumed = b.end
        self.fingerprint_position, self.fingerprint_crc = b.position, b.crc
        offsets = [rec.offset for rec in b.records or ()]
        highest = max(offsets, default=b.last_offset)
        if self.last_offset is not None:
            highest = max(highest, self.last_offset)
        self.last_offset = max(highest, b.last_offset)
        if not offsets:
            return
        chain = offsets if self.previous is None else [self.previous, *offsets]
        if any(a >= b for a, b in itertools.pairwise(chain)):
            self.offsets_ordered = False
        low = min(offsets)
        self.first_offset = low if self.first_offset is None else min(self.first_offset, low)
        self.previous = offsets[-1]
        self.records += len(offsets)

    def issue(self, issue: ReadIssue) -> None:
        if issue.kind == ReadIssue.CORRUPT:
            self.consumed = issue.position + issue.length


_TS_TYPE = {"CreateTime": 0, "LogAppendTime": 1, None: -1}


def reference_table(r: ByteRange, cluster: str) -> pa.Table:
    rows: list[dict[str, Any]] = []
    progress = ReferenceProgress()
    src = ArrowFileSource(r.uri)
    progress.size_seen = src.size
    try:
        for item in reference_entries(src, r):
            if isinstance(item, Batch):
                rows += [record_row(item, rec, r, cluster) for rec in item.records or ()]
                progress.batch(item)
            else:
                rows.append(issue_row(item, r, cluster))
                progress.issue(item)
    finally:
        src.close()
    rows.append(
        base_row("progress", r, cluster)
        | {"control": False, "range_start": r.start}
        | {name: getattr(progress, name) for name in PROGRESS_COLUMNS if name != "range_start"}
    )
    return pa.Table.from_pylist(rows, schema=arrow_schema())


def reference_entries(src: ArrowFileSource, r: ByteRange) -> Any:
    if r.start == r.boundary:
        start = r.start
    else:
        start = find_batch_start(src, r.start, [*read_index_positions(r.index_uri), r.boundary])
    if start is None or start >= r.end:
        return iter(())
    return iter_log(src, start=start, end=r.end)


def base_row(kind: str, r: ByteRange, cluster: str) -> dict[str, Any]:
    return {
        "row_kind": kind,
        "cluster": cluster,
        "partition": r.partition,
        "topic": TOPIC,
        "source_uri": r.uri,
        "last_segment": r.is_last,
    }


def record_row(b: Batch, rec: Record, r: ByteRange, cluster: str) -> dict[str, Any]:
    ts = None if rec.timestamp is None else datetime.fromtimestamp(rec.timestamp / 1000, tz=timezone.utc)
    return base_row("record", r, cluster) | {
        "offset": rec.offset,
        "timestamp": ts,
        "timestamp_type": _TS_TYPE[b.timestamp_type],
        "key": rec.key,
        "value": rec.value,
        "headers": [{"key": k, "value": v} for k, v in rec.headers],
        "magic": b.magic,
        "codec": b.codec_name,
        "producer_id": b.producer_id,
        "producer_epoch": b.producer_epoch,
        "base_sequence": b.base_sequence,
        "transactional": b.is_transactional,
        "control": b.is_control,
        "partition_leader_epoch": b.partition_leader_epoch,
        "base_offset": b.base_offset,
        "batch_position": b.position,
        "content_hash": content_hash(rec.key, rec.value),
    }


def issue_row(issue: ReadIssue, r: ByteRange, cluster: str) -> dict[str, Any]:
    kind = issue.kind if (issue.kind != "torn_tail" or r.is_last) else "corrupt_batch"
    return base_row("issue", r, cluster) | {
        "batch_position": issue.position,
        "issue_length": issue.length,
        "issue_kind": kind,
        "issue_reason": issue.reason.value,
        "issue_detail": issue.detail,
        "control": False,
    }


# -- the comparison ----------------------------------------------------------------------------------------
def columnar_table(r: ByteRange, cluster: str, rows_per_batch: int = 8192, chunk_bytes: int | None = None) -> pa.Table:
    extra = {} if chunk_bytes is None else {"chunk_bytes": chunk_bytes}
    batches = list(read_range(r, cluster, rows_per_batch=rows_per_batch, **extra))
    assert all(b.num_rows <= rows_per_batch for b in batches)
    assert all(b.schema == arrow_schema() for b in batches)
    return pa.Table.from_batches(batches, arrow_schema())


def assert_same(r: ByteRange, cluster: str = "c1", **kw: Any) -> pa.Table:
    got = columnar_table(r, cluster, **kw)
    want = reference_table(r, cluster)
    assert got.to_pylist() == want.to_pylist(), r
    assert got.combine_chunks().equals(want.combine_chunks()), r  # types and raw values too (timestamps in us)
    return got


def kinds(table: pa.Table) -> set[str]:
    return set(table["row_kind"].to_pylist())


# -- real segments --------------------------------------------------------------------------------------------
def real_ranges(split_bytes: int) -> list[ByteRange]:
    return plan_ranges([str(real_segments_dir())], split_bytes)


def test_every_real_segment_whole() -> None:
    records = 0
    for r in real_ranges(1 << 40):
        records += assert_same(r, "real")["row_kind"].to_pylist().count("record")
    assert records > 40_000


def test_real_segments_in_byte_ranges_that_start_mid_file() -> None:
    """Ranges of 64 KiB: most start inside a batch and find their first one from the .index."""
    ranges = [r for r in real_ranges(64 * 1024) if r.start > 0]
    assert len(ranges) > 50
    for r in ranges:
        assert_same(r, "real", chunk_bytes=16 * 1024)


# -- a generated log -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def generated_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bronze-columnar") / "logs"
    generate(out, 20_000, seed=7, partitions=3, segment_bytes=128 * 1024)
    return out


def test_generated_log_every_magic_and_codec(generated_log: Path) -> None:
    seen: set[tuple[int, str]] = set()
    for r in plan_ranges([str(generated_log)], 1 << 40):
        got = assert_same(r, rows_per_batch=1000)
        records = got.filter(pa.compute.equal(got["row_kind"], "record"))
        seen |= set(zip(records["magic"].to_pylist(), records["codec"].to_pylist(), strict=True))
    assert {(m, c) for m in (0, 1) for c in ("none", "gzip", "snappy", "lz4")} <= seen
    assert {(2, c) for c in ("none", "gzip", "snappy", "lz4", "zstd")} <= seen


def test_generated_log_in_ranges_chunks_and_known_boundaries(generated_log: Path) -> None:
    ranges = plan_ranges([str(generated_log)], 10_007)  # odd-sized: ranges start mid-batch
    assert sum(r.start > 0 for r in ranges) > 20
    for r in ranges:
        assert_same(r, chunk_bytes=2048)  # chunks smaller than some batches
    # a grown file's new bytes: the range starts at a boundary known from the last run
    for r in plan_ranges([str(generated_log)], 1 << 40)[:3]:
        src = ArrowFileSource(r.uri)
        middle = find_batch_start(src, r.end // 2)
        src.close()
        assert middle is not None and middle > 0
        assert_same(replace(r, start=middle, boundary=middle))
        assert_same(replace(r, start=middle + 1, boundary=middle))  # known boundary used as a hint


# -- damaged and torn files --------------------------------------------------------------------------------------
def write_segment(tmp_path: Path, name: str, data: bytes) -> Path:
    directory = tmp_path / name / "__consumer_offsets-5"
    directory.mkdir(parents=True)
    path = directory / "00000000000000000000.log"
    path.write_bytes(data)
    return path


def whole(path: Path, is_last: bool = True, start: int = 0) -> ByteRange:
    return ByteRange(str(path), start, path.stat().st_size, 5, is_last, None)


def test_torn_tails_last_segment_or_not(tmp_path: Path, generated_log: Path) -> None:
    data = sorted(generated_log.rglob("*.log"))[0].read_bytes()
    cases = {
        "cut-in-a-batch": data[: len(data) - 100],
        "cut-in-a-header": data + data[:10],
        "zero-filled": data + bytes(300),
        "impossible-size": data[:-200] + b"\x00" * 8 + b"\x7f\xff\xff\xff" + bytes(188),
    }
    for name, content in cases.items():
        path = write_segment(tmp_path, name, content)
        for is_last in (True, False):
            got = assert_same(whole(path, is_last), chunk_bytes=4096)
            assert "issue" in kinds(got), name
            assert_same(whole(path, is_last, start=len(content) // 3))


def test_mutated_logs(tmp_path: Path) -> None:
    """Mutated real and generated logs, half with CRCs fixed so the damage reaches the record parsers."""
    rng = random.Random(20261126)
    small = [p for p in sorted(real_segments_dir().rglob("*.log")) if p.stat().st_size < 16_384]
    logs, _ = corpus(small, rng)
    reasons: set[str] = set()
    for case in range(120):
        data = mutate(rng.choice(logs), rng)
        if case % 2:
            data = fix_crcs(data)
        path = write_segment(tmp_path, f"case-{case}", data)
        try:
            reference_table(whole(path), "c1")
        except ValueError:  # a forged timestamp fromtimestamp refused: tested below
            continue
        got = assert_same(whole(path, is_last=bool(case % 3)), chunk_bytes=rng.choice([64, 500, 1 << 20]))
        reasons |= set(got["issue_reason"].drop_null().to_pylist())
        if len(data) > 40:
            assert_same(whole(path, start=rng.randrange(1, len(data) // 2)))
    assert {"crc_mismatch", "bad_records", "torn_tail"} <= reasons


def commits(first: int, n: int) -> list[Record]:
    return [Record(o, 1000 + o, b"k%d" % o, b"v%d" % o) for o in range(first, first + n)]


def test_progress_of_unordered_offsets_and_empty_batches(tmp_path: Path) -> None:
    """The progress fold over batches out of order (within a chunk and across chunks), empty
    batches (their last offset counts), a compacted batch's wider last offset delta, corrupt entries."""
    corrupt = bytearray(encode_v2_batch(commits(30, 2)))
    corrupt[-1] ^= 0xFF
    logs = {
        "ordered": [encode_v2_batch(commits(0, 3)), encode_v2_batch([], base_offset=3, last_offset_delta=4)],
        "backwards": [encode_v2_batch(commits(5, 3)), encode_v2_batch(commits(2, 2)), encode_v2_batch(commits(9, 1))],
        "repeated": [encode_v2_batch(commits(0, 2)), encode_v2_batch(commits(1, 1))],
        "wide-delta": [encode_v2_batch(commits(0, 2), last_offset_delta=40), encode_v2_batch(commits(3, 1))],
        "corrupt-last": [encode_v2_batch(commits(0, 2)), bytes(corrupt)],
        "corrupt-between": [encode_v2_batch(commits(0, 2)), bytes(corrupt), encode_v2_batch(commits(40, 1))],
        "empty-only": [encode_v2_batch([], base_offset=7)],
    }
    seen = set()
    for name, batches in logs.items():
        path = write_segment(tmp_path, name, b"".join(batches))
        for chunk_bytes in (1, 100, 1 << 20):  # one batch per chunk, or all in one
            progress = assert_same(whole(path), chunk_bytes=chunk_bytes).to_pylist()[-1]
            seen.add((progress["offsets_ordered"], progress["last_offset"]))
    assert {(True, 7), (False, 9), (False, 1), (True, 40)} <= seen


# -- timestamps and hashes ---------------------------------------------------------------------------------------
def test_timestamps_as_fromtimestamp_gave_them(tmp_path: Path) -> None:
    """Microseconds as datetime.fromtimestamp(ms / 1000) rounds them, also far from now (where a
    double's precision shows), and a record outside datetime's years fails as it did."""
    stamps = [0, -1, -1500, 1_700_000_000_123, 8_589_934_592_777, 32_503_680_000_001, 253_402_300_799_999]
    stamps += [-62_135_596_800_000, -62_135_596_799_999, -30_000_000_000_001, 99_999_999_999_999]
    rng = random.Random(5)
    stamps += [rng.randint(-62_135_596_800_000, 253_402_300_799_999) for _ in range(3000)]
    records = [Record(i, ts, b"k", b"v") for i, ts in enumerate(stamps)]
    legacy = encode_legacy([Record(len(stamps), 1_600_000_000_555, b"k", None)], magic=1)
    path = write_segment(tmp_path, "stamps", encode_v2_batch(records) + legacy)
    got = assert_same(whole(path))
    assert got["timestamp"].to_pylist()[:-1] == [
        datetime.fromtimestamp(ts / 1000, tz=timezone.utc) for ts in [*stamps, 1_600_000_000_555]
    ]
    for outside in (253_402_300_800_000, -62_135_596_800_001, 2**62):
        path = write_segment(tmp_path, f"outside-{outside}", encode_v2_batch([Record(0, outside, b"k", b"v")]))
        with pytest.raises(ValueError):
            reference_table(whole(path), "c1")
        with pytest.raises(ValueError, match="outside years 1-9999"):
            columnar_table(whole(path), "c1")


def test_content_hashes_are_content_hash() -> None:
    rng = random.Random(3)
    keys = [None, b"", b"\x00", b"\xff", *(rng.randbytes(rng.randrange(0, 400)) for _ in range(200))]
    values = [*keys[1:], None]
    got = content_hashes(pa.array(keys, pa.binary()), pa.array(values, pa.binary())).to_pylist()
    assert got == [content_hash(k, v) for k, v in zip(keys, values, strict=True)]
    # the layout itself, as existing tables hold it
    assert content_hash(None, b"ab") == hashlib.sha256(b"\xff\x00\x00\x00\x00\x02ab").hexdigest()
    sliced = pa.array(keys, pa.binary()).slice(5, 20)
    assert content_hashes(sliced, sliced).to_pylist() == [content_hash(k, k) for k in keys[5:25]]
    assert content_hashes(pa.array([], pa.binary()), pa.array([], pa.binary())).to_pylist() == []


# -- memory ---------------------------------------------------------------------------------------------------------
def test_a_range_is_read_in_chunks_never_whole(generated_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    [r] = [r for r in plan_ranges([str(generated_log)], 1 << 40) if r.end > 100_000][:1]
    asked: list[int] = []
    read_at = ListedFile.read_at

    def recording(self: ListedFile, pos: int, n: int) -> bytes:
        asked.append(n)
        return read_at(self, pos, n)

    monkeypatch.setattr(segments_source.ListedFile, "read_at", recording)
    table = columnar_table(r, "c1", chunk_bytes=8192)
    largest = max(iter_log(r.uri), key=lambda b: b.size).size
    assert len(asked) > r.end // 8192 // 2 and max(asked) <= max(8192, largest + 12)
    assert table.num_rows > 1
