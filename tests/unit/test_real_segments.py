"""Every real broker segment decodes, and its census equals the independent manifest.

``manifest.tsv`` was computed by a separate parser when the data set was assembled; none
of its numbers come from our code.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from pipelines.codec.reader import Batch, iter_log
from pipelines.codec.records import decode_record, encode_record
from pipelines.codec.segments import discover
from pipelines.codec.writer import encode_batch
from pipelines.inspect import inspect_segment
from tests.conftest import manifest_rows, real_segments_dir

ROWS = manifest_rows()


def _pairs(text: str) -> Counter:
    """``"1/3:216,2/3:7"`` -> Counter({"1/3": 216, "2/3": 7})."""
    out: Counter = Counter()
    for item in filter(None, text.split(",")):
        key, _, count = item.rpartition(":")
        out[key] += int(count)
    return out


def test_manifest_covers_every_file() -> None:
    found = {s.path.relative_to(real_segments_dir()).as_posix() for s in discover([real_segments_dir()])}
    assert found == {row["relpath"] for row in ROWS}
    assert len(found) == 268


@pytest.mark.parametrize("row", ROWS, ids=[r["relpath"] for r in ROWS])
def test_census_matches_manifest(row: dict[str, str]) -> None:
    path = real_segments_dir() / row["relpath"]
    [seg] = discover([path])
    report = inspect_segment(seg)
    assert report.undecodable == 0, report.undecodable_records[:3]
    assert report.corrupt_batches == 0 and report.torn_tail_bytes == 0, report.issues
    assert report.batches == int(row["batches"])
    assert report.records == int(row["records"])
    assert report.control_records == int(row["control_records"])
    assert report.tombstones == int(row["tombstones"])
    expected = _pairs(row["key_value_pairs"])
    for type_id, count in _pairs(row["tombstones_by_key"]).items():
        expected[f"{type_id}/null"] += count
    assert report.by_type_version == expected
    # the manifest's range is batch-level: first base offset .. last batch's last offset
    batches = [b for b in iter_log(path) if isinstance(b, Batch)]
    if batches:
        assert (batches[0].base_offset, batches[-1].last_offset) == (int(row["first_offset"]), int(row["last_offset"]))
        assert sum(b.has_delete_horizon for b in batches) == int(row["delete_horizon_batches"])


@pytest.mark.parametrize("row", ROWS, ids=[r["relpath"] for r in ROWS])
def test_reencoding_is_byte_exact(row: dict[str, str]) -> None:
    """encode(decode(b)) == b for every batch and every record key/value."""
    data = Path(real_segments_dir() / row["relpath"]).read_bytes()
    for batch in iter_log(data):
        assert isinstance(batch, Batch)
        assert encode_batch(batch) == data[batch.position : batch.end]
        for record in batch.records or ():
            decoding = decode_record(record.key, record.value)
            assert decoding.ok
            assert encode_record(decoding) == (record.key, record.value)
