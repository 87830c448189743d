"""Independent derivations for the gold history and marts checks (tests/spark/test_gold.py).

Nothing here uses pipelines.gold: the expected values come from the generator's event log
(what the workload did) and from the raw log read by the codec, never from gold's own tables.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path

from pipelines.codec.segments import discover
from pipelines.generate.workload import ERAS
from pipelines.reference.replay import iter_batches

HOUR, DAY = 3_600_000, 86_400_000


def generator_events(root: Path) -> list[dict]:
    with gzip.open(root / "generator-events.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def rebalances_per_day(root: Path) -> Counter:
    """(group, day) -> generations started: every rebalance and every members-left event of the
    workload wrote a group record with a new generation. Eras that write magic 0 messages put no
    timestamp in the log, so their day is unknown (None)."""
    untimed = {name for _, name, *_, magic in ERAS if magic == 0}
    out: Counter = Counter()
    for e in generator_events(root):
        if e["event"] in ("rebalance", "empty"):
            day = None if e["era"] in untimed else datetime.fromtimestamp(e["ts"] / 1000, tz=timezone.utc).date()
            out[(e["group"], day)] += 1
    return out


def plain_commit_log(root: Path) -> tuple[set[str], list]:
    """The raw log's offset records and tombstones (codec only), and the groups that ever used a
    transaction (for the others every commit record applies at once, in log order)."""
    txn_groups: set[str] = set()
    records = []
    for batch in iter_batches(discover([root])):
        for e in batch:
            if e.is_control or e.record_type not in (0, 1):
                continue
            if e.transactional:
                txn_groups.add(e.key["group"])
            records.append((e.partition, batch[0].offset, e))
    return txn_groups, records


def cadence(root: Path) -> dict[tuple[str, int], tuple[int, int]]:
    """(group, hour start ms) -> (commit batches, offsets committed), groups without transactions."""
    txn_groups, records = plain_commit_log(root)
    batches: dict[tuple[str, int], set] = defaultdict(set)
    offsets: Counter = Counter()
    for part, batch_offset, e in records:
        g = e.key["group"]
        if g in txn_groups or e.value is None:
            continue
        k = (g, None if e.timestamp is None else e.timestamp // HOUR * HOUR)  # magic 0: no log time
        batches[k].add((part, batch_offset))
        offsets[k] += 1
    return {k: (len(v), offsets[k]) for k, v in batches.items()}


def rewinds(root: Path) -> Counter:
    """(group, topic, partition) -> commits that moved the offset backwards (a deletion keeps the
    last value, so a commit after it is compared with the offset before the deletion)."""
    txn_groups, records = plain_commit_log(root)
    last: dict[tuple, int] = {}
    out: Counter = Counter()
    for _part, _b, e in sorted(records, key=lambda r: (r[0], r[2].offset)):
        k = (e.key["group"], e.key["topic"], e.key["partition"])
        if e.key["group"] in txn_groups or e.value is None:
            continue
        if k in last and e.value["offset"] < last[k]:
            out[k] += 1
        last[k] = e.value["offset"]
    return out
