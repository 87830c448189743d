"""The four codecs exactly as Kafka frames them (spec 10.7), on top of maintained libraries.

cramjam provides the raw algorithms (snappy blocks, lz4 blocks and frames, zstd
streams); this module only adds Kafka's framing quirks: xerial snappy chunks (with the
raw-block fallback of Kafka's Java reader) and the wrong lz4 header checksum that
Kafka wrote for magic 0.

Decompression of lz4 and zstd first tries a faster call for the usual input, one complete
frame (python-zstandard keeps its decompression context between calls, cramjam makes one per
call: ~10 µs; lz4.frame costs ~1 µs less per call than cramjam's); anything else (several
frames, trailing bytes, damage) goes to cramjam, so that results and errors stay exactly its own.
"""

from __future__ import annotations

import gzip
import struct
import threading
import zlib

import cramjam
import lz4.frame
import xxhash
import zstandard

from pipelines.codec.errors import DecodeError, Reason

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS = {name: cid for cid, name in CODEC_NAMES.items()}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_CHUNK = 32 * 1024
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_BLOCK = 64 * 1024
_I32 = struct.Struct(">i")


def _fail(codec: int, exc: Exception | str) -> DecodeError:
    return DecodeError(Reason.DECOMPRESSION_FAILED, 0, f"{CODEC_NAMES.get(codec, codec)}: {exc}")


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))  # raw block, as Kafka's reader falls back to
    out = bytearray()
    pos = 16
    n = len(data)
    while pos < n:
        # snappy-java tolerates a repeated stream header between chunks
        if data.startswith(_XERIAL_MAGIC, pos):
            pos += 16
            continue
        if pos + 4 > n:
            raise ValueError("xerial chunk length truncated")
        (size,) = _I32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > n:
            raise ValueError(f"xerial chunk of {size} bytes runs past the end")
        out += cramjam.snappy.decompress_raw(data[pos : pos + size])
        pos += size
    return bytes(out)


def _gzip_decompress(data: bytes) -> bytes:
    """One complete gzip member, the usual case, straight through zlib (gzip.decompress costs ~3 µs
    more per call in Python); anything else (several members, padding, damage) through
    gzip.decompress, so that results and errors stay exactly its own."""
    try:
        inflater = zlib.decompressobj(31)  # 16 + 15: gzip wrapper, trailer CRC and size checked
        out = inflater.decompress(data)
        if inflater.eof and not inflater.unused_data:
            return out
    except zlib.error:
        pass
    return gzip.decompress(data)  # accepts multi-member streams


def _lz4_decompress(data: bytes, magic: int) -> bytes:
    if magic == 0 and len(data) >= 7 and data.startswith(_LZ4_MAGIC):
        # Kafka's magic-0 writer hashed the frame magic into the header checksum; Kafka's
        # reader ignores that byte for magic 0, a standard reader rejects it: recompute it.
        flg = data[4]
        desc_len = 2 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
        descriptor = data[4 : 4 + desc_len]
        hc = (xxhash.xxh32_intdigest(descriptor) >> 8) & 0xFF
        data = data[: 4 + desc_len] + bytes([hc]) + data[5 + desc_len :]
    try:
        out, used = lz4.frame.decompress(data, return_bytes_read=True)
        if used == len(data):  # one frame and nothing after it: what cramjam returns too
            return out
    except RuntimeError:  # lz4.frame's error for a damaged or incomplete frame
        pass
    return bytes(cramjam.lz4.decompress(data))


class _ZstdContext(threading.local):
    """One python-zstandard decompressor per thread (a context must not be shared between threads)."""

    def __init__(self) -> None:
        self.decompressor = zstandard.ZstdDecompressor()


_ZSTD = _ZstdContext()


def _zstd_decompress(data: bytes) -> bytes:
    try:
        stream = _ZSTD.decompressor.decompressobj()
        out = stream.decompress(data)
        if stream.eof and not stream.unused_data:  # one complete frame: what cramjam returns too
            return out
    except zstandard.ZstdError:
        pass
    return bytes(cramjam.zstd.decompress(data))


def decompress(codec: int, data: bytes, magic: int = 2) -> bytes:
    """Decompress a v2 records section or a legacy wrapper value; raises DecodeError."""
    try:
        if codec == GZIP:
            return _gzip_decompress(data)
        if codec == SNAPPY:
            return _snappy_decompress(data)
        if codec == LZ4:
            return _lz4_decompress(data, magic)
        if codec == ZSTD:
            if magic < 2:
                raise DecodeError(Reason.UNSUPPORTED_CODEC, 0, "zstd is not allowed in magic 0/1")
            return _zstd_decompress(data)
    except (OSError, EOFError, zlib.error, ValueError, cramjam.DecompressionError) as exc:
        # gzip raises BadGzipFile (an OSError), EOFError or zlib.error on damaged input
        raise _fail(codec, exc) from None
    raise DecodeError(Reason.UNSUPPORTED_CODEC, 0, f"compression codec id {codec}")


def compress(codec: int, data: bytes, magic: int = 2) -> bytes:
    """Compress as Kafka's producer/coordinator writes it (framing included)."""
    if codec == GZIP:
        return gzip.compress(data, mtime=0)
    if codec == SNAPPY:
        out = bytearray(_XERIAL_HEADER)
        for i in range(0, len(data), _XERIAL_CHUNK) or [0]:
            block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_CHUNK]))
            out += _I32.pack(len(block)) + block
        return bytes(out)
    if codec == LZ4:
        descriptor = bytes([0x60, 0x40])  # v01, independent blocks; 64 KiB max block
        # reproduce the magic-0 quirk so that generated legacy data is what Kafka wrote
        hashed = _LZ4_MAGIC + descriptor if magic == 0 else descriptor
        out = bytearray(_LZ4_MAGIC + descriptor + bytes([(xxhash.xxh32_intdigest(hashed) >> 8) & 0xFF]))
        for i in range(0, len(data), _LZ4_BLOCK):
            chunk = data[i : i + _LZ4_BLOCK]
            block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
            if len(block) >= len(chunk):
                out += struct.pack("<I", len(chunk) | 0x80000000) + chunk
            else:
                out += struct.pack("<I", len(block)) + block
        out += b"\x00\x00\x00\x00"
        return bytes(out)
    if codec == ZSTD:
        comp = cramjam.zstd.Compressor()  # streaming: no content size in the frame, like zstd-jni
        comp.compress(data)
        return bytes(comp.finish())
    if codec == NONE:
        return data
    raise ValueError(f"unknown codec {codec}")
