"""One small generated lakehouse for the spark tier's modules that only read one (serve, the
analyst guide, status): built once per test run by whichever xdist worker asks first
(tests/support/build_once.py), in that worker's Spark session, and never changed afterwards. A
test that must change it works on a copy (``copy_to``).

Two clusters, each a generated log, through bronze, silver and gold in one job:

* ``c1``: 3,000 records, seed 30, 4 partitions, 64 KiB segments: rebalances, resets, group
  deletions (offsets deleted), a transaction left hanging, KIP-848 churn, a share group with a
  member (what the analyst guide's queries need; seed 23 has no deleted offsets since the
  generator's share/streams writes changed its draws);
* ``c2``: 1,000 records, seed 12, 2 partitions, 16 KiB segments (several per partition): a second
  cluster, so ``status`` must keep clusters apart and every guide query must filter by cluster.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from pipelines.generate import generate
from pipelines.runner import Context, run_job
from pipelines.runtime.tables import LAYERS, Tables
from tests.support import build_once
from tests.support.jvm import SHORT_RUN_YAML


class Log(NamedTuple):
    records: int
    seed: int
    partitions: int
    segment_bytes: int


CLUSTERS = {
    "c1": Log(records=3000, seed=30, partitions=4, segment_bytes=64 * 1024),
    "c2": Log(records=1000, seed=12, partitions=2, segment_bytes=16 * 1024),
}
JOB = "lake"


def jobs_yaml(root: Path, logs: Path) -> str:
    sources = "".join(
        f"  {c}: {{kind: segments, cluster: {c}, paths: [{logs / c}], offsets_partitions: {log.partitions}}}\n"
        for c, log in CLUSTERS.items()
    )
    return f"""
lakehouse: {{root: {root}}}
spark:
  master: "local[2]"
  conf: {{spark.ui.enabled: "false", spark.sql.shuffle.partitions: "2", spark.driver.memory: "1g", {SHORT_RUN_YAML}}}
sources:
{sources}jobs:
  {JOB}: {{sources: [{", ".join(CLUSTERS)}], stages: [bronze, silver, gold]}}
"""


@dataclass(frozen=True)
class SharedLakehouse:
    base: Path  # logs/<cluster>, lakehouse/, jobs.yaml

    @property
    def root(self) -> Path:
        return self.base / "lakehouse"

    @property
    def config(self) -> Path:
        return self.base / "jobs.yaml"

    def logs(self, cluster: str) -> Path:
        return self.base / "logs" / cluster

    def register(self, spark) -> Tables:
        return build_once.register(spark, self.root)

    def copy_to(self, dest: Path) -> Path:
        """A copy of the lakehouse under ``dest`` for a test that changes it; returns the copy's
        jobs.yaml (same logs and job, its own root)."""
        shutil.copytree(self.root, dest / "lakehouse")
        config = dest / "jobs.yaml"
        config.write_text(jobs_yaml(dest / "lakehouse", self.base / "logs"))
        return config


def build(base: Path, spark) -> None:
    """Generate the logs and run the job in ``spark`` (the calling worker's session)."""
    for cluster, log in CLUSTERS.items():
        logs = base / "logs" / cluster
        generate(logs, log.records, seed=log.seed, partitions=log.partitions, segment_bytes=log.segment_bytes)
    shared = SharedLakehouse(base)
    shared.config.write_text(jobs_yaml(shared.root, base / "logs"))
    for db in LAYERS:
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    ctx = Context(shared.config)
    ctx._spark = spark  # this session, not a JVM of its own
    report = run_job(ctx, JOB)
    assert report.status == "ok", report.to_json()
