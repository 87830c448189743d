"""Codec benchmark: records/s for framing alone and framing + decode, one process.

    python bench/codec_bench.py --records 1000000

Generates (once, cached under var/bench/) a log of the generator's realistic mix, then
times, best of --repeat runs each:
  * ours, framing only: iter_log over every segment (batches, CRC, decompression, records);
  * ours, framing + decode: plus decode_record / decode_control of every record;
  * kafka-python's record parser (MemoryRecords) on the same files, as a reference:
    framing and record parsing, keys/values touched but not decoded (it has no
    __consumer_offsets decoder).
Prints a Markdown table (copied into docs/performance.md) and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import generated  # noqa: E402
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


def best(fn: Callable[[list[Path]], int], files: list[Path], repeat: int) -> tuple[int, float]:
    times = []
    count = 0
    for _ in range(repeat):
        t = time.perf_counter()
        count = fn(files)
        times.append(time.perf_counter() - t)
    return count, min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    files = dataset(args.records, args.seed)
    size = sum(f.stat().st_size for f in files)
    rows = []
    for name, fn in [
        ("ours: framing", framing),
        ("ours: framing + decode", framing_decode),
        ("kafka-python MemoryRecords: framing", kafka_python),
    ]:
        count, seconds = best(fn, files, args.repeat)
        rows.append(
            {
                "path": name,
                "records": count,
                "seconds": round(seconds, 3),
                "records_per_s": round(count / seconds),
                "mib_per_s": round(size / seconds / 2**20, 1),
            }
        )
    print(
        f"\n{args.records} generated records, {len(files)} segments, {size / 2**20:.1f} MiB; "
        f"Python {platform.python_version()}, {platform.machine()}, best of {args.repeat}\n"
    )
    print("| path | records | seconds | records/s | MiB/s |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['path']} | {r['records']} | {r['seconds']} | {r['records_per_s']:,} | {r['mib_per_s']} |")
    print(json.dumps({"benchmark": "codec", "records": args.records, "rows": rows}))


if __name__ == "__main__":
    main()
