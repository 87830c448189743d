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

from tests.harness.broker import KafkaBroker
from tests.harness.scenarios import Harness, ScenarioResult, run_all


@dataclass
class HarnessRun:
    broker: KafkaBroker
    harness: Harness
    results: dict[str, ScenarioResult | BaseException]

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
        yield HarnessRun(broker, h, run_all(h))
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def broker_files(harness: HarnessRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The offsets topic's partition directories, copied after a clean shutdown."""
    return harness.broker.copy_offsets_topic(tmp_path_factory.mktemp("evidence") / "logs")
