"""Mutation fuzzing of the log reader and the record codec.

Used by the unit tier (a few thousand cases) and by the long tier:

    python -m tests.fuzz --cases 1000000 --seed 1

Every case must end in a structured result: the reader yields only batches and issue
reports whose sizes add up to the input (nothing is silently skipped), and the codec
returns a RecordDecoding; any exception is a failure and is printed with its input.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import struct
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import crc32c

from pipelines.codec import primitives as P
from pipelines.codec.errors import DecodeError
from pipelines.codec.reader import Batch, ReadIssue, Record, iter_log
from pipelines.codec.records import (
    RECORDS,
    decode_assignment,
    decode_control,
    decode_record,
    decode_subscription,
    encode_control,
    encode_key,
    encode_value,
)
from pipelines.codec.schema import Field, Struct, default_value
from pipelines.codec.writer import encode_legacy, encode_v2_batch


# -- a corpus of valid inputs ----------------------------------------------------------------------
def random_value(struct_: Struct, version: int, flexible: bool, rng: random.Random, depth: int = 0) -> dict:
    out: dict[str, Any] = {}
    for f in struct_.fields:
        if version not in f.versions or (flexible and version in f.tagged and rng.random() < 0.5):
            out[f.key] = default_value(f)
            if out[f.key] == []:
                out[f.key] = []
            continue
        out[f.key] = _random_field(f, version, flexible, rng, depth)
    return out


def _random_field(f: Field, version: int, flexible: bool, rng: random.Random, depth: int) -> Any:
    if version in f.nullable and rng.random() < 0.2:
        return None
    if f.is_array:
        n = rng.randint(0, 2 if depth < 2 else 0)
        if f.struct is not None:
            return [random_value(f.struct, version, flexible, rng, depth + 1) for _ in range(n)]
        return [_scalar(f.elem, rng) for _ in range(n)]
    if f.struct is not None:
        return random_value(f.struct, version, flexible, rng, depth + 1)
    return _scalar(f.type, rng)


def _scalar(type_name: str, rng: random.Random) -> Any:
    if type_name == "string":
        return rng.choice(["", "g", "orders", "consumer-1", "é😀", "x" * 130])
    if type_name == "bytes":
        return rng.randbytes(rng.randint(0, 20))
    if type_name == "uuid":
        return P.uuid_to_str(rng.randbytes(16))
    bits = {"int8": 8, "int16": 16, "uint16": 16, "int32": 32, "int64": 64}[type_name]
    if type_name == "uint16":
        return rng.randrange(1 << 16)
    return rng.randrange(-(1 << (bits - 1)), 1 << (bits - 1))


def generated_pairs(rng: random.Random) -> list[tuple[bytes, bytes | None]]:
    """One valid (key, value) per declared type/version/layout, plus a tombstone per type."""
    pairs = []
    for type_id, compiled in RECORDS.items():
        key = encode_key(type_id, random_value(compiled.decl.key, 0, False, rng))
        pairs.append((key, None))
        for version, layouts in compiled.value_layouts.items():
            flexible = version in compiled.decl.flexible_versions
            for layout, _, _ in layouts:
                struct_ = next(lay.struct for lay in compiled.decl.layouts if lay.name == layout)
                value = random_value(struct_, version, flexible, rng)
                pairs.append((key, encode_value(type_id, version, value, layout)))
    return pairs


def generated_log(rng: random.Random, pairs: list[tuple[bytes, bytes | None]]) -> bytes:
    """A segment mixing every magic, codec, transactions and control batches."""
    out = bytearray()
    offset = 0
    for i in range(0, len(pairs), 3):
        chunk = pairs[i : i + 3]
        records = [Record(offset + j, 1_700_000_000_000 + offset + j, k, v) for j, (k, v) in enumerate(chunk)]
        offset += len(chunk)
        codec = rng.randrange(5)
        magic = rng.choice([2, 2, 2, 1, 0])
        if magic < 2:
            out += encode_legacy(records, magic=magic, codec=min(codec, 3))
        else:
            txn = rng.random() < 0.3
            out += encode_v2_batch(records, codec=codec, transactional=txn, producer_id=9 if txn else -1)
            if txn:
                key, value = encode_control(rng.choice([0, 1]), 4)
                out += encode_v2_batch([Record(offset, 1, key, value)], transactional=True, control=True, producer_id=9)
                offset += 1
    return bytes(out)


def corpus(real_files: list[Path], rng: random.Random) -> tuple[list[bytes], list[tuple[bytes, bytes | None]]]:
    logs = [p.read_bytes() for p in real_files]
    pairs = generated_pairs(rng)
    logs.append(generated_log(rng, pairs))
    for data in logs[:-1][:60]:
        for b in iter_log(data):
            if isinstance(b, Batch) and not b.is_control:
                pairs += [(r.key, r.value) for r in b.records or () if r.key is not None][:3]
    return logs, pairs


# -- mutations ---------------------------------------------------------------------------------------
def mutate(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        op = rng.randrange(6)
        n = len(buf)
        if n == 0:
            buf += rng.randbytes(rng.randint(1, 8))
            continue
        i = rng.randrange(n)
        if op == 0:
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            buf[i] = rng.choice([0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)])
        elif op == 2:
            del buf[rng.randrange(n + 1) :]
        elif op == 3:
            buf[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op == 4:
            del buf[i : i + rng.randint(1, 8)]
        else:
            j = rng.randrange(n)
            buf[i:i] = buf[j : j + rng.randint(1, 16)]
    return bytes(buf)


def fix_crcs(data: bytes) -> bytes:
    """Recompute v2 CRCs after a mutation so that the damage reaches the record parser."""
    buf = bytearray(data)
    pos = 0
    while pos + 61 <= len(buf):
        size = struct.unpack_from(">i", buf, pos + 8)[0]
        end = pos + 12 + size
        if buf[pos + 16] != 2 or size < 49 or end > len(buf):
            break
        buf[pos + 17 : pos + 21] = struct.pack(">I", crc32c.crc32c(bytes(buf[pos + 21 : end])))
        pos = end
    return bytes(buf)


def _window(data: bytes, rng: random.Random) -> bytes:
    if len(data) <= 4096:
        return data
    start = rng.randrange(0, len(data) - 2048)
    # start on a batch boundary so that the window is a plausible log
    positions = [p for p, _ in _boundaries(data, limit=start + 1)] or [0]
    start = positions[-1]
    return data[start : start + rng.randint(200, 4096)]


def _boundaries(data: bytes, limit: int) -> list[tuple[int, int]]:
    from pipelines.codec.reader import BytesSource, iter_boundaries

    out = []
    for pos, size in iter_boundaries(BytesSource(data)):
        if pos >= limit:
            break
        out.append((pos, size))
    return out


# -- checks ----------------------------------------------------------------------------------------
def check_log(data: bytes) -> Counter:
    stats: Counter = Counter()
    covered = 0
    for item in iter_log(data):
        if isinstance(item, ReadIssue):
            stats[f"issue:{item.reason.value}"] += 1
            covered += item.length
            continue
        assert isinstance(item, Batch), item
        covered += item.size
        stats["batch"] += 1
        for r in item.records or ():
            if item.is_control:
                try:
                    decode_control(r.key, r.value)
                except DecodeError:
                    stats["control:bad"] += 1
            else:
                d = decode_record(r.key, r.value)
                stats["record:" + ("ok" if d.ok else d.reason.value)] += 1  # type: ignore[union-attr]
    assert covered == len(data), f"reader accounted for {covered} of {len(data)} bytes"
    return stats


def check_pair(key: bytes | None, value: bytes | None) -> str:
    d = decode_record(key, value)
    assert (d.reason is None) == d.ok
    if d.ok and d.record_type == 2 and d.value is not None:
        for m in d.value["members"]:
            for fn, raw in ((decode_subscription, m["subscription"]), (decode_assignment, m["assignment"])):
                with contextlib.suppress(DecodeError):
                    fn(raw)
    return "ok" if d.ok else d.reason.value  # type: ignore[union-attr]


def run(cases: int, seed: int, real_files: list[Path], progress: bool = False) -> Counter:
    rng = random.Random(seed)
    logs, pairs = corpus(real_files, rng)
    stats: Counter = Counter()
    t0 = time.time()
    for i in range(cases):
        kind = i % 3
        if kind == 2:
            key, value = rng.choice(pairs)
            if value is not None and rng.random() < 0.7:
                value = mutate(value, rng)
            else:
                key = mutate(key, rng)
            stats["pair:" + check_pair(key, value)] += 1
        else:
            data = mutate(_window(rng.choice(logs), rng), rng)
            if kind == 1:
                data = fix_crcs(data)
            stats.update(check_log(data))
        if progress and i and i % 50_000 == 0:
            print(f"{i} cases, {i / (time.time() - t0):.0f}/s", file=sys.stderr)
    stats["cases"] = cases
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--real", type=Path, default=Path(__file__).resolve().parents[2] / "shared/testdata/real-segments"
    )
    args = parser.parse_args()
    files = sorted(args.real.rglob("*.log"))
    t0 = time.time()
    stats = run(args.cases, args.seed, files, progress=True)
    elapsed = time.time() - t0
    print(f"fuzz: {args.cases} cases in {elapsed:.0f} s ({args.cases / elapsed:.0f}/s), no exception escaped")
    for k, v in sorted(stats.items()):
        print(f"  {k}: {v}")


if __name__ == "__main__":
    main()
