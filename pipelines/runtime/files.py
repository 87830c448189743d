"""Files on local disks or object stores through ``pyarrow.fs``, and Parquet data files read as Arrow.

No Spark: this is what Python workers use to read what they need themselves — bronze's segment
files (Spark's Python data sources have no Hadoop filesystem) and the data files of a Delta
table's snapshot that gold replays (the file list comes from the Delta log on the driver,
:func:`pipelines.runtime.lake.data_files`; reading a partition's files in its task needs no
shuffle and no row conversion in the JVM).

Local paths, ``file://`` and ``s3://`` URIs (``s3a://``, Spark's spelling, is accepted as an
alias). S3 credentials and endpoint come from the usual environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ENDPOINT_URL`` for S3-compatible stores).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow import fs

__all__ = [
    "data_file_uri",
    "exists",
    "filesystem",
    "normalise",
    "plain_types",
    "read_parquet",
    "upload_tree",
    "write_bytes",
]


def data_file_uri(root: str, path: str) -> str:
    """A data file's location: the Delta log's ``path`` is a URI-encoded path relative to the
    table at ``root`` (absolute only for a shallow clone's files)."""
    if "://" in path or path.startswith(("file:", "/")):
        return unquote(path)
    return f"{root.rstrip('/')}/{unquote(path)}"


def normalise(uri: str) -> str:
    """``s3a://`` as ``s3://``, a local path absolute; other URIs (``file:``, ``s3://``) as they are."""
    if uri.startswith("s3a://"):
        return "s3://" + uri[len("s3a://") :]
    if "://" not in uri and not uri.startswith("file:"):
        return str(Path(uri).resolve())
    return uri


def filesystem(uri: str) -> tuple[Any, str]:
    """The pyarrow filesystem of ``uri`` and the path on it."""
    uri = normalise(uri)
    if uri.startswith("/"):
        return fs.LocalFileSystem(), uri
    scheme, _, rest = uri.partition("://")
    if scheme == "s3":
        # the key is taken literally, not parsed as a URI: '?', '#' and '%' are glob or name
        # characters here (from_uri would read '?' as the start of a query string)
        bucket, _, key = rest.partition("/")
        filesys, root = fs.FileSystem.from_uri(f"s3://{bucket}")
        key = key.rstrip("/")
        return filesys, f"{root}/{key}" if key else root
    return fs.FileSystem.from_uri(uri)


def exists(uri: str) -> bool:
    """Whether a file or directory (on a store: a key or a prefix) is at ``uri``."""
    filesys, path = filesystem(uri)
    return filesys.get_file_info(path).type != fs.FileType.NotFound


def write_bytes(uri: str, data: bytes) -> None:
    """Write ``data`` to the file at ``uri`` (whole: an object appears at once on a store)."""
    filesys, path = filesystem(uri)
    if isinstance(filesys, fs.LocalFileSystem):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    with filesys.open_output_stream(path) as out:
        out.write(data)


def upload_tree(local: Path, uri: str) -> int:
    """Copy the files under the local directory ``local`` to the directory ``uri``; returns how many."""
    count = 0
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        write_bytes(f"{uri.rstrip('/')}/{path.relative_to(local).as_posix()}", path.read_bytes())
        count += 1
    return count


def plain_types(schema: pa.Schema) -> pa.Schema:
    """``schema`` with string and binary views as plain strings and binaries: delta-rs returns
    views, the rest of the pipeline (and Spark, and Parquet) speaks plain ones."""
    plain = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
    return pa.schema([pa.field(f.name, plain.get(f.type, f.type), f.nullable, f.metadata) for f in schema])


def floor_ms(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A timestamp column as epoch milliseconds, rounded down like Spark's ``unix_millis``."""
    unit = column.type.unit
    raw = pc.cast(column, pa.int64())
    per_ms = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}[unit]
    if per_ms is None:
        return pc.multiply(raw, 1_000)
    if per_ms == 1:
        return raw
    # floor division: Arrow's divide truncates toward zero, so step pre-1970 values down first
    shifted = pc.if_else(pc.less(raw, 0), pc.subtract(raw, per_ms - 1), raw)
    return pc.divide(shifted, per_ms)


def read_parquet(
    uris: Sequence[str],
    schema: pa.Schema,
    after: tuple[str, int] | None = None,
    timestamps_as_ms: Sequence[str] = (),
    equal: tuple[str, int] | None = None,
) -> pa.Table:
    """The rows of these Parquet files in ``schema``'s columns and types (a column a file lacks —
    an older file of a table that gained columns — is null), optionally only those whose integer
    column ``after[0]`` is greater than ``after[1]``, and whose column ``equal[0]`` (where the file
    has it) equals ``equal[1]``. Columns named in ``timestamps_as_ms`` are read as timestamps and
    returned as epoch milliseconds (int64), whatever unit the file stores. Spark writes INT96
    timestamps: they are read in microseconds, Spark's own precision (pyarrow's default,
    nanoseconds, overflows int64 after the year 2262 and turned such times into garbage)."""
    parts = []
    for uri in uris:
        filesys, path = filesystem(uri)
        with filesys.open_input_file(path) as fh:
            pf = pq.ParquetFile(fh, coerce_int96_timestamp_unit="us", pre_buffer=True)
            present = set(pf.schema_arrow.names)
            wanted = [n for n in schema.names if n in present]
            if equal is not None and equal[0] in present and equal[0] not in wanted:
                wanted.append(equal[0])
            table = pf.read(columns=wanted)
        if equal is not None and equal[0] in present and table.num_rows:
            table = table.filter(pc.equal(table.column(equal[0]), equal[1]))
        if after is not None and table.num_rows:
            column, low = after
            table = table.filter(pc.greater(table.column(column), low))
        cols = []
        for field in schema:
            if field.name not in present:
                cols.append(pa.nulls(table.num_rows, field.type))
                continue
            col = table.column(field.name)
            if field.name in timestamps_as_ms and pa.types.is_timestamp(col.type):
                col = floor_ms(col)
            cols.append(col if col.type == field.type else col.cast(field.type))
        parts.append(pa.Table.from_arrays(cols, schema=schema))
    if not parts:
        return schema.empty_table()
    return pa.concat_tables(parts) if len(parts) > 1 else parts[0]
