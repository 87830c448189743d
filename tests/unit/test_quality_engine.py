"""What the quality engine collects for GX's pandas engine, decided from the suite's own specs
(no GX imported: a stage computes its first frames while GX is still being imported). A
recording stand-in for the Spark DataFrame; no JVM."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa

from pipelines.quality.engine import collect_local
from pipelines.quality.suites import ExpectationSpec, Suite


@dataclass
class FakeFrame:
    """Records the limit and the columns asked for; collects ``rows`` rows of them."""

    columns: list[str]
    rows: int
    asked: dict = field(default_factory=dict)

    def limit(self, n: int) -> FakeFrame:
        self.asked["limit"] = n
        return self

    def select(self, *columns: str) -> FakeFrame:
        self.asked["columns"] = list(columns)
        return self

    def toPandas(self) -> pd.DataFrame:
        n = min(self.rows, self.asked["limit"])
        return pd.DataFrame({c: range(n) for c in self.asked["columns"]})


def suite(*expectations: ExpectationSpec) -> Suite:
    return Suite("silver.t", "silver", "t", "silver.t", ("k",), tuple(expectations))


A = ExpectationSpec("a_not_null", "expect_column_values_to_not_be_null", {"column": "a"})
AB = ExpectationSpec("ab_unique", "expect_compound_columns_to_be_unique", {"column_list": ["a", "b"]})
TABLE = ExpectationSpec("rows", "expect_table_row_count_to_be_between", {"min_value": 1})
C = ExpectationSpec("c_in_set", "expect_column_values_to_be_in_set", {"column": "c", "value_set": [1]})


def test_only_the_columns_the_chosen_rules_read_are_collected() -> None:
    df = FakeFrame(["a", "b", "c", "d"], rows=5)
    local = collect_local(suite(A, AB, C), df, ["a_not_null", "ab_unique"], 10)
    assert df.asked == {"limit": 11, "columns": ["a", "b"]}  # c's rule was not chosen
    assert list(local.columns) == ["a", "b"] and len(local) == 5


def test_a_rule_that_names_no_column_collects_every_column() -> None:
    df = FakeFrame(["a", "b", "c"], rows=3)
    collect_local(suite(A, TABLE), df, None, 10)
    assert df.asked["columns"] == ["a", "b", "c"]


def test_a_frame_over_the_bound_or_a_bound_of_zero_stays_with_spark() -> None:
    assert collect_local(suite(A), FakeFrame(["a"], rows=11), None, 10) is None  # 11 rows > 10
    assert len(collect_local(suite(A), FakeFrame(["a"], rows=10), None, 10)) == 10
    zero = FakeFrame(["a"], rows=1)
    assert collect_local(suite(A), zero, None, 0) is None and zero.asked == {}  # nothing computed


def test_a_frame_built_on_the_driver_is_converted_as_spark_converts_what_it_collects() -> None:
    """An Arrow frame (local_frames.py) becomes pandas of the chosen rules' columns, as Spark's
    toPandas makes it from Arrow: integers with nulls as floats, booleans with nulls as objects."""
    table = pa.table(
        {
            "a": pa.array([1, None], pa.int64()),
            "b": pa.array([True, None]),
            "c": pa.array([1, 2], pa.int32()),
            "d": ["x", "y"],
        }
    )
    local = collect_local(suite(A, AB, C), table, ["a_not_null", "ab_unique"], 10)
    assert list(local.columns) == ["a", "b"]
    assert str(local["a"].dtype) == "float64" and local["a"].isna().tolist() == [False, True]
    assert local["b"].dtype == object and local["b"].tolist() == [True, None]


def test_gx_imported_in_the_background_and_at_first_use_at_once() -> None:
    """A job preloads GX in a thread while its stages run; a stage that needs GX before that
    import ends must wait for it, not import it a second time from another thread (GX's circular
    imports then fail with "partially initialized module": the unit tier's CI run of 2026-12-02).
    In a fresh interpreter each time, at delays inside the 3-4 s import."""
    script = (
        "import sys, time\n"
        "from pipelines.quality import engine\n"
        "engine.preload()\n"
        "time.sleep(float(sys.argv[1]))\n"
        "engine.expectation_class('expect_column_values_to_not_be_null')\n"
    )
    for delay in ("0", "0.2", "0.5"):
        done = subprocess.run(
            [sys.executable, "-c", script, delay],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert done.returncode == 0, f"at {delay} s: {done.stderr[-2000:]}"
