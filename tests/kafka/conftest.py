"""The kafka tier: ONE real broker for the whole tier, every scenario run once against it.

``harness`` runs the scenarios (tests/harness/scenarios.py) and keeps their truth snapshots;
``broker_files`` is a copy of the broker's ``__consumer_offsets-N`` directories taken after a
clean shutdown (the broker is started again afterwards, so live-source tests can still read it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipelines.truth import TruthSnapshot
from tests.harness.broker import KafkaBroker
from tests.harness.scenarios import Harness, ScenarioResult, run_all


@dataclass
class HarnessRun:
    broker: KafkaBroker
    harness: Harness
    results: dict[str, ScenarioResult | BaseException]
    evidence: Evidence | None = None

    def result(self, name: str) -> ScenarioResult:
        r = self.results.get(name)
        if r is None:
            pytest.fail(f"scenario {name} did not run")
        if isinstance(r, BaseException):
            raise AssertionError(
                f"scenario {name} failed to drive the clients: {r!r}\n--- broker log ---\n{self.broker.tail_log(40)}"
            ) from r
        return r


@pytest.fixture(scope="session")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HarnessRun]:
    overrides = {}
    if n := os.environ.get("OFFSETS_TEST_OFFSETS_PARTITIONS"):
        overrides["offsets.topic.num.partitions"] = n
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"), overrides=overrides).start()
    try:
        h = Harness(broker)
        run = HarnessRun(broker, h, run_all(h))
        # right after the scenarios, before the 1-minute retention expires their empty groups
        run.evidence = _take_evidence(run, tmp_path_factory)
        yield run
    finally:
        broker.stop()


@dataclass
class Evidence:
    logs: Path  # copy of the __consumer_offsets-N directories
    snapshot: TruthSnapshot  # every group, taken at exactly the position the copy ends at


def _file_ends(logs: Path) -> dict[int, int]:
    from pipelines.codec.segments import discover, iter_segment

    ends: dict[int, int] = {}
    for seg in discover([logs]):
        for batch, _ in iter_segment(seg):
            if batch is not None:
                ends[seg.partition] = batch.last_offset + 1
    return ends


def _take_evidence(harness: HarnessRun, tmp_path_factory: pytest.TempPathFactory) -> Evidence | None:
    """A truth snapshot of every group and a copy of the broker's files at the same log position
    (after a clean shutdown); retried if the coordinator wrote in between (expiry runs every 5 s)."""
    for attempt in range(5):
        snap = harness.harness.snapshot([])
        logs = harness.broker.copy_offsets_topic(tmp_path_factory.mktemp(f"evidence{attempt}") / "logs")
        ends = _file_ends(logs)
        if all(ends.get(p, 0) == o for p, o in snap.offsets_topic_end_offsets.items()):
            return Evidence(logs, snap)
    return None


@pytest.fixture(scope="session")
def evidence(harness: HarnessRun) -> Evidence:
    if harness.evidence is None:
        pytest.fail("the offsets topic kept moving between the snapshot and the copy (5 attempts)")
    return harness.evidence


@pytest.fixture(scope="session")
def broker_files(evidence: Evidence) -> Path:
    """The offsets topic's partition directories, copied after a clean shutdown."""
    return evidence.logs


@pytest.fixture(scope="session")
def spark() -> Iterator:
    from pipelines.runtime.config import SparkSettings
    from pipelines.runtime.spark import build_session

    session = build_session(
        SparkSettings(master="local[2]", conf={"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"})
    )
    yield session
    session.stop()


@pytest.fixture()
def tables(spark, tmp_path: Path):
    from pipelines.runtime.tables import Tables

    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    return Tables(spark, str(tmp_path / "lakehouse"))
