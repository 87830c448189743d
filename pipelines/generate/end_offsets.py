"""End-offset snapshots beside a generated log: the input consumer lag is computed from.

``__consumer_offsets`` says where each group is, not where each topic partition ends; a real
deployment observes end offsets with the Admin API or exports them to files (docs/lag.md). The
generator writes such a file, ``end-offsets.jsonl`` in the ``file`` input's format, so the demo
job has lag to show.

Each snapshot lists every topic partition of the workload with an end offset at or beyond every
position a group has reached there (consumed, committed, or pending in an open transaction), so a
lag is never negative, and never below the partition's previous snapshot (an end offset only
grows). ``observed_at`` is the workload's clock when the snapshot is taken: every record written
before it carries an earlier or equal timestamp, every later operation a later one. The offsets
above those positions come from a hash of the partition and the snapshot's time, not from the
workload's random stream: the log's bytes are what they were without snapshots.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import IO

from pipelines.generate.workload import Workload

__all__ = ["FILE", "SNAPSHOTS", "EndOffsetSnapshots"]

FILE = "end-offsets.jsonl"
SNAPSHOTS = 12  # during the run, evenly spaced by records written; one more at its end


class EndOffsetSnapshots:
    def __init__(self, wl: Workload, out: IO[str], snapshots: int = SNAPSHOTS) -> None:
        self.wl = wl
        self.out = out
        self.every = max(1, wl.target // max(1, snapshots))
        self.next_at = self.every
        self.last_at: int | None = None
        self.ends: dict[tuple[str, int], int] = {}

    def maybe_take(self) -> None:
        """A snapshot once the workload wrote another ``1/snapshots`` of its records, from the first
        era whose records carry a timestamp on (a magic-0 record's log time is unknown: lag as of a
        time before it is not defined by it), and never two at one instant."""
        if self.wl.written < self.next_at or self.wl.era().magic == 0 or self.wl.now == self.last_at:
            return
        self.take()
        self.next_at = (self.wl.written // self.every + 1) * self.every

    def take(self) -> None:
        """A snapshot now; the last one, after every record, a millisecond later if it must be."""
        at = self.wl.now if self.last_at is None else max(self.wl.now, self.last_at + 1)
        reached = self._reached()
        for topic, count in sorted(self.wl.topics.items()):
            for partition in range(count):
                tp = (topic, partition)
                ahead = zlib.crc32(f"{topic}:{partition}:{at}".encode()) % 200
                end = max(self.ends.get(tp, 0), reached.get(tp, 0) + ahead)
                self.ends[tp] = end
                row = {"topic": topic, "partition": partition, "end_offset": end, "observed_at": at}
                self.out.write(json.dumps(row, sort_keys=True) + "\n")
        self.last_at = at

    def _reached(self) -> dict[tuple[str, int], int]:
        """The furthest position any group has reached per topic partition, now."""
        reached: dict[tuple[str, int], int] = {}
        positions = [g.positions for g in self.wl.groups] + [g.committed for g in self.wl.groups]
        positions += [offsets for _, offsets, _ in self.wl.open_txns.values()]
        for seen in positions:
            for tp, offset in seen.items():
                reached[tp] = max(reached.get(tp, 0), offset)
        return reached


def read(out: Path) -> list[dict[str, int | str]]:
    """The snapshots of a generated log directory, as written."""
    with open(Path(out) / FILE) as f:
        return [json.loads(line) for line in f]
