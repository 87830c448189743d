"""Kafka's primitive encodings (spec section 2): fixed-width big-endian integers,
classic and compact strings/bytes/arrays, unsigned and zig-zag varints, UUIDs.

Readers take ``(buf, pos, end)`` and return ``(value, new_pos)``; they raise
:class:`DecodeError` with the position of the offending field and never read past
``end``. Writers append to a ``bytearray``. The declaration compiler
(``schema.py``) inlines fixed-width reads and calls these helpers for the rest.
"""

from __future__ import annotations

import base64
import struct

from pipelines.codec.errors import DecodeError, Reason

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
UINT16 = struct.Struct(">H")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UUID = struct.Struct(">16s")

ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"

# variable-length int arrays: the format string depends on the element count
struct_unpack_from = struct.unpack_from
struct_pack = struct.pack


# -- UUIDs --------------------------------------------------------------------------
def uuid_to_str(raw: bytes) -> str:
    """Kafka prints UUIDs as URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def uuid_from_str(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "==")
    if len(raw) != 16:
        raise ValueError(f"not a 16-byte UUID: {text!r}")
    return raw


def read_uuid(buf: bytes, pos: int, end: int) -> tuple[str, int]:
    stop = pos + 16
    if stop > end:
        raise DecodeError(Reason.TRUNCATED, pos, "uuid needs 16 bytes")
    return uuid_to_str(buf[pos:stop]), stop


# -- varints --------------------------------------------------------------------------
def read_uvarint(buf: bytes, pos: int, end: int, max_bytes: int = 5) -> tuple[int, int]:
    """Unsigned little-endian base-128 varint of a record value (compact lengths, tags), in its
    shortest form: Kafka writes no other, and a longer one (``0x80 0x00`` for 0) would let an old
    layout's bytes read as the current layout without being its encoding."""
    value, stop = _uvarint(buf, pos, end, max_bytes)
    if stop - pos > 1 and buf[stop - 1] == 0:
        raise DecodeError(Reason.BAD_VARINT, pos, "varint not in its shortest form")
    return value, stop


def _uvarint(buf: bytes, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    """Unsigned little-endian base-128 varint in any form (the record fields of v2 batches, which
    Kafka's own reader takes as they are)."""
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise DecodeError(Reason.TRUNCATED, start, "varint runs past the end")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if pos - start >= max_bytes:
            raise DecodeError(Reason.BAD_VARINT, start, f"varint longer than {max_bytes} bytes")


def read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Zig-zag signed 32-bit varint (record fields inside v2 batches)."""
    u, pos = _uvarint(buf, pos, end, 5)
    if u > 0xFFFFFFFF:
        raise DecodeError(Reason.BAD_VARINT, pos, "varint exceeds 32 bits")
    return (u >> 1) ^ -(u & 1), pos


def read_varlong(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Zig-zag signed 64-bit varint (timestamp deltas)."""
    u, pos = _uvarint(buf, pos, end, 10)
    if u > 0xFFFFFFFFFFFFFFFF:
        raise DecodeError(Reason.BAD_VARINT, pos, "varlong exceeds 64 bits")
    return (u >> 1) ^ -(u & 1), pos


def write_uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_varint(out: bytearray, value: int) -> None:
    write_uvarint(out, ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def write_varlong(out: bytearray, value: int) -> None:
    write_uvarint(out, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def uvarint_size(value: int) -> int:
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


# -- strings and bytes ------------------------------------------------------------------
def _utf8(buf: bytes, pos: int, stop: int) -> str:
    try:
        return buf[pos:stop].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(Reason.BAD_UTF8, pos + exc.start, "invalid UTF-8 in string") from None


def _body(buf: bytes, pos: int, n: int, end: int, what: str) -> int:
    stop = pos + n
    if stop > end:
        raise DecodeError(Reason.TRUNCATED, pos, f"{what} of {n} bytes runs past the end")
    return stop


def read_string(buf: bytes, pos: int, end: int) -> tuple[str, int]:
    if pos + 2 > end:
        raise DecodeError(Reason.TRUNCATED, pos, "string length")
    (n,) = INT16.unpack_from(buf, pos)
    if n < 0:
        raise DecodeError(Reason.BAD_LENGTH, pos, f"length {n} in a non-nullable string")
    stop = _body(buf, pos + 2, n, end, "string")
    return _utf8(buf, pos + 2, stop), stop


def read_nullable_string(buf: bytes, pos: int, end: int) -> tuple[str | None, int]:
    if pos + 2 > end:
        raise DecodeError(Reason.TRUNCATED, pos, "string length")
    (n,) = INT16.unpack_from(buf, pos)
    if n == -1:
        return None, pos + 2
    if n < 0:
        raise DecodeError(Reason.BAD_LENGTH, pos, f"string length {n}")
    stop = _body(buf, pos + 2, n, end, "string")
    return _utf8(buf, pos + 2, stop), stop


def read_compact_string(buf: bytes, pos: int, end: int) -> tuple[str, int]:
    n, p = read_uvarint(buf, pos, end)
    if n == 0:
        raise DecodeError(Reason.BAD_LENGTH, pos, "null in a non-nullable compact string")
    stop = _body(buf, p, n - 1, end, "compact string")
    return _utf8(buf, p, stop), stop


def read_compact_nullable_string(buf: bytes, pos: int, end: int) -> tuple[str | None, int]:
    n, p = read_uvarint(buf, pos, end)
    if n == 0:
        return None, p
    stop = _body(buf, p, n - 1, end, "compact string")
    return _utf8(buf, p, stop), stop


def read_bytes(buf: bytes, pos: int, end: int) -> tuple[bytes, int]:
    if pos + 4 > end:
        raise DecodeError(Reason.TRUNCATED, pos, "bytes length")
    (n,) = INT32.unpack_from(buf, pos)
    if n < 0:
        raise DecodeError(Reason.BAD_LENGTH, pos, f"length {n} in non-nullable bytes")
    stop = _body(buf, pos + 4, n, end, "bytes")
    return bytes(buf[pos + 4 : stop]), stop


def read_nullable_bytes(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise DecodeError(Reason.TRUNCATED, pos, "bytes length")
    (n,) = INT32.unpack_from(buf, pos)
    if n == -1:
        return None, pos + 4
    if n < 0:
        raise DecodeError(Reason.BAD_LENGTH, pos, f"bytes length {n}")
    stop = _body(buf, pos + 4, n, end, "bytes")
    return bytes(buf[pos + 4 : stop]), stop


def read_compact_bytes(buf: bytes, pos: int, end: int) -> tuple[bytes, int]:
    n, p = read_uvarint(buf, pos, end)
    if n == 0:
        raise DecodeError(Reason.BAD_LENGTH, pos, "null in non-nullable compact bytes")
    stop = _body(buf, p, n - 1, end, "compact bytes")
    return bytes(buf[p:stop]), stop


def read_compact_nullable_bytes(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    n, p = read_uvarint(buf, pos, end)
    if n == 0:
        return None, p
    stop = _body(buf, p, n - 1, end, "compact bytes")
    return bytes(buf[p:stop]), stop


def read_array_length(buf: bytes, pos: int, end: int, nullable: bool) -> tuple[int, int]:
    """Classic array count; returns -1 for a null array (only when nullable)."""
    if pos + 4 > end:
        raise DecodeError(Reason.TRUNCATED, pos, "array length")
    (n,) = INT32.unpack_from(buf, pos)
    if n < -1 or (n == -1 and not nullable):
        raise DecodeError(Reason.BAD_LENGTH, pos, f"array length {n}")
    # every element takes at least one byte: a count beyond the remaining bytes is garbage
    if n > end - pos - 4:
        raise DecodeError(Reason.TRUNCATED, pos, f"array of {n} elements runs past the end")
    return n, pos + 4


def read_compact_array_length(buf: bytes, pos: int, end: int, nullable: bool) -> tuple[int, int]:
    n, p = read_uvarint(buf, pos, end)
    if n == 0:
        if not nullable:
            raise DecodeError(Reason.BAD_LENGTH, pos, "null in a non-nullable compact array")
        return -1, p
    if n - 1 > end - p:
        raise DecodeError(Reason.TRUNCATED, pos, f"array of {n - 1} elements runs past the end")
    return n - 1, p


def write_string(out: bytearray, value: str) -> None:
    raw = value.encode("utf-8")
    out += INT16.pack(len(raw))
    out += raw


def write_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += b"\xff\xff"
    else:
        write_string(out, value)


def write_compact_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out.append(0)
        return
    raw = value.encode("utf-8")
    write_uvarint(out, len(raw) + 1)
    out += raw


def write_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += b"\xff\xff\xff\xff"
    else:
        out += INT32.pack(len(value))
        out += value


def write_compact_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out.append(0)
    else:
        write_uvarint(out, len(value) + 1)
        out += value
