"""One outcome per expectation: GX's verdict with the policy applied; the quality.results table."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyspark.sql import functions as F

from pipelines.runtime import lake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.runtime.tables import Tables

log = logging.getLogger("offsets_lakehouse")

# what a run did about an expectation
PASSED, NOT_EVALUATED, FAILED, WARNED, QUARANTINED = "passed", "not_evaluated", "failed", "warned", "quarantined"


@dataclass
class Outcome:
    suite: str
    layer: str
    table: str
    expectation: str
    expectation_type: str
    policy: str
    evaluated: bool
    success: bool | None
    action: str
    column: str | None = None
    observed_value: Any = None
    element_count: int | None = None
    unexpected_count: int | None = None
    unexpected_percent: float | None = None
    quarantined_rows: int | None = None
    suite_version: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def action_for(success: bool | None, evaluated: bool, policy: str) -> str:
    """What a run does with a verdict (quarantine is completed by the mover)."""
    if not evaluated:
        return NOT_EVALUATED
    if success:
        return PASSED
    return {"fail": FAILED, "warn": WARNED, "quarantine": QUARANTINED}[policy]


@dataclass
class SuiteSummary:
    suite: str
    evaluated: int
    passed: int
    failed: int
    not_evaluated: int
    status: str  # ok, warn, failed, not_evaluated


def summarize(outcomes: list[Outcome]) -> list[SuiteSummary]:
    """Per suite: evaluated/passed/failed counts (failed = GX said no, whatever the policy) and a
    status: failed when a rule failed the run, warn when one warned or quarantined, ok when all
    evaluated rules passed, not_evaluated when none was evaluated."""
    by_suite: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_suite.setdefault(o.suite, []).append(o)
    out = []
    for suite, items in by_suite.items():
        evaluated = [o for o in items if o.evaluated]
        passed = sum(1 for o in evaluated if o.success)
        actions = {o.action for o in items}
        if FAILED in actions:
            status = "failed"
        elif actions & {WARNED, QUARANTINED}:
            status = "warn"
        elif evaluated:
            status = "ok"
        else:
            status = "not_evaluated"
        out.append(
            SuiteSummary(suite, len(evaluated), passed, len(evaluated) - passed, len(items) - len(evaluated), status)
        )
    return out


def plain(value: Any) -> Any:
    """``value`` with numpy scalars (GX's pandas engine reports sums as ``np.int64``) as Python
    numbers, inside lists and dicts too: stored as JSON numbers, read back equal."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    item = getattr(value, "item", None)
    return item() if callable(item) and type(value).__module__ == "numpy" else value


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(plain(value), default=str, sort_keys=True)


def write_results(
    spark: SparkSession,
    tables: Tables,
    run_id: str,
    job: str | None,
    after: str | None,
    outcomes: list[Outcome],
    metadata: dict[str, Any] | None = None,
) -> None:
    """Append the outcomes to quality.results (one Delta commit, carrying ``metadata``)."""
    if not outcomes:
        return
    tables.ensure("quality", "results")
    now = datetime.now(timezone.utc)
    rows = [
        dict(
            run_id=run_id,
            job=job,
            checked_at=now,
            after_stage=after,
            layer=o.layer,
            table=o.table,
            suite=o.suite,
            suite_version=o.suite_version,
            expectation=o.expectation,
            expectation_type=o.expectation_type,
            column=o.column,
            evaluated=o.evaluated,
            success=o.success,
            observed_value=_json(o.observed_value),
            element_count=o.element_count,
            unexpected_count=o.unexpected_count,
            unexpected_percent=None if o.unexpected_percent is None else float(o.unexpected_percent),
            policy=o.policy,
            action=o.action,
            quarantined_rows=o.quarantined_rows,
            details=_json(o.details),
        )
        for o in outcomes
    ]
    spec = tables.spec("quality", "results")
    table = pa.Table.from_pylist(rows, spec.arrow())
    lake.write_rows(spark, table, tables.path("quality", "results"), spec.struct(), metadata=metadata)


def read_results(spark: SparkSession, tables: Tables, run_id: str | None = None) -> tuple[str | None, list[Outcome]]:
    """The outcomes of ``run_id`` (default: the latest run) from quality.results. Read by delta-rs
    on the driver: every incremental validation reads the last one's outcomes first, and a Spark
    read of this table in a fresh process (a scheduled run's) took 11.6 s on 2 cores; files whose
    run id statistics rule the run out are not read. Spark reads what delta-rs cannot."""
    path = tables.path("quality", "results")
    try:
        run_id, rows = _rows_by_delta_rs(path, [c.name for c in tables.spec("quality", "results").columns], run_id)
    except Exception as exc:
        log.debug("delta-rs cannot read %s (%s): Spark reads it", path, exc)
        run_id, rows = _rows_by_spark(spark, path, run_id)
    rows = sorted(rows, key=lambda r: (r["checked_at"], r["suite"], r["expectation"]))
    outcomes = [
        Outcome(
            suite=r["suite"],
            layer=r["layer"],
            table=r["table"],
            expectation=r["expectation"],
            expectation_type=r["expectation_type"],
            policy=r["policy"],
            evaluated=r["evaluated"],
            success=r["success"],
            action=r["action"],
            column=r["column"],
            observed_value=json.loads(r["observed_value"]) if r["observed_value"] else None,
            element_count=r["element_count"],
            unexpected_count=r["unexpected_count"],
            unexpected_percent=r["unexpected_percent"],
            quarantined_rows=r["quarantined_rows"],
            suite_version=r["suite_version"] or "",
            details=json.loads(r["details"]) if r["details"] else {},
        )
        for r in rows
    ]
    return run_id, outcomes


def _rows_by_delta_rs(path: str, columns: list[str], run_id: str | None) -> tuple[str | None, list[dict[str, Any]]]:
    if run_id is None:
        runs = lake.read_arrow_where(path, ["run_id", "checked_at"], None)
        if not runs.num_rows:
            return None, []
        run_id = runs["run_id"][pc.index(runs["checked_at"], pc.max(runs["checked_at"])).as_py()].as_py()
    return run_id, lake.read_arrow_where(path, columns, ds.field("run_id") == run_id).to_pylist()


def _rows_by_spark(spark: SparkSession, path: str, run_id: str | None) -> tuple[str | None, list[Any]]:
    df = lake.read(spark, path)
    if df is None:
        return None, []
    if run_id is None:
        last = df.orderBy(F.col("checked_at").desc()).select("run_id").limit(1).collect()
        if not last:
            return None, []
        run_id = last[0]["run_id"]
    return run_id, df.where(F.col("run_id") == run_id).collect()
