"""Bronze from segment files: counts equal inspect's, re-runs change nothing, conflicts kept apart."""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bench.common import Split, split_log
from pipelines.bronze import file_log
from pipelines.bronze import ingest as bronze_ingest
from pipelines.bronze.ingest import ingest_segments
from pipelines.bronze.sink import IngestResult
from pipelines.codec.reader import Batch, Record, iter_log
from pipelines.codec.segments import discover
from pipelines.codec.writer import encode_batch, encode_v2_batch
from pipelines.generate import generate
from pipelines.inspect import inspect_segment, iter_record_json
from pipelines.runtime import lake
from pipelines.runtime.config import SegmentsSource
from pipelines.runtime.tables import Tables
from tests.conftest import real_segments_dir
from tests.spark.real_lakehouse import CLUSTER_FROM_PATH

RUN = "test-run"


def source(paths: list[str], **kw) -> SegmentsSource:
    return SegmentsSource(kind="segments", cluster=kw.pop("cluster", "c1"), paths=paths, **kw)


def bronze_counts(spark, tables) -> Counter:
    rows = (
        spark.read.format("delta")
        .load(tables.path("bronze", "offsets_records"))
        .groupBy("cluster", "partition")
        .count()
        .collect()
    )
    return Counter({(r["cluster"], r["partition"]): r["count"] for r in rows})


def version(spark, tables) -> int | None:
    return lake.version(spark, tables.path("bronze", "offsets_records"))


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen") / "logs"
    generate(out, 6000, seed=4, partitions=6, segment_bytes=32 * 1024)
    return out


def test_real_segments_every_cluster_and_partition(spark, tables) -> None:
    """All 268 real files, 69 source directories as 69 clusters, in one ingest."""
    root = real_segments_dir()
    positions: dict[tuple, set] = {}
    records = 0
    for seg in discover([root]):
        cluster = seg.path.relative_to(root).parts[0]
        for line in iter_record_json([seg]):
            positions.setdefault((cluster, seg.partition), set()).add(line["offset"])
            records += 1
    expected = Counter({k: len(v) for k, v in positions.items()})
    src = source([str(root)], cluster="unused", cluster_from_path=CLUSTER_FROM_PATH)
    first = ingest_segments(spark, tables, "real", src, RUN, "/")
    assert first.rows_read == records == 40526
    # one source directory holds two segments that both contain 6 records (a compaction caught
    # mid-way): same position, same bytes, so bronze keeps one row each and reports no conflict
    assert first.rows_inserted == sum(expected.values()) == 40520
    assert bronze_counts(spark, tables) == expected
    assert not first.issues and first.conflicts == 0
    v = version(spark, tables)
    again = ingest_segments(spark, tables, "real", src, "second-run", "/")
    assert again.rows_inserted == 0 and again.conflicts == 0
    assert again.rows_read == again.bytes_read == 0 and again.files["unchanged"] == 268, "nothing is read again"
    assert version(spark, tables) == v, "a re-run writes no new version"
    assert bronze_counts(spark, tables) == expected


def test_generated_split_into_small_byte_ranges(spark, tables, generated: Path) -> None:
    expected = Counter()
    for seg in discover([generated]):
        expected[("c1", seg.partition)] += inspect_segment(seg).records
    res = ingest_segments(spark, tables, "gen", source([str(generated)], split_bytes=4096), RUN, "/")
    assert res.rows_inserted == sum(expected.values())
    assert bronze_counts(spark, tables) == expected
    df = spark.read.format("delta").load(tables.path("bronze", "offsets_records"))
    assert df.where("control").count() > 0 and df.where("value IS NULL").count() > 0
    assert df.select("magic").distinct().count() == 3


def test_overlap_and_conflicts(spark, tables, generated: Path, tmp_path: Path, monkeypatch) -> None:
    part = next(d for d in sorted(generated.glob("__consumer_offsets-*")) if list(d.glob("*.log")))
    copy = tmp_path / "copy" / part.name
    shutil.copytree(part, copy)
    first = ingest_segments(spark, tables, "a", source([str(part)]), RUN, "/")
    # the same partition again, from another copy: nothing new (found by the MERGE, as when the
    # Delta log keeps no file statistics: such a file may hold anything)
    listed = lake.data_files

    def without_statistics(*args, **kwargs):
        out = listed(*args, **kwargs)
        return {t: [dataclasses.replace(f, minimum=dict.fromkeys(f.minimum), maximum=dict.fromkeys(f.maximum))
                    for f in files] for t, files in out.items()}  # fmt: skip

    with monkeypatch.context() as m:
        m.setattr(lake, "data_files", without_statistics)
        again = ingest_segments(spark, tables, "b", source([str(copy.parent)]), RUN, "/")
    assert again.rows_read > 0 and again.rows_inserted == 0 and again.conflicts == 0
    # a copy whose first batch carries different bytes at the same offsets: conflicts, first kept
    seg = sorted(copy.glob("*.log"))[0]
    data = seg.read_bytes()
    b0 = next(b for b in iter_log(data) if isinstance(b, Batch))
    forged = encode_v2_batch(
        [Record(r.offset, r.timestamp, r.key, b"\x00\x01forged") for r in b0.records], base_offset=b0.base_offset
    )
    seg.write_bytes(forged + data[b0.end :])
    res = ingest_segments(spark, tables, "forged", source([str(copy.parent)]), "run-3", "/")
    assert res.rows_inserted == 0 and res.conflicts == len(b0.records)
    conflicts = spark.read.format("delta").load(tables.path("bronze", "conflicts")).collect()
    assert len(conflicts) == len(b0.records) and all(c["rejected_source_uri"].startswith(str(copy)) for c in conflicts)
    kept = (
        spark.read.format("delta")
        .load(tables.path("bronze", "offsets_records"))
        .where(f"offset = {b0.records[0].offset}")
        .collect()
    )
    assert [r["source_uri"].startswith(str(part)) for r in kept] == [True]
    assert first.rows_inserted > 0


def test_reads_in_tasks_write_bronze_s_files_or_leave_them_to_the_sink(
    spark, generated: Path, tmp_path: Path, monkeypatch
) -> None:
    """A large read's tasks write bronze's files (pipelines/bronze/direct.py), committed when that
    append is what the sink's MERGE would insert; a read of records bronze holds goes through the
    sink instead, and the tasks' files are dropped."""
    monkeypatch.setattr(bronze_ingest, "LOCAL_READ_BYTES", -1)  # every read in Spark's tasks
    part = max(generated.glob("__consumer_offsets-*"), key=lambda d: len(list(d.glob("*.log"))))
    copy = tmp_path / "copy" / part.name
    shutil.copytree(part, copy)
    records = sum(inspect_segment(seg).records for seg in discover([part]))
    # two tasks per copy: several files, without a Python worker's start per few kilobytes
    split = max(4096, sum(p.stat().st_size for p in part.glob("*.log")) // 2 + 1)
    tables = Tables(spark, str(tmp_path / "lakehouse"))
    path = tables.path("bronze", "offsets_records")
    first = ingest_segments(spark, tables, "a", source([str(part)], split_bytes=split), RUN, "/")
    assert first.rows_read == first.rows_inserted == records > 0
    assert lake.commit_info(spark, path, lake.version(spark, path))["engineInfo"].startswith("delta-rs")
    assert lake.latest_metadata(spark, path) == {"run_id": RUN, "source": "a", "kind": "segments"}
    files = set((tmp_path / "lakehouse").rglob("offsets_records/**/*.parquet"))
    assert len(files) > 1  # several tasks
    # the same records from another path: bronze holds them, the sink's MERGE inserts nothing
    again = ingest_segments(spark, tables, "b", source([str(copy.parent)], split_bytes=split), RUN, "/")
    assert again.rows_read == records and again.rows_inserted == 0 and again.conflicts == 0
    assert set((tmp_path / "lakehouse").rglob("offsets_records/**/*.parquet")) == files
    assert len(table_rows(spark, tables)) == records


def test_read_issues_are_recorded(spark, tables, generated: Path, tmp_path: Path) -> None:
    part = max(generated.glob("__consumer_offsets-*"), key=lambda d: len(list(d.glob("*.log"))))
    copy = tmp_path / "torn" / part.name
    shutil.copytree(part, copy)
    logs = sorted(copy.glob("*.log"))
    logs[-1].write_bytes(logs[-1].read_bytes()[:-7])  # torn tail of the last segment: normal
    data = bytearray(logs[0].read_bytes())
    data[100] ^= 0xFF  # corrupt a batch in a rolled segment
    logs[0].write_bytes(bytes(data))
    res = ingest_segments(spark, tables, "torn", source([str(copy.parent)]), RUN, "/")
    kinds = Counter(i["kind"] for i in res.issues)
    assert kinds["torn_tail"] == 1 and kinds["corrupt_batch"] == 1
    reasons = {i["reason"] for i in res.issues}
    assert reasons == {"torn_tail", "crc_mismatch"}
    issues = spark.read.format("delta").load(tables.path("bronze", "read_issues"))
    assert issues.count() == 2
    expected = sum(inspect_segment(s).records for s in discover([copy]))
    assert res.rows_inserted == expected


def test_delta_schema_matches_declaration(spark, tables, generated: Path) -> None:
    ingest_segments(spark, tables, "gen", source([str(generated)]), RUN, "/")
    for table in ("offsets_records", "read_issues", "conflicts"):
        tables.ensure("bronze", table)
        actual = spark.read.format("delta").load(tables.path("bronze", table)).schema
        spec = tables.spec("bronze", table)
        assert [(f.name, f.dataType.simpleString(), f.nullable) for f in actual] == [
            (c.name, spec.struct()[c.name].dataType.simpleString(), c.nullable) for c in spec.columns
        ]
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{tables.path('bronze', table)}`").collect()[0]
        assert list(detail["partitionColumns"]) == list(spec.partitioned_by)


# -- the ingestion log: a run reads only what is new -----------------------------------------------------
@dataclass
class Increments:
    """One lakehouse fed a growing log, run by run (the module's shared lakehouse)."""

    spark: Any
    tables: Tables
    split: Split
    runs: dict[str, IngestResult] = field(default_factory=dict)
    versions: dict[str, int | None] = field(default_factory=dict)
    sizes: dict[Path, int] = field(default_factory=dict)  # segment sizes before the increment

    def ingest(self, label: str) -> IngestResult:
        res = ingest_segments(self.spark, self.tables, "live", source([str(self.split.source)]), label, "/")
        self.runs[label] = res
        self.versions[label] = version(self.spark, self.tables)
        return res

    def rows(self) -> set:
        return table_rows(self.spark, self.tables)


def table_rows(spark, tables) -> set:
    df = spark.read.format("delta").load(tables.path("bronze", "offsets_records"))
    rows = [tuple(r) for r in df.select("cluster", "partition", "offset", "content_hash").collect()]
    assert len(rows) == len({r[:3] for r in rows}), "one row per log position"
    return set(rows)


def log_rows(spark, tables) -> dict[str, Any]:
    df = spark.read.format("delta").load(tables.path("bronze", "ingested_files"))
    return {r["file_uri"]: r for r in df.collect()}


@pytest.fixture(scope="module")
def increments(spark, generated: Path, tmp_path_factory: pytest.TempPathFactory) -> Increments:
    """The generated log as its broker had it before its last 10 % (a private copy: the tests
    below change its files), ingested once, then again with nothing new."""
    work = tmp_path_factory.mktemp("increments")
    shutil.copytree(generated, work / "logs")
    split = split_log(work / "logs", work / "source", 10)
    assert split.grown and split.new, "the increment both grows active segments and rolls new ones"
    inc = Increments(spark, Tables(spark, str(work / "lakehouse")), split)
    inc.ingest("base")
    inc.ingest("again")
    return inc


@pytest.fixture(scope="module")
def grown(increments: Increments, tmp_path_factory: pytest.TempPathFactory) -> tuple[Increments, set]:
    """The held-back bytes appended and the later segments rolled in, ingested; and bronze from a
    from-scratch ingest of the final files."""
    increments.sizes = {p: p.stat().st_size for p in increments.split.source.rglob("*.log")}
    increments.split.grow()
    increments.ingest("grown")
    scratch = Tables(increments.spark, str(tmp_path_factory.mktemp("scratch") / "lakehouse"))
    src = source([str(increments.split.source)])
    ingest_segments(increments.spark, scratch, "scratch", src, "scratch", "/")
    return increments, table_rows(increments.spark, scratch)


def test_rerun_reads_nothing_and_commits_nothing(increments: Increments) -> None:
    base, again = increments.runs["base"], increments.runs["again"]
    files = len(list(increments.split.source.rglob("*.log")))
    assert base.files == {"new": files, "unchanged": 0, "grown": 0, "replaced": 0}
    assert base.rows_inserted == base.rows_read == increments.split.records - increments.split.held_back
    assert again.files == {"new": 0, "unchanged": files, "grown": 0, "replaced": 0}
    assert again.rows_read == again.bytes_read == again.rows_inserted == 0
    assert increments.versions["again"] == increments.versions["base"], "no commit to offsets_records"
    # a first load is an append, not a MERGE
    commit = lake.last_commit(increments.spark, increments.tables.path("bronze", "offsets_records"))
    assert commit["operation"] == "WRITE"


def test_grown_tails_are_read_from_where_the_last_run_stopped(grown: tuple[Increments, set]) -> None:
    inc, scratch = grown
    res, split = inc.runs["grown"], inc.split
    before = inc.sizes
    new_bytes = sum(p.stat().st_size for p in split.new)
    tail_bytes = sum(p.stat().st_size - before[p] for p in split.grown)
    assert res.files["grown"] == len(split.grown) and res.files["new"] == len(split.new)
    assert res.bytes_read == tail_bytes + new_bytes, "only the appended bytes and the new segments"
    assert res.rows_read == res.rows_inserted == split.held_back and res.conflicts == 0
    commit = lake.last_commit(inc.spark, inc.tables.path("bronze", "offsets_records"))
    assert commit["operation"] == "WRITE", "nothing of it was in bronze: appended"
    assert inc.rows() == scratch, "the same table as a from-scratch ingest of the final files"
    # the overlap check's file statistics (not its fallback query) bound every partition's offsets
    path = inc.tables.path("bronze", "offsets_records")
    listed = lake.data_files(inc.spark, {"b": path}, ("cluster", "partition"), ("offset",))["b"]
    files = [(f.partition, f.minimum["offset"], f.maximum["offset"]) for f in listed]
    assert files and all(low is not None for _, low, _ in files)
    bounds: dict[tuple, tuple[int, int]] = {}
    for (cluster, part), low, high in files:
        lo, hi = bounds.get((cluster, int(part)), (low, high))
        bounds[(cluster, int(part))] = (min(lo, low), max(hi, high))
    actual = inc.spark.read.format("delta").load(path).groupBy("cluster", "partition").agg({"offset": "min"})
    assert {(r[0], r[1]) for r in actual.collect()} == set(bounds)
    for c, p, offset, _ in scratch:
        assert bounds[(c, p)][0] <= offset <= bounds[(c, p)][1]
    logged = log_rows(inc.spark, inc.tables)
    for path in split.grown:
        row = logged[str(path)]
        assert (row["action"], row["size"], row["consumed_bytes"]) == ("grown", path.stat().st_size, row["size"])


def test_a_torn_tail_is_picked_up_when_it_completes(grown: tuple[Increments, set]) -> None:
    inc, _ = grown
    seg = max(inc.split.source.rglob("*.log"), key=lambda p: (p.parent.name, p.name))  # a partition's last
    last = [b for b in iter_log(seg.read_bytes()) if isinstance(b, Batch)][-1].last_offset
    batch = encode_v2_batch([Record(last + 1 + i, 1, b"torn-key", b"v%d" % i) for i in range(3)], base_offset=last + 1)
    size = seg.stat().st_size
    with seg.open("ab") as fh:
        fh.write(batch[:40])
    torn = inc.ingest("torn")
    assert torn.files["grown"] == 1 and torn.bytes_read == 40 and torn.rows_read == 0
    assert [(i["kind"], i["position"]) for i in torn.issues] == [("torn_tail", size)]
    assert log_rows(inc.spark, inc.tables)[str(seg)]["consumed_bytes"] == size, "the torn tail is read again"
    with seg.open("ab") as fh:
        fh.write(batch[40:])
    done = inc.ingest("completed")
    assert done.bytes_read == len(batch) and done.rows_read == done.rows_inserted == 3 and not done.issues
    assert inc.versions["completed"] == inc.versions["torn"] + 1


def test_a_replaced_segment_is_read_again_within_its_partition(grown: tuple[Increments, set], monkeypatch) -> None:
    """The log cleaner swaps in a compacted copy of a rolled segment: every other batch kept, one
    of them with other bytes at the same offsets (a conflict, recorded; bronze keeps the first)."""
    inc, _ = grown
    seg = next(p for p in sorted(inc.split.source.rglob("*.log")) if p != sorted(p.parent.glob("*.log"))[-1])
    batches = [b for b in iter_log(seg.read_bytes()) if isinstance(b, Batch)][::2]
    forged = batches[1]
    data = b"".join(encode_batch(b) for b in batches if b is not forged)
    data += encode_v2_batch(
        [Record(r.offset, r.timestamp, r.key, b"compacted differently") for r in forged.records or ()],
        base_offset=forged.base_offset,
    )
    fresh = seg.with_suffix(".log.swap")
    fresh.write_bytes(data)
    os.replace(fresh, seg)  # as the cleaner does: a new file under the old name
    before = inc.rows()
    targets: list[str | None] = []
    insert_new = lake.insert_new

    def recording(*args, **kw):
        targets.append(kw.get("target_where"))
        return insert_new(*args, **kw)

    monkeypatch.setattr(lake, "insert_new", recording)
    res = inc.ingest("replaced")
    assert res.files["replaced"] == 1 and res.bytes_read == len(data)
    assert res.rows_inserted == 0 and res.conflicts == len(forged.records or ())
    assert inc.rows() == before
    part = int(seg.parent.name.rsplit("-", 1)[1])
    [where] = [t for t in targets if t and "offset BETWEEN" in t]
    assert f"t.partition IN ({part}))" in where and where.count("t.partition =") == 1, where
    conflicts = inc.spark.read.format("delta").load(inc.tables.path("bronze", "conflicts"))
    assert conflicts.where(f"run_id = 'replaced' AND partition = {part}").count() == res.conflicts


def test_a_run_killed_before_its_file_log_reruns_to_the_same_table(grown: tuple[Increments, set], monkeypatch) -> None:
    inc, _ = grown
    inc.versions["quiet-before"] = version(inc.spark, inc.tables)
    seg = max(inc.split.source.rglob("*.log"), key=lambda p: (p.parent.name, p.name))
    last = [b for b in iter_log(seg.read_bytes()) if isinstance(b, Batch)][-1].last_offset
    with seg.open("ab") as fh:
        fh.write(encode_v2_batch([Record(last + 1, 1, b"k", b"after")], base_offset=last + 1))

    def killed(*args, **kw):
        raise KeyboardInterrupt("killed after the data commit, before the file log")

    with monkeypatch.context() as m:
        m.setattr(file_log, "save", killed)
        with pytest.raises(KeyboardInterrupt):
            inc.ingest("killed")
    committed = inc.rows()
    assert version(inc.spark, inc.tables) == inc.versions["quiet-before"] + 1, "the data commit was made"
    assert ("c1", int(seg.parent.name.rsplit("-", 1)[1]), last + 1) in {r[:3] for r in committed}
    rerun = inc.ingest("rerun")
    assert rerun.rows_read == 1 and rerun.rows_inserted == 0 and rerun.conflicts == 0
    assert inc.rows() == committed
    assert inc.ingest("quiet").rows_read == 0, "the file log caught up"
