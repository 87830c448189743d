"""Bronze-shaped Arrow rows straight from segment files, without a Spark session (tests and
benchmarks).

The columns are those of ``bronze.offsets_records`` that the silver decoder reads, typed as
``schemas/tables/bronze.yaml`` declares them, so :func:`pipelines.silver.decode.decode_batch`
sees what a Spark task would see.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipelines.codec.segments import discover, iter_segment
from pipelines.runtime.ddl import arrow_type
from pipelines.runtime.tables import load_specs
from pipelines.silver.contract import BRONZE
from pipelines.silver.decode import INPUT_COLUMNS


def bronze_arrow() -> pa.Schema:
    """The decoder's input columns (in :data:`INPUT_COLUMNS` order) with their declared types."""
    declared = {c.name: c.type for c in load_specs()[BRONZE[0]][BRONZE[1]].columns}
    return pa.schema([(name, arrow_type(declared[name])) for name in INPUT_COLUMNS])


BRONZE_ARROW = bronze_arrow()


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
