"""What the quality suites should see, counted from the log files with ``inspect`` (never from
the lakehouse): the rows a suite's rules judge, so a passing suite is known to have judged them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.codec.segments import SegmentFile, discover
from pipelines.inspect import iter_record_json


def records_by_position(root: Path, cluster_of: Callable[[SegmentFile], str]) -> dict[tuple[str, int, int], dict]:
    """``inspect --records`` lines keyed by (cluster, partition, offset): one per log position (a
    position repeated by two files, as bronze keeps it, once)."""
    out = {}
    for seg in discover([root]):
        for line in iter_record_json([seg]):
            out[(cluster_of(seg), seg.partition, line["offset"])] = line
    return out


@dataclass
class LogCounts:
    """Counts of a log, per what the suites judge."""

    records: int = 0
    member_rows: int = 0  # silver.group_members rows + group records without members (one row each)
    consumer_members: int = 0  # members of records of protocol type consumer
    undecoded_consumer_members: int = 0  # ... whose subscription or (non-empty) assignment does not decode
    tombstones: int = 0
    generations: int = 0  # classic generations, as gold.group_generations cuts them
    generation_drops: int = 0  # ... that follow a higher generation of the group without a tombstone
    transactional: int = 0  # records of transactional batches
    types: set[int] = field(default_factory=set)  # record types of data records and tombstones
    commit_topic_ids: set[str] = field(default_factory=set)  # topic ids of offset commits (v4), zero UUID too
    census: set[tuple[Any, ...]] = field(default_factory=set)  # version_inventory keys (all decoded)
    partitions: set[tuple[str, int]] = field(default_factory=set)


def log_counts(records: dict[tuple[str, int, int], dict]) -> LogCounts:
    """A classic generation starts at a group record whose generation differs from the open one's
    (or when none is open); a group tombstone ends it."""
    c = LogCounts()
    open_generation: dict[tuple[str, int, str], int] = {}
    for (cluster, part, _), line in sorted(records.items()):
        c.records += 1
        c.partitions.add((cluster, part))
        c.transactional += bool(line["transactional"])
        kind = "control" if line["control"] else "tombstone" if line["tombstone"] else "data"
        rtype = None if line["control"] else line["record_type"]
        c.census.add((cluster, part, kind, rtype, line["value_version"] if kind == "data" else None))
        if rtype is None:
            continue
        c.types.add(rtype)
        c.tombstones += kind == "tombstone"
        if rtype == 1 and kind == "data" and line["value_version"] >= 4:
            c.commit_topic_ids.add(line["value"]["topic_id"])
        if rtype != 2:
            continue
        group = (cluster, part, line["key"]["group"])
        if kind == "tombstone":
            open_generation.pop(group, None)
            continue
        members = line["value"]["members"]
        c.member_rows += max(len(members), 1)
        if line["value"]["protocol_type"] == "consumer":
            c.consumer_members += len(members)
            c.undecoded_consumer_members += sum(
                m["subscription_info"] is None or (bool(m["assignment"]) and m["assignment_info"] is None)
                for m in members
            )
        generation, before = line["value"]["generation"], open_generation.get(group)
        if before != generation:
            c.generations += 1
            c.generation_drops += before is not None and generation < before
            open_generation[group] = generation
    return c
