"""Shared test fixtures: where ../shared is, and the real segment census."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """``../shared`` beside the repository (CI puts it there), or ``$OFFSETS_SHARED_DIR``."""
    return Path(os.environ.get("OFFSETS_SHARED_DIR", REPO.parent / "shared")).resolve()


def real_segments_dir() -> Path:
    path = shared_dir() / "testdata" / "real-segments"
    if not (path / "manifest.tsv").exists():
        pytest.fail(f"real segment test data not found at {path}; set OFFSETS_SHARED_DIR")
    return path


def manifest_rows() -> list[dict[str, str]]:
    with open(real_segments_dir() / "manifest.tsv", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


@pytest.fixture(scope="session")
def real_dir() -> Path:
    return real_segments_dir()


_TIER_DIRS = {"spark": "spark", "kafka": "kafka", "kafkatools": "kafkatools", "e2e": "e2e", "long": "long"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests under tests/<tier>/ carry that tier's marker, so no test lands in the wrong tier."""
    for item in items:
        parts = Path(str(item.fspath)).relative_to(REPO / "tests").parts
        if parts and parts[0] in _TIER_DIRS:
            item.add_marker(getattr(pytest.mark, _TIER_DIRS[parts[0]]))
