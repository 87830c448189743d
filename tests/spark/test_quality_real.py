"""All 268 real segment files through the bronze and silver suites and the reconciliation.

Without a Delta pipeline (the spark tier already runs them through bronze and silver in
test_silver_real.py; doing it again here would cost minutes): bronze-shaped rows read from the
files, decoded by silver's Spark decoder, split into silver's tables, then the suites' frames.
"""

from __future__ import annotations

import pyarrow as pa

from pipelines.quality import frames
from pipelines.quality.stage import evaluate_suite, params_of
from pipelines.quality.suites import load_suites
from pipelines.runtime.config import QualitySettings
from pipelines.runtime.tables import Tables
from pipelines.silver import DATA_TABLES, RECORD_TABLES
from pipelines.silver.decode import build_plan
from pipelines.silver.frames import decode_frame
from pipelines.silver.local import BRONZE_ARROW, bronze_rows


def test_real_files_pass_the_bronze_and_silver_suites(spark, real_dir) -> None:
    rows = [r for d in sorted(p for p in real_dir.iterdir() if p.is_dir()) for r in bronze_rows([d], d.name)]
    arrow = pa.Table.from_pylist(rows, schema=BRONZE_ARROW)
    # bronze keeps the first delivery of a position (two segments of one directory repeat 6 records)
    bronze = spark.createDataFrame(arrow).dropDuplicates(["cluster", "partition", "offset"]).persist()
    decoded = decode_frame(bronze, build_plan())
    tables = Tables(spark, "/nonexistent")  # only for the table declarations
    silver = {t: decoded.table(tables, t) for t in DATA_TABLES}
    suites = load_suites()
    params = params_of(QualitySettings())
    inputs = {
        "bronze.offsets_records": frames.Frame(frames.bronze_offsets_records(bronze)),
        "silver.offset_commits": frames.silver_offset_commits(silver["offset_commits"], {}, 1_800_000_000_000),
        "silver.group_metadata": frames.with_partition_rule(silver["group_metadata"], {}),
        "silver.transaction_markers": frames.Frame(silver["transaction_markers"]),
        "silver.quarantine": frames.Frame(frames.silver_quarantine(bronze, silver["quarantine"])),
        "gold.reconciliation": frames.Frame(frames.gold_reconciliation(bronze, [silver[t] for t in RECORD_TABLES])),
    }
    try:
        results = {}
        for name, frame in inputs.items():
            outcomes, _ = evaluate_suite(suites[name], frame, params, "real-files")
            results.update({(name, o.expectation): o for o in outcomes})
    finally:
        decoded.unpersist()
        bronze.unpersist()
    for key, o in results.items():
        if key[1] == "offsets_partition_matches_group":  # the real files' partition counts are unknown
            assert (o.evaluated, o.success, o.action) == (False, None, "not_evaluated"), key
        else:
            assert o.evaluated and o.success, (key, o)
    # 40,520 log positions in the files (tests/spark/test_silver_real.py counts them with inspect)
    assert results[("bronze.offsets_records", "position_unique")].element_count == 40520
    assert results[("silver.quarantine", "undecodable_rate_zero")].element_count == 40520
    pairs = {(r["cluster"], r["partition"]) for r in rows}
    assert results[("gold.reconciliation", "silver_records_equal_bronze_records")].element_count == len(pairs)
