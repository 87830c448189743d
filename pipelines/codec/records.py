"""Decode and encode the key and value of one ``__consumer_offsets`` record.

``decode_record`` is the entry point for everything downstream: it never raises for
bad bytes; it returns a :class:`RecordDecoding` whose status is ``ok`` or
``undecodable`` with a reason code from :class:`Reason`, the failing part and byte
position. Only :class:`DecodeError` and ``struct.error`` (a fixed-width read past the
end) are turned into results; any other exception is a bug and propagates.
"""

from __future__ import annotations

import struct
from typing import Any

from pipelines.codec import primitives as P
from pipelines.codec.errors import DecodeError, Reason
from pipelines.codec.schema import CompiledEmbedded, Registry, compile_registry

REGISTRY: Registry = compile_registry()
RECORDS = REGISTRY.records
SUBSCRIPTION: CompiledEmbedded = REGISTRY.embedded["ConsumerProtocolSubscription"]
ASSIGNMENT: CompiledEmbedded = REGISTRY.embedded["ConsumerProtocolAssignment"]

TYPE_NAMES: dict[int, str] = {t: c.decl.name for t, c in RECORDS.items()}
# type id -> value version -> ((layout name, decoder), ...): the hot path's lookup table
_VALUE_LAYOUTS = {
    t: {v: tuple((name, dec) for name, dec, _ in lays) for v, lays in c.value_layouts.items()}
    for t, c in RECORDS.items()
}

CONTROL_TYPES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}


class RecordDecoding:
    """The decoded form of one data record; maps one-to-one to silver columns.

    Attributes default at class level, so a record only pays for what it sets (this
    object is created once per record on the hot path).
    """

    record_type: int | None = None
    key: dict[str, Any] | None = None
    tombstone: bool = False
    value_version: int | None = None
    value: dict[str, Any] | None = None
    layout: str | None = None
    reason: Reason | None = None
    error_part: str | None = None
    error_position: int | None = None
    error_detail: str | None = None
    warnings: list[str] | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None

    @property
    def record_type_name(self) -> str | None:
        return TYPE_NAMES.get(self.record_type) if self.record_type is not None else None

    def fail(self, part: str, err: DecodeError) -> RecordDecoding:
        self.reason = err.reason
        self.error_part = part
        self.error_position = err.position
        self.error_detail = err.detail
        return self

    def __repr__(self) -> str:
        status = "ok" if self.ok else f"undecodable:{self.reason.value}"  # type: ignore[union-attr]
        return f"RecordDecoding({status}, type={self.record_type}, key={self.key}, v={self.value_version})"


# -- keys ------------------------------------------------------------------------------------
# Offset-commit keys repeat for every commit of a (group, topic, partition): decoding each
# distinct key once is the single largest saving on real logs. Bounded; cleared when full.
_KEY_CACHE: dict[bytes, tuple[int, dict[str, Any]]] = {}
_KEY_CACHE_MAX = 200_000


def decode_key(key: bytes) -> tuple[int, dict[str, Any]]:
    """``(type id, key fields)``; raises :class:`DecodeError`. The dict is shared: do not mutate."""
    hit = _KEY_CACHE.get(key)
    if hit is not None:
        return hit
    end = len(key)
    if end < 2:
        raise DecodeError(Reason.TRUNCATED, 0, "key shorter than its 2-byte type id")
    type_id = int.from_bytes(key[:2], "big", signed=True)
    compiled = RECORDS.get(type_id)
    if compiled is None:
        raise DecodeError(Reason.UNKNOWN_TYPE, 0, f"record type id {type_id} is not declared")
    try:
        fields, pos = compiled.key_decoder(key, 2, end)
    except struct.error:
        raise DecodeError(Reason.TRUNCATED, end, "key ended inside a fixed-width field") from None
    except UnicodeDecodeError as exc:
        raise _bad_utf8(key, exc) from None
    if pos != end:
        raise DecodeError(Reason.TRAILING_BYTES, pos, f"{end - pos} bytes after the key")
    result = (type_id, fields)
    if len(_KEY_CACHE) >= _KEY_CACHE_MAX:
        _KEY_CACHE.clear()
    _KEY_CACHE[bytes(key)] = result
    return result


def _bad_utf8(buf: bytes, exc: UnicodeDecodeError) -> DecodeError:
    # generated decoders slice the string's bytes and decode them; the slice is found
    # again in the buffer to report where the bad byte is
    where = bytes(buf).find(exc.object)
    return DecodeError(Reason.BAD_UTF8, max(where, 0) + exc.start, "invalid UTF-8 in a string")


def encode_key(type_id: int, fields: dict[str, Any]) -> bytes:
    out = bytearray(P.INT16.pack(type_id))
    RECORDS[type_id].key_encoder(out, fields)
    return bytes(out)


# -- values ----------------------------------------------------------------------------------
def decode_value(type_id: int, value: bytes) -> tuple[int, dict[str, Any], str | None]:
    """``(value version, fields, layout)`` for a non-null value; raises :class:`DecodeError`.

    Layouts are tried current-first; a historical variant is used only when the current
    layout does not consume the bytes exactly. The error of the current layout is the one
    reported when none fits.
    """
    end = len(value)
    if end < 2:
        raise DecodeError(Reason.TRUNCATED, 0, "value shorter than its 2-byte version")
    version = (value[0] << 8) | value[1]
    if version & 0x8000:
        version -= 0x10000
    by_version = _VALUE_LAYOUTS.get(type_id)
    if by_version is None:
        raise DecodeError(Reason.UNKNOWN_TYPE, 0, f"record type id {type_id} is not declared")
    layouts = by_version.get(version)
    if layouts is None:
        raise DecodeError(Reason.UNKNOWN_VERSION, 0, f"{TYPE_NAMES[type_id]} value version {version} is not declared")
    first: DecodeError | None = None
    for layout, decoder in layouts:
        try:
            fields, pos = decoder(value, 2, end)
        except DecodeError as exc:
            first = first or exc
            continue
        except struct.error:
            first = first or DecodeError(Reason.TRUNCATED, end, "value ended inside a fixed-width field")
            continue
        except UnicodeDecodeError as exc:
            first = first or _bad_utf8(value, exc)
            continue
        if pos == end:
            return version, fields, layout
        first = first or DecodeError(Reason.TRAILING_BYTES, pos, f"{end - pos} bytes after the value")
    assert first is not None
    raise first


def encode_value(type_id: int, version: int, fields: dict[str, Any], layout: str | None = None) -> bytes:
    for name, _, encoder in RECORDS[type_id].value_layouts[version]:
        if name == layout:
            out = bytearray(P.INT16.pack(version))
            encoder(out, fields)
            return bytes(out)
    raise KeyError(f"type {type_id} v{version} has no layout {layout!r}")


# -- consumer protocol (inside classic group members) ------------------------------------------
def _decode_embedded(decl: CompiledEmbedded, data: bytes) -> dict[str, Any]:
    end = len(data)
    if end < 2:
        raise DecodeError(Reason.TRUNCATED, 0, f"{decl.decl.name} shorter than its version")
    (version,) = P.INT16.unpack_from(data, 0)
    if version < 0:
        raise DecodeError(Reason.UNKNOWN_VERSION, 0, f"{decl.decl.name} version {version}")
    # Kafka reads a newer version as the newest it knows and ignores what follows:
    # fields are only ever appended to these structures.
    readable = min(version, decl.max_version)
    try:
        fields, _ = decl.decoders[readable](data, 2, end)
    except struct.error:
        raise DecodeError(Reason.TRUNCATED, end, f"{decl.decl.name} ended inside a field") from None
    except UnicodeDecodeError as exc:
        raise _bad_utf8(data, exc) from None
    return {"version": version, **fields}


def decode_subscription(data: bytes) -> dict[str, Any]:
    return _decode_embedded(SUBSCRIPTION, data)


def decode_assignment(data: bytes) -> dict[str, Any] | None:
    """A zero-length assignment (not even a version) means "no assignment"."""
    if not data:
        return None
    return _decode_embedded(ASSIGNMENT, data)


def _encode_embedded(decl: CompiledEmbedded, fields: dict[str, Any]) -> bytes:
    version = fields["version"]
    out = bytearray(P.INT16.pack(version))
    decl.encoders[min(version, decl.max_version)](out, fields)
    return bytes(out)


def encode_subscription(fields: dict[str, Any]) -> bytes:
    return _encode_embedded(SUBSCRIPTION, fields)


def encode_assignment(fields: dict[str, Any] | None) -> bytes:
    return b"" if fields is None else _encode_embedded(ASSIGNMENT, fields)


def _decode_members(result: RecordDecoding) -> None:
    """Add ``subscription_info`` / ``assignment_info`` to members of a consumer-protocol group.

    The bytes stay as they are (``subscription`` / ``assignment``); the broker treats them
    as opaque, so a failure here is a warning on the record, not an undecodable record.
    """
    value = result.value
    assert value is not None
    consumer = value["protocol_type"] == "consumer"
    for i, member in enumerate(value["members"]):
        member["subscription_info"] = None
        member["assignment_info"] = None
        if not consumer:
            continue
        for part, fn in (("subscription", decode_subscription), ("assignment", decode_assignment)):
            try:
                member[f"{part}_info"] = fn(member[part])
            except DecodeError as exc:
                (result.warnings or _new_warnings(result)).append(
                    f"members[{i}].{part}: {exc.reason.value} at byte {exc.position}: {exc.detail}"
                )


def _new_warnings(result: RecordDecoding) -> list[str]:
    result.warnings = []
    return result.warnings


def decode_record(key: bytes | None, value: bytes | None) -> RecordDecoding:
    """Decode one data record (not a control record). Never raises for bad bytes."""
    result = RecordDecoding()
    if key is None:
        return result.fail("key", DecodeError(Reason.NULL_KEY, 0, "data record without a key"))
    try:
        result.record_type, result.key = decode_key(key)
    except DecodeError as exc:
        if len(key) >= 2:
            result.record_type = P.INT16.unpack_from(key, 0)[0]
        return result.fail("key", exc)
    if value is None:
        result.tombstone = True
        return result
    try:
        result.value_version, result.value, result.layout = decode_value(result.record_type, value)
    except DecodeError as exc:
        if len(value) >= 2:
            result.value_version = P.INT16.unpack_from(value, 0)[0]
        return result.fail("value", exc)
    if result.record_type == 2:
        _decode_members(result)
    return result


def encode_record(decoding: RecordDecoding) -> tuple[bytes, bytes | None]:
    """Inverse of :func:`decode_record` for a decodable record: ``(key, value)`` bytes."""
    assert decoding.record_type is not None and decoding.key is not None
    key = encode_key(decoding.record_type, decoding.key)
    if decoding.tombstone:
        return key, None
    assert decoding.value_version is not None and decoding.value is not None
    return key, encode_value(decoding.record_type, decoding.value_version, decoding.value, decoding.layout)


# -- control records (spec 10.8) ------------------------------------------------------------------
def decode_control(key: bytes | None, value: bytes | None) -> tuple[int, int, int | None]:
    """``(control type id, key version, coordinator epoch or None)``; raises DecodeError."""
    if key is None or len(key) < 4:
        raise DecodeError(Reason.BAD_CONTROL_RECORD, 0, "control key shorter than 4 bytes")
    version, ctype = struct.unpack_from(">hh", key, 0)
    epoch = None
    if ctype in (0, 1):
        if value is None or len(value) < 6:
            raise DecodeError(Reason.BAD_CONTROL_RECORD, 0, "transaction marker value shorter than 6 bytes")
        _, epoch = struct.unpack_from(">hi", value, 0)
    return ctype, version, epoch


def encode_control(ctype: int, coordinator_epoch: int, version: int = 0) -> tuple[bytes, bytes]:
    return struct.pack(">hh", version, ctype), struct.pack(">hi", 0, coordinator_epoch)
