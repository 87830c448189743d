"""The columnar reader yields what ``iter_log`` yields: the same batches, records and issues.

``iter_log`` is the reference. Every test turns its output into rows (batch fields, one row per
record with its batch's number, the issues) and compares them with the columnar reader's tables.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import cramjam
import pytest

from pipelines.codec.columnar_reader import BATCH_SCHEMA, LogColumns, iter_log_columns, read_log_columns
from pipelines.codec.compression import LZ4, ZSTD, compress, decompress
from pipelines.codec.errors import DecodeError
from pipelines.codec.reader import Batch, BytesSource, ReadIssue, Record, find_batch_start, iter_log
from pipelines.codec.records import encode_key, encode_value
from pipelines.codec.segments import discover
from pipelines.codec.writer import encode_legacy, encode_v2_batch
from pipelines.generate import generate
from tests.conftest import real_segments_dir
from tests.fuzz import corpus, fix_crcs, mutate


def reference_rows(items: list[Batch | ReadIssue]) -> tuple[list[dict], list[dict], list[ReadIssue]]:
    batches, records, issues = [], [], []
    for item in items:
        if isinstance(item, ReadIssue):
            issues.append(item)
            continue
        number = len(batches)
        batches.append({name: getattr(item, name) for name in BATCH_SCHEMA.names})
        for r in item.records or ():
            headers = [{"key": k, "value": v} for k, v in r.headers]
            records.append(
                {"batch": number, "offset": r.offset, "timestamp": r.timestamp, "key": r.key, "value": r.value}
                | {"headers": headers}
            )
    return batches, records, issues


def assert_same(got: LogColumns, items: list[Batch | ReadIssue]) -> None:
    batches, records, issues = reference_rows(items)
    assert got.batches.to_pylist() == batches
    assert got.records.to_pylist() == records
    assert got.issues == issues


def test_every_real_segment() -> None:
    records = 0
    for segment in discover([real_segments_dir()]):
        got = read_log_columns(segment.path)
        assert_same(got, list(iter_log(segment.path)))
        records += got.records.num_rows
    assert records > 40_000


@pytest.fixture(scope="module")
def generated_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("columnar-reader") / "logs"
    generate(out, 20_000, seed=12, segment_bytes=128 * 1024)
    return sorted(out.rglob("*.log"))


def test_generated_log_every_magic_and_codec(generated_files: list[Path]) -> None:
    seen = Counter()
    for path in generated_files:
        items = list(iter_log(path))
        seen.update((b.magic, b.codec_name) for b in items if isinstance(b, Batch))
        assert_same(read_log_columns(path), items)
    assert {(m, c) for m in (0, 1) for c in ("none", "gzip", "snappy", "lz4")} <= set(seen)
    assert {(2, c) for c in ("none", "gzip", "snappy", "lz4", "zstd")} <= set(seen)


def test_small_chunks_and_byte_ranges(generated_files: list[Path]) -> None:
    data = generated_files[0].read_bytes()
    # chunks smaller than an entry: every entry is read by growing the chunk to it
    assert_same(read_log_columns(data, chunk_bytes=100), list(iter_log(data)))
    source = BytesSource(data)
    for start, end in [(0, 4000), (5000, 9000), (len(data) // 2, len(data))]:
        first = find_batch_start(source, start)
        assert first is not None
        parts = list(iter_log_columns(data, start=first, end=end, chunk_bytes=1000))
        assert len(parts) > 1 or end - first <= 1000
        items = list(iter_log(data, start=first, end=end))
        assert_same(read_log_columns(data, start=first, end=end, chunk_bytes=1000), items)


def test_damaged_logs_match_the_reference() -> None:
    """Mutated windows of real and generated logs, half of them with CRCs fixed so that the damage
    reaches the record parsers: the columnar reader reports every issue iter_log reports."""
    rng = random.Random(20261125)
    small = [p for p in sorted(real_segments_dir().rglob("*.log")) if p.stat().st_size < 16_384]
    logs, _ = corpus(small, rng)
    reasons: Counter = Counter()
    for case in range(250):
        data = mutate(rng.choice(logs), rng)
        if case % 2:
            data = fix_crcs(data)
        items = list(iter_log(data))
        assert_same(read_log_columns(data), items)
        assert_same(read_log_columns(data, chunk_bytes=rng.choice([17, 64, 500])), items)
        reasons.update(i.reason.value for i in items if isinstance(i, ReadIssue))
    assert {"crc_mismatch", "bad_records", "torn_tail"} <= set(reasons)


def test_unchecked_crcs_and_an_empty_source() -> None:
    data = bytearray(read_bytes_of_a_real_segment())
    data[30] ^= 0xFF  # inside the first batch, after its CRC field
    assert_same(read_log_columns(bytes(data), verify_crc=False), list(iter_log(bytes(data), verify_crc=False)))
    got = read_log_columns(bytes(data))
    assert got.issues and got.issues[0].reason.value == "crc_mismatch"
    empty = read_log_columns(b"")
    assert (empty.batches.num_rows, empty.records.num_rows, empty.issues) == (0, 0, [])


def read_bytes_of_a_real_segment() -> bytes:
    return max(real_segments_dir().rglob("*.log"), key=lambda p: p.stat().st_size).read_bytes()


def test_records_of_every_length_class() -> None:
    """Record lengths of one, two and three varint bytes (up to 8 KiB and beyond), null keys and values."""
    key = encode_key(1, {"group": "g", "topic": "t", "partition": 0})
    records = [
        Record(offset, 1_700_000_000_000 + offset, key, value)
        for offset, value in enumerate(
            [
                # value version 4: a compact metadata string may be longer than 32767 bytes
                encode_value(1, 4, {"offset": 1, "leader_epoch": 0, "metadata": "m" * size, "commit_timestamp": 2})
                for size in (0, 40, 200, 9000, 70_000)
            ]
            + [None, b""]
        )
    ]
    records.append(Record(len(records), 5, None, b"no key"))
    data = b"".join(encode_v2_batch(records[i : i + 3], codec=i % 2) for i in range(0, len(records), 3))
    assert_same(read_log_columns(data), list(iter_log(data)))


def test_chunks_decoded_in_pieces(generated_files: list[Path]) -> None:
    """A chunk is read CHUNK_BYTES at a time and decoded DECODE_BYTES at a time (never splitting an
    entry): in small pieces, generated and damaged logs give what iter_log gives."""
    pieces = 0
    for path in generated_files:
        items = list(iter_log(path))
        parts = list(iter_log_columns(path, decode_bytes=16_384))
        pieces += len(parts)
        assert_same(read_log_columns(path, decode_bytes=16_384), items)
    assert pieces > 2 * len(generated_files)  # the files are 128 KiB: several pieces each
    rng = random.Random(20261126)
    small = [p for p in sorted(real_segments_dir().rglob("*.log")) if p.stat().st_size < 16_384]
    logs, _ = corpus(small, rng)
    for case in range(100):
        data = mutate(rng.choice(logs), rng)
        if case % 2:
            data = fix_crcs(data)
        assert_same(read_log_columns(data, decode_bytes=rng.choice([1, 300, 4000])), list(iter_log(data)))


def cramjam_only(codec: int, data: bytes) -> bytes | None:
    """What compression.decompress returned for an lz4 or zstd records section before its faster
    first tries (cramjam alone); None where cramjam raises."""
    try:
        return bytes(cramjam.lz4.decompress(data) if codec == LZ4 else cramjam.zstd.decompress(data))
    except cramjam.DecompressionError:
        return None


def test_lz4_and_zstd_fast_paths_equal_cramjam() -> None:
    """python-zstandard and lz4.frame are tried first (faster per call); whatever they return must be
    what cramjam returns, on whole frames and on frames cut, extended, doubled or with bytes changed."""
    rng = random.Random(12)
    compared = Counter()
    for codec in (LZ4, ZSTD):
        for case in range(600):
            payload = rng.randbytes(rng.choice([0, 1, 50, 3000, 70_000])) if case % 3 else b"abc" * rng.randrange(5000)
            frame = compress(codec, payload)
            variants = [
                frame,
                frame + frame,
                frame + rng.randbytes(rng.randrange(1, 9)),
                frame[: rng.randrange(len(frame))],
            ]
            damaged = bytearray(frame)
            for _ in range(rng.randrange(1, 4)):
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            variants.append(bytes(damaged))
            for data in variants:
                expected = cramjam_only(codec, data)
                try:
                    got: bytes | None = decompress(codec, data)
                except DecodeError:
                    got = None
                assert got == expected, (codec, case, len(data))
                compared[codec, expected is None] += 1
    # both outcomes, for both codecs, many times each
    assert min(compared[c, failed] for c in (LZ4, ZSTD) for failed in (False, True)) > 200, compared


def test_records_in_every_region_of_the_records_buffer() -> None:
    """A chunk's records are read from one buffer: the chunk, then the decompressed sections, then the
    wrappers' messages, then (after parsing) the reference's records. Entries of every kind in any
    order, with empty and null keys and values where a region ends (the last entry of the chunk, the
    last record of a section or wrapper, the first record the reference parses), timestamps and
    offsets whose deltas take several varint bytes: the columnar reader equals iter_log."""
    rng = random.Random(26)

    def records(n: int, first: int) -> list[Record]:
        out = []
        for i in range(n):
            key = rng.choice([None, b"", b"k" * rng.randrange(1, 70)])
            value = rng.choice([None, b"", b"v" * rng.randrange(1, 300)])
            out.append(
                Record(first + i * rng.choice([1, 1000, 300_000]), 1_700_000_000_000 + rng.randrange(10**9), key, value)
            )
        out[-1].key, out[-1].value = None, b""  # a region's last span: empty or null
        return out

    makers = [
        *(lambda o, c=c: encode_v2_batch(records(rng.randrange(1, 6), o), codec=c) for c in range(5)),
        *(lambda o, m=m: encode_legacy(records(1, o), magic=m) for m in (0, 1)),
        *(
            lambda o, m=m, c=c: encode_legacy(records(rng.randrange(1, 4), o), magic=m, codec=c)
            for m in (0, 1)
            for c in (1, 2, 3)
        ),
        # headers: parsed by the reference, whose records are laid after the others
        lambda o: encode_v2_batch([Record(o, 5, b"", None, [("h", b"x")]), *records(2, o + 1)]),
    ]
    kinds = Counter()
    for _ in range(30):
        chosen = [rng.randrange(len(makers)) for _entry in range(rng.randrange(1, 12))]
        data = b"".join(makers[k](1000 * i) for i, k in enumerate(chosen))
        kinds.update(chosen)
        items = list(iter_log(data))
        assert not [i for i in items if isinstance(i, ReadIssue)], items
        assert_same(read_log_columns(data), items)
        assert_same(read_log_columns(data, chunk_bytes=rng.choice([64, 700, 3000])), items)
        assert_same(read_log_columns(data, decode_bytes=rng.choice([1, 500, 2000])), items)  # chunks decoded in pieces
    assert set(kinds) == set(range(len(makers)))  # every kind of entry, in some chunk
