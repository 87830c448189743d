"""Bronze: raw records from segment files, a live cluster or dumps, ingested idempotently.

The public API: :func:`ingest_source` (one source of a job into ``bronze.offsets_records``, returning an
:class:`IngestResult`), the Kafka source's progress (:func:`stored_positions`, :func:`last_runs`)
and the ``kafka_segments`` Spark data source (:func:`register`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines import lazy_exports

if TYPE_CHECKING:
    from pipelines.bronze.ingest import ingest_source
    from pipelines.bronze.kafka_source import last_runs, stored_positions
    from pipelines.bronze.segments_source import register
    from pipelines.bronze.sink import IngestResult

__all__ = ["IngestResult", "ingest_source", "last_runs", "register", "stored_positions"]

# Imported on first use, not with the package: Spark's Python workers import
# pipelines.bronze.segments_source (and so this package) to read segments, and must not need Delta.
_MODULES = {
    "IngestResult": "sink",
    "ingest_source": "ingest",
    "last_runs": "kafka_source",
    "register": "segments_source",
    "stored_positions": "kafka_source",
}

__getattr__ = lazy_exports(__name__, _MODULES)
