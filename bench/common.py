"""What the benchmark scripts share: the cached generated log (and its split into a base and an
increment), the Spark session, the result table, and gold against the generator's expected state."""

from __future__ import annotations

import filecmp
import hashlib
import json
import os
import shutil
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipelines.generate import Skew

REPO = Path(__file__).resolve().parents[1]


def generated(
    records: int,
    seed: int,
    prefix: str = "codec",
    segment_bytes: int | None = None,
    skew: Skew | None = None,
    open_transactions: bool = False,
) -> Path:
    """The generator's log of ``records`` records, generated once and cached under var/bench/
    (``skew``: a skewed log, pipelines/generate/skew.py; ``prefix`` must then name the skew;
    ``open_transactions``: the log ends with its transactions open, ``generate``'s
    ``close_transactions=False``)."""
    from pipelines.generate import generate

    name = f"{prefix}-{records}-s{seed}" + ("-open" if open_transactions else "")
    out = REPO / "var" / "bench" / name
    manifest = out / "generator-manifest.json"
    stamp = out / "bench-cache.json"  # which generator wrote the cached log
    cached = json.loads(manifest.read_text()) if manifest.exists() else None
    version = generator_fingerprint()
    stale = cached is None or not stamp.exists() or json.loads(stamp.read_text()).get("generator") != version
    if stale or (segment_bytes is not None and cached.get("segment_bytes") != segment_bytes):
        t = time.perf_counter()
        extra: dict[str, Any] = {} if segment_bytes is None else {"segment_bytes": segment_bytes}
        if skew is not None:
            extra["skew"] = skew
        if open_transactions:
            extra["close_transactions"] = False
        generate(out, records, seed=seed, overwrite=True, **extra)
        stamp.write_text(json.dumps({"generator": version}))
        print(f"generated {records} records in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return out


def generator_fingerprint() -> str:
    """A digest of what a generated log and its expected state are made from (the generator, the
    reference replay, the record declarations): a cached log written by other code is stale, and
    comparing gold with its expected state would judge today's gold by yesterday's rules."""
    digest = hashlib.sha256()
    for pattern in ("pipelines/generate/*.py", "pipelines/reference/*.py", "schemas/records/*.yaml"):
        for path in sorted(REPO.glob(pattern)):
            digest.update(path.relative_to(REPO).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def session(master: str, driver_memory: str):
    """A Spark session for a benchmark and its start-up time in seconds (never counted)."""
    from pipelines.runtime.config import SparkSettings
    from pipelines.runtime.spark import build_session

    t = time.perf_counter()
    conf = {"spark.ui.enabled": "false", "spark.driver.memory": driver_memory}
    spark = build_session(SparkSettings(master=master, conf=conf))
    return spark, time.perf_counter() - t


def print_rows(rows: list[dict], records_header: str = "records", rate_header: str = "per s") -> None:
    """The measured rows as a Markdown table (records/s where both numbers are there)."""
    for r in rows:
        r["records_per_s"] = round(r["records"] / r["seconds"]) if r["seconds"] and r["records"] else None
    print(f"| run | {records_header} | seconds | {rate_header} |")
    print("|---|---:|---:|---:|")
    for r in rows:
        rate = f"{r['records_per_s']:,}" if r["records_per_s"] else "-"
        print(f"| {r['run']} | {r['records']} | {r['seconds']} | {rate} |")


# -- the log split into a base and an increment ----------------------------------------------------
_TIME_ENTRY = struct.Struct(">qi")  # .timeindex entry: timestamp, offset relative to the segment's base
INDEX_SUFFIXES = (".index", ".timeindex")


@dataclass
class Split:
    """A generated log as its broker had it a little earlier (``source``: what a job reads), and how
    it becomes the whole log: segments that grow and segments that appear (:meth:`grow`)."""

    logs: Path
    source: Path
    records: int = 0  # records in the whole log (control records included: bronze's rows)
    held_back: int = 0  # records of the increment
    grown: dict[Path, int] = field(default_factory=dict)  # active segment in source -> its bytes in the base
    new: list[Path] = field(default_factory=list)  # segments in source that roll in with the increment

    @property
    def percent(self) -> float:
        return 100 * self.held_back / self.records if self.records else 0.0

    def grow(self) -> None:
        """Make the increment visible as a broker would: append the held-back bytes to the active
        segments (their indexes rewritten), then let the later segments appear. Exits when the
        source is not then byte for byte the generated log."""
        for dest, size in self.grown.items():
            orig = self.logs / dest.relative_to(self.source)
            with orig.open("rb") as src, dest.open("ab") as out:
                src.seek(size)
                shutil.copyfileobj(src, out)
            for suffix in INDEX_SUFFIXES:
                if orig.with_suffix(suffix).exists():
                    shutil.copyfile(orig.with_suffix(suffix), dest.with_suffix(suffix))
        for dest in self.new:
            orig = self.logs / dest.relative_to(self.source)
            for suffix in (*INDEX_SUFFIXES, ".log"):  # the log last, as a segment's files appear on a roll
                if orig.with_suffix(suffix).exists():
                    _link(orig.with_suffix(suffix), dest.with_suffix(suffix))
        for orig in sorted(self.logs.rglob("*.log")):
            dest = self.source / orig.relative_to(self.logs)
            if not dest.exists() or not (os.path.samefile(orig, dest) or filecmp.cmp(orig, dest, shallow=False)):
                sys.exit(f"split: {dest} is not {orig} after the increment")


def split_log(logs: Path, out: Path, percent: float) -> Split:
    """Copy the log directory ``logs`` to ``out`` as it was before its last ``percent`` % of records.

    Each offsets partition is cut at the batch boundary that leaves the held-back share closest to
    ``percent`` %, the rounding carried from partition to partition, so the whole increment is
    within about a batch of ``percent`` % and every partition with data gets its share. Segments
    before the cut are hard-linked; the segment holding the cut is copied up to it with the index
    entries written so far (the active segment, which grows); later segments are left out (they
    roll in with the increment). A partition cut at its very start keeps an empty first segment,
    as a broker creates it."""
    from pipelines.codec.reader import Batch, iter_log
    from pipelines.codec.segments import discover

    shutil.rmtree(out, ignore_errors=True)
    split = Split(logs, out)
    for part_dir in sorted(logs.glob("__consumer_offsets-*")):  # partitions without segments too
        (out / part_dir.name).mkdir(parents=True)
    by_partition: dict[Path, list] = {}
    for seg in discover([logs]):
        by_partition.setdefault(seg.path.parent, []).append(seg)
    target = 0.0
    for segments in by_partition.values():
        # every batch in log order: (segment, byte position, records, last offset)
        batches = [
            (seg, b.position, len(b.records or ()), b.last_offset)
            for seg in segments
            for b in iter_log(seg.path, verify_crc=False)
            if isinstance(b, Batch)
        ]
        records = sum(n for _, _, n, _ in batches)
        split.records += records
        target += records * percent / 100
        want = target - split.held_back
        cut, held, best, tail = len(batches), 0, abs(want), 0
        for i in range(len(batches) - 1, -1, -1):
            tail += batches[i][2]
            if abs(want - tail) < best:
                cut, held, best = i, tail, abs(want - tail)
            if tail >= want:
                break
        split.held_back += held
        cut_seg, cut_pos = (batches[cut][0], batches[cut][1]) if cut < len(batches) else (None, 0)
        last_kept = batches[cut - 1][3] if cut > 0 else None
        after_cut = False
        for seg in segments:
            dest = out / seg.path.parent.name / seg.path.name
            if after_cut:
                split.new.append(dest)
            elif seg is cut_seg and (cut_pos > 0 or seg is segments[0]):
                with seg.path.open("rb") as src:
                    dest.write_bytes(src.read(cut_pos))
                _indexes_up_to(seg.path, dest, cut_pos, last_kept, seg.base_offset or 0)
                split.grown[dest] = cut_pos
                after_cut = True
            elif seg is cut_seg:
                split.new.append(dest)
                after_cut = True
            else:
                for suffix in (".log", *INDEX_SUFFIXES):
                    if seg.path.with_suffix(suffix).exists():
                        _link(seg.path.with_suffix(suffix), dest.with_suffix(suffix))
    return split


def _indexes_up_to(orig: Path, dest: Path, position: int, last_offset: int | None, base_offset: int) -> None:
    """The ``.index`` and ``.timeindex`` of segment ``orig`` as they were when its log was
    ``position`` bytes long (entries for batches before that position, ending at ``last_offset``)."""
    from pipelines.codec.segments import read_offset_index

    index = [(rel, pos) for rel, pos in read_offset_index(orig.with_suffix(".index")) if pos < position]
    dest.with_suffix(".index").write_bytes(b"".join(struct.pack(">ii", rel, pos) for rel, pos in index))
    timeindex = orig.with_suffix(".timeindex")
    data = timeindex.read_bytes() if timeindex.exists() else b""
    entries = _TIME_ENTRY.iter_unpack(data[: len(data) - len(data) % _TIME_ENTRY.size])
    kept = [(ts, rel) for ts, rel in entries if last_offset is not None and base_offset + rel <= last_offset]
    dest.with_suffix(".timeindex").write_bytes(b"".join(_TIME_ENTRY.pack(ts, rel) for ts, rel in kept))


def _link(src: Path, dest: Path) -> None:
    """Hard-link ``src`` to ``dest`` (copy it across file systems)."""
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


# -- gold against the generator's expected state ---------------------------------------------------
def expected_gold(state: dict) -> dict:
    """The part of an ``expected-state.json`` (or a reference snapshot) gold must equal — what
    tests/spark/test_gold.py and test_gold_splits.py compare too:
    live offsets with metadata, soft deletes with position and cause, pending transactional
    offsets, classic generations, every group Kafka would list, offsets-only groups gone."""
    return {
        "live": {(o["group"], o["topic"], o["partition"]): (o["offset"], o["metadata"]) for o in state["offsets"]},
        "deleted": {
            (d["group"], d["topic"], d["partition"]): (d["record_offset"], d["cause"]) for d in state["deleted_offsets"]
        },
        "pending": sorted(
            (p["offsets_partition"], p["producer_id"], p["group"], p["topic"], p["partition"], p["offset"])
            for p in state["pending_transactions"]
        ),
        "classic": {g["group"]: g["generation"] for g in state["classic_groups"]},
        # every group Kafka would list, offsets-only groups included, in the state the coordinator
        # computes (share and streams groups too)
        "groups": {
            (g["group"], g["type"]): (g["protocol_type"], g["state"], g["exists_because"]) for g in state["groups"]
        },
        "simple_groups_gone": {g["group"]: g["cause"] for g in state["deleted_simple_groups"]},
    }


def gold_now(spark, tables, cluster: str | None = None) -> dict:
    """The same parts, read from the gold tables of ``tables``' lakehouse (of ``cluster`` only,
    when given: a lakehouse that several clusters' jobs write)."""
    import pyarrow.compute as pc

    from pipelines.runtime import lake
    from pipelines.runtime.tables import load_views

    where = "true" if cluster is None else f"cluster = '{cluster}'"
    # gold.live_groups is a view: its own SQL, over the tables it names read by delta-rs and handed
    # to Spark (registering every gold table and view cost 10 s on the spark tier's object store,
    # and Spark's reads of the tables there 8 s a call; Spark reading what the tables hold is
    # test_serve's and test_object_store's)
    (view,) = [v for v in load_views() if (v.layer, v.name) == ("gold", "live_groups")]
    names = {}
    for t in tables.specs["gold"]:
        if "{" + t + "}" not in view.sql:
            continue
        got = lake.read_arrow(spark, tables.path("gold", t))
        names[t] = f"delta.`{tables.path('gold', t)}`"
        if got is not None:
            lake.spark_frame(spark, got).createOrReplaceTempView(f"gold_now_{t}")
            names[t] = f"gold_now_{t}"
    live_groups = view.sql.format(**names)

    def rows(table: str) -> list:
        # read by delta-rs (a Spark job per table costs seconds on a small lakehouse and on a
        # store; Spark reading what the tables hold is test_serve's and test_object_store's)
        got = lake.read_arrow(spark, tables.path("gold", table))
        if got is None:
            return []
        return (got if cluster is None else got.filter(pc.equal(got["cluster"], cluster))).to_pylist()

    offsets, pending, groups = rows("current_offsets"), rows("pending_transactions"), rows("current_groups")
    return {
        "live": {
            (r["group_id"], r["topic"], r["partition"]): (r["committed_offset"], r["metadata"])
            for r in offsets
            if not r["deleted"]
        },
        "deleted": {
            (r["group_id"], r["topic"], r["partition"]): (r["deleted_offset"], r["delete_cause"])
            for r in offsets
            if r["deleted"]
        },
        "pending": sorted(
            (r["offsets_partition"], r["producer_id"], r["group_id"], r["topic"], r["partition"], r["committed_offset"])
            for r in pending
        ),
        "classic": {
            r["group_id"]: r["generation"]
            for r in groups
            if r["protocol"] == "classic" and not r["deleted"] and r["exists_because"] == "metadata"
        },
        "groups": {
            (r["group_id"], r["protocol"]): (r["protocol_type"], r["state"], r["exists_because"])
            for r in spark.sql(live_groups).where(where).collect()
        },
        "simple_groups_gone": {
            r["group_id"]: r["delete_cause"]
            for r in groups
            if r["protocol"] == "classic"
            and r["deleted"]
            and r["exists_because"] == "offsets"
            and r["delete_cause"] != "converted"
        },
    }


def gold_differences(spark, tables, expected_state: Path, cluster: str | None = None) -> list[str]:
    """Where gold (of ``cluster``, when given) differs from the generator's ``expected-state.json``
    (empty: it equals it)."""
    want = expected_gold(json.loads(Path(expected_state).read_text()))
    got = gold_now(spark, tables, cluster)
    out = []
    for part, expected in want.items():
        have = got[part]
        if have == expected:
            continue
        if isinstance(expected, dict):
            missing = sorted(set(expected) - set(have), key=str)
            extra = sorted(set(have) - set(expected), key=str)
            changed = sorted((k for k in set(expected) & set(have) if expected[k] != have[k]), key=str)
            out.append(
                f"{part}: {len(missing)} missing {missing[:3]}, {len(extra)} extra {extra[:3]}, "
                f"{len(changed)} different {[(k, expected[k], have[k]) for k in changed[:3]]}"
            )
        else:
            missing = sorted(set(expected) - set(have), key=str)
            extra = sorted(set(have) - set(expected), key=str)
            out.append(f"{part}: {len(have)} rows, expected {len(expected)}; missing {missing[:3]}, extra {extra[:3]}")
    return out


# what a quality outcome says about the data (incremental and full validations must agree on it;
# not how it was validated, nor the samples of unexpected values, which are a sample of either)
_VERDICT = ("evaluated", "success", "action", "element_count", "unexpected_count", "observed_value")


def quality_differences(got: list, full: list) -> tuple[int, list[str]]:
    """Compare quality outcomes (``results.Outcome``) with a full validation's, rule by rule:
    returns how many rules were compared and a line per difference (a rule missing from either
    side is one)."""
    mine = {(o.suite, o.expectation): o for o in got}
    theirs = {(o.suite, o.expectation): o for o in full}
    out = [f"{s}.{e}: only in {'the first' if (s, e) in mine else 'the full validation'}"
           for s, e in sorted(set(mine) ^ set(theirs))]  # fmt: skip
    compared = 0
    for rule in sorted(set(mine) & set(theirs)):
        a, b = mine[rule], theirs[rule]
        compared += 1
        for f in _VERDICT:
            if getattr(a, f) != getattr(b, f):
                out.append(f"{rule[0]}.{rule[1]}: {f} {getattr(a, f)!r} != {getattr(b, f)!r}")
        pa, pb = a.unexpected_percent, b.unexpected_percent
        if (pa is None) != (pb is None) or (pa is not None and abs(pa - pb) > 1e-9):
            out.append(f"{rule[0]}.{rule[1]}: unexpected_percent {pa!r} != {pb!r}")
        if a.details.get("missing_count") != b.details.get("missing_count"):
            out.append(f"{rule[0]}.{rule[1]}: missing_count {a.details.get('missing_count')!r} != "
                       f"{b.details.get('missing_count')!r}")  # fmt: skip
    return compared, out
