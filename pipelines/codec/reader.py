"""Iterate the batches of a Kafka log segment (spec section 10) with bounded memory.

``iter_log(source)`` yields :class:`Batch` objects in file order, interleaved with
:class:`ReadIssue` reports for what could not be read:

* ``torn_tail``: the file ends inside an entry (fewer than 17 bytes left, a declared
  size beyond the end, or a zero-filled remainder). Normal at the end of a partition's
  last segment copied from a live broker; the batches before it are all yielded.
* ``corrupt_batch``: a complete entry that fails its CRC, has a bad magic, cannot be
  decompressed or whose records do not parse to the declared size/count. Reading
  continues with the next entry (its length field was sane).
* ``unreadable``: the size field is impossible, so the next entry cannot be located;
  the rest of the file is reported and reading stops. Kafka stops at the first bad
  batch; we report more, never less.

Memory is bounded by one read-ahead window plus the largest batch: a 1 GiB segment is
never loaded whole. ``start``/``end`` restrict reading to the batches that *start* in
``[start, end)``, which is how a Spark task reads one byte range of a large file;
``find_batch_start`` locates the first batch boundary at or after a position.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

import crc32c

from pipelines.codec.compression import CODEC_NAMES, decompress
from pipelines.codec.errors import DecodeError, Reason

LOG_OVERHEAD = 12  # offset int64 + size int32
PREFIX = 17  # ... + partition leader epoch / crc int32 + magic int8
V2_HEADER = 61
V2_MIN_SIZE = V2_HEADER - LOG_OVERHEAD  # 49: a header-only batch
LEGACY_MIN_SIZE = {0: 14, 1: 22}
# A batch larger than this is not something a broker wrote into __consumer_offsets
# (message.max.bytes tops out far below); treating it as garbage keeps memory bounded.
MAX_BATCH_SIZE = 256 * 1024 * 1024

_PREFIX = struct.Struct(">qiib")
_V2 = struct.Struct(">qiibIhiqqqhii")
_LEGACY = struct.Struct(">qiIbb")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


# -- data model ------------------------------------------------------------------------------------
class Record:
    """One record of a batch: absolute offset, timestamp, raw key/value and headers."""

    __slots__ = ("headers", "key", "offset", "timestamp", "value")

    def __init__(
        self,
        offset: int,
        timestamp: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | tuple = (),
    ) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers

    def __repr__(self) -> str:
        return f"Record(offset={self.offset}, ts={self.timestamp}, key={self.key!r}, value={self.value!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (self.offset, self.timestamp, self.key, self.value, list(self.headers)) == (
            other.offset,
            other.timestamp,
            other.key,
            other.value,
            list(other.headers),
        )


@dataclass(slots=True)
class Batch:
    """A v2 record batch, or a legacy (magic 0/1) top-level message with its inner messages.

    For legacy entries ``base_offset`` is the first inner offset, ``attributes`` the
    message attribute byte, ``base_timestamp``/``max_timestamp`` the message timestamp
    (-1 for magic 0), and producer fields are -1.
    """

    position: int
    size: int  # bytes on disk, header included
    base_offset: int
    magic: int
    crc: int
    attributes: int
    partition_leader_epoch: int = -1
    last_offset_delta: int = 0
    base_timestamp: int = -1
    max_timestamp: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    records_count: int = 0
    records: list[Record] | None = None

    @property
    def codec(self) -> int:
        return self.attributes & 0x07

    @property
    def codec_name(self) -> str:
        return CODEC_NAMES.get(self.codec, str(self.codec))

    @property
    def timestamp_type(self) -> str | None:
        if self.magic == 0:
            return None
        return "LogAppendTime" if self.attributes & 0x08 else "CreateTime"

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & 0x10)

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & 0x20)

    @property
    def has_delete_horizon(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & 0x40)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def end(self) -> int:
        return self.position + self.size


@dataclass(frozen=True, slots=True)
class ReadIssue:
    kind: str  # "torn_tail" | "corrupt_batch" | "unreadable"
    position: int
    length: int  # bytes affected (skipped)
    reason: Reason
    detail: str = ""

    TORN_TAIL = "torn_tail"
    CORRUPT = "corrupt_batch"
    UNREADABLE = "unreadable"


# -- byte sources ------------------------------------------------------------------------------------
class ByteSource(Protocol):
    """Random-access bytes: a local file, an object-store file, or bytes in memory."""

    size: int

    def read_at(self, pos: int, n: int) -> bytes: ...


class BytesSource:
    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.data = bytes(data)
        self.size = len(self.data)

    def read_at(self, pos: int, n: int) -> bytes:
        return self.data[pos : pos + n]


class FileSource:
    """A local file read with ``os.pread`` (no shared file position: safe across threads)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size

    def read_at(self, pos: int, n: int) -> bytes:
        return os.pread(self.fd, n, pos)

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> FileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StreamSource:
    """Any seekable binary file object (``pyarrow`` / ``fsspec`` object-store files)."""

    def __init__(self, stream: BinaryIO, size: int | None = None) -> None:
        self.stream = stream
        if size is None:
            stream.seek(0, os.SEEK_END)
            size = stream.tell()
        self.size = size

    def read_at(self, pos: int, n: int) -> bytes:
        self.stream.seek(pos)
        return self.stream.read(n)


class _Window:
    """Read-ahead over a ByteSource: one large read serves many small batches."""

    __slots__ = ("block", "buf", "buf_pos", "src")

    def __init__(self, src: ByteSource, block: int = 4 * 1024 * 1024) -> None:
        self.src = src
        self.block = block
        self.buf = b""
        self.buf_pos = 0

    def get(self, pos: int, n: int) -> bytes:
        off = pos - self.buf_pos
        if off >= 0 and off + n <= len(self.buf):
            return self.buf[off : off + n]
        self.buf = self.src.read_at(pos, max(n, self.block))
        self.buf_pos = pos
        return self.buf[:n]


def as_source(source: ByteSource | bytes | bytearray | memoryview | str | os.PathLike) -> ByteSource:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return BytesSource(source)
    if isinstance(source, (str, os.PathLike)):
        return FileSource(source)
    return source


@contextmanager
def opened(source: ByteSource | bytes | bytearray | memoryview | str | os.PathLike) -> Iterator[ByteSource]:
    """``source`` as a ByteSource; a file opened here from a path is closed on exit (a reader
    called once per segment file would otherwise keep one descriptor per file: a driver past
    1,024 of them breaks ``select()`` in PySpark's accumulator server)."""
    src = as_source(source)
    try:
        yield src
    finally:
        if isinstance(source, (str, os.PathLike)):
            src.close()


# -- varints (inlined fast path for the common one-byte case) -------------------------------------------
def _varint_slow(buf: bytes, pos: int, limit: int) -> tuple[int, int]:
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= limit:
            raise DecodeError(Reason.BAD_RECORDS, start, "varint runs past the end of the record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise DecodeError(Reason.BAD_RECORDS, start, "varint longer than 10 bytes")


def parse_v2_records(
    buf: bytes, count: int, base_offset: int, base_ts: int, max_ts: int, log_append: bool
) -> list[Record]:
    """Parse ``count`` records that must fill ``buf`` exactly (spec 10.6)."""
    records = []
    pos = 0
    n = len(buf)
    append = records.append
    for _ in range(count):
        if pos >= n:
            raise DecodeError(Reason.BAD_RECORDS, pos, f"only {len(records)} of {count} records present")
        b = buf[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        elif pos + 1 < n and buf[pos + 1] < 0x80:  # records of 64..8191 bytes: two-byte length
            u = (b & 0x7F) | (buf[pos + 1] << 7)
            length = (u >> 1) ^ -(u & 1)
            pos += 2
        else:
            length, pos = _varint_slow(buf, pos, n)
        end = pos + length
        if length < 6 or end > n:
            raise DecodeError(Reason.BAD_RECORDS, pos, f"record length {length} does not fit")
        pos += 1  # attributes (unused)
        b = buf[pos]
        if b < 0x80:
            ts_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            ts_delta, pos = _varint_slow(buf, pos, end)
        b = buf[pos]
        if b < 0x80:
            off_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            off_delta, pos = _varint_slow(buf, pos, end)
        b = buf[pos]
        if b < 0x80:
            klen = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            klen, pos = _varint_slow(buf, pos, end)
        if klen < 0:
            key = None
            if klen != -1:
                raise DecodeError(Reason.BAD_RECORDS, pos, f"key length {klen}")
        else:
            key = buf[pos : pos + klen]
            pos += klen
        if pos >= end:
            raise DecodeError(Reason.BAD_RECORDS, pos, "record ends before its value length")
        b = buf[pos]
        if b < 0x80:
            vlen = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            vlen, pos = _varint_slow(buf, pos, end)
        if vlen < 0:
            value = None
            if vlen != -1:
                raise DecodeError(Reason.BAD_RECORDS, pos, f"value length {vlen}")
        else:
            value = buf[pos : pos + vlen]
            pos += vlen
        if pos >= end:
            raise DecodeError(Reason.BAD_RECORDS, pos, "record ends before its header count")
        b = buf[pos]
        if b == 0:
            headers: list | tuple = ()
            pos += 1
        else:
            hcount, pos = _varint_slow(buf, pos, end)
            headers = []
            if hcount < 0:
                raise DecodeError(Reason.BAD_RECORDS, pos, f"header count {hcount}")
            for _ in range(hcount):
                hk, pos = _varint_slow(buf, pos, end)
                if hk < 0 or pos + hk > end:
                    raise DecodeError(Reason.BAD_RECORDS, pos, f"header key length {hk}")
                try:
                    hkey = buf[pos : pos + hk].decode("utf-8")
                except UnicodeDecodeError:
                    raise DecodeError(Reason.BAD_RECORDS, pos, "header key is not UTF-8") from None
                pos += hk
                hv, pos = _varint_slow(buf, pos, end)
                if hv < -1 or pos + max(hv, 0) > end:
                    raise DecodeError(Reason.BAD_RECORDS, pos, f"header value length {hv}")
                hval = None if hv < 0 else buf[pos : pos + hv]
                pos += max(hv, 0)
                headers.append((hkey, hval))
        if pos != end:
            raise DecodeError(Reason.BAD_RECORDS, pos, f"record declared {length} bytes, used {pos - end + length}")
        append(Record(base_offset + off_delta, max_ts if log_append else base_ts + ts_delta, key, value, headers))
    if pos != n:
        raise DecodeError(Reason.BAD_RECORDS, pos, f"{n - pos} bytes after the last of {count} records")
    return records


# -- entry parsers ------------------------------------------------------------------------------------
def parse_v2_batch(data: bytes, position: int, verify_crc: bool = True) -> Batch:
    """Parse one complete v2 batch (``data`` = the whole entry); raises DecodeError."""
    (
        base_offset,
        size,
        leader_epoch,
        magic,
        crc,
        attributes,
        last_delta,
        base_ts,
        max_ts,
        pid,
        pepoch,
        base_seq,
        count,
    ) = _V2.unpack_from(data, 0)
    if verify_crc:
        actual = crc32c.crc32c(memoryview(data)[21:])
        if actual != crc:
            raise DecodeError(Reason.CRC_MISMATCH, 17, f"stored crc {crc:08x}, computed {actual:08x}")
    if count < 0:
        raise DecodeError(Reason.BAD_RECORDS, 57, f"record count {count}")
    body = data[V2_HEADER:]
    codec = attributes & 0x07
    if codec:
        body = decompress(codec, body, 2)
    records = parse_v2_records(body, count, base_offset, base_ts, max_ts, bool(attributes & 0x08))
    return Batch(
        position,
        LOG_OVERHEAD + size,
        base_offset,
        magic,
        crc,
        attributes,
        leader_epoch,
        last_delta,
        base_ts,
        max_ts,
        pid,
        pepoch,
        base_seq,
        count,
        records,
    )


def _parse_legacy_message(data: bytes, pos: int, end: int, verify_crc: bool) -> tuple[Record, int, int, int]:
    """One magic 0/1 message at ``pos``: (record, attributes, magic, crc); raises DecodeError."""
    if pos + PREFIX + 1 > end:
        raise DecodeError(Reason.BAD_RECORDS, pos, "message header runs past the end")
    offset, size, crc, magic, attributes = _LEGACY.unpack_from(data, pos)
    msg_end = pos + LOG_OVERHEAD + size
    if magic not in (0, 1):
        raise DecodeError(Reason.BAD_MAGIC, pos + 16, f"magic {magic} in a legacy message set")
    if size < LEGACY_MIN_SIZE[magic] or msg_end > end:
        raise DecodeError(Reason.BAD_RECORDS, pos + 8, f"message size {size} does not fit")
    if verify_crc:
        actual = zlib.crc32(memoryview(data)[pos + 16 : msg_end])
        if actual != crc:
            raise DecodeError(Reason.CRC_MISMATCH, pos + 12, f"stored crc {crc:08x}, computed {actual:08x}")
    p = pos + 18
    timestamp = None
    if magic == 1:
        (timestamp,) = _I64.unpack_from(data, p)
        p += 8
    fields = []
    for what in ("key", "value"):
        (n,) = _I32.unpack_from(data, p)
        p += 4
        if n < -1 or p + max(n, 0) > msg_end:
            raise DecodeError(Reason.BAD_RECORDS, p - 4, f"{what} length {n} does not fit")
        fields.append(None if n < 0 else data[p : p + n])
        p += max(n, 0)
    if p != msg_end:
        raise DecodeError(Reason.BAD_RECORDS, p, f"{msg_end - p} bytes after the message value")
    return Record(offset, timestamp, fields[0], fields[1]), attributes, magic, crc


def parse_legacy_entry(data: bytes, position: int, verify_crc: bool = True) -> Batch:
    """One top-level magic 0/1 message; a compressed wrapper yields its inner messages."""
    end = len(data)
    record, attributes, magic, crc = _parse_legacy_message(data, 0, end, verify_crc)
    ts = -1 if record.timestamp is None else record.timestamp
    codec = attributes & 0x07
    if codec == 0:
        return Batch(
            position,
            end,
            record.offset,
            magic,
            crc,
            attributes,
            base_timestamp=ts,
            max_timestamp=ts,
            records_count=1,
            records=[record],
        )
    if record.value is None:
        raise DecodeError(Reason.BAD_RECORDS, 0, "compressed wrapper without a value")
    inner = decompress(codec, record.value, magic)
    messages: list[Record] = []
    pos = 0
    while pos < len(inner):
        msg, inner_attrs, inner_magic, _ = _parse_legacy_message(inner, pos, len(inner), verify_crc)
        if inner_attrs & 0x07:
            raise DecodeError(Reason.BAD_RECORDS, 0, "compressed message inside a compressed wrapper")
        if inner_magic != magic:
            raise DecodeError(Reason.BAD_RECORDS, 0, f"inner magic {inner_magic} in a magic {magic} wrapper")
        messages.append(msg)
        pos += LOG_OVERHEAD + _I32.unpack_from(inner, pos + 8)[0]
    if not messages:
        raise DecodeError(Reason.BAD_RECORDS, 0, "compressed wrapper holds no messages")
    if magic == 1 and record.offset != 0:
        # inner offsets are relative; the wrapper carries the absolute offset of the last one
        shift = record.offset - messages[-1].offset
        for m in messages:
            m.offset += shift
    if magic == 1 and attributes & 0x08:
        for m in messages:
            m.timestamp = record.timestamp
    first = messages[0].offset
    return Batch(
        position,
        end,
        first,
        magic,
        crc,
        attributes,
        last_offset_delta=messages[-1].offset - first,
        base_timestamp=ts,
        max_timestamp=ts,
        records_count=len(messages),
        records=messages,
    )


def parse_entry(data: bytes, position: int, verify_crc: bool = True) -> Batch:
    """Parse one complete log entry of any magic; raises only DecodeError."""
    magic = data[16]
    try:
        if magic == 2:
            return parse_v2_batch(data, position, verify_crc)
        if magic in (0, 1):
            return parse_legacy_entry(data, position, verify_crc)
    except struct.error as exc:  # a fixed-width read ran past the entry
        raise DecodeError(Reason.BAD_RECORDS, 0, f"truncated field: {exc}") from None
    except IndexError:  # a one-byte varint read ran past the records section
        raise DecodeError(Reason.BAD_RECORDS, 0, "record runs past the end of the batch") from None
    raise DecodeError(Reason.BAD_MAGIC, 16, f"magic byte {magic}")


# -- the walk ------------------------------------------------------------------------------------------
def _min_size(magic: int) -> int:
    return V2_MIN_SIZE if magic == 2 else LEGACY_MIN_SIZE.get(magic, 14)


def _tail_is_zero(win: _Window, pos: int, size: int) -> bool:
    step = 1 << 20
    return all(not win.get(p, min(step, size - p)).strip(b"\x00") for p in range(pos, size, step))


def iter_log(
    source: ByteSource | bytes | str | os.PathLike,
    *,
    start: int = 0,
    end: int | None = None,
    verify_crc: bool = True,
) -> Iterator[Batch | ReadIssue]:
    """Yield the batches starting in ``[start, end)`` and the issues found there.

    ``start`` must be a batch boundary (0, or a value from ``find_batch_start``). A file given by
    its path is opened here and closed when the iteration ends or is closed.
    """
    with opened(source) as src:
        yield from _iter_entries(src, start, end, verify_crc)


def _iter_entries(src: ByteSource, start: int, end: int | None, verify_crc: bool) -> Iterator[Batch | ReadIssue]:
    size = src.size
    stop = size if end is None else min(end, size)
    win = _Window(src)
    pos = start
    while pos < stop:
        left = size - pos
        if left < PREFIX:
            yield ReadIssue(ReadIssue.TORN_TAIL, pos, left, Reason.TORN_TAIL, f"{left} bytes, less than a header")
            return
        _base_offset, bsize, _, magic = _PREFIX.unpack(win.get(pos, PREFIX))
        if bsize < _min_size(magic) or bsize > MAX_BATCH_SIZE:
            if _tail_is_zero(win, pos, size):
                yield ReadIssue(ReadIssue.TORN_TAIL, pos, left, Reason.TORN_TAIL, "zero-filled remainder")
            else:
                yield ReadIssue(
                    ReadIssue.UNREADABLE,
                    pos,
                    left,
                    Reason.BAD_BATCH_LENGTH,
                    f"size field {bsize} (magic {magic}) cannot be a batch; rest of file skipped",
                )
            return
        total = LOG_OVERHEAD + bsize
        if total > left:
            yield ReadIssue(
                ReadIssue.TORN_TAIL,
                pos,
                left,
                Reason.TORN_TAIL,
                f"entry of {total} bytes, only {left} left in the file",
            )
            return
        try:
            yield parse_entry(win.get(pos, total), pos, verify_crc)
        except DecodeError as exc:
            yield ReadIssue(ReadIssue.CORRUPT, pos, total, exc.reason, exc.detail)
        pos += total


def iter_boundaries(source: ByteSource, start: int = 0) -> Iterator[tuple[int, int]]:
    """Walk entry headers only (no CRC, no records): yield ``(position, total size)``.

    Stops at the first header that is incomplete or whose size is impossible.
    """
    win = _Window(source, 1 << 20)
    pos = start
    size = source.size
    while size - pos >= PREFIX:
        _, bsize, _, magic = _PREFIX.unpack(win.get(pos, PREFIX))
        total = LOG_OVERHEAD + bsize
        if bsize < _min_size(magic) or bsize > MAX_BATCH_SIZE or total > size - pos:
            return
        yield pos, total
        pos += total


def find_batch_start(source: ByteSource, target: int, hints: list[int] | tuple = ()) -> int | None:
    """Where a reader of the byte range starting at ``target`` begins; None: nothing to read.

    That is the first entry boundary at or after ``target`` — or the position at or after
    ``target`` where the header walk met an incomplete or impossible entry, so that exactly
    one range (the one containing it) reports the problem. When the walk fails before
    ``target``, an earlier range reports it and this one has nothing to read.

    ``hints`` are known boundaries (positions from the segment's ``.index``); the walk starts
    from the largest hint at or before ``target`` that holds a plausible header, else from 0.
    Indexes are not checksummed, so hints are only shortcuts.
    """
    if target <= 0:
        return 0
    begin = 0
    for hint in sorted(h for h in hints if 0 < h <= target):
        begin = hint
    if begin and not _plausible_header(source, begin):
        begin = 0
    pos = begin
    for pos, size in iter_boundaries(source, begin):
        if pos >= target:
            return pos
        pos += size
    # the walk stopped at `pos`: end of file, or an entry it cannot step over
    return pos if target <= pos < source.size else None


def entry_crc(source: ByteSource, position: int) -> int | None:
    """The CRC stored in the header of the entry at ``position`` (a batch boundary), or None when
    no entry header is there. A cheap fingerprint of a batch already read: a v2 batch's CRC covers
    its attributes and records, a legacy message's its magic, attributes, key and value."""
    head = source.read_at(position, PREFIX + 4)
    if len(head) < PREFIX:
        return None
    magic = head[16]
    if magic == 2 and len(head) == PREFIX + 4:
        return struct.unpack_from(">I", head, PREFIX)[0]
    if magic in (0, 1):
        return struct.unpack_from(">I", head, LOG_OVERHEAD)[0]
    return None


def _plausible_header(source: ByteSource, pos: int) -> bool:
    head = source.read_at(pos, PREFIX)
    if len(head) < PREFIX:
        return False
    _, bsize, _, magic = _PREFIX.unpack(head)
    return magic in (0, 1, 2) and _min_size(magic) <= bsize <= MAX_BATCH_SIZE
