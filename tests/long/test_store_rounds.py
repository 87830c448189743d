"""Two hosts on one lakehouse on a real object store (SeaweedFS), five rounds of new data, both
jobs at once in each, and from the second round on a quality run of the whole lakehouse and an SQL
reader on a third host beside them (the e2e tier's tests/e2e/test_store_two_hosts.py runs two
rounds on moto, the quality run and the reader beside the second): every run ends 0 or is refused
with exit code 4, and gold then equals each generator's expected state with every record once in
bronze and silver."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_store_two_hosts import BUCKET, two_hosts
from tests.support.seaweedfs import seaweedfs_store
from tests.support.store import Store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with seaweedfs_store(tmp_path_factory.mktemp("store")) as running:
        running.bucket(BUCKET)
        yield running


def test_two_hosts_five_rounds_on_seaweedfs(spark, store: Store, tmp_path: Path) -> None:
    two_hosts(spark, store, tmp_path, (80, 60, 40, 20, 0), beside=(1, 2, 3, 4))
