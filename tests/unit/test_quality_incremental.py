"""How an incremental validation's parts make a full validation's outcome (quality/incremental.py
``merge``): earlier - then + now for every count, then Great Expectations' own verdict and
percentage on the totals. The totals below are worked out by hand."""

from __future__ import annotations

import pytest

from pipelines.quality.incremental import merge
from pipelines.quality.results import Outcome

HOW = {"as_of_run": "r1", "how": "incremental"}


def outcome(
    element: int | None = None,
    unexpected: int | None = None,
    missing: int | None = 0,
    *,
    kind: str = "expect_column_values_to_be_between",
    observed=None,
    evaluated: bool = True,
    policy: str = "warn",
    **kwargs,
) -> Outcome:
    details = {"kwargs": kwargs}
    if missing is not None and kind != "expect_column_sum_to_be_between":
        details["missing_count"] = missing
    return Outcome(
        suite="silver.offset_commits",
        layer="silver",
        table="offset_commits",
        expectation="rule",
        expectation_type=kind,
        policy=policy,
        evaluated=evaluated,
        success=True if evaluated else None,
        action="passed" if evaluated else "not_evaluated",
        observed_value=observed,
        element_count=element,
        unexpected_count=unexpected,
        unexpected_percent=0.0 if element else None,
        details=details,
    )


def test_new_rows_add_to_the_earlier_counts() -> None:
    """Per row, inserts only: no row of the earlier validation is in the part validated now."""
    m = merge(outcome(100, 0), outcome(10, 1), None, HOW)
    assert m is not None
    assert (m.element_count, m.unexpected_count, m.success, m.action) == (110, 1, False, "warned")
    assert m.unexpected_percent == pytest.approx(100 / 110)
    assert m.details["validated"] == HOW


def test_changed_groups_replace_what_they_were() -> None:
    """Per group: the changed groups held 20 rows then (none unexpected) and 21 now, 2 of them
    duplicates of each other: 100 - 20 + 21 rows, 2 unexpected."""
    m = merge(outcome(100, 0), outcome(21, 2), outcome(20, 0), HOW)
    assert m is not None
    assert (m.element_count, m.unexpected_count, m.success) == (101, 2, False)
    assert m.unexpected_percent == pytest.approx(2 / 101 * 100)


def test_missing_values_are_left_out_of_the_percentage() -> None:
    """100 - 20 + 30 = 110 rows, 5 - 2 + 1 = 4 of them null: 3 unexpected of 106 judged."""
    m = merge(outcome(100, 0, 5), outcome(30, 3, 1), outcome(20, 0, 2), HOW)
    assert m is not None
    assert (m.element_count, m.unexpected_count, m.details["missing_count"]) == (110, 3, 4)
    assert m.unexpected_percent == pytest.approx(3 / 106 * 100)


def test_mostly_is_judged_on_the_totals() -> None:
    """5 unexpected of 100: 95 % pass, enough for mostly 0.9 (a part alone, 5 of 10, would not be)."""
    m = merge(outcome(90, 0, mostly=0.9), outcome(10, 5, mostly=0.9), None, HOW)
    assert m is not None and m.success is True and m.action == "passed"


def test_an_empty_table_reports_no_unexpected_count() -> None:
    """As the engine reports an empty frame: no counts, and vacuously true."""
    m = merge(outcome(0, None), outcome(0, None), None, HOW)
    assert m is not None
    assert (m.element_count, m.unexpected_count, m.unexpected_percent, m.success) == (0, None, None, True)


def test_an_aggregate_rule_adds_its_observed_sums() -> None:
    """offset_gaps: the sum of gaps, 10 - 3 + 5 = 12, judged against min_value 0 again."""
    kind = "expect_column_sum_to_be_between"
    m = merge(
        outcome(kind=kind, observed=10, min_value=0),
        outcome(kind=kind, observed=5, min_value=0),
        outcome(kind=kind, observed=3, min_value=0),
        HOW,
    )
    assert m is not None and (m.observed_value, m.success) == (12, True)
    low = merge(
        outcome(kind=kind, observed=10, min_value=0, max_value=11),
        outcome(kind=kind, observed=5, min_value=0, max_value=11),
        None,
        HOW,
    )
    assert low is not None and (low.observed_value, low.success) == (15, False)


def test_a_rule_judged_in_one_part_only_does_not_combine() -> None:
    assert merge(outcome(100, 0), outcome(evaluated=False), None, HOW) is None
    assert merge(outcome(evaluated=False), outcome(10, 0), None, HOW) is None
    kept = merge(outcome(evaluated=False), outcome(evaluated=False), None, HOW)
    assert kept is not None and kept.action == "not_evaluated" and kept.details["validated"] == HOW


def test_notes_on_judged_clusters_do_not_combine() -> None:
    noted = outcome(10, 0)
    noted.details["notes"] = {"evaluated_clusters": ["a"], "not_evaluated_clusters": ["b"]}
    assert merge(outcome(100, 0), noted, None, HOW) is None
