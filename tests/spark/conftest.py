"""One local Spark session for the whole spark tier; each test gets its own lakehouse root.

The session starts after the tier's object store (moto's S3 server behind a proxy,
tests/support/store.py), with its settings, as `offsets-lakehouse run` starts on a store: jobs
whose lakehouse or sources are on it run in this process (its Python workers inherit the store's
environment). Tests that need a store of their own start one."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tier_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from tests.support.store import moto_store

    with moto_store(tmp_path_factory.mktemp("tier-store")) as running:
        yield running


@pytest.fixture(scope="session")
def spark(tier_store) -> Iterator:
    from pipelines.runtime.config import SparkSettings
    from pipelines.runtime.spark import build_session
    from pipelines.runtime.storage import S3Settings
    from tests.support.jvm import INTERPRETED_CONF, TIER_SESSION_JAVA_OPTIONS

    os.environ.update(tier_store.env())
    session = build_session(
        SparkSettings(
            master="local[2]",
            conf={
                "spark.sql.shuffle.partitions": "2",
                "spark.ui.enabled": "false",
                "spark.default.parallelism": "2",
                # Delta rebuilds table state with 50 tasks by default: a lot of overhead on tiny tables
                "spark.databricks.delta.snapshotPartitions": "2",
                "spark.driver.extraJavaOptions": TIER_SESSION_JAVA_OPTIONS,
                **INTERPRETED_CONF,
            },
        ),
        store=S3Settings.resolve({}),
    )
    yield session
    session.stop()


@pytest.fixture()
def tables(spark, tmp_path: Path):
    from pipelines.runtime.tables import Tables

    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    return Tables(spark, str(tmp_path / "lakehouse"))


@pytest.fixture(scope="session")
def shared_lakehouse(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """The tier's one generated lakehouse for readers (tests/spark/shared_lakehouse.py): built
    once per run whichever worker asks first, left exactly as built by every test."""
    from tests.spark.shared_lakehouse import SharedLakehouse, build
    from tests.support.build_once import assert_unchanged, build_once

    shared = SharedLakehouse(build_once(tmp_path_factory, "shared-lakehouse", lambda base: build(base, spark)))
    yield shared
    assert_unchanged(shared.base)


@pytest.fixture(scope="session")
def real_lakehouse(spark, real_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """All real segment files through bronze, silver and gold (tests/spark/real_lakehouse.py):
    built once per run whichever worker asks first, left exactly as built by every test."""
    from tests.spark.real_lakehouse import RealLakehouse, build
    from tests.support.build_once import assert_unchanged, build_once

    shared = RealLakehouse(build_once(tmp_path_factory, "real-lakehouse", lambda base: build(base, spark, real_dir)))
    yield shared
    assert_unchanged(shared.base)
