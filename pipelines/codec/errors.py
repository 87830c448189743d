"""Reason codes for everything that cannot be read, and the one exception type the codec raises.

Record-level codes end up in silver's quarantine table; batch-level codes in the
reader's issue reports. Both sets are documented in ``docs/reason-codes.md`` and are
a stable contract: add codes, never rename them.
"""

from __future__ import annotations

from enum import Enum


class Reason(str, Enum):
    # -- record level (key or value of one record) --------------------------------
    UNKNOWN_TYPE = "unknown_type"  # key type id not in schemas/records
    UNKNOWN_VERSION = "unknown_version"  # value version outside the declared validVersions
    TRUNCATED = "truncated"  # bytes ended inside a field
    BAD_VARINT = "bad_varint"  # varint longer than its maximum width, or a value's not in its shortest form
    TRAILING_BYTES = "trailing_bytes"  # no declared layout consumes the bytes exactly
    BAD_UTF8 = "bad_utf8"  # string bytes are not valid UTF-8
    BAD_LENGTH = "bad_length"  # negative length, or null where the field is not nullable
    BAD_TAGS = "bad_tags"  # tagged fields not in ascending tag order (Kafka writes no other)
    BAD_MARKER = "bad_marker"  # nullable-struct presence marker that is neither -1 nor 1
    NULL_KEY = "null_key"  # data record without a key
    BAD_CONTROL_RECORD = "bad_control_record"  # control record key/value of the wrong shape

    # -- batch level (one batch / legacy message of a log file) --------------------
    CRC_MISMATCH = "crc_mismatch"
    BAD_BATCH_LENGTH = "bad_batch_length"  # size field impossible; rest of file unreadable
    BAD_MAGIC = "bad_magic"  # magic byte not 0, 1 or 2
    UNSUPPORTED_CODEC = "unsupported_codec"  # codec bits 5-7, or zstd in magic 0/1
    DECOMPRESSION_FAILED = "decompression_failed"
    BAD_RECORDS = "bad_records"  # records do not parse to the declared size/count
    TORN_TAIL = "torn_tail"  # incomplete entry at the end of a file (normal on a live copy)

    # -- file level (a segment file that changed between its listing and its read) --
    FILE_DELETED = "file_deleted"  # gone (retention, the log cleaner): read as listed next time it is listed
    FILE_REPLACED = "file_replaced"  # another file under its name (the log cleaner's swap)
    FILE_TRUNCATED = "file_truncated"  # shorter than listed (truncation after an unclean election)


class DecodeError(Exception):
    """Structured decoding failure: a reason code, the byte position and a detail."""

    __slots__ = ("detail", "position", "reason")

    def __init__(self, reason: Reason, position: int, detail: str = "") -> None:
        super().__init__(f"{reason.value} at byte {position}: {detail}")
        self.reason = reason
        self.position = position
        self.detail = detail
