"""Silver from all 268 real broker segment files (69 source directories as 69 clusters; the
tier's shared lakehouse of the files, tests/spark/real_lakehouse.py).

Zero records quarantined, and silver reconciles with bronze counted in records — per cluster and
offsets partition, against what ``inspect`` finds in the files (not against silver's own counts).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from pipelines.codec.segments import discover
from pipelines.inspect import iter_record_json
from pipelines.silver import RECORD_TABLES
from tests.conftest import real_segments_dir
from tests.spark.real_lakehouse import RealLakehouse
from tests.support.silver import read


def test_real_segments_decode_completely_and_reconcile_by_record(spark, real_lakehouse: RealLakehouse) -> None:
    root = real_segments_dir()
    # what the files hold, one entry per log position (two segments of one directory repeat 6 records)
    records: dict[tuple[str, int, int], dict] = {}
    for seg in discover([root]):
        cluster = seg.path.relative_to(root).parts[0]
        for line in iter_record_json([seg]):
            records[(cluster, seg.partition, line["offset"])] = line
    assert len(records) == 40520
    tables = real_lakehouse.register(spark)
    result = real_lakehouse.silver_result()
    assert result["mode"] == "snapshot", "the first run decodes bronze's snapshot"
    assert result["bronze_rows"] == 40520 and result["quarantined"] == 0
    assert read(spark, tables, "quarantine") is None, "no quarantine table: nothing was ever quarantined"
    written = {t for t, n in result["rows"].items() if n}
    assert written == {"offset_commits", "group_metadata", "group_members", "tombstones"}

    expected: Counter = Counter()
    by_type: dict[tuple[str, int], Counter] = defaultdict(Counter)
    members: Counter = Counter()
    for (cluster, part, _), line in records.items():
        expected[(cluster, part)] += 1
        version = "null" if line["tombstone"] else line["value_version"]
        by_type[(cluster, part)][f"{line['record_type']}/{version}"] += 1
        if line["record_type"] == 2 and not line["tombstone"]:
            members[(cluster, part)] += len(line["value"]["members"])
    got: Counter = Counter()
    for table in RECORD_TABLES:
        df = read(spark, tables, table)
        if df is not None:
            got.update({(r[0], r[1]): r[2] for r in df.groupBy("cluster", "offsets_partition").count().collect()})
    assert got == expected, "decoded + quarantined + control = the records of the files, per cluster and partition"
    assert len({c for c, _ in got}) == 69
    rows = read(spark, tables, "group_members").groupBy("cluster", "offsets_partition").count().collect()
    assert Counter({(r[0], r[1]): r[2] for r in rows}) == +members, "one group_members row per member per record"

    inventory: dict[tuple[str, int], Counter] = defaultdict(Counter)
    for r in read(spark, tables, "version_inventory").collect():
        assert r["status"] == "decoded"
        version = "null" if r["record_kind"] == "tombstone" else r["value_version"]
        inventory[(r["cluster"], r["offsets_partition"])][f"{r['record_type']}/{version}"] += r["records"]
    assert inventory == by_type

    # the same group names in several clusters stay apart: per cluster, silver's commits of such a
    # group are that cluster's own
    commits = read(spark, tables, "offset_commits").groupBy("cluster", "group_id").count().collect()
    clusters_of: dict[str, set] = defaultdict(set)
    for r in commits:
        clusters_of[r["group_id"]].add(r["cluster"])
    shared = {g for g, cs in clusters_of.items() if len(cs) > 1}
    assert shared, "the real data has group names used in several clusters"
    own = Counter(
        (cluster, line["key"]["group"])
        for (cluster, _, _), line in records.items()
        if line["record_type"] in (0, 1) and not line["tombstone"] and line["key"]["group"] in shared
    )
    assert Counter({(r[0], r[1]): r[2] for r in commits if r[1] in shared}) == own
