"""lake.parallel_map: each call runs with Spark local properties of its own, copied from the
caller's. Spark keeps a running query's execution id there and reads it back: when the threads
shared one copy (pyspark's wrapper, made once for all calls), one query removed another's id and
that one failed ("NumberFormatException: Cannot parse null string" in a CI run's
register_existing, about once in 100 registrations of the demo lakehouse here)."""

from __future__ import annotations

import threading

import pytest

from pipelines.runtime import lake

pytestmark = pytest.mark.spark


def test_each_call_has_local_properties_of_its_own(spark) -> None:
    sc = spark.sparkContext
    sc.setLocalProperty("offsets.test.caller", "here")
    items = ["a", "b", "c", "d"]
    barrier = threading.Barrier(len(items), timeout=60)  # every call has set its own before any reads

    def one(item: str) -> tuple[str | None, str | None]:
        sc.setLocalProperty("offsets.test.item", item)
        barrier.wait()
        return sc.getLocalProperty("offsets.test.item"), sc.getLocalProperty("offsets.test.caller")

    try:
        assert lake.parallel_map(one, items, threads=len(items)) == [(i, "here") for i in items]
        assert sc.getLocalProperty("offsets.test.item") is None  # the calls left the caller's alone
    finally:
        sc.setLocalProperty("offsets.test.caller", None)
