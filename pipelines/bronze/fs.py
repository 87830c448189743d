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
import functools
import os
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass

from pyarrow import fs

from pipelines.codec.errors import Reason
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
    identity: str | None = None  # a local file's "device:inode" (a swapped-in file has another)

    def listed_as(self) -> tuple[int, int | None, str | None]:
        """What a read compares the file with (ListedFile): size, modification time, identity."""
        return self.size, self.mtime_ns, self.identity


def _join(uri: str, path: str) -> str:
    """Rebuild a URI for a path returned by a filesystem listing."""
    return _scheme(uri) + path


@functools.lru_cache(maxsize=64)
def _scheme(uri: str) -> str:
    """``s3://`` for a URI on a store, empty for a local path. Cached: normalising a local path
    resolves it (a stat per component), and a listing joins two URIs per segment (at 10M
    records 0.4 s of an increment)."""
    scheme, sep, _ = _normalise(uri).partition("://")
    return f"{scheme}://" if sep else ""


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
    found: dict[str, tuple[int, str, int | None, str | None]] = {}  # path -> (size, uri root, mtime, identity)
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
        local = isinstance(filesys, fs.LocalFileSystem) and info.type == fs.FileType.Directory
        for e_path, size, mtime_ns, identity in _local_logs(base) if local else _listed(filesys, info):
            if glob and not _glob_matches(e_path, path):
                continue
            name = posixpath.basename(e_path)
            parent = posixpath.basename(posixpath.dirname(e_path))
            if SEGMENT_FILE.match(name) and (PARTITION_DIR.match(parent) or info.type == fs.FileType.File):
                found[e_path] = (size, raw, mtime_ns, identity)
    by_dir: dict[str, list[tuple[int, str]]] = {}
    for path in found:
        by_dir.setdefault(posixpath.dirname(path), []).append((int(posixpath.basename(path)[:20]), path))
    out = []
    for directory in sorted(by_dir):
        segs = sorted(by_dir[directory])
        m = PARTITION_DIR.match(posixpath.basename(directory))
        for i, (base, path) in enumerate(segs):
            size, raw, mtime_ns, identity = found[path]
            index = path[:-4] + ".index"
            partition = int(m.group(1)) if m else None
            uri, index_uri = _join(raw, path), _join(raw, index)
            out.append(RemoteSegment(uri, size, partition, base, i == len(segs) - 1, index_uri, mtime_ns, identity))
    return out


def _listed(filesys: fs.FileSystem, info: fs.FileInfo) -> Iterator[tuple[str, int, int | None, str | None]]:
    """(path, size, mtime, identity) of every file at or under ``info``, as the filesystem lists them."""
    if info.type == fs.FileType.File:
        entries = [info]
    else:
        entries = filesys.get_file_info(fs.FileSelector(info.path, recursive=True))
    for e in entries:
        if e.type == fs.FileType.File:
            yield e.path, e.size, e.mtime_ns, _identity(filesys, e.path)


def _local_logs(directory: str) -> Iterator[tuple[str, int, int | None, str | None]]:
    """The ``.log`` files under a local directory with one ``stat`` each (symbolic links followed,
    as pyarrow's listing follows them). pyarrow's recursive listing stats every file, ``.index``
    and ``.timeindex`` too, and the inode then takes another: at 13,000 segments 0.8 s of an
    increment, where this takes a quarter of it."""
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return  # gone since it was listed: what it held is not there to read
    for entry in entries:
        try:
            if entry.is_dir():
                yield from _local_logs(entry.path)
            elif entry.name.endswith(".log"):
                st = entry.stat()
                yield entry.path, st.st_size, st.st_mtime_ns, f"{st.st_dev}:{st.st_ino}"
        except FileNotFoundError:
            continue  # removed under the listing (a segment the broker deleted): nothing to read


def _identity(filesys: fs.FileSystem, path: str) -> str | None:
    """A local file's device and inode: the log cleaner swaps a compacted copy in under the same
    name (a rename), which only the inode tells apart from the file that was listed."""
    if not isinstance(filesys, fs.LocalFileSystem):
        return None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None  # gone since the listing: the read reports it
    return f"{st.st_dev}:{st.st_ino}"


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


class FileChanged(Exception):
    """The file under a listed name is not the file that was listed any more."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


class ListedFile:
    """A segment file opened for reading as it was listed (``size``, ``mtime_ns``, ``identity``).

    :meth:`check` raises :class:`FileChanged` when the file is no longer the one listed: deleted
    (retention, or the cleaner's ``.deleted`` step), swapped for a compacted copy (the cleaner's
    rename, seen locally as another inode), or shorter than listed (a broker truncating its log
    after an unclean leader election). Growth is not a change on a local disk: a segment only
    grows by appending, so the listed bytes are still what they were; reading stops at the listed
    size and the next run reads the rest. On an object store any other size or modification time
    is a change: an object is rewritten whole, and only reading it tells a longer copy of the same
    bytes from a compacted one — the next run does that (pipelines/bronze/file_log.py).

    Locally the check is made on the open descriptor: a file opened before a swap or a delete
    still reads what was listed, which is consistent."""

    def __init__(self, uri: str, size: int | None = None, mtime_ns: int | None = None, identity: str | None = None):
        self.uri, self.listed = uri, (size, mtime_ns, identity)
        self.filesys, self.path = filesystem(uri)
        self.fd: int | None = None
        try:
            if isinstance(self.filesys, fs.LocalFileSystem):
                self.fd = os.open(self.path, os.O_RDONLY)
                self.size = os.fstat(self.fd).st_size
            else:
                self.file = self.filesys.open_input_file(self.path)
                self.size = self.file.size()
        except FileNotFoundError:
            raise FileChanged(Reason.FILE_DELETED, "deleted after it was listed") from None
        try:
            self.check()
        except FileChanged:
            self.close()
            raise

    def read_at(self, pos: int, n: int) -> bytes:
        if self.fd is not None:
            return os.pread(self.fd, n, pos)
        data = self.file.read_at(min(n, max(0, self.size - pos)), pos)
        return data if isinstance(data, bytes) else data.to_pybytes()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        elif hasattr(self, "file"):
            self.file.close()

    def current_size(self) -> int:
        """The file's size now (locally through the open descriptor)."""
        if self.fd is not None:
            return os.fstat(self.fd).st_size
        info = self.filesys.get_file_info(self.path)
        return info.size if info.type == fs.FileType.File else 0

    def check(self) -> None:
        """Raise :class:`FileChanged` unless this is still the file that was listed."""
        size, mtime_ns, identity = self.listed
        if size is None:
            return  # not opened from a listing (an ad hoc read): nothing to compare with
        if self.fd is not None:
            st = os.fstat(self.fd)
            found = f"{st.st_dev}:{st.st_ino}"
            if identity is not None and found != identity:
                detail = f"another file under its name (inode {identity} listed, {found} read)"
                raise FileChanged(Reason.FILE_REPLACED, detail)
            if st.st_size < size:
                raise FileChanged(Reason.FILE_TRUNCATED, f"{size} bytes when listed, {st.st_size} when read")
            return
        info = self.filesys.get_file_info(self.path)
        if info.type != fs.FileType.File:
            raise FileChanged(Reason.FILE_DELETED, "deleted after it was listed")
        if info.size < size:
            raise FileChanged(Reason.FILE_TRUNCATED, f"{size} bytes when listed, {info.size} when read")
        if info.size != size or (mtime_ns is not None and info.mtime_ns != mtime_ns):
            raise FileChanged(
                Reason.FILE_REPLACED, f"rewritten after it was listed ({size} bytes listed, {info.size} when read)"
            )


def read_index_positions(uri: str | None) -> list[int]:
    """Batch start positions from a segment's .index file, if it exists (hints only)."""
    if not uri:
        return []
    filesys, path = filesystem(uri)
    if filesys.get_file_info(path).type != fs.FileType.File:
        return []
    try:
        with filesys.open_input_file(path) as fh:
            return [pos for _, pos in parse_offset_index(fh.read())]
    except FileNotFoundError:
        return []  # deleted with its segment since: the segment's read reports that


def crc_at(uri: str, position: int) -> int | None:
    """The CRC stored in the header of the entry at ``position`` of a file (one small read); None
    when the file is gone (deleted since it was listed: planned as replaced, its read reports it)."""
    try:
        src = ArrowFileSource(uri)
    except FileNotFoundError:
        return None
    try:
        return entry_crc(src, position)
    finally:
        src.close()
