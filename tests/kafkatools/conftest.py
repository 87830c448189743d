"""Fixtures for the DumpLogSegments (Kafka's own decoder) tier."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.dumplog import parse_dump, run_dump_log_segments, shared_dir

SEGMENT_NAME = "00000000000000000000.log"  # DumpLogSegments derives the start offset from the name


def real_segments_dir() -> Path:
    return shared_dir() / "testdata" / "real-segments"


@pytest.fixture(scope="session")
def java() -> None:
    if shutil.which("java") is None:
        pytest.skip("java not on PATH")


@pytest.fixture(scope="session")
def manifest() -> dict[str, dict[str, str]]:
    path = real_segments_dir() / "manifest.tsv"
    if not path.is_file():
        pytest.skip(f"{path} not found (set OFFSETS_SHARED_DIR)")
    with path.open(newline="") as f:
        return {row["relpath"]: row for row in csv.DictReader(f, delimiter="\t")}


@pytest.fixture(scope="session")
def real_segment_files(manifest: dict[str, dict[str, str]]) -> list[Path]:
    root = real_segments_dir()
    files = sorted(root.rglob("*.log"))
    assert len(files) == len(manifest) == 268
    return files


@pytest.fixture(scope="session")
def kafka_real_dump(java: None, real_segment_files: list[Path]) -> tuple[list[dict[str, Any]], dict[str, dict]]:
    """DumpLogSegments over all real segment files (one or a few JVMs), parsed."""
    info: dict[str, dict] = {}
    records = parse_dump(run_dump_log_segments(real_segment_files), info)
    return records, info


@pytest.fixture()
def dump_built(java: None, tmp_path: Path):
    """Write {name: segment bytes} as <tmp>/<name>/000...0.log, dump them with ONE JVM, return
    {name: [parsed records]} (and the per-file info as attribute ``info`` of the function)."""

    def run(segments: dict[str, bytes]) -> dict[str, list[dict[str, Any]]]:
        paths = {}
        for name, data in segments.items():
            d = tmp_path / name
            d.mkdir()
            (d / SEGMENT_NAME).write_bytes(data)
            paths[name] = d / SEGMENT_NAME
        info: dict[str, dict] = {}
        recs = parse_dump(run_dump_log_segments(list(paths.values())), info)
        by_file = {str(p): name for name, p in paths.items()}
        out: dict[str, list[dict[str, Any]]] = {name: [] for name in segments}
        for r in recs:
            out[by_file[r["file"]]].append(r)
        run.info = {by_file[f]: v for f, v in info.items()}  # type: ignore[attr-defined]
        return out

    return run
