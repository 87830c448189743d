"""The lakehouse I/O module's SQL text: predicates Delta can prune files with, literals quoted."""

from __future__ import annotations

import pytest

from pipelines.runtime import lake
from pipelines.runtime.lake import key_condition, offset_ranges_predicate, partitions_predicate, sql_in_list, sql_str


def test_sql_str_quotes_and_escapes() -> None:
    assert sql_str("plain") == "'plain'"
    assert sql_str("it's") == "'it\\'s'"
    assert sql_str("back\\slash") == "'back\\\\slash'"


def test_sql_in_list_sorts_and_quotes_only_strings() -> None:
    assert sql_in_list([3, 1, 2]) == "1, 2, 3"
    assert sql_in_list(["b", "a"]) == "'a', 'b'"


def test_partitions_predicate_selects_exactly_the_pairs() -> None:
    assert partitions_predicate([]) == "false"
    pred = partitions_predicate([("c2", 7), ("c1", 3), ("c1", 1)], prefix="t.")
    assert (
        pred
        == "(t.cluster = 'c1' AND t.offsets_partition IN (1, 3)) OR (t.cluster = 'c2' AND t.offsets_partition IN (7))"
    )
    assert partitions_predicate([("c", 0)], column="partition") == "(cluster = 'c' AND partition IN (0))"


def test_key_condition_joins_every_key_column() -> None:
    assert key_condition(["cluster", "partition"]) == "t.cluster = s.cluster AND t.partition = s.partition"
    assert key_condition(("k",), "<=>", "s", "t") == "s.k <=> t.k"


def test_offset_ranges_predicate_prunes_by_partition_then_offsets() -> None:
    assert offset_ranges_predicate({}) == "false"
    assert offset_ranges_predicate({("c", 1): []}) == "false"
    pred = offset_ranges_predicate({("c2", 7): [(5, 9)], ("c1", 3): [(40, 49), (0, 9)]}, prefix="t.")
    assert pred == (
        "((t.cluster = 'c1' AND t.partition IN (3)) OR (t.cluster = 'c2' AND t.partition IN (7))) AND ("
        "(t.cluster = 'c1' AND t.partition = 3 AND (t.offset BETWEEN 0 AND 9 OR t.offset BETWEEN 40 AND 49))"
        " OR (t.cluster = 'c2' AND t.partition = 7 AND (t.offset BETWEEN 5 AND 9)))"
    )


def test_conflict_names_delta_and_delta_rs_conflicts() -> None:
    assert lake.conflict(RuntimeError("[DELTA_CONCURRENT_APPEND] Files were added to partition ...")) == (
        "DELTA_CONCURRENT_APPEND"
    )
    wrapped = RuntimeError("stage failed")
    wrapped.__cause__ = type("CommitFailedError", (Exception,), {})("Transaction failed: version already exists")
    assert lake.conflict(wrapped) == "CommitFailedError"
    assert lake.conflict(RuntimeError("[DELTA_PROTOCOL_CHANGED] The protocol version ...")) == "DELTA_PROTOCOL_CHANGED"
    assert lake.conflict(OSError("Connection refused")) is None
    assert lake.conflict(ValueError("DELTA_SOMETHING_ELSE")) is None


def test_retry_conflicts_does_the_work_again_until_it_commits() -> None:
    calls, pauses, told = [], [], []

    def work() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("[DELTA_CONCURRENT_APPEND] Files were added by a concurrent update")
        return "committed"

    assert lake.retry_conflicts("silver", work, sleep=pauses.append, retried=told.append) == "committed"
    assert len(calls) == 3 and told == ["DELTA_CONCURRENT_APPEND"] * 2
    assert len(pauses) == 2 and 0.5 <= pauses[0] <= 1.5 and 1.0 <= pauses[1] <= 3.0  # growing, jittered


def test_retry_conflicts_raises_other_errors_at_once_and_the_last_conflict() -> None:
    calls = []

    def broken() -> None:
        calls.append(1)
        raise OSError("the store is gone")

    with pytest.raises(OSError, match="the store is gone"):
        lake.retry_conflicts("bronze", broken, sleep=lambda s: None)
    assert len(calls) == 1

    def always() -> None:
        calls.append(1)
        raise RuntimeError("[DELTA_METADATA_CHANGED] The metadata of the Delta table has been changed")

    calls.clear()
    with pytest.raises(RuntimeError, match="DELTA_METADATA_CHANGED"):
        lake.retry_conflicts("gold", always, attempts=4, sleep=lambda s: None)
    assert len(calls) == 4


def test_a_passing_store_failure_is_done_again_but_an_unreachable_store_is_not() -> None:
    """delta-rs writes make no request retries (storage.delta_rs_options): a 500 or 503 from the
    store (moto answered one to a LIST under load) re-runs the stage like a conflict; a store
    that does not answer at all fails the run with its one line (docs/object-storage.md)."""
    from pipelines.runtime.lake import conflict

    answered = Exception("Error performing GET http://s:9000/b?list-type=2 - Server returned non-2xx status code: 500")
    assert conflict(answered) == "the store answered 500"
    assert conflict(Exception("Server returned non-2xx status code: 503 Slow Down")) == "the store answered 503"
    assert conflict(Exception("Server returned non-2xx status code: 403 Forbidden")) is None
    assert conflict(Exception("Connect to 127.0.0.1:9000 failed: Connection refused")) is None


def test_write_arrow_raises_for_a_store_that_does_not_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """delta-rs failing to open a table falls back to Spark (False), except when the store is gone:
    then the error surfaces at once, where Spark's S3A would retry past the stage lock's lease."""
    import pyarrow as pa

    from pipelines.runtime.storage import unreachable

    for key, value in {"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_ACCESS_KEY_ID": "k",
                       "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    with pytest.raises(OSError) as gone:
        lake.write_arrow(pa.table({"n": [1]}), "s3://bucket/table")
    assert unreachable(str(gone.value)) is not None
