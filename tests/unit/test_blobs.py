"""Grouping tables for collecting their blobs together (pipelines/runtime/blobs.py ``scans``)."""

from __future__ import annotations

from pipelines.runtime.blobs import scans


def test_groups_hold_at_most_the_limit_and_every_table_once() -> None:
    sizes = {"a": 70, "b": 10, "c": 40, "d": 30, "e": 0, "big": 500}
    got = scans(sizes, 100)
    assert set(got) == set(sizes)
    groups = set(got.values())
    assert sorted(t for g in groups for t in g) == sorted(sizes)  # each table in exactly one group
    for group in groups:
        assert all(got[t] == group for t in group)
        assert len(group) == 1 or sum(sizes[t] for t in group) <= 100
    assert got["big"] == ("big",)  # over the limit: a scan of its own
    assert len(groups) == 3  # e, b, d, c (80) | a (70) | big


def test_no_tables_no_groups() -> None:
    assert scans({}, 100) == {}
