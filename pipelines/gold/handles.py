"""Rows addressed by integer handles, and the Arrow plumbing gold's engine builds its tables with.

The engine keeps only keys and handles in Python: a handle indexes the rows that carry values (a
partition's persisted gold rows first, then its events), and output columns are gathered from
those rows with Arrow's ``take``. Shared by :mod:`pipelines.gold.engine` and
:mod:`pipelines.gold.modern`. No Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

__all__ = ["Values", "concat", "concat_all", "renamed", "rows", "set_column"]


class Values:
    """Rows that carry values, indexed by handle: the persisted rows first, then the events."""

    def __init__(self, parts: Sequence[pa.Table | None], columns: Sequence[str]) -> None:
        self.columns = tuple(columns)
        tables = [t.select(list(self.columns)) for t in parts if t is not None and t.num_rows]
        if not tables:  # no rows at all (a bucket of a partition whose groups did nothing): typed, empty
            tables = [t.select(list(self.columns)) for t in parts if t is not None][:1]
        schema = tables[0].schema if tables else None
        self.table = pa.concat_tables([t.cast(schema) for t in tables]) if tables else None
        self.starts: list[int] = []
        n = 0
        for t in parts:
            self.starts.append(n)
            n += 0 if t is None else t.num_rows

    def column(self, name: str) -> list[Any]:
        return [] if self.table is None else self.table.column(name).to_pylist()

    def take(self, handles: list[int | None], names: Sequence[str] | None = None) -> list[pa.ChunkedArray]:
        idx = pa.array(handles, pa.int64())
        return [self.table.column(n).take(idx) for n in (names or self.columns)]  # type: ignore[union-attr]


def renamed(table: pa.Table | None, names: dict[str, str]) -> pa.Table | None:
    if table is None:
        return None
    return table.rename_columns([names.get(c, c) for c in table.column_names])


def rows(table: pa.Table | None, columns: Sequence[str]) -> list[tuple]:
    """The table's rows as tuples of the named columns (none for a missing table)."""
    if table is None or not table.num_rows:
        return []
    return list(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


def set_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, values)


def concat(restored: pa.Table | None, keep: list[int], built: pa.Table) -> pa.Table:
    """The restored rows kept unchanged, then the rows this run built, in the built columns."""
    if restored is None or not restored.num_rows:
        return built
    return concat_all([restored.take(pa.array(keep, pa.int64())), built], built.schema)


def concat_all(parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
    out = []
    for t in parts:
        t = t.select(schema.names)
        out.append(t.cast(schema) if t.schema != schema else t)
    return pa.concat_tables(out)
