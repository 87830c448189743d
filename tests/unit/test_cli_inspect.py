"""`offsets-lakehouse inspect`: exit codes, the --json contract, --records streaming."""

from __future__ import annotations

import json
import shutil
import struct
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines.cli.main import cli
from pipelines.codec.reader import Batch, iter_log
from pipelines.generate import generate

TOTAL_FIELDS = {
    "files",
    "batches",
    "records",
    "control_records",
    "tombstones",
    "undecodable",
    "torn_tail_bytes",
    "corrupt_batches",
    "by_type_version",
}


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "logs"
    generate(out, 4000, seed=3, partitions=4, segment_bytes=16 * 1024)
    return out


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def partition_dir_with_segments(root: Path, n: int = 2) -> Path:
    return next(d for d in sorted(root.glob("__consumer_offsets-*")) if len(list(d.glob("*.log"))) >= n)


def test_clean_directory_exit_0_and_json_contract(logs: Path) -> None:
    res = invoke("inspect", "--json", str(logs))
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert set(doc["totals"]) >= TOTAL_FIELDS and all(
        isinstance(doc["totals"][f], int) for f in TOTAL_FIELDS - {"by_type_version"}
    )
    assert doc["totals"]["files"] == len(doc["files"]) == len(list(logs.rglob("*.log")))
    assert all({"path", "partition"} <= set(f) for f in doc["files"])
    by_tv = doc["totals"]["by_type_version"]
    assert all(k.split("/")[1] == "null" or k.split("/")[1].isdigit() for k in by_tv)
    # records include control records, which are excluded from by_type_version and tombstones
    t = doc["totals"]
    assert t["records"] == sum(by_tv.values()) + t["control_records"] and t["control_records"] > 0
    assert t["tombstones"] == sum(v for k, v in by_tv.items() if k.endswith("/null"))


def test_records_stream_matches_census(logs: Path) -> None:
    res = invoke("inspect", "--records", str(logs))
    assert res.exit_code == 0
    lines = [json.loads(line) for line in res.output.splitlines()]
    census = json.loads(invoke("inspect", "--json", str(logs)).output)["totals"]
    assert len(lines) == census["records"]
    assert sum(1 for d in lines if d["control"]) == census["control_records"]
    assert all(d["status"] == "ok" for d in lines)
    per_file = {}
    for d in lines:
        per_file.setdefault(d["file"], []).append(d["offset"])
    assert all(offs == sorted(offs) for offs in per_file.values())


def test_torn_tail_of_last_segment_is_normal(logs: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(partition_dir_with_segments(logs), copy / "__consumer_offsets-0")
    last = sorted((copy / "__consumer_offsets-0").glob("*.log"))[-1]
    last.write_bytes(last.read_bytes() + b"\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x01\x00\x00")
    res = invoke("inspect", "--json", str(copy))
    assert res.exit_code == 0
    assert json.loads(res.output)["totals"]["torn_tail_bytes"] == 13


def test_torn_tail_in_a_rolled_segment_is_corruption(logs: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(partition_dir_with_segments(logs), copy / "__consumer_offsets-0")
    first = sorted((copy / "__consumer_offsets-0").glob("*.log"))[0]
    first.write_bytes(first.read_bytes()[:-10])
    res = invoke("inspect", "--json", str(copy))
    assert res.exit_code == 1
    totals = json.loads(res.output)["totals"]
    assert totals["corrupt_batches"] == 1 and totals["torn_tail_bytes"] == 0


def test_corrupt_batch_exit_1_and_reported(logs: Path, tmp_path: Path) -> None:
    seg = sorted(logs.rglob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    batches = [b for b in iter_log(bytes(data)) if isinstance(b, Batch)]
    victim = batches[len(batches) // 2]
    data[victim.end - 3] ^= 0x55
    bad = tmp_path / "__consumer_offsets-0" / seg.name
    bad.parent.mkdir()
    bad.write_bytes(bytes(data))
    res = invoke("inspect", "--json", str(bad))
    assert res.exit_code == 1
    [f] = json.loads(res.output)["files"]
    assert f["corrupt_batches"] == 1 and f["issues"][0]["position"] == victim.position
    assert f["batches"] == len(batches) - 1
    text = invoke("inspect", str(bad))
    assert text.exit_code == 1 and "crc_mismatch" in text.output


def test_undecodable_record_exit_1(tmp_path: Path) -> None:
    from pipelines.codec.reader import Record
    from pipelines.codec.writer import encode_v2_batch

    seg = tmp_path / "__consumer_offsets-1" / "00000000000000000000.log"
    seg.parent.mkdir()
    seg.write_bytes(encode_v2_batch([Record(0, 1, struct.pack(">h", 99) + b"\x00\x01g", b"\x00\x00")]))
    res = invoke("inspect", "--json", str(seg))
    assert res.exit_code == 1
    [u] = json.loads(res.output)["files"][0]["undecodable_records"]
    assert u["reason"] == "unknown_type" and u["error_part"] == "key"
    line = json.loads(invoke("inspect", "--records", str(seg)).output)
    assert line["status"] == "undecodable" and line["raw_key"] and line["record_type"] == 99


@pytest.mark.parametrize("args", [["inspect", "/no/such/path"], ["inspect"], ["inspect", "--json", "--records", "."]])
def test_bad_arguments_exit_2(args: list[str]) -> None:
    assert invoke(*args).exit_code == 2


def test_reader_memory_is_bounded(tmp_path: Path) -> None:
    """A 40 MB segment is read with a few MiB of Python memory, never loaded whole."""
    from pipelines.codec.reader import Record
    from pipelines.codec.writer import encode_v2_batch

    seg = tmp_path / "big.log"
    batch = encode_v2_batch([Record(i, 1, b"k" * 20, b"v" * 2000) for i in range(500)])
    with open(seg, "wb") as fh:
        for _ in range(40):
            fh.write(batch)
    assert seg.stat().st_size > 40_000_000
    tracemalloc.start()
    count = sum(len(b.records or ()) for b in iter_log(seg) if isinstance(b, Batch))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert count == 20_000
    assert peak < 12 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"
