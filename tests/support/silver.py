"""Helpers for silver tests: table contents and versions, and independent censuses of log files."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from pipelines.codec.segments import discover
from pipelines.inspect import inspect_segment, iter_record_json
from pipelines.runtime import lake
from pipelines.silver import DATA_TABLES

# every silver table but the watermark log (whose rows carry run ids and times)
CONTENT_TABLES = (*DATA_TABLES, "version_inventory", "topic_ids")


def read(spark, tables, table: str):
    return lake.read(spark, tables.path("silver", table))


def snapshot(spark, tables) -> dict[str, list[str]]:
    """Every row of every silver content table, as sorted JSON lines (tables that exist), read by
    delta-rs (a Spark job per table cost ~2 s; snapshots are compared with snapshots)."""
    out = {}
    for table in CONTENT_TABLES:
        got = lake.read_arrow(spark, tables.path("silver", table))
        if got is not None:
            out[table] = sorted(json.dumps(r, default=str, sort_keys=True) for r in got.to_pylist())
    return out


def versions(spark, tables) -> dict[str, int]:
    """Latest Delta version of every silver table, from the ``_delta_log`` listing (local lakehouses)."""
    out = {}
    for table in (*CONTENT_TABLES, "progress"):
        log = Path(tables.path("silver", table)) / "_delta_log"
        commits = [int(p.name[:20]) for p in log.glob("*.json") if p.name[:20].isdigit()] if log.is_dir() else []
        if commits:
            out[table] = max(commits)
    return out


def census(logs: Path) -> dict[int, dict[str, Any]]:
    """Per offsets partition, counted by ``inspect`` (not by silver): records, control records,
    tombstones, counts per "type/version", and classic group members."""
    out: dict[int, dict[str, Any]] = {}
    for seg in discover([logs]):
        report = inspect_segment(seg)
        part = out.setdefault(
            seg.partition, {"records": 0, "control": 0, "tombstones": 0, "by_type_version": Counter(), "members": 0}
        )
        part["records"] += report.records
        part["control"] += report.control_records
        part["tombstones"] += report.tombstones
        part["by_type_version"].update(report.by_type_version)
    for line in iter_record_json(discover([logs])):
        if line["record_type"] == 2 and line["value"] is not None:
            out[line["partition"]]["members"] += len(line["value"]["members"])
    return out


def commits_of(logs: Path) -> set[tuple]:
    """(partition, offset, group, topic, topic partition, committed offset) of every offset commit."""
    return {
        (r["partition"], r["offset"], r["key"]["group"], r["key"]["topic"], r["key"]["partition"], r["value"]["offset"])
        for r in iter_record_json(discover([logs]))
        if r["record_type"] in (0, 1) and r["value"] is not None
    }


def topic_id_pairs_of(logs: Path) -> set[tuple[str, str]]:
    """(topic id, topic name) pairs written in the log: offset commits v4 and share-group state records."""
    pairs = set()
    for seg in discover([logs]):
        for r in iter_record_json([seg]):
            if r["record_type"] == 1 and r["value_version"] == 4 and r["value"]["topic_id"] != "A" * 22:
                pairs.add((r["value"]["topic_id"], r["key"]["topic"]))
            if r["record_type"] == 15 and r["value"] is not None:
                for field in ("initializing_topics", "initialized_topics", "deleting_topics"):
                    for t in r["value"].get(field) or ():
                        pairs.add((t["topic_id"], t["topic_name"]))
    return pairs
