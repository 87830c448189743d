"""Files on local disks or object stores, through ``pyarrow.fs``.

Spark's Python data sources have no Hadoop filesystem, so segment files are listed and read
with pyarrow: local paths, ``file://`` and ``s3://`` (``s3a://`` is accepted as an alias).
S3 credentials and endpoint come from the usual environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ENDPOINT_URL`` for S3-compatible stores).

Listing rules (spec 10.1, as ``pipelines.codec.segments``): only ``__consumer_offsets-<N>``
directories and ``<20 digits>.log`` files; ``.deleted``, ``.cleaned`` and ``.swap`` files and
``-delete``/``-future``/``-stray`` directories are skipped, because they are transient copies
of data that exists (or existed) in a regular segment.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from dataclasses import dataclass

from pyarrow import fs

from pipelines.codec.reader import entry_crc
from pipelines.codec.segments import PARTITION_DIR, SEGMENT_FILE, parse_offset_index
from pipelines.errors import SourceNotFound
from pipelines.runtime.files import filesystem
from pipelines.runtime.files import normalise as _normalise


@dataclass(frozen=True)
class RemoteSegment:
    uri: str
    size: int
    partition: int | None
    base_offset: int | None
    is_last: bool
    index_uri: str | None
    mtime_ns: int | None = None  # modification time, when the filesystem reports one


def _join(uri: str, path: str) -> str:
    """Rebuild a URI for a path returned by a filesystem listing."""
    scheme, sep, _ = _normalise(uri).partition("://")
    return f"{scheme}://{path}" if sep else path


def _glob_base(pattern: str) -> str:
    """The directory to list for a glob: its literal part up to the last ``/`` (an S3 bucket at least)."""
    literal = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
    cut = literal.rfind("/")
    if cut > 0:
        return literal[:cut]
    return "/" if literal.startswith("/") else literal


def _glob_matches(path: str, pattern: str) -> bool:
    """A file matches a glob when the glob names the file or any directory above it
    (``s3://backups/kafka/*/data`` names log directories, ``.../__consumer_offsets-*`` partitions)."""
    while path and path != "/":
        if fnmatch.fnmatch(path, pattern):
            return True
        path = posixpath.dirname(path)
    return False


def list_segments(uris: list[str]) -> list[RemoteSegment]:
    """Segment files under the given paths, globs or files, in (directory, base offset) order."""
    found: dict[str, tuple[int, str, int | None]] = {}  # path -> (size, uri root, mtime)
    for raw in uris:
        filesys, path = filesystem(raw)
        glob = any(ch in path for ch in "*?[")
        base = path
        if glob:
            path = path.rstrip("/") or "/"
            base = _glob_base(path)
        info = filesys.get_file_info(base)
        if info.type == fs.FileType.NotFound:
            raise SourceNotFound(f"no such file or directory: {raw}")
        if info.type == fs.FileType.File:
            entries = [info]
        else:
            entries = filesys.get_file_info(fs.FileSelector(base, recursive=True))
        for e in entries:
            if e.type != fs.FileType.File:
                continue
            if glob and not _glob_matches(e.path, path):
                continue
            name = posixpath.basename(e.path)
            parent = posixpath.basename(posixpath.dirname(e.path))
            if SEGMENT_FILE.match(name) and (PARTITION_DIR.match(parent) or info.type == fs.FileType.File):
                found[e.path] = (e.size, raw, e.mtime_ns)
    by_dir: dict[str, list[tuple[int, str]]] = {}
    for path in found:
        by_dir.setdefault(posixpath.dirname(path), []).append((int(posixpath.basename(path)[:20]), path))
    out = []
    for directory in sorted(by_dir):
        segs = sorted(by_dir[directory])
        m = PARTITION_DIR.match(posixpath.basename(directory))
        for i, (base, path) in enumerate(segs):
            size, raw, mtime_ns = found[path]
            index = path[:-4] + ".index"
            partition = int(m.group(1)) if m else None
            uri, index_uri = _join(raw, path), _join(raw, index)
            out.append(RemoteSegment(uri, size, partition, base, i == len(segs) - 1, index_uri, mtime_ns))
    return out


class ArrowFileSource:
    """A ByteSource over a pyarrow RandomAccessFile (local or object store)."""

    def __init__(self, uri: str) -> None:
        filesys, path = filesystem(uri)
        self.file = filesys.open_input_file(path)
        self.size = self.file.size()

    def read_at(self, pos: int, n: int) -> bytes:
        data = self.file.read_at(min(n, max(0, self.size - pos)), pos)
        return data if isinstance(data, bytes) else data.to_pybytes()

    def close(self) -> None:
        self.file.close()


def read_index_positions(uri: str | None) -> list[int]:
    """Batch start positions from a segment's .index file, if it exists (hints only)."""
    if not uri:
        return []
    filesys, path = filesystem(uri)
    if filesys.get_file_info(path).type != fs.FileType.File:
        return []
    with filesys.open_input_file(path) as fh:
        return [pos for _, pos in parse_offset_index(fh.read())]


def crc_at(uri: str, position: int) -> int | None:
    """The CRC stored in the header of the entry at ``position`` of a file (one small read)."""
    src = ArrowFileSource(uri)
    try:
        return entry_crc(src, position)
    finally:
        src.close()
