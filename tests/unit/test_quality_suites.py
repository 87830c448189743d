"""Quality suites as data: loading and validation, parameters, policy resolution, jobs.yaml
overrides (quarantine refused on gold, naming the field) and the quarantine predicates. No JVM."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipelines.quality.suites import (
    ExpectationSpec,
    SuiteError,
    check_overrides,
    load_suites,
    parse_suite,
    resolve_policy,
    substitute,
    violation_predicate,
)
from pipelines.runner import load_jobs as load
from pipelines.runtime.config import ConfigError

REPO = Path(__file__).resolve().parents[2]
REQUIRED_SUITES = {
    "bronze.offsets_records",
    "silver.offset_commits",
    "silver.group_metadata",
    "silver.transaction_markers",
    "silver.quarantine",
    "gold.current_offsets",
    "gold.pending_transactions",
    "gold.reconciliation",
    "gold.truth_snapshot",
    "gold.current_lag",
    "gold.lag_history",
    "gold.topic_end_offsets",
    "silver.group_members",
    "silver.tombstones",
    "silver.version_inventory",
    "silver.topic_ids",
    "gold.current_groups",
    "gold.offset_history",
    "gold.group_generations",
    "gold.consumer_group_members",
    "gold.partition_progress",
}


def test_repository_suites_load_and_every_expectation_is_a_gx_type() -> None:
    from pipelines.quality.engine import expectation_class

    suites = load_suites()
    assert set(suites.suites) == REQUIRED_SUITES
    for suite in suites:
        assert suite.description and suite.version
        for e in suite.expectations:
            expectation_class(e.type)  # raises for a type GX does not have
            if e.can_quarantine and suite.layer != "gold":
                assert suite.key, f"{suite.name}: a quarantinable rule needs the suite's key"


def test_every_threshold_is_justified_by_a_comment() -> None:
    """Each expectation in a suite file is preceded (within its block) by a comment line."""
    for path in sorted((REPO / "expectations").glob("*.yaml")):
        lines = path.read_text().splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith("  - name:")]
        for n, i in enumerate(starts):
            prev = starts[n - 1] if n else next(j for j, ln in enumerate(lines) if ln.startswith("expectations:"))
            assert any(ln.strip().startswith("#") for ln in lines[prev + 1 : i]), (path.name, lines[i])


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"expectations": []}, "suite: field required"),
        ({"suite": "platinum.x", "expectations": []}, "must be <layer>.<table>"),
        ({"suite": "silver.x", "expectations": []}, "at least one"),
        ({"suite": "silver.x", "expectations": [{"name": "a", "type": "drop table"}]}, "not a Great Expectations"),
        (
            {"suite": "gold.x", "expectations": [{"name": "a", "type": "expect_x", "policy": "quarantine"}]},
            "quarantine is not allowed on gold",
        ),
        (
            {
                "suite": "silver.x",
                "expectations": [{"name": "a", "type": "expect_x"}, {"name": "a", "type": "expect_y"}],
            },
            "appears twice",
        ),
        ({"suite": "silver.x", "expectations": [{"name": "a", "type": "expect_x", "policy": "ignore"}]}, "policy"),
    ],
)
def test_invalid_suite_files_name_the_field(doc, message) -> None:
    with pytest.raises(SuiteError, match=message):
        parse_suite(doc, "x.yaml")


def test_suite_name_must_match_file(tmp_path: Path) -> None:
    (tmp_path / "silver.a.yaml").write_text(
        yaml.safe_dump({"suite": "silver.b", "expectations": [{"name": "n", "type": "expect_x"}]})
    )
    with pytest.raises(SuiteError, match="must match the file name"):
        load_suites(tmp_path)


def test_parameters_come_from_the_quality_settings() -> None:
    kwargs = {"column": "c", "max_value": "$max_clock_skew_minutes", "value_set": ["$a", "b"]}
    assert substitute(kwargs, {"max_clock_skew_minutes": 3, "a": 1}) == {
        "column": "c",
        "max_value": 3,
        "value_set": [1, "b"],
    }
    with pytest.raises(SuiteError, match="unknown parameter"):
        substitute({"max_value": "$nope"}, {})


def test_policy_resolution_most_specific_first() -> None:
    suites = load_suites()
    commits = suites["silver.offset_commits"]
    rule = commits.expectation("committed_offset_at_least_minus_one")
    assert resolve_policy(commits, rule) == "fail"  # the job's default
    assert resolve_policy(commits, rule, "warn") == "warn"
    assert resolve_policy(commits, rule, "fail", {"silver": "quarantine"}) == "quarantine"
    assert resolve_policy(commits, rule, "fail", {"silver": "quarantine", "silver.offset_commits": "warn"}) == "warn"
    both = {"silver.offset_commits": "warn", "silver.offset_commits.committed_offset_at_least_minus_one": "quarantine"}
    assert resolve_policy(commits, rule, "fail", both) == "quarantine"
    assert resolve_policy(commits, rule, "fail", {"committed_offset_at_least_minus_one": "warn"}) == "warn"
    # the suite's own default for a rule beats the job default, not an override
    undecodable = suites["silver.quarantine"].expectation("undecodable_rate_zero")
    assert resolve_policy(suites["silver.quarantine"], undecodable, "fail") == "warn"
    assert resolve_policy(suites["silver.quarantine"], undecodable, "warn", {"undecodable_rate_zero": "fail"}) == "fail"
    # quarantine where rows cannot move (gold, aggregate rules, quarantinable: false) fails instead
    gold = suites["gold.current_offsets"]
    assert resolve_policy(gold, gold.expectation("key_unique"), "quarantine") == "fail"
    bronze = suites["bronze.offsets_records"]
    assert resolve_policy(bronze, bronze.expectation("position_unique"), "quarantine") == "fail"
    assert resolve_policy(bronze, bronze.expectation("offsets_increasing_in_file"), "quarantine") == "fail"
    assert resolve_policy(bronze, bronze.expectation("key_on_data_records"), "quarantine") == "quarantine"


def test_override_keys_are_checked() -> None:
    assert check_overrides({"silver": "quarantine", "bronze.offsets_records.key_on_data_records": "quarantine"}) == []
    assert check_overrides({"gold": "warn", "gold.truth_snapshot": "fail"}) == []
    [problem] = check_overrides({"gold.current_offsets": "quarantine"})
    assert problem.startswith("gold.current_offsets: quarantine is not allowed on gold suites")
    [problem] = check_overrides({"key_unique": "quarantine"})  # gold.current_offsets and gold.pending_transactions
    assert "not allowed on gold" in problem
    [problem] = check_overrides({"silver.quarantine.undecodable_rate_zero": "quarantine"})
    assert "cannot quarantine rows" in problem
    [problem] = check_overrides({"silver.offset_comits": "warn"})
    assert problem.startswith("silver.offset_comits: unknown suite, layer or expectation")


JOBS = """
lakehouse: {{root: lh}}
sources:
  a: {{kind: segments, cluster: c1, paths: [logs], offsets_partitions: 50}}
jobs:
  j:
    sources: [a]
    quality:
      policy: warn
      overrides: {{{overrides}}}
"""


def test_jobs_yaml_rejects_quarantine_on_gold_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(JOBS.format(overrides='"gold.pending_transactions": quarantine'))
    with pytest.raises(ConfigError) as err:
        load(path)
    assert str(err.value).startswith(
        f"{path}: jobs.j.quality.overrides: gold.pending_transactions: quarantine is not allowed on gold suites"
    )
    path.write_text(JOBS.format(overrides='silver: quarantine, "gold.pending_transactions": warn'))
    job = load(path).jobs["j"]
    assert job.quality.overrides == {"silver": "quarantine", "gold.pending_transactions": "warn"}
    assert job.stages == ["bronze", "silver", "gold", "quality"]


@pytest.mark.parametrize(
    ("type_", "kwargs", "sql"),
    [
        ("expect_column_values_to_not_be_null", {"column": "c"}, "`c` IS NULL"),
        ("expect_column_values_to_be_between", {"column": "c", "min_value": -1}, "`c` IS NOT NULL AND (`c` < -1)"),
        (
            "expect_column_values_to_be_between",
            {"column": "c", "min_value": 0, "max_value": 0},
            "`c` IS NOT NULL AND (`c` < 0 OR `c` > 0)",
        ),
        (
            "expect_column_values_to_be_between",
            {"column": "c", "max_value": 1.5, "strict_max": True},
            "`c` IS NOT NULL AND (`c` >= 1.5)",
        ),
        (
            "expect_column_value_lengths_to_be_between",
            {"column": "g", "min_value": 1},
            "`g` IS NOT NULL AND (length(`g`) < 1)",
        ),
        (
            "expect_column_values_to_be_in_set",
            {"column": "t", "value_set": ["COMMIT", "it's"]},
            "`t` IS NOT NULL AND NOT (`t` IN ('COMMIT', 'it\\'s'))",
        ),
        (
            "expect_column_values_to_be_in_set",
            {"column": "b", "value_set": [True]},
            "`b` IS NOT NULL AND NOT (`b` IN (true))",
        ),
    ],
)
def test_violation_predicates(type_, kwargs, sql) -> None:
    assert violation_predicate(ExpectationSpec("x", type_, kwargs), kwargs) == sql


def test_aggregate_rules_have_no_row_predicate() -> None:
    spec = ExpectationSpec("x", "expect_column_sum_to_be_between", {"column": "c"})
    assert not spec.can_quarantine
    with pytest.raises(ValueError, match="not a row-level"):
        violation_predicate(spec, spec.kwargs)
