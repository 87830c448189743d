"""Drive the workload into partition logs, then write the expected coordinator state.

Output directory::

    __consumer_offsets-<p>/<20-digit base>.log|.index|.timeindex   the log, 50 partitions by default
    expected-state.json        reference replay of the written files (pipelines/reference/replay.py)
    end-offsets.jsonl          end-offset snapshots of the topics the groups read (generate/end_offsets.py)
    generator-events.jsonl.gz  one line per coordinator operation: what the workload did
    generator-manifest.json    parameters and counts

Same ``--records``/``--seed``/``--partitions`` -> byte-identical output. ``skew`` (opt-in,
:class:`pipelines.generate.skew.Skew`) puts most records and millions of live keys into one
partition and adds a huge classic group; without it the output is what it always was.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipelines.generate.end_offsets import FILE as END_OFFSETS
from pipelines.generate.end_offsets import EndOffsetSnapshots
from pipelines.generate.logwriter import PartitionLogWriter
from pipelines.generate.skew import Skew, SkewedWorkload
from pipelines.generate.workload import Workload
from pipelines.reference.replay import replay_paths


@dataclass
class GenerateResult:
    out: Path
    records: int
    batches: int
    segments: int
    expected_offsets: int
    pending_transactions: int


def generate(
    out: Path,
    records: int,
    seed: int = 1,
    partitions: int = 50,
    segment_bytes: int = 8 * 1024 * 1024,
    progress: Callable[[int], None] | None = None,
    overwrite: bool = False,
    skew: Skew | None = None,
    close_transactions: bool = True,
) -> GenerateResult:
    """Write a generated log of about ``records`` records to ``out``, with its expected state.

    ``close_transactions``: when the records run out, resolve every transaction still open but
    one (which hangs). False leaves them all open, as a live cluster's log is at any instant: its
    tail is then ordinary traffic, where closing them puts a marker per open transaction at the
    end (at 30M records 27k markers, a quarter of the last 100k records)."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{out} is not empty (use --overwrite)")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    wl = Workload(seed, records, partitions) if skew is None else SkewedWorkload(seed, records, partitions, skew)
    writers = [PartitionLogWriter(out, p, segment_bytes) for p in range(partitions)]
    reported = 0

    def write(batches: list) -> None:
        nonlocal reported
        for part, ts, items, opts, event in batches:
            era = wl.era()
            control = opts.get("control", False)
            magic = 2 if opts else era.magic
            codec = 0 if control else wl.codec(era)
            offsets = writers[part].append(items, ts, magic=magic, codec=codec, **opts)
            wl.written += len(items)
            event.update(ts=ts, partition=part, first_offset=offsets[0], last_offset=offsets[-1], era=era.name)
            events.write(json.dumps(event, sort_keys=True) + "\n")
        if progress and wl.written - reported >= 10_000:
            progress(wl.written - reported)
            reported = wl.written

    # mtime=0 and no file name in the gzip header: the same seed gives the same bytes
    with (
        open(out / "generator-events.jsonl.gz", "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=1) as gz,
        io.TextIOWrapper(gz, encoding="utf-8") as events,
        open(out / END_OFFSETS, "w", encoding="utf-8") as ends,
    ):
        snapshots = EndOffsetSnapshots(wl, ends)
        while wl.written < records:
            write(wl.step())
            snapshots.maybe_take()
        if close_transactions:
            write(wl.close_open_transactions(leave_open=1))
        snapshots.take()  # the last one: after every commit, what current_lag is computed from
    for w in writers:
        w.close()
    if progress:
        progress(wl.written - reported)

    replay = replay_paths([str(out)])
    state = replay.snapshot()
    # the replay of the bytes must agree with what the workload meant to commit
    replayed = {(o["group"], o["topic"], o["partition"]): o["offset"] for o in state["offsets"]}
    intent = wl.intent()
    if replayed != intent:
        diff = sorted(set(replayed.items()) ^ set(intent.items()))[:10]
        raise AssertionError(f"reference replay disagrees with the generator's intent: {diff}")
    # streamed: the text of a skewed log's state (millions of keys) is never held whole
    with open(out / "expected-state.json", "w") as f:
        json.dump(state, f, indent=1, sort_keys=True)
    segments = sum(1 for _ in out.glob("__consumer_offsets-*/*.log"))
    manifest = {
        "generator": "offsets-lakehouse generate",
        "records": wl.written,
        "seed": seed,
        "partitions": partitions,
        "segment_bytes": segment_bytes,
        "coordinator_writes": sum(w.batches for w in writers),
        "segments": segments,
        "records_per_partition": {str(w.partition): w.records for w in writers},
    }
    if not close_transactions:  # only then: a default manifest stays byte for byte what it was
        manifest["open_transactions_at_end"] = True
    if isinstance(wl, SkewedWorkload):  # only then: an unskewed manifest stays byte for byte what it was
        manifest["skew"] = wl.report()
    (out / "generator-manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return GenerateResult(
        out,
        wl.written,
        manifest["coordinator_writes"],
        segments,
        len(state["offsets"]),
        len(state["pending_transactions"]),
    )
