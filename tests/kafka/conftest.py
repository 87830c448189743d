"""The kafka tier: ONE real broker for the whole tier, every scenario run once against it.

``harness`` runs the scenarios (tests/harness/scenarios.py) and keeps their truth snapshots;
``broker_files`` is a copy of the broker's ``__consumer_offsets-N`` directories taken after a
clean shutdown (the broker is started again afterwards, so live-source tests can still read it);
``lake`` is those files through bronze, silver and gold, shared by the modules that compare the
layers with the broker.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipelines.truth import TruthSnapshot
from tests.harness import principals
from tests.harness.broker import KafkaBroker, Secured
from tests.harness.scenarios import Harness, ScenarioResult, run_all
from tests.harness.tls import Stores, make_stores

# the secured listeners' principals (tests/kafka/test_security.py); the passwords are known on
# purpose: the leak test searches every file a run wrote for them
SASL_PASSWORDS = {"alice": "alice-Sasl-Secret-91c2", "bob": "bob-Sasl-Secret-5d7e", "mallory": "mallory-Secret-0b1f"}


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
    stores = make_stores(tmp_path_factory.mktemp("stores"))
    secured = Secured(stores, plain_users={"alice": SASL_PASSWORDS["alice"]})
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"), overrides=overrides, secured=secured).start()
    try:
        h = Harness(broker)
        try:
            run = HarnessRun(broker, h, run_all(h))
            # right after the scenarios, before the 1-minute retention expires their empty groups
            run.evidence = _take_evidence(run, tmp_path_factory)
        finally:
            h.release()  # the members scenarios left alive for the evidence
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
    (after a clean shutdown); retried if the coordinator wrote in between (expiry runs every 5 s).
    The classic groups whose members the scenarios left alive are snapshot with those members
    (generation, and members equal to what the clients hold)."""
    for attempt in range(5):
        snap = harness.harness.snapshot([], clients=harness.harness.kept)
        logs = harness.broker.copy_offsets_topic(tmp_path_factory.mktemp(f"evidence{attempt}") / "logs")
        ends = _file_ends(logs)
        if all(ends.get(p, 0) == o for p, o in snap.offsets_topic_end_offsets.items()):
            return Evidence(logs, snap)
    return None


@dataclass
class SecureCluster:
    broker: KafkaBroker
    stores: Stores
    passwords: dict[str, str]


@pytest.fixture(scope="session")
def secure(harness: HarnessRun) -> SecureCluster:
    """The tier broker's SASL_SSL and SSL listeners with their principals: alice may read the
    offsets topic, describe every topic (end offsets) and every group (live truth); the
    certificate CN=reader (User:reader) has what the live source needs (docs/security.md): READ
    on the offsets topic, DESCRIBE on Spark's groups; bob only reads the offsets topic, without
    the group ACL; mallory may do nothing."""
    bootstrap = harness.broker.bootstrap
    for user, password in SASL_PASSWORDS.items():
        principals.add_scram_user(bootstrap, user, password)
    rules = (principals.OFFSETS_READ, principals.TOPICS_DESCRIBE, principals.GROUPS_DESCRIBE)
    principals.grant(bootstrap, "User:alice", rules)
    principals.grant(bootstrap, "User:bob", [principals.OFFSETS_READ])
    principals.grant(bootstrap, "User:reader", [principals.OFFSETS_READ, principals.SPARK_GROUPS_DESCRIBE])
    assert harness.broker.secured is not None
    return SecureCluster(harness.broker, harness.broker.secured.stores, dict(SASL_PASSWORDS))


@pytest.fixture(scope="session")
def evidence(harness: HarnessRun) -> Evidence:
    if harness.evidence is None:
        pytest.fail("the offsets topic kept moving between the snapshot and the copy (5 attempts)")
    return harness.evidence


@pytest.fixture(scope="session")
def broker_files(evidence: Evidence) -> Path:
    """The offsets topic's partition directories, copied after a clean shutdown."""
    return evidence.logs


def truncated_copy(logs: Path, ends: dict[int, int], dest: Path) -> Path:
    """The broker's files as they were when a snapshot was taken: every batch at or after the
    snapshot's log end offset cut away (compaction is held off in the harness, so the files
    before that point are what the broker had). Writing a later cut into the same ``dest``
    makes the files grow, as a live broker's do."""
    from pipelines.codec.segments import discover, iter_segment

    for seg in discover([logs]):
        end = ends.get(seg.partition)
        cut = None
        if end is not None:
            for batch, _ in iter_segment(seg):
                if batch is not None and batch.last_offset >= end:
                    cut = batch.position
                    break
        out = dest / seg.path.parent.name / seg.path.name
        out.parent.mkdir(parents=True, exist_ok=True)
        data = seg.path.read_bytes()
        out.write_bytes(data if cut is None else data[:cut])
    return dest


@dataclass
class Lake:
    """bronze -> silver -> gold of the broker's files, built in two runs (:func:`lake`)."""

    tables: Any  # pipelines.runtime.tables.Tables
    cut: TruthSnapshot  # the snapshot the first run's files end at
    at_cut: dict[str, list[Any]]  # gold tables (Rows) right after the first run

    def read(self, layer: str, table: str) -> Any:
        return self.tables.spark.read.format("delta").load(self.tables.path(layer, table))


# gold tables read after the first run (the state at the cut)
AT_CUT_TABLES = ("current_groups", "consumer_group_members", "group_generations")


@pytest.fixture(scope="session")
def lake(spark, harness: HarnessRun, evidence: Evidence, tmp_path_factory: pytest.TempPathFactory) -> Lake:
    """The broker's files through bronze, silver and gold, once for the tier, in two runs: first
    the files cut at the new_protocol scenario's final snapshot (taken while its members were
    alive; the gold tables are read then), then the same files grown to the evidence (an
    incremental run over grown segment files, as from a live broker's log directory)."""
    from pipelines.bronze.ingest import ingest_segments
    from pipelines.gold.build import run_gold
    from pipelines.runtime.config import SegmentsSource
    from pipelines.runtime.tables import Tables
    from pipelines.silver.ingest import run_silver

    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    work = tmp_path_factory.mktemp("lake")
    tables = Tables(spark, str(work / "lakehouse"))
    src = SegmentsSource(kind="segments", cluster="harness", paths=[str(work / "logs")])
    cut = harness.result("new_protocol").snapshots["final"]
    at_cut: dict[str, list[Any]] = {}
    for run, ends in ((1, cut.offsets_topic_end_offsets), (2, evidence.snapshot.offsets_topic_end_offsets)):
        truncated_copy(evidence.logs, ends, work / "logs")
        ingest_segments(spark, tables, "files", src, f"b{run}", "/")
        run_silver(spark, tables, f"s{run}")
        run_gold(spark, tables, f"g{run}")
        if run == 1:
            at_cut = {t: spark.read.format("delta").load(tables.path("gold", t)).collect() for t in AT_CUT_TABLES}
    return Lake(tables, cut, at_cut)


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
