"""Rows of a Delta table as plain Python, whoever read them (Spark, delta-rs, Polars), so that
readers can be compared row for row."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any


def plain(value: Any) -> Any:
    """A value as plain Python, whoever read it: Spark's Rows and pyarrow's dicts alike; times in UTC."""
    if hasattr(value, "asDict"):
        value = value.asDict(recursive=True)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)  # the session's zone is UTC
    return value


def sorted_rows(rows: list[dict]) -> list[dict]:
    return sorted((plain(r) for r in rows), key=lambda r: json.dumps(r, default=str, sort_keys=True))


def spark_rows(spark, path: str) -> tuple[list[str], list[dict]]:
    df = spark.read.format("delta").load(path)
    return df.columns, sorted_rows([r.asDict(recursive=True) for r in df.collect()])
