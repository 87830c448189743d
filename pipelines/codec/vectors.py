"""Vectorised reads of one byte buffer at many positions at once (numpy), for the columnar paths.

Reads never raise and never leave the buffer: a position past its end is clipped and the caller
learns, through the bounds it checks itself or the ``ok`` masks returned here, that what was read
there must not be used. Both columnar paths (``columnar.py`` for keys and values,
``columnar_reader.py`` for record batches) build on these.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

MIN_BYTES = 16  # the widest fixed-width read (a uuid): every window below has at least one item


class ByteBuffer:
    """A read-only byte buffer with gathers of fixed-width big-endian values at any positions."""

    def __init__(self, data: bytes | pa.Buffer | np.ndarray) -> None:
        array = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
        if array.size < MIN_BYTES:  # clipped reads always have bytes to read
            array = np.concatenate([array, np.zeros(MIN_BYTES - array.size, np.uint8)])
        self.data = array
        self._windows: dict[Any, np.ndarray] = {}

    def window(self, dtype: Any) -> np.ndarray:
        """The buffer as overlapping items of ``dtype``, one starting at every byte: ``window[p]``
        is the value stored at byte p, so one gather reads a field of every row. A dtype wider
        than the buffer has one item, at byte 0, over the buffer padded with zeros."""
        view = self._windows.get(dtype)
        if view is None:
            width = np.dtype(dtype).itemsize
            data = self.data
            if data.size < width:
                data = np.concatenate([data, np.zeros(width - data.size, np.uint8)])
            view = np.ndarray((data.size - width + 1,), dtype, buffer=data, strides=(1,))
            self._windows[dtype] = view
        return view

    def read(self, dtype: str, pos: np.ndarray) -> np.ndarray:
        """The ``dtype`` value at every position (clipped into the buffer: garbage past its end)."""
        window = self.window(dtype)
        # fancy indexing, not np.take: take copies a non-contiguous (overlapping) array first;
        # maximum/minimum, not np.clip: the same, without clip's Python-level wrapper
        return window[np.minimum(np.maximum(pos, 0), len(window) - 1)]

    def uvarint(self, pos: np.ndarray, end: np.ndarray, max_bytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unsigned little-endian base-128 varints at ``pos``: (value as uint64, bytes used, ok).

        Not ok: a byte at or past ``end``, still continued after ``max_bytes`` bytes, or (at ten
        bytes) more than 64 bits.
        """
        # two bytes in one gather: varints of one and two bytes (record lengths up to 8191) are
        # done without the byte-by-byte loop below
        pair = self.read("<u2", pos).astype(np.uint64)
        first, second = pair & np.uint64(0xFF), pair >> np.uint64(8)
        last = np.flatnonzero(pos >= self.data.size - 1)  # no pair starts at the last byte
        if last.size:
            first[last], second[last] = self.read("u1", pos[last]), 0
        long = first >= 0x80
        value = np.where(long, (first & np.uint64(0x7F)) | ((second & np.uint64(0x7F)) << np.uint64(7)), first)
        size = 1 + long
        ok = pos + size <= end
        more = np.flatnonzero(long & (second >= 0x80))  # the rare rest, read byte by byte
        for k in range(2, max_bytes):
            if not more.size:
                break
            at = pos[more] + k
            ok[more[at >= end[more]]] = False
            byte = self.read("u1", at).astype(np.uint64)
            if k == 9:  # the tenth byte holds bit 63 only
                ok[more[(byte & np.uint64(0x7F)) > 1]] = False
            value[more] |= (byte & np.uint64(0x7F)) << np.uint64(7 * k)
            size[more] += 1
            more = more[byte >= 0x80]
        ok[more] = False
        return value, size, ok


def shortest(value: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Where varints of ``size`` bytes are in their shortest form (``primitives.read_uvarint``'s
    rule for record values): one byte, or a value that needs every byte."""
    floor = np.left_shift(np.uint64(1), (7 * (np.maximum(size, 1) - 1)).astype(np.uint64))
    return (size <= 1) | (value >= floor)


def zigzag(value: np.ndarray) -> np.ndarray:
    """Zig-zag decoded signed values of uint64 varints (record fields of v2 batches)."""
    return ((value >> np.uint64(1)) ^ (np.uint64(0) - (value & np.uint64(1)))).view(np.int64)


def add_checked(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int64 a + b and where it did not overflow (Python's ints never do; Arrow's int64 columns would)."""
    with np.errstate(over="ignore"):
        total = a + b
    return total, ((a ^ total) & (b ^ total)) >= 0


def subtract_checked(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int64 a - b and where it did not overflow."""
    with np.errstate(over="ignore"):
        difference = a - b
    return difference, ((a ^ b) & (a ^ difference)) >= 0


def spans_to_binary(
    buffer: pa.Buffer,
    offset_type: Any,
    start: np.ndarray,
    stop: np.ndarray,
    null: np.ndarray,
    rows: np.ndarray | None = None,
) -> pa.Array:
    """A binary array of the spans ``[start, stop)`` of ``buffer`` (those at ``rows``, in that order, if
    given), copied out by Arrow's ``take``.

    The spans must lie one after the other in the buffer (start[i] <= stop[i] <= start[i + 1]):
    then start0, stop0, start1, stop1, ... is a valid Arrow offsets buffer whose even elements
    are the spans and whose odd ones are the bytes between them. ``offset_type`` is np.int32
    (binary) or np.int64 (large binary); null rows should have empty spans.
    """
    count = len(start)
    if not count:
        return pa.array([], pa.binary())
    offsets = np.empty(2 * count, offset_type)
    offsets[0::2] = start
    offsets[1::2] = stop
    validity = None
    if null.any():
        valid = np.ones(2 * count - 1, bool)
        valid[0::2] = ~null
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    binary_type = pa.binary() if offset_type == np.int32 else pa.large_binary()
    interleaved = pa.Array.from_buffers(binary_type, 2 * count - 1, [validity, pa.py_buffer(offsets), buffer])
    taken = interleaved.take(pa.array(np.arange(0, 2 * count, 2) if rows is None else 2 * rows))
    return taken if binary_type == pa.binary() else taken.cast(pa.binary())
