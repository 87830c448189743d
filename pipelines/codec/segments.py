"""Find the segment files of ``__consumer_offsets`` partitions and read their index files.

Rules (spec 10.1): partition directories are named exactly ``__consumer_offsets-<N>``;
directories being deleted, moved or orphaned (``…-delete``, ``…-future``, ``…-stray``)
do not match and are skipped. Segments are ``<20-digit base offset>.log``; transient
compaction/deletion files (``.log.cleaned``, ``.log.swap``, ``.log.deleted``) do not
match either. A partition's segments are processed in base-offset order, and only the
last one may legitimately end in a torn tail.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pipelines.codec.reader import Batch, FileSource, ReadIssue, iter_log
from pipelines.errors import SourceNotFound

PARTITION_DIR = re.compile(r"^__consumer_offsets-(\d+)$")
SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
_INDEX_ENTRY = struct.Struct(">ii")


@dataclass(frozen=True)
class SegmentFile:
    path: Path
    partition: int | None  # from the directory name; None when it does not say
    base_offset: int | None  # from the file name
    is_last: bool  # last segment of its partition directory (may end in a torn tail)


def partition_of(path: Path) -> int | None:
    m = PARTITION_DIR.match(path.name)
    return int(m.group(1)) if m else None


def segment_name(base_offset: int, suffix: str = ".log") -> str:
    return f"{base_offset:020d}{suffix}"


def _segments_in(directory: Path) -> list[SegmentFile]:
    logs = sorted(
        (int(m.group(1)), p) for p in directory.iterdir() if p.is_file() and (m := SEGMENT_FILE.match(p.name))
    )
    part = partition_of(directory)
    return [SegmentFile(p, part, base, i == len(logs) - 1) for i, (base, p) in enumerate(logs)]


def discover(paths: list[str | Path]) -> list[SegmentFile]:
    """Segments under the given paths, in (path, partition, base offset) order.

    A path may be a ``.log`` file, a partition directory, or any directory above them
    (a broker log directory, or a tree of several).
    """
    found: dict[Path, SegmentFile] = {}
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise SourceNotFound(f"no such file or directory: {path}")
        if path.is_file():
            parent_segments = {s.path: s for s in _segments_in(path.parent)} if SEGMENT_FILE.match(path.name) else {}
            seg = parent_segments.get(path) or SegmentFile(path, partition_of(path.parent), None, True)
            found[path] = seg
            continue
        dirs = [path] if PARTITION_DIR.match(path.name) else []
        dirs += [d for d in path.rglob("__consumer_offsets-*") if d.is_dir() and PARTITION_DIR.match(d.name)]
        for d in dirs:
            for seg in _segments_in(d):
                found[seg.path] = seg
    return sorted(found.values(), key=lambda s: (str(s.path.parent), s.partition or 0, s.base_offset or 0))


def read_offset_index(path: Path) -> list[tuple[int, int]]:
    """``(relative offset, byte position)`` entries of a ``.index`` file.

    Active segments have pre-allocated, zero-filled index files: stop at the first
    all-zero entry after the first (a genuine first entry can be ``(0, 0)``). Entries
    are hints only; they are not checksummed.
    """
    if not path.exists():
        return []
    return parse_offset_index(path.read_bytes())


def parse_offset_index(data: bytes) -> list[tuple[int, int]]:
    """Entries of ``.index`` bytes, up to the zero-filled tail or the first non-increasing one."""
    entries: list[tuple[int, int]] = []
    for i in range(0, len(data) - len(data) % 8, 8):
        rel, pos = _INDEX_ENTRY.unpack_from(data, i)
        if i and rel == 0 and pos == 0:
            break
        if entries and (rel <= entries[-1][0] or pos <= entries[-1][1]):
            break  # entries strictly increase; anything else is garbage
        entries.append((rel, pos))
    return entries


def index_positions(log_path: Path) -> list[int]:
    """Known batch start positions of a segment, from its sibling ``.index`` file."""
    return [pos for _, pos in read_offset_index(log_path.with_suffix(".index"))]


def iter_segment(seg: SegmentFile) -> Iterator[tuple[Batch | None, ReadIssue | None]]:
    """A segment file's batches, each as ``(batch, None)``, and what could not be read as
    ``(None, issue)``, in file order."""
    with FileSource(seg.path) as src:
        for item in iter_log(src):
            if isinstance(item, Batch):
                yield item, None
            else:
                yield None, item
