"""SQL's semantics in local_frames.py's pandas helpers, where pandas' own differ: worked by hand.

The builders are held equal to their Spark twins in tests/spark/test_quality_frames.py and
test_quality_rules.py; these are the rules those depend on, without a JVM.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from pipelines.quality import local_frames as lf


def values(series: pd.Series) -> list:
    return [None if v is pd.NA else v for v in series.tolist()]


def test_frame_keeps_nulls_and_makes_timestamps_integers() -> None:
    table = pa.table(
        {
            "n": pa.array([1, None], pa.int64()),
            "b": pa.array([True, None]),
            "t": pa.array([1_000_000, None], pa.timestamp("us", tz="UTC")),
        }
    )
    d = lf.frame(table)
    assert values(d["n"]) == [1, None] and values(d["b"]) == [True, None]
    assert values(d["t"]) == [1_000_000, None]
    # a comparison with a null is null, and Kleene's AND: false AND null is false, null AND null null
    unknown = pd.Series([None, None], dtype="boolean")
    assert values(d["n"] == 1) == [True, None]
    assert values((d["n"] == 2) & unknown) == [False, None]
    assert values((d["n"] == 1) | unknown) == [True, None]


def test_when_treats_a_null_condition_as_not_true() -> None:
    condition = pd.Series([True, False, None], dtype="boolean")
    assert values(lf.when(condition, True)) == [True, None, None]
    assert values(lf.when(condition, 1, 0, dtype="Int64")) == [1, 0, 0]


def test_is_in_of_a_null_is_null() -> None:
    assert values(lf.is_in(pd.Series(["a", "b", None], dtype="string"), ["a"])) == [True, False, None]


def test_eq_null_safe() -> None:
    a = pd.Series([1, None, None, 2], dtype="Int64")
    b = pd.Series([1, None, 3, 3], dtype="Int64")
    assert values(lf.eq_null_safe(a, b)) == [True, True, False, False]


def test_window_groups_nulls_together_and_sums_nulls_to_null() -> None:
    d = pd.DataFrame(
        {
            "k": pd.Series(["a", "a", None, None, "b"], dtype="string"),
            "v": pd.Series([1, 2, 5, None, None], dtype="Int64"),
        }
    )
    assert values(lf.window(d, ["k"], "v", "size")) == [2, 2, 2, 2, 1]
    assert values(lf.window(d, ["k"], "v", "count")) == [2, 2, 1, 1, 0]
    assert values(lf.window(d, ["k"], "v", "sum")) == [3, 3, 5, 5, None]
    assert values(lf.window(d, ["k"], "v", "max")) == [2, 2, 5, 5, None]


def test_shifted_orders_nulls_first_within_a_partition() -> None:
    d = pd.DataFrame(
        {
            "k": pd.Series(["a", "a", "a", "b"], dtype="string"),
            "o": pd.Series([20, None, 10, 1], dtype="Int64"),
        }
    )
    # partition a in order: null, 10, 20
    assert values(lf.shifted(d, ["k"], ["o"], "o")) == [10, None, None, None]
    assert values(lf.shifted(d, ["k"], ["o"], "o", lead=True)) == [None, 10, 20, None]


def test_join_never_matches_a_null_key() -> None:
    left = pd.DataFrame({"k": pd.Series(["a", None, "c"], dtype="string"), "x": pd.Series([1, 2, 3], dtype="Int64")})
    right = pd.DataFrame(
        {"k": pd.Series(["a", None, "d"], dtype="string"), "y": pd.Series([10, 20, 30], dtype="Int64")}
    )
    joined = lf.join(left, right, ["k"], "left").sort_values("x")
    assert values(joined["y"]) == [10, None, None]
    full = lf.join(left, right, ["k"], "full")
    pairs = sorted(zip(values(full["x"]), values(full["y"]), strict=True), key=repr)
    # a matches; the null keys of both sides and c, d stay apart
    assert pairs == sorted([(1, 10), (2, None), (3, None), (None, 20), (None, 30)], key=repr)


def test_bronze_frame_by_hand() -> None:
    bronze = pa.table(
        {
            "cluster": ["c", "c", "c", "c", "c"],
            "partition": pa.array([0, 0, 0, 0, 1], pa.int32()),
            "offset": pa.array([0, 1, 5, 3, 7], pa.int64()),
            "source_uri": ["f", "f", "f", "f", "g"],
            "batch_position": pa.array([0, 10, 20, 30, 0], pa.int64()),
            "control": [False, False, False, True, False],
            "key": pa.array([b"k", None, b"k", None, b"k"]),
        }
    )
    out = lf.bronze_offsets_records(bronze).to_pydict()
    assert out["data_record_has_key"] == [True, False, True, None, True]
    assert out["offset_step"] == [None, 1, 4, -2, None]  # file order: 0, 1, 5, then 3
    assert out["offset_gap"] == [0, 0, 1, 1, 0]  # partition 0 by offset: 0 1 3 5
