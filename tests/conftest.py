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


# The longest modules of the xdist tiers (unit, spark, e2e; measured), longest first. xdist hands
# whole modules to workers in collection order (scripts/test: --no-loadscope-reorder); starting
# the long ones first keeps one worker from being left with a long module at the end while the
# other idles. Builds shared between modules (tests/support/build_once.py) are made by whichever
# module asks first: the first of their users here carries them.
_LONGEST_FIRST = (
    # e2e: the first fault module builds the template and the uninterrupted run (the report reads
    # the latter); the other starts its killed runs as soon as the template exists
    "test_fault_points_bronze_gold",
    "test_fault_points_silver",
    "test_silver_crash",
    # a first run through the CLI with every stage, then the report in this process
    "test_first_run",
    "test_report_browser",
    # spark: the object store module runs several jobs on the store
    "test_object_store",
    # spark: serve builds the shared lakehouse that the analyst guide and status read
    "test_serve",
    "test_silver_generated",
    "test_gold",
    # builds the real files' lakehouse (bronze, silver, gold of all 268), then every suite on it;
    # test_silver_real reads the same lakehouse near the end, when it is long built
    "test_quality_real",
    "test_gold_splits",
    "test_bronze_segments",
    "test_quality_pipeline",
    "test_quality_incremental",
    "test_cli_errors",
    "test_bronze_s3",
    "test_silver_quarantine",
    "test_silver_real",
    "test_analyst_guide",
    # unit: the modules over 14 s on one worker (of 192 s in all)
    "test_gold_engine",
    "test_lease",
    "test_gold_buckets",
    "test_share_streams",
    "test_roundtrip",
)

_TIER_DIRS = {"spark": "spark", "kafka": "kafka", "kafkatools": "kafkatools", "e2e": "e2e", "long": "long"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests under tests/<tier>/ carry that tier's marker, so no test lands in the wrong tier."""
    for item in items:
        parts = Path(str(item.fspath)).relative_to(REPO / "tests").parts
        if parts and parts[0] in _TIER_DIRS:
            item.add_marker(getattr(pytest.mark, _TIER_DIRS[parts[0]]))

    def rank(item: pytest.Item) -> int:
        name = Path(str(item.fspath)).stem
        return _LONGEST_FIRST.index(name) if name in _LONGEST_FIRST else len(_LONGEST_FIRST)

    items.sort(key=rank)  # stable: within a module, and among the rest, the collected order stays
