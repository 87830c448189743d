"""All 268 real segment files through bronze, silver and gold, built once per test run for the
spark tier's modules that only read it (tests/support/build_once.py): test_silver_real.py checks
silver against the files record by record, test_quality_real.py runs every suite on it.

The 69 source directories are 69 clusters (``cluster_from_path``). The silver run's result is
kept beside the lakehouse (``silver-result.json``): what the stage reported, for the checks of
what it decoded and quarantined.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.bronze.ingest import ingest_segments
from pipelines.gold import run_gold
from pipelines.runtime.config import SegmentsSource
from pipelines.runtime.tables import LAYERS, Tables
from pipelines.silver.ingest import run_silver
from tests.support import build_once

CLUSTER_FROM_PATH = r"real-segments/(?P<cluster>[^/]+)/"  # a cluster per source directory


@dataclass(frozen=True)
class RealLakehouse:
    base: Path  # lakehouse/, silver-result.json

    @property
    def root(self) -> Path:
        return self.base / "lakehouse"

    def silver_result(self) -> dict[str, Any]:
        return json.loads((self.base / "silver-result.json").read_text())

    def register(self, spark) -> Tables:
        return build_once.register(spark, self.root)


def build(base: Path, spark, real_dir: Path) -> None:
    for db in LAYERS:
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    tables = Tables(spark, str(base / "lakehouse"))
    src = SegmentsSource(kind="segments", cluster="unused", paths=[str(real_dir)], cluster_from_path=CLUSTER_FROM_PATH)
    ingest_segments(spark, tables, "real", src, "run", "/")
    silver = run_silver(spark, tables, "run")
    (base / "silver-result.json").write_text(json.dumps(silver.to_json(), default=str))
    run_gold(spark, tables, "run")
