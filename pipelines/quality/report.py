"""``offsets-lakehouse quality report``: the latest (or a given) run's summary, as data and text."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.quality.docs import docs_root, docs_uri
from pipelines.quality.results import FAILED, Outcome, read_results, summarize

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.runtime.tables import Tables


def report_doc(
    run_id: str | None, outcomes: list[Outcome], docs_dir: Path | None, docs_store: str | None = None
) -> dict[str, Any]:
    """The report as one JSON-able document (also what the text rendering prints). Data Docs are
    looked for in the local ``docs_dir``, or at the object-store URI ``docs_store``."""
    suites = [asdict(s) for s in summarize(outcomes)]
    index = docs_dir / run_id / "index.html" if docs_dir is not None and run_id else None
    latest = docs_dir / "latest" / "index.html" if docs_dir is not None else None
    docs = str(index) if index is not None and index.exists() else None
    if docs_store is not None and run_id:
        from pipelines.runtime import files

        docs = f"{docs_store}/{run_id}/index.html" if files.exists(f"{docs_store}/{run_id}/index.html") else None
    return {
        "run_id": run_id,
        "status": "failed" if any(o.action == FAILED for o in outcomes) else ("ok" if outcomes else "no_results"),
        "suites": suites,
        "problems": [
            {
                "suite": o.suite,
                "expectation": o.expectation,
                "action": o.action,
                "unexpected_count": o.unexpected_count,
                "observed_value": o.observed_value,
            }
            for o in outcomes
            if o.evaluated and not o.success
        ],
        "data_docs": docs,
        "data_docs_latest": str(latest) if latest is not None and latest.exists() else None,
    }


def render_text(doc: dict[str, Any]) -> str:
    """A fixed-width table: suite, evaluated, passed, failed, status; then problems and docs."""
    if not doc["run_id"]:
        return "no quality results yet: run `offsets-lakehouse quality JOB` or a job with the quality stage\n"
    header = ("suite", "evaluated", "passed", "failed", "not evaluated", "status")
    rows = [
        (s["suite"], str(s["evaluated"]), str(s["passed"]), str(s["failed"]), str(s["not_evaluated"]), s["status"])
        for s in doc["suites"]
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    lines = [f"quality run {doc['run_id']}: {doc['status']}", fmt.format(*header)]
    lines += [fmt.format(*r) for r in rows]
    for p in doc["problems"]:
        lines.append(
            f"{p['action']}: {p['suite']}.{p['expectation']} "
            f"({p['unexpected_count'] if p['unexpected_count'] is not None else p['observed_value']} unexpected)"
        )
    lines.append(f"Data Docs: {doc['data_docs'] or 'not built'}")
    if doc["data_docs_latest"]:
        lines.append(f"latest:    {doc['data_docs_latest']}")
    return "\n".join(lines) + "\n"


def load_report(spark: SparkSession, tables: Tables, run_id: str | None = None) -> dict[str, Any]:
    run_id, outcomes = read_results(spark, tables, run_id)
    local = docs_root(tables.root)
    return report_doc(run_id, outcomes, local, None if local is not None else docs_uri(tables.root))
