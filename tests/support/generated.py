"""A generated log's own account of itself, for tests that check tables against it: the
generator's event log (what the workload did, at which log positions and times), its expected
state and manifest, and the offset records of an event's batch read back with the codec.
Nothing here reads the lakehouse."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from pipelines.codec.segments import discover
from pipelines.generate.workload import ERAS
from pipelines.reference.replay import iter_batches

MAGIC = {name: magic for _, name, *_, magic in ERAS}  # message format of each era's plain batches
UNTIMED_ERAS = {name for name, magic in MAGIC.items() if magic == 0}  # magic 0: no timestamp in the log


class Generated:
    """The generator's output, with the positions and log times of its events."""

    def __init__(self, root: Path) -> None:
        self.root = root
        with gzip.open(root / "generator-events.jsonl.gz", "rt") as f:
            self.events = [json.loads(line) for line in f]
        self.expected = json.loads((root / "expected-state.json").read_text())
        self.manifest = json.loads((root / "generator-manifest.json").read_text())
        self.txn_groups = {e["group"] for e in self.events if e["event"] == "txn_begin"}
        # (partition, first offset, last offset) -> log time of the batch (None: magic 0, untimed)
        self.batches = sorted(
            (e["partition"], e["first_offset"], e["last_offset"], self.log_time(e)) for e in self.events
        )
        self._records: dict[tuple[int, int], Any] | None = None
        self._entry_of: dict[tuple[int, int], int] = {}  # record position -> first offset of its log entry

    @staticmethod
    def log_time(event: dict) -> int | None:
        return None if event["era"] in UNTIMED_ERAS else event["ts"]

    @staticmethod
    def magic(event: dict) -> int:
        """Message format the event's batch was written in (transactions: always record batches)."""
        return 2 if event["event"].startswith("txn_") else MAGIC[event["era"]]

    def time_at(self, partition: int, offset: int) -> int | None:
        """Log time of the batch the generator wrote at ``partition``/``offset``."""
        for part, first, last, ts in self.batches:
            if part == partition and first <= offset <= last:
                return ts
        raise AssertionError(f"no generator event wrote {partition}/{offset}")

    def _read_log(self) -> dict[tuple[int, int], Any]:
        if self._records is None:
            self._records, self._entry_of = {}, {}
            for batch in iter_batches(discover([self.root])):
                for e in batch:
                    self._records[(e.partition, e.offset)] = e
                    self._entry_of[(e.partition, e.offset)] = batch[0].offset
        return self._records

    def requests(self, event: dict) -> int:
        """Log entries the event's write became: one record batch, one compressed message set
        wrapper, or, uncompressed before magic 2, one entry per message (no batch boundary)."""
        self._read_log()
        part = event["partition"]
        return len({self._entry_of[(part, o)] for o in range(event["first_offset"], event["last_offset"] + 1)})

    def records(self, event: dict) -> list:
        """The offset records (types 0, 1) the event's batch holds, read back with the codec: for
        events whose log line does not list its offsets (resets, deletions)."""
        self._read_log()
        assert self._records is not None
        return [
            r
            for o in range(event["first_offset"], event["last_offset"] + 1)
            if (r := self._records[(event["partition"], o)]).record_type in (0, 1)
        ]

    def key_states(self) -> dict[tuple[str, str, int], list[tuple[int | None, int, bool]]]:
        """Per key of the groups without transactions: every state in log order, as
        (log time, committed offset, deleted); a deletion keeps the offset before it."""
        out: dict[tuple, list] = defaultdict(list)
        for e in self.events:
            g = e["group"]
            if g in self.txn_groups:
                continue
            ts = self.log_time(e)
            if e["event"] == "commit":
                for tp, offset in e["offsets"].items():
                    topic, p = tp.rsplit(":", 1)
                    out[(g, topic, int(p))].append((ts, offset, False))
            elif e["event"] in ("reset", "delete_group", "expire"):
                for r in self.records(e):
                    k = (r.key["group"], r.key["topic"], r.key["partition"])
                    if r.value is not None:
                        out[k].append((ts, r.value["offset"], False))
                    elif out.get(k):
                        out[k].append((ts, out[k][-1][1], True))
        return out
