"""What the silver stage shares: the tables it writes, their keys, the result it reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipelines.runtime import lake
from pipelines.silver.decode import (
    MEMBER_TABLE,
    RECORD_TABLES,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.runtime.tables import Tables
KEY = ("cluster", "offsets_partition", "record_offset")
MEMBER_KEY = (*KEY, "member_index")


# the tables the decoder feeds, in write order
DATA_TABLES = (*RECORD_TABLES[:2], MEMBER_TABLE, *RECORD_TABLES[2:])
BRONZE = ("bronze", "offsets_records")


@dataclass
class SilverResult:
    mode: str  # up_to_date, incremental, snapshot, full_refresh, redecode, no_bronze
    bronze_version_from: int | None = None
    bronze_version: int | None = None
    bronze_rows: int = 0
    rows: dict[str, int] = field(default_factory=dict)  # decoded rows per table in this run
    inserted: dict[str, int] = field(default_factory=dict)  # rows the writes added per table
    quarantined: int = 0
    released: int = 0  # redecode: quarantine rows now decoded into their tables
    topic_names_resolved: int = 0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "bronze_version_from": self.bronze_version_from,
            "bronze_version": self.bronze_version,
            "bronze_rows": self.bronze_rows,
            "rows": self.rows,
            "inserted": self.inserted,
            "quarantined": self.quarantined,
            "released": self.released,
            "topic_names_resolved": self.topic_names_resolved,
            "notes": self.notes,
        }


def read_table(spark: SparkSession, tables: Tables, table: str) -> DataFrame | None:
    """A silver table, or None when it does not exist yet (tables appear with their first row)."""
    return lake.read(spark, tables.path("silver", table))


def table_exists(spark: SparkSession, tables: Tables, table: str) -> bool:
    return lake.exists(spark, tables.path("silver", table))
