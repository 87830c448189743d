"""Codec benchmark: records/s for framing alone and framing + decode, one process.

    python bench/codec_bench.py --records 1000000

Generates (once, cached under var/bench/) a log of the generator's realistic mix, then
times, best of --repeat runs each:
  * ours, framing only: iter_log over every segment (batches, CRC, decompression, records);
  * ours, framing + decode: plus decode_record / decode_control of every record;
  * kafka-python's record parser (MemoryRecords) on the same files, as a reference:
    framing and record parsing, keys/values touched but not decoded (it has no
    __consumer_offsets decoder);
  * columnar, framing only: read_log_columns over every segment (Arrow tables of batches and
    records, equal to iter_log's);
  * columnar, decode only: decode_columns over the data records (framed beforehand, not timed),
    the records it flags decoded by decode_record, control records by decode_control; once per
    segment, and once per batch of --decode-batch records (segments framed one by one, then
    decoded together: the fixed cost of a call, a few milliseconds per record type and version,
    is paid once per batch);
  * columnar, framing + decode: both, per segment and in batches.
Prints a Markdown table (copied into docs/performance.md) and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from bench.common import generated  # noqa: E402
from pipelines.codec.columnar import decode_columns, decode_fallback  # noqa: E402
from pipelines.codec.columnar_reader import LogColumns, read_log_columns  # noqa: E402
from pipelines.codec.reader import Batch, iter_log  # noqa: E402
from pipelines.codec.records import decode_control, decode_record  # noqa: E402


def dataset(records: int, seed: int) -> list[Path]:
    return sorted(generated(records, seed).rglob("*.log"))


def framing(files: list[Path]) -> int:
    n = 0
    for f in files:
        for b in iter_log(f):
            if isinstance(b, Batch):
                n += len(b.records or ())
    return n


def framing_decode(files: list[Path]) -> int:
    n = 0
    for f in files:
        for b in iter_log(f):
            if not isinstance(b, Batch):
                continue
            for r in b.records or ():
                if b.is_control:
                    decode_control(r.key, r.value)
                else:
                    decode_record(r.key, r.value)
                n += 1
    return n


def kafka_python(files: list[Path]) -> int:
    from kafka.record import MemoryRecords

    n = 0
    for f in files:
        records = MemoryRecords(f.read_bytes())
        while (batch := records.next_batch()) is not None:
            for r in batch:
                _ = (r.key, r.value)
                n += 1
    return n


def columnar_framing(files: list[Path]) -> int:
    return sum(read_log_columns(f).records.num_rows for f in files)


def control_mask(log: LogColumns) -> np.ndarray:
    """Per record: is it in a control batch (magic 2, attribute bit 5)?"""
    batches = log.batches
    control = (batches["magic"].to_numpy() == 2) & ((batches["attributes"].to_numpy() & 0x20) != 0)
    return control[log.records["batch"].to_numpy()]


def columnar_decode(logs: list[LogColumns]) -> int:
    """Every record of the logs decoded: data records in one decode_columns call (the ones it flags
    by decode_record), control records by decode_control."""
    keys = pa.chunked_array([c for log in logs for c in log.records["key"].chunks], pa.binary())
    values = pa.chunked_array([c for log in logs for c in log.records["value"].chunks], pa.binary())
    keys, values = keys.combine_chunks(), values.combine_chunks()
    control = np.concatenate([control_mask(log) for log in logs])
    rows = pa.array(np.flatnonzero(control))
    for key, value in zip(keys.take(rows).to_pylist(), values.take(rows).to_pylist(), strict=True):
        decode_control(key, value)
    result = decode_columns(keys, values, ignore=control)
    for _ in decode_fallback(result, keys, values):
        pass
    return len(keys)


def in_batches(logs: Iterable[LogColumns], batch_records: int) -> Iterator[list[LogColumns]]:
    """Logs grouped until a group holds ``batch_records`` records (0: each log alone)."""
    group: list[LogColumns] = []
    size = 0
    for log in logs:
        group.append(log)
        size += log.records.num_rows
        if size >= batch_records:
            yield group
            group, size = [], 0
    if group:
        yield group


def columnar_framing_decode(batch_records: int) -> Callable[[list[Path]], int]:
    def run(files: list[Path]) -> int:
        framed = (read_log_columns(f) for f in files)
        return sum(columnar_decode(group) for group in in_batches(framed, batch_records))

    return run


def columnar_decode_only(batch_records: int) -> Callable[[list[Path]], Callable[[list[Path]], int]]:
    """A timed function over the segments framed when it is made (so that only decoding is timed)."""

    def prepare(files: list[Path]) -> Callable[[list[Path]], int]:
        logs = [read_log_columns(f) for f in files]
        return lambda _files: sum(columnar_decode(group) for group in in_batches(logs, batch_records))

    return prepare


def best(fn: Callable[[list[Path]], int], files: list[Path], repeat: int) -> tuple[int, float, float]:
    """(records, best wall seconds, best CPU seconds of this process): on a machine shared with
    other work the CPU seconds move less than the wall seconds."""
    times, cpu = [], []
    count = 0
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        count = fn(files)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return count, min(times), min(cpu)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="", help="run only the paths whose name contains this")
    parser.add_argument(
        "--decode-batch", type=int, default=262_144, help="records per decode_columns call in the batched rows"
    )
    args = parser.parse_args()
    files = dataset(args.records, args.seed)
    size = sum(f.stat().st_size for f in files)
    rows = []
    batch = args.decode_batch
    for name, fn in [
        ("ours: framing", framing),
        ("ours: framing + decode", framing_decode),
        ("kafka-python MemoryRecords: framing", kafka_python),
        ("columnar: framing", columnar_framing),
        ("columnar: decode only, per segment (framed beforehand)", columnar_decode_only(0)),
        ("columnar: framing + decode, per segment", columnar_framing_decode(0)),
        (f"columnar: decode only, {batch:,}-record batches (framed beforehand)", columnar_decode_only(batch)),
        (f"columnar: framing + decode, {batch:,}-record batches", columnar_framing_decode(batch)),
    ]:
        if args.only not in name:
            continue
        if "decode only" in name:
            fn = fn(files)  # frame now, time the decoding only
        count, seconds, cpu_seconds = best(fn, files, args.repeat)
        rows.append(
            {
                "path": name,
                "records": count,
                "seconds": round(seconds, 3),
                "cpu_seconds": round(cpu_seconds, 3),
                "records_per_s": round(count / seconds),
                "mib_per_s": round(size / seconds / 2**20, 1),
            }
        )
    print(
        f"\n{args.records} generated records, {len(files)} segments, {size / 2**20:.1f} MiB; "
        f"Python {platform.python_version()}, {platform.machine()}, best of {args.repeat}; "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n"
    )
    print("| path | records | seconds | CPU seconds | records/s | MiB/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['path']} | {r['records']} | {r['seconds']} | {r['cpu_seconds']} "
            f"| {r['records_per_s']:,} | {r['mib_per_s']} |"
        )
    load = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps({"benchmark": "codec", "records": args.records, "load_average_end": load, "rows": rows}))


if __name__ == "__main__":
    main()
