"""Silver: bronze records decoded into typed Delta tables (docs/silver.md).

The public API: the stage (:func:`run_silver`), re-decoding the quarantine
(:func:`redecode_quarantine`), the status report (:func:`silver_status`), the quarantine moves a
quality rule asks for (:class:`Offenders`, :func:`move_to_quarantine`, :func:`settle_quarantine`)
and the contract other layers and the tests rely on (:mod:`pipelines.silver.contract`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines import lazy_exports
from pipelines.silver.contract import (
    DATA_TABLES,
    KEY,
    MEMBER_KEY,
    MEMBER_TABLE,
    QUALITY_REASON,
    RECORD_TABLES,
    TYPED_TABLES,
    SilverResult,
)

if TYPE_CHECKING:
    from pipelines.silver.ingest import run_silver
    from pipelines.silver.progress import silver_status
    from pipelines.silver.quarantine import Offenders, move_to_quarantine, settle_quarantine
    from pipelines.silver.redecode import redecode_quarantine

__all__ = [
    "DATA_TABLES",
    "KEY",
    "MEMBER_KEY",
    "MEMBER_TABLE",
    "QUALITY_REASON",
    "RECORD_TABLES",
    "TYPED_TABLES",
    "Offenders",
    "SilverResult",
    "move_to_quarantine",
    "redecode_quarantine",
    "run_silver",
    "settle_quarantine",
    "silver_status",
]

# The Spark side is imported on first use, not with the package: Spark's Python workers import
# pipelines.silver.decode (and so this package) to decode, and that stays free of Spark and Delta.
_SPARK_SIDE = {
    "run_silver": "ingest",
    "redecode_quarantine": "redecode",
    "silver_status": "progress",
    "Offenders": "quarantine",
    "move_to_quarantine": "quarantine",
    "settle_quarantine": "quarantine",
}


__getattr__ = lazy_exports(__name__, _SPARK_SIDE)
