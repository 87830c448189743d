"""What a range of a Delta table's commits changed, read from the commit files themselves.

Delta's change data feed needs ``delta.enableChangeDataFeed`` on every version it serves; a
follower of a table written without it (gold's, ``bronze.end_offsets``) can still tell which rows
a range of commits added and removed: a commit's ``add`` and ``remove`` actions with
``dataChange: true`` name whole data files (Delta writes no ``cdc`` files then, and a compaction
or a retention's rewrite says ``dataChange: false`` for the rows it only moved). Reading the
commit JSON files of the range costs what the range committed, never what the table holds.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from pipelines.runtime.files import data_file_uri, filesystem, read_parquet

__all__ = ["FileChange", "RangeChanges", "changed_files", "read_rows"]

log = logging.getLogger("offsets_lakehouse")


@dataclass(frozen=True)
class FileChange:
    """A data file a commit added or removed, with its partition values (strings as the log has them)."""

    uri: str
    partition: tuple[tuple[str, str | None], ...]


@dataclass(frozen=True)
class RangeChanges:
    """The data files commits ``after + 1 .. upto`` added and removed, net: a file added and removed
    again inside the range is in neither."""

    added: tuple[FileChange, ...]
    removed: tuple[FileChange, ...]

    @property
    def empty(self) -> bool:
        return not self.added and not self.removed


def _actions(path: str, version: int) -> list[dict[str, Any]]:
    filesys, log_path = filesystem(f"{path.rstrip('/')}/_delta_log/{version:020d}.json")
    with filesys.open_input_stream(log_path) as stream:
        return [json.loads(line) for line in stream.read().decode("utf-8").splitlines() if line.strip()]


def changed_files(path: str, after: int, upto: int) -> RangeChanges | None:
    """The files that commits ``after + 1`` to ``upto`` of the table at ``path`` added and removed
    with ``dataChange: true``; None when that cannot be told exactly from the log: a commit file
    gone (the log expired by its retention), a deletion vector (the rows a file lost are not whole
    files), or a commit that replaced the table's metadata (a column or partitioning change)."""
    added: dict[str, FileChange] = {}
    removed: dict[str, FileChange] = {}
    for version in range(after + 1, upto + 1):
        try:
            actions = _actions(path, version)
        except (FileNotFoundError, OSError) as exc:
            log.debug("the log of %s has no commit %d (%s)", path, version, exc)
            return None
        for action in actions:
            if "metaData" in action and version > 0:
                return None
            for kind, into in (("add", added), ("remove", removed)):
                entry = action.get(kind)
                if entry is None or not entry.get("dataChange", True):
                    continue
                if entry.get("deletionVector"):
                    return None
                uri = data_file_uri(path, entry["path"])
                change = FileChange(uri, tuple(sorted((entry.get("partitionValues") or {}).items())))
                if kind == "remove" and uri in added:
                    del added[uri]  # added and removed inside the range: never seen from outside it
                else:
                    into[uri] = change
    return RangeChanges(tuple(added.values()), tuple(removed.values()))


def read_rows(files: Sequence[FileChange], schema: pa.Schema) -> pa.Table:
    """The rows of ``files`` in ``schema``'s columns, partition columns filled from each file's
    partition values (a data file does not hold them)."""
    parts = []
    for f in files:
        values = dict(f.partition)
        stored = pa.schema([field for field in schema if field.name not in values])
        rows = read_parquet([f.uri], stored)
        columns = []
        for field in schema:
            if field.name in values:
                raw = values[field.name]
                value = pa.scalar(None, field.type) if raw is None else pa.scalar(raw).cast(field.type)
                columns.append(pa.repeat(value, rows.num_rows))
            else:
                columns.append(rows.column(field.name))
        parts.append(pa.Table.from_arrays(columns, schema=schema))
    return pa.concat_tables(parts) if parts else schema.empty_table()
