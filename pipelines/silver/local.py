"""Bronze-shaped Arrow rows straight from segment files, without Spark (tests and benchmarks).

The columns are those of ``bronze.offsets_records`` that the silver decoder reads, with the
same types, so :func:`pipelines.silver.decode.decode_batch` sees what a Spark task would see.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipelines.codec.segments import discover, iter_segment

BRONZE_ARROW = pa.schema(
    [
        ("cluster", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("producer_id", pa.int64()),
        ("producer_epoch", pa.int32()),
        ("transactional", pa.bool_()),
        ("control", pa.bool_()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("source_uri", pa.string()),
        ("batch_position", pa.int64()),
        ("base_offset", pa.int64()),
    ]
)


def bronze_rows(paths: Iterable[str | Path], cluster: str) -> Iterator[dict[str, Any]]:
    """One dict per record of the segment files under ``paths`` (control records included)."""
    for seg in discover([Path(p) for p in paths]):
        for batch, _ in iter_segment(seg):
            if batch is None:
                continue
            for r in batch.records or ():
                yield {
                    "cluster": cluster,
                    "partition": seg.partition,
                    "offset": r.offset,
                    "timestamp": None if r.timestamp is None else r.timestamp * 1000,
                    "producer_id": batch.producer_id,
                    "producer_epoch": batch.producer_epoch,
                    "transactional": batch.is_transactional,
                    "control": batch.is_control,
                    "key": r.key,
                    "value": r.value,
                    "source_uri": str(seg.path),
                    "batch_position": batch.position,
                    "base_offset": batch.base_offset,
                }


def bronze_table(rows: Iterable[dict[str, Any]]) -> pa.Table:
    """Rows (dicts with bronze column names; missing columns are null) as an Arrow table."""
    return pa.Table.from_pylist(list(rows), schema=BRONZE_ARROW)
