"""Data quality: expectation suites (``expectations/*.yaml``) run with Great Expectations on the
lakehouse's Spark DataFrames, with per-rule policies, a results table and Data Docs
(docs/quality.md).

The public API: the stage (:func:`run_quality`, its :class:`QualityReport`), the suites
(:func:`load_suites`, :func:`check_job_overrides`, ``LAYERS``) and the report of a run
(:func:`load_report`, :func:`render_text`).
"""

from pipelines.quality.report import load_report, render_text
from pipelines.quality.stage import QualityReport, run_quality
from pipelines.quality.suites import LAYERS, check_job_overrides, load_suites

__all__ = [
    "LAYERS",
    "QualityReport",
    "check_job_overrides",
    "load_report",
    "load_suites",
    "render_text",
    "run_quality",
]
