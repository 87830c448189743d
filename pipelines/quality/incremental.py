"""Incremental validation: a suite is validated on what changed since its last validation.

A quality run that follows an earlier one (the memo in ``quality.results``' commit metadata says
which run validated which table versions, with the same suites, parameters and policies) plans
each suite (:func:`plan`):

* **unchanged**: none of the tables its frame reads (``frames.SOURCES``) has a new version: the
  earlier outcomes stand, copied into this run (a clock-dependent rule that failed is validated
  again: the clock may have made it pass);
* **incremental**: the suite has a scope (:data:`SCOPES`), the earlier validation passed every rule
  it evaluated, and its tables' change data feeds say what changed. Two kinds:

  - *per row*: each row's verdicts depend on the row alone (and on settings the memo holds
    fixed). When the feed holds inserts only, the suite is validated on the inserted rows, and
    every count adds to the earlier one;
  - *per group*: verdicts depend on the rows sharing the scope's columns (a uniqueness rule, a
    window in log order, a row and its members). The groups any change touched are validated
    twice, as they were at the earlier validation's versions and as they are now, and the
    outcome is ``earlier - then + now`` for every count (element, missing, unexpected, and the
    observed sum of an aggregate rule). A per-row suite whose feed removed or rewrote rows is
    validated this way, its key as the group;

* **full**: otherwise — no earlier validation, ``quality --full``, a rule that failed or warned
  earlier (its unexpected samples must be of the whole table), a feed that cannot serve the
  range, or changes that touch half the table's groups or more (two partial validations would
  cost more than one full one).

Exactness: a rule's verdict on a row depends only on the rows of its group (or the row alone),
so the groups no change touched contribute what they contributed before. The earlier outcome
had no unexpected row, so neither had any part of it; the counts of element and missing rows
are subtracted for the touched groups as they were. ``tests/spark/test_quality_incremental.py``
compares every rule of an incremental run with a full validation of the same tables, and
``bench/pipeline_bench.py --quality`` does so after its increment.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from pipelines.quality.frames import SMALL_TABLE_ROWS, Reader, sources
from pipelines.quality.results import NOT_EVALUATED, PASSED, Outcome, action_for
from pipelines.runtime import lake
from pipelines.silver import KEY

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.quality.suites import Suite
    from pipelines.runtime.tables import Tables

log = logging.getLogger("offsets_lakehouse")

UNCHANGED, INCREMENTAL, FULL = "unchanged", "incremental", "full"
# the earlier version of a table dropped (and perhaps created again) since: unlike any version now
RECREATED = -1
_CDF_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")


@dataclass(frozen=True)
class Scope:
    """The rows a suite's rules judge together: rows with equal ``columns`` (in every table the
    suite's frame reads); ``per_row``: each row alone (``columns`` is then its key)."""

    columns: tuple[str, ...]
    per_row: bool = False


# Suites with a scope, and why it is theirs (frames.py builds the frames). Every other suite
# reads tables without a change data feed (gold's, silver's derived tables) or compares whole
# tables (reconciliation, the census): those are validated in full when their tables change.
SCOPES: dict[str, Scope] = {
    # uniqueness of (cluster, partition, offset), offsets increasing within a file, gaps in a
    # partition: every window and key is within one offsets partition
    "bronze.offsets_records": Scope(("cluster", "partition")),
    # each rule reads the row's own columns (the partition rule: the group id and the jobs.yaml
    # partition count; the clock rule: the row's timestamp, and a passing row stays passing)
    "silver.offset_commits": Scope(KEY, per_row=True),
    "silver.group_metadata": Scope(KEY, per_row=True),
    "silver.tombstones": Scope(KEY, per_row=True),
    "silver.transaction_markers": Scope(KEY, per_row=True),
    # a group record and its member rows: one window per record key
    "silver.group_members": Scope(KEY),
}

# how many more rows than ``quality.incremental_min_rows`` a table needs to be validated per group
GROUP_ROWS_FACTOR = 10

# frames whose rules read the wall clock: an unexpected row there may pass later with nothing changed
CLOCK_FRAMES = frozenset({"silver.offset_commits"})


@dataclass
class Changes:
    """What the change data feeds of a suite's tables hold between two validations."""

    groups: pa.Table  # the distinct scope columns of every changed row
    rows: int  # change rows (inserts, deletes, both images of an update)
    inserts_only: bool
    ranges: dict[str, tuple[int, int]]  # table -> (first, last) version with changes


@dataclass
class Plan:
    kind: str  # UNCHANGED, INCREMENTAL, FULL
    reason: str
    changes: Changes | None = None
    scope: Scope | None = None


def plan(
    spark: SparkSession,
    tables: Tables,
    suite: Suite,
    earlier: list[Outcome] | None,
    before: dict[str, int | None] | None,
    now: dict[str, int | None],
    min_rows: int = 0,
) -> Plan:
    """How to validate ``suite``, given the outcomes and table versions of its last validation;
    ``min_rows``: a smaller table is validated in full (cheaper there than two partial validations)."""
    if earlier is None or before is None:
        return Plan(FULL, "no earlier validation with these suites and settings")
    if {e.name for e in suite.expectations} != {o.expectation for o in earlier}:
        return Plan(FULL, "the earlier validation has other rules")
    names = sources(suite.frame)
    changed = [n for n in names if before.get(n) != now.get(n)]
    passed = all(o.action in (PASSED, NOT_EVALUATED) for o in earlier)
    if not changed:
        if suite.frame in CLOCK_FRAMES and not passed:
            return Plan(FULL, "a rule that reads the clock did not pass")
        return Plan(UNCHANGED, "none of its tables changed")
    scope = SCOPES.get(suite.frame)
    if scope is None:
        return Plan(FULL, f"{', '.join(changed)} changed")
    if not passed:
        return Plan(FULL, "a rule did not pass at the earlier validation")
    rows = lake.row_count(tables.path(*names[0].split(".", 1))) if min_rows else 0
    if rows is None or rows < min_rows:
        return Plan(FULL, f"{names[0]} has {rows} rows, fewer than {min_rows}")
    changes = read_changes(spark, tables, scope, changed, before, now)
    if changes is None:
        return Plan(FULL, "the change data feed cannot serve the versions since")
    if scope.per_row and changes.inserts_only:
        return Plan(INCREMENTAL, f"{changes.rows} rows inserted", changes, scope)
    # the changed groups are read and validated twice (then and now): below this many rows one
    # full validation costs less (silver.group_members, 100k rows: 2.7 s against 1.8 s in full)
    if rows < GROUP_ROWS_FACTOR * min_rows:
        return Plan(FULL, f"{names[0]} has {rows} rows, fewer than {GROUP_ROWS_FACTOR * min_rows} for its groups")
    total = _groups_in(tables, names[0], scope)
    if total is None or 2 * changes.groups.num_rows > total:
        return Plan(FULL, f"changes touch {changes.groups.num_rows} of {total} groups")
    return Plan(INCREMENTAL, f"{changes.groups.num_rows} of {total} groups changed", changes, scope)


def read_changes(
    spark: SparkSession,
    tables: Tables,
    scope: Scope,
    changed: list[str],
    before: dict[str, int | None],
    now: dict[str, int | None],
) -> Changes | None:
    """The change data feeds of the ``changed`` tables since ``before`` (None when a table was
    created or replaced since, or its feed cannot serve the range)."""
    parts, rows, inserts_only, ranges = [], 0, True, {}
    for name in changed:
        start, end = before.get(name), now.get(name)
        if start is None or start == RECREATED or end is None or end <= start:
            return None
        layer, table = name.split(".", 1)
        try:
            feed = lake.changes_arrow(spark, tables.path(layer, table), start + 1, end, scope.columns)
        except Exception as exc:  # a feed turned off, files vacuumed: a full validation instead
            log.debug("quality: no change data feed for %s %d..%d (%s)", name, start + 1, end, exc)
            return None
        rows += feed.num_rows
        inserts_only &= bool(pc.all(pc.equal(feed["_change_type"], "insert")).as_py() is not False)
        parts.append(feed.select(list(scope.columns)))
        ranges[name] = (start + 1, end)
    groups = pa.concat_tables(parts).group_by(list(scope.columns)).aggregate([])
    return Changes(groups, rows, inserts_only, ranges)


def _groups_in(tables: Tables, name: str, scope: Scope) -> int | None:
    """How many groups of ``scope`` the table has now: distinct partition values when the scope
    is the table's partitioning, else its rows (from the Delta log's file statistics)."""
    layer, table = name.split(".", 1)
    actions = lake.add_actions(tables.path(layer, table))
    if actions is None:
        return None
    partition = [f"partition.{c}" for c in scope.columns]
    if all(c in actions.column_names for c in partition):
        return actions.select(partition).group_by(partition).aggregate([]).num_rows
    return lake.row_count(tables.path(layer, table))


# -- the frames of an increment ----------------------------------------------------------------------
def inserted_reader(spark: SparkSession, tables: Tables, changes: Changes, local: bool = False) -> Reader:
    """The rows the changes inserted, as the tables' rows (per-row scopes, inserts only); ``local``:
    as Arrow for frames built on the driver. Otherwise a few are still read by delta-rs and
    handed to Spark as a local relation: Spark's own read of the change data feed, then the
    frame's jobs over it, took 7.2-8.0 s for 1,372 rows of silver.offset_commits (the 200k
    benchmark's increment), longer than its full validation."""

    def read(layer: str, table: str, columns: Sequence[str] | None = None) -> Any:
        path = tables.path(layer, table)
        name = f"{layer}.{table}"
        if name not in changes.ranges:
            if local:
                schema = lake.arrow_schema(path)
                return None if schema is None else schema.empty_table()
            df = lake.read(spark, path)
            return None if df is None else df.limit(0)
        start, end = changes.ranges[name]
        if local or (changes.rows <= SMALL_TABLE_ROWS and not lake.remote(spark)):
            schema = lake.arrow_schema(path, end)
            if schema is not None:
                feed = lake.changes_arrow(spark, path, start, end, schema.names)
                inserted = feed.filter(pc.equal(feed["_change_type"], "insert")).drop_columns(["_change_type"])
                return inserted if local else lake.spark_frame(spark, inserted)
        feed = lake.changes(spark, path, start, end)
        return feed.where(F.col("_change_type") == "insert").drop(*_CDF_COLUMNS)

    return read


def group_reader(
    spark: SparkSession,
    tables: Tables,
    plan: Plan,
    names: tuple[str, ...],
    at: dict[str, int | None] | None,
    local: bool = False,
) -> Reader:
    """The tables' rows in the changed groups, now (``at`` None) or at the versions ``at``;
    ``local``: as Arrow for frames built on the driver."""
    assert plan.changes is not None and plan.scope is not None
    columns = list(plan.scope.columns)
    groups = plan.changes.groups if local else spark.createDataFrame(plan.changes.groups.to_pandas()).select(*columns)

    def read(layer: str, table: str, wanted: Sequence[str] | None = None) -> Any:
        name = f"{layer}.{table}"
        path = tables.path(layer, table)
        version = None if at is None else at.get(name)
        if at is not None and version is None:
            return None
        if local:
            scoped = name in names
            read_columns = None if wanted is None else [*wanted, *(c for c in columns if scoped and c not in wanted)]
            rows = lake.read_arrow(spark, path, read_columns, at=version)
            if rows is None or not scoped:
                return rows
            return _in_groups(rows, groups, columns).select(list(wanted or rows.column_names))
        df = lake.read(spark, path) if version is None else lake.read_at(spark, path, version)
        if df is None or name not in names:
            return df
        return df.join(F.broadcast(groups), columns, "left_semi")

    return read


def _in_groups(rows: pa.Table, groups: pa.Table, columns: list[str]) -> pa.Table:
    """The rows of ``rows`` whose ``columns`` are a row of ``groups`` (a null matches nothing), in
    their order. The semi join runs on the key columns alone: Arrow's joins refuse some types of
    the columns they carry (lists of structs)."""
    keys = rows.select(columns).append_column("_row", pa.array(range(rows.num_rows), pa.int64()))
    hit = keys.join(groups.select(columns), columns, join_type="left semi")["_row"]
    return rows.take(pc.take(hit, pc.sort_indices(hit)))


# -- outcomes --------------------------------------------------------------------------------------
def carried(earlier: list[Outcome], run_id: str) -> list[Outcome]:
    """The earlier outcomes, as this run's (nothing the suite reads changed)."""
    return [replace(o, details={**o.details, "validated": {"as_of_run": run_id, "how": UNCHANGED}}) for o in earlier]


def merge(earlier: Outcome, now: Outcome, then: Outcome | None, how: dict[str, Any]) -> Outcome | None:
    """The outcome of a full validation from the earlier one and the changed groups' outcomes now
    and then (``then`` None: no row of the earlier validation was in them). None when the parts
    do not combine (a rule evaluated in one and not the other)."""
    if not now.evaluated or not earlier.evaluated or (then is not None and not then.evaluated):
        same = not now.evaluated and not earlier.evaluated and (then is None or not then.evaluated)
        return replace(earlier, details={**earlier.details, "validated": how}) if same else None
    if now.details.get("notes") or earlier.details.get("notes"):
        return None  # clusters judged and not judged: the parts' notes do not add up

    def total(get) -> int | float | None:
        parts = [get(earlier), get(now), -(get(then) or 0) if then is not None else 0]
        return None if all(p is None for p in parts[:2]) else sum(p or 0 for p in parts)

    kwargs = now.details.get("kwargs") or {}
    details = {**now.details, "validated": how}
    if now.expectation_type == "expect_column_sum_to_be_between":
        parts = [o.observed_value for o in (earlier, now, then) if o is not None]
        if not all(v is None or isinstance(v, (int, float)) for v in parts):
            return None  # not a number (results written before numbers were stored as numbers)
        observed = total(lambda o: o.observed_value)
        return with_action(replace(now, observed_value=observed, success=_between(observed, kwargs), details=details))
    element = int(total(lambda o: o.element_count) or 0)
    missing = total(lambda o: o.details.get("missing_count"))
    unexpected = int(total(lambda o: o.unexpected_count) or 0)
    # Great Expectations' arithmetic for map expectations (expectation.py: _mostly_success,
    # _format_map_output), and the engine's: an empty frame reports no unexpected counts
    nonnull = element - int(missing or 0)
    success = True if element == 0 or nonnull == 0 else (nonnull - unexpected) / nonnull >= kwargs.get("mostly", 1)
    count: int | None = None
    percent: float | None = None
    if element > 0:
        count = unexpected
        if missing is None:
            percent = unexpected / element * 100
        elif nonnull > 0:
            percent = unexpected / nonnull * 100
    if missing is not None:
        details["missing_count"] = int(missing)
    return with_action(
        replace(
            now,
            element_count=element,
            unexpected_count=count,
            unexpected_percent=percent,
            success=success,
            details=details,
        )
    )


def _between(value: Any, kwargs: dict[str, Any]) -> bool:
    """expect_column_sum_to_be_between's verdict on ``value``."""
    if value is None:
        return False
    low, high = kwargs.get("min_value"), kwargs.get("max_value")
    above = low is None or (value > low if kwargs.get("strict_min") else value >= low)
    below = high is None or (value < high if kwargs.get("strict_max") else value <= high)
    return bool(above and below)


def with_action(outcome: Outcome) -> Outcome:
    return replace(outcome, action=action_for(outcome.success, outcome.evaluated, outcome.policy))
