"""Bronze from segment files: counts equal inspect's, re-runs change nothing, conflicts kept apart."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from pipelines.bronze.ingest import ingest_segments
from pipelines.codec.segments import discover
from pipelines.generate import generate
from pipelines.inspect import inspect_segment, iter_record_json
from pipelines.runtime import lake
from pipelines.runtime.config import SegmentsSource
from tests.conftest import real_segments_dir

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
    src = source([str(root)], cluster="unused", cluster_from_path=r"real-segments/(?P<cluster>[^/]+)/")
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


def test_overlap_and_conflicts(spark, tables, generated: Path, tmp_path: Path) -> None:
    part = next(d for d in sorted(generated.glob("__consumer_offsets-*")) if list(d.glob("*.log")))
    copy = tmp_path / "copy" / part.name
    shutil.copytree(part, copy)
    first = ingest_segments(spark, tables, "a", source([str(part)]), RUN, "/")
    # the same partition again, from another copy: nothing new
    assert ingest_segments(spark, tables, "b", source([str(copy.parent)]), RUN, "/").rows_inserted == 0
    # a copy whose first batch carries different bytes at the same offsets: conflicts, first kept
    from pipelines.codec.reader import Batch, Record, iter_log
    from pipelines.codec.writer import encode_v2_batch

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
