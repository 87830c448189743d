"""Silver's contract, declared once: the tables it writes, their keys, the quarantine reason of
quality moves, and the result a run reports. Pure data (no Spark): the decoder, quality, gold
and the tests take these names from here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipelines.runtime.steps import Steps

KEY = ("cluster", "offsets_partition", "record_offset")
MEMBER_KEY = (*KEY, "member_index")

# silver tables with one struct column in the wide decoded row, in wide-row order: every record
# of bronze lands in exactly one of them (decoded, quarantined, or a transaction marker)
RECORD_TABLES = (
    "offset_commits",
    "group_metadata",
    "consumer_group_metadata",
    "consumer_group_partition_metadata",
    "consumer_group_member_metadata",
    "consumer_group_target_assignment_metadata",
    "consumer_group_target_assignment_member",
    "consumer_group_current_member_assignment",
    "consumer_group_regular_expressions",
    "share_group_records",
    "streams_group_records",
    "tombstones",
    "transaction_markers",
    "quarantine",
)
MEMBER_TABLE = "group_members"  # one row per member of a group_metadata record
# the tables the decoder feeds, in write order
DATA_TABLES = (*RECORD_TABLES[:2], MEMBER_TABLE, *RECORD_TABLES[2:])
# the tables of decoded records: what a quality rule's quarantine move deletes from
TYPED_TABLES = (*(t for t in RECORD_TABLES if t != "quarantine"), MEMBER_TABLE)
# quarantine reasons of records a quality rule moved there (they decode fine; re-decoding keeps them)
QUALITY_REASON = "quality:"

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
    steps: Steps = field(default_factory=lambda: Steps("silver"))  # wall time per step

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
            "steps": self.steps,
        }
