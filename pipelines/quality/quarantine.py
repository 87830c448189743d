"""The offenders of a quality rule with policy ``quarantine``, as silver keys. Quality only finds
them; silver moves them (:func:`pipelines.silver.move_to_quarantine`), so each layer owns its
writes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from pipelines.silver import KEY, QUALITY_REASON, Offenders

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def offender_keys(frame: DataFrame, key: tuple[str, ...], predicate: str) -> DataFrame:
    """The offending rows of a suite frame as silver keys (bronze frames name them differently)."""
    cols = [F.col(k).alias(n) for k, n in zip(key, KEY, strict=True)]
    group = F.col("group_id") if "group_id" in frame.columns else F.lit(None).cast("string")
    return frame.where(predicate).select(*cols, group.alias("group_id")).distinct()


def offenders(suite: str, expectation: str, detail: str, suite_version: str, keys: DataFrame) -> Offenders:
    """What silver needs to quarantine the rows of one rule: reason ``quality:<suite>.<expectation>``,
    decoder version ``quality:<suite version>``."""
    return Offenders(f"{QUALITY_REASON}{suite}.{expectation}", detail, f"{QUALITY_REASON}{suite_version}", keys)
