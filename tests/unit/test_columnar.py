"""The columnar decoder equals the per-record decoder, record for record, or flags the record.

``decode_record`` is the reference: every record the columnar path decodes must carry the same
type, version, key and value dict (defaults and None included); every record it does not decode
must be flagged for the fallback, and only for a reason the reference confirms (the record does
not decode, needs a layout variant or unknown tags, or its layout has no columnar form).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.codec import primitives as P
from pipelines.codec.columnar import ColumnarResult, decode_columns, decode_fallback, uuid_strings
from pipelines.codec.columnar_versions import Merged
from pipelines.codec.errors import Reason
from pipelines.codec.reader import Batch, iter_log
from pipelines.codec.records import (
    ASSIGNMENT,
    RECORDS,
    SUBSCRIPTION,
    RecordDecoding,
    decode_record,
    encode_assignment,
    encode_key,
    encode_subscription,
    encode_value,
)
from pipelines.codec.schema import UNKNOWN_TAGS, Struct, columnar_layout
from pipelines.codec.segments import discover
from pipelines.generate import generate
from tests.conftest import real_segments_dir
from tests.unit.strategies import struct_strategy

BINARY = pa.binary()
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# (type, value version) whose current layout has a columnar form: derived from the declarations
COLUMNAR_VALUES = sorted(
    (type_id, version)
    for type_id, compiled in RECORDS.items()
    for version, layout in compiled.value_columnar.items()
    if layout is not None
)


def _needs_per_record_path(struct: Struct, version: int, flexible: bool) -> bool:
    """Independently of the compiler: a struct outside an array, a tagged struct or array of structs,
    or a tagged array of strings or bytes."""
    for f in struct.fields:
        if version not in f.versions:
            continue
        tagged = flexible and version in f.tagged
        if f.struct is not None and (tagged or not f.is_array):
            return True
        if f.is_array and tagged and f.elem in ("string", "bytes"):
            return True
        if f.is_array and f.struct is not None and _needs_per_record_path(f.struct, version, flexible):
            return True
    return False


def test_which_layouts_are_columnar() -> None:
    """Offset commits, classic group metadata and every layout without a struct outside arrays, a
    tagged struct or a tagged array of variable-length elements are columnar; the rest stays on
    the per-record path."""
    assert {(0, 0), *((1, v) for v in range(5)), *((2, v) for v in range(5))} <= set(COLUMNAR_VALUES)
    assert all(compiled.key_columnar is not None for compiled in RECORDS.values())
    for type_id, compiled in RECORDS.items():
        current = compiled.decl.layouts[0].struct
        for version, layout in compiled.value_columnar.items():
            flexible = version in compiled.decl.flexible_versions
            assert (layout is None) == _needs_per_record_path(current, version, flexible), (type_id, version)


# -- the equality check ------------------------------------------------------------------------------------
def _reference_allows_fallback(ref: RecordDecoding) -> bool:
    """A record may only be left to the fallback when the reference shows why."""
    if not ref.ok or ref.layout is not None or ref.warnings:
        return True
    if ref.tombstone:
        return False  # keys always have a columnar layout
    if _has_unknown_tags(ref.value):
        return True
    return RECORDS[ref.record_type].value_columnar.get(ref.value_version) is None


def check_against_reference(
    keys: list[bytes | None],
    values: list[bytes | None],
    arrow_type: pa.DataType = BINARY,
    small_groups_per_record: bool = False,
) -> ColumnarResult:
    """decode_columns over the lists equals decode_record record for record; returns the result.

    By default every group is decoded columnar-wise however small (the inputs here are small)."""
    result = decode_columns(
        pa.array(keys, arrow_type), pa.array(values, arrow_type), small_groups_per_record=small_groups_per_record
    )
    assert not (result.too_few & ~result.fallback).any()
    assert isinstance(result, ColumnarResult)
    seen = np.zeros(len(keys), int)
    for group in result.groups:
        seen[group.rows] += 1
        decoded_keys = group.key.to_pylist()
        decoded_values = [None] * len(group.rows) if group.value is None else group.value.to_pylist()
        assert len(decoded_keys) == len(decoded_values) == len(group.rows)
        for row, key, value in zip(group.rows.tolist(), decoded_keys, decoded_values, strict=True):
            ref = decode_record(keys[row], values[row])
            assert ref.ok and ref.layout is None, (row, ref)
            assert (group.record_type, group.value_version, group.tombstone) == (
                ref.record_type,
                ref.value_version,
                ref.tombstone,
            )
            assert key == ref.key, row
            assert value == ref.value, row
    assert ((seen == 1) != result.fallback).all(), "every record decoded once or flagged, never both"
    assert len(result.fallback) == len(keys)
    fallback = list(decode_fallback(result, pa.array(keys, arrow_type), pa.array(values, arrow_type)))
    assert [row for row, _ in fallback] == result.fallback_rows.tolist()
    for row, got in fallback:
        ref = decode_record(keys[row], values[row])
        assert (got.record_type, got.value_version, got.reason, got.key, got.value) == (
            ref.record_type,
            ref.value_version,
            ref.reason,
            ref.key,
            ref.value,
        )
        assert result.too_few[row] or _reference_allows_fallback(ref), (row, ref)
    return result


def _data_records(path: Path | bytes) -> tuple[list[bytes | None], list[bytes | None]]:
    keys, values = [], []
    for batch in iter_log(path):
        if isinstance(batch, Batch) and not batch.is_control:
            for record in batch.records or ():
                keys.append(record.key)
                values.append(record.value)
    return keys, values


# -- real and generated logs ----------------------------------------------------------------------------------
def test_every_real_segment() -> None:
    decoded = flagged = 0
    for segment in discover([real_segments_dir()]):
        keys, values = _data_records(segment.path)
        result = check_against_reference(keys, values)
        decoded += len(keys) - int(result.fallback.sum())
        flagged += int(result.fallback.sum())
    assert decoded > 30_000  # the bulk of the real records is offset commits, decoded columnar-wise
    assert flagged < decoded / 100


@pytest.fixture(scope="module")
def generated_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("columnar") / "logs"
    generate(out, 20_000, seed=11, segment_bytes=128 * 1024)
    return out


def test_generated_log_every_type_version_and_codec(generated_log: Path) -> None:
    files = sorted(generated_log.rglob("*.log"))
    codecs = set()
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    for path in files:
        codecs |= {b.codec_name for b in iter_log(path) if isinstance(b, Batch)}
        k, v = _data_records(path)
        keys += k
        values += v
    assert codecs == {"none", "gzip", "snappy", "lz4", "zstd"}
    result = check_against_reference(keys, values)
    columnar = {(g.record_type, g.value_version) for g in result.groups}
    present = {(r.record_type, r.value_version) for r in map(decode_record, keys, values)}
    # every columnar layout the generator wrote was decoded columnar-wise, tombstones too
    assert present & set(COLUMNAR_VALUES) == columnar - {(t, None) for t in RECORDS}
    assert {(1, None), (2, None)} <= columnar
    # the generator writes type 1 from value version 1 on (v0 only under type 0, as 0.8.2 did)
    assert {(1, v) for v in range(1, 5)} | {(0, 0)} <= columnar


# -- hypothesis: valid records of every declared layout, and damaged ones ------------------------------------------
def _record(type_id: int, version: int | None, layout: str | None = None):
    compiled = RECORDS[type_id]
    key = struct_strategy(compiled.decl.key, 0, False).map(lambda k: encode_key(type_id, k))
    if version is None:
        return st.tuples(key, st.none())
    struct = next(lay.struct for lay in compiled.decl.layouts if lay.name == layout)
    flexible = version in compiled.decl.flexible_versions
    fields = struct_strategy(struct, version, flexible, unknown_tags=layout is None)
    return st.tuples(key, fields.map(lambda v: encode_value(type_id, version, v, layout)))


ALL_LAYOUTS = [
    (type_id, version, name)
    for type_id, compiled in sorted(RECORDS.items())
    for version, layouts in sorted(compiled.value_layouts.items())
    for name, _, _ in layouts
]
any_record = st.one_of(
    *(_record(t, v, name) for t, v, name in ALL_LAYOUTS if v < 5),  # open-ended versions: the first few
    *(_record(t, None) for t in RECORDS),
)


@st.composite
def damaged(draw: st.DrawFn, raw: bytes | None) -> bytes | None:
    """The bytes truncated, with a byte changed or with bytes appended; None stays None."""
    if raw is None:
        return draw(st.sampled_from([None, b"", b"\x00"]))
    how = draw(st.sampled_from(["truncate", "change", "append"]))
    if how == "truncate":
        return raw[: draw(st.integers(0, max(len(raw) - 1, 0)))]
    if how == "append":
        return raw + draw(st.binary(min_size=1, max_size=4))
    if not raw:
        return raw
    at = draw(st.integers(0, len(raw) - 1))
    return raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1 :]


@pytest.mark.parametrize(("type_id", "version"), COLUMNAR_VALUES, ids=lambda x: str(x))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_valid_records_of_a_columnar_layout(type_id: int, version: int, data: st.DataObject) -> None:
    pairs = data.draw(st.lists(_record(type_id, version), min_size=1, max_size=12))
    keys, values = [k for k, _ in pairs], [v for _, v in pairs]
    result = check_against_reference(keys, values)
    for row in result.fallback_rows.tolist():  # only what the reference warns about or cannot store
        ref = decode_record(keys[row], values[row])
        assert ref.warnings or _has_unknown_tags(ref.value) or _longest_array(ref.value) > 256, ref


def _has_unknown_tags(value: Any) -> bool:
    if isinstance(value, dict):
        return UNKNOWN_TAGS in value or any(_has_unknown_tags(v) for v in value.values())
    return isinstance(value, list) and any(_has_unknown_tags(v) for v in value)


def _longest_array(value: Any) -> int:
    if isinstance(value, dict):
        return max((_longest_array(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return max([len(value), *(_longest_array(v) for v in value)])
    return 0


@FAST
@given(data=st.data())
def test_mixed_and_damaged_records(data: st.DataObject) -> None:
    pairs = data.draw(st.lists(any_record, min_size=1, max_size=25))
    keys, values = [k for k, _ in pairs], [v for _, v in pairs]
    for i in data.draw(st.lists(st.integers(0, len(pairs) - 1), max_size=6)):
        if data.draw(st.booleans()):
            keys[i] = data.draw(damaged(keys[i]))
        else:
            values[i] = data.draw(damaged(values[i]))
    arrow_type = data.draw(st.sampled_from([pa.binary(), pa.large_binary()]))
    check_against_reference(keys, values, arrow_type)


def test_fallback_reasons_come_from_the_reference() -> None:
    good_key = encode_key(1, {"group": "g", "topic": "t", "partition": 0})
    value = {"offset": 5, "leader_epoch": 1, "metadata": "", "commit_timestamp": 7, "expire_timestamp": -1}
    good = encode_value(1, 3, value)
    bad_utf8 = [
        good[:14] + P.INT16.pack(len(s)) + s + good[16:]
        for s in (b"\xff", b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80", b"a\xe2\x82")
    ]
    cases = [
        (None, good),  # null key
        (good_key[:1], good),  # key shorter than its type id
        (P.INT16.pack(99) + good_key[2:], good),  # unknown type
        (good_key + b"\x00", good),  # trailing key bytes
        (good_key, good[:1]),  # value shorter than its version
        (good_key, P.INT16.pack(9) + good[2:]),  # unknown version
        (good_key, good[:-1]),  # truncated
        (good_key, good + b"\x00"),  # trailing bytes
        (good_key, good[:14] + P.INT16.pack(-2) + good[16:]),  # negative length
        *((good_key, v) for v in bad_utf8),
        (good_key, good),  # and one that decodes
    ]
    keys, values = [k for k, _ in cases], [v for _, v in cases]
    result = check_against_reference(keys, values)
    assert result.fallback.tolist() == [True] * (len(cases) - 1) + [False]
    reasons = {row: ref.reason for row, ref in decode_fallback(result, pa.array(keys), pa.array(values))}
    assert all(reason is not None for reason in reasons.values())


def test_tagged_topic_id_and_unknown_tags() -> None:
    key = encode_key(1, {"group": "g", "topic": "t", "partition": 3})
    base = {"offset": 1, "leader_epoch": 2, "metadata": "m", "commit_timestamp": 3, "expire_timestamp": -1}
    with_id = {**base, "topic_id": P.uuid_to_str(bytes(range(16)))}
    without = {**base, "topic_id": P.ZERO_UUID}
    unknown = {**without, UNKNOWN_TAGS: [(5, b"xy")]}
    values = [encode_value(1, 4, v) for v in (with_id, without, unknown)]
    result = check_against_reference([key] * 3, values)
    assert result.fallback.tolist() == [False, False, True]


@pytest.mark.parametrize("arrow_type", [pa.binary(), pa.large_binary()])
def test_empty_null_sliced_and_chunked_inputs(arrow_type: pa.DataType) -> None:
    assert check_against_reference([], [], arrow_type).groups == []
    assert check_against_reference([None, None], [None, b""], arrow_type).fallback.all()
    key = encode_key(2, {"group": "g"})
    keys = pa.array([b"junk", key, key, None], arrow_type)
    values = pa.array([None, None, b"\x00", None], arrow_type)
    sliced = decode_columns(keys[1:3], values[1:3])
    assert sliced.fallback.tolist() == [False, True]
    [group] = sliced.groups
    assert (group.record_type, group.rows.tolist(), group.key.to_pylist()) == (2, [0], [{"group": "g"}])
    chunked = decode_columns(pa.chunked_array([keys[:2], keys[2:]]), pa.chunked_array([values[:1], values[1:]]))
    assert chunked.fallback.tolist() == [True, False, True, True]


@FAST
@given(raw=st.lists(st.binary(min_size=16, max_size=16), max_size=20))
def test_uuid_strings_print_as_kafka_does(raw: list[bytes]) -> None:
    items = np.frombuffer(b"".join(raw), "V16")
    assert uuid_strings(items).to_pylist() == [P.uuid_to_str(r) for r in raw]


consumer_members = st.lists(
    st.fixed_dictionaries(
        {
            "subscription": st.one_of(
                *(
                    struct_strategy(SUBSCRIPTION.decl.struct, v, False).map(
                        lambda d, v=v: encode_subscription({"version": v, **d})
                    )
                    for v in SUBSCRIPTION.decoders
                ),
                st.binary(max_size=6),  # not a subscription: the reference warns
            ),
            "assignment": st.one_of(
                st.just(b""),
                struct_strategy(ASSIGNMENT.decl.struct, 0, False).map(lambda d: encode_assignment({"version": 1, **d})),
            ),
        }
    ),
    max_size=3,
)


@FAST
@given(data=st.data())
def test_classic_group_members_with_consumer_protocol(data: st.DataObject) -> None:
    """Group metadata values whose members carry real (or broken) consumer protocol bytes."""
    keys, values = [], []
    for _ in range(data.draw(st.integers(1, 6))):
        version = data.draw(st.integers(0, 4))
        value = data.draw(struct_strategy(RECORDS[2].decl.layouts[0].struct, version, version >= 4))
        value["protocol_type"] = data.draw(st.sampled_from(["consumer", "connect"]))
        for member, protocol in zip(value["members"], data.draw(consumer_members), strict=False):
            member.update(protocol)
        keys.append(encode_key(2, {"group": "g"}))
        values.append(encode_value(2, version, value))
    check_against_reference(keys, values)


def test_a_consumer_protocol_version_none_of_whose_members_decodes() -> None:
    """The only subscription of version 0 is cut short: that version's columns (one of them a list
    the version lacks) are built for no row."""
    subscription = encode_subscription({"version": 0, "topics": ["a", "b"], "user_data": None})
    member = {
        "member_id": "m",
        "group_instance_id": None,
        "client_id": "c",
        "client_host": "h",
        "rebalance_timeout": 1,
        "session_timeout": 2,
        "subscription": subscription[:-1],
        "assignment": b"",
    }
    value = {
        "protocol_type": "consumer",
        "generation": 1,
        "protocol": "range",
        "leader": "m",
        "current_state_timestamp": 5,
        "members": [member],
    }
    newer = encode_subscription({"version": 1, "topics": ["a"], "user_data": None, "owned_partitions": []})
    good = {**value, "members": [{**member, "subscription": newer}]}
    key = encode_key(2, {"group": "g"})
    result = check_against_reference([key, key], [encode_value(2, 3, value), encode_value(2, 3, good)])
    assert result.fallback.tolist() == [True, False]


def test_ignored_records_are_neither_decoded_nor_flagged() -> None:
    key = encode_key(1, {"group": "g", "topic": "t", "partition": 0})
    value = encode_value(1, 3, {"offset": 1, "leader_epoch": 0, "metadata": "", "commit_timestamp": 2})
    control_key, control_value = b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05"  # a COMMIT marker
    keys, values = pa.array([key, control_key, key]), pa.array([value, control_value, None])
    result = decode_columns(keys, values, ignore=np.array([False, True, False]), small_groups_per_record=False)
    assert result.fallback.tolist() == [False, False, False]
    assert sorted(row for g in result.groups for row in g.rows.tolist()) == [0, 2]
    assert decode_columns(keys, values, small_groups_per_record=False).fallback.tolist() == [False, True, False]


def test_small_groups_go_to_the_reference_and_large_ones_stay_columnar() -> None:
    """The default policy: a (type, version) with a few records is flagged as too few (the per-record
    decoder is cheaper there), a large one is decoded columnar-wise; keys of a type with few
    distinct keys are decoded one by one, to the same values."""
    rng = random.Random(5)
    commit = {"leader_epoch": 1, "metadata": "m", "expire_timestamp": -1}
    keys, values = [], []
    for i in range(600):
        keys.append(encode_key(1, {"group": f"g{i % 7}", "topic": "t", "partition": i % 3}))
        values.append(encode_value(1, 3, {**commit, "offset": i, "commit_timestamp": rng.randrange(1 << 40)}))
    for i in range(5):
        keys.append(encode_key(1, {"group": "g", "topic": "t", "partition": i}))
        values.append(encode_value(1, 1, {**commit, "offset": i, "commit_timestamp": i, "expire_timestamp": i}))
    keys.append(encode_key(3, {"group_id": "few"}))
    values.append(None)
    result = check_against_reference(keys, values, small_groups_per_record=True)
    assert result.too_few.tolist() == [False] * 600 + [True] * 5 + [False]
    assert {(g.record_type, g.value_version) for g in result.groups} == {(1, 3), (3, None)}


# -- versions read in one pass ------------------------------------------------------------------------------
# (type, versions) that one pass decodes: consecutive versions whose layouts differ only in which
# fields are present
PASSES = [
    (type_id, run)
    for type_id, compiled in sorted(RECORDS.items())
    for run in Merged(compiled.value_columnar).classes(sorted(v for v, lay in compiled.value_columnar.items() if lay))
    if len(run) > 1
]


def test_versions_that_only_add_fields_share_a_pass() -> None:
    """Offset commits and classic group metadata only added fields up to version 3 (version 4 is
    flexible: another wire form), and so did the consumer protocol's subscription and assignment."""
    assert {(1, (0, 1, 2, 3)), (2, (0, 1, 2, 3))} <= set(PASSES)
    for decl in (SUBSCRIPTION, ASSIGNMENT):
        layouts = {v: columnar_layout(decl.decl.struct, v, False) for v in decl.decoders}
        assert Merged(layouts).classes(sorted(layouts)) == [tuple(sorted(layouts))]


def _every_version(decl: Any, encode: Any) -> st.SearchStrategy[bytes]:
    """Consumer protocol bytes of any version the declaration has."""
    return st.one_of(
        *(
            struct_strategy(decl.decl.struct, v, False).map(lambda d, v=v: encode({"version": v, **d}))
            for v in decl.decoders
        )
    )


consumer_protocol_of_any_version = st.fixed_dictionaries(
    {
        "subscription": _every_version(SUBSCRIPTION, encode_subscription),
        "assignment": _every_version(ASSIGNMENT, encode_assignment),
    }
)


@pytest.mark.parametrize(("type_id", "versions"), PASSES, ids=lambda x: str(x))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_versions_of_one_pass_mixed(type_id: int, versions: tuple[int, ...], data: st.DataObject) -> None:
    """Records of every version of a pass in one call, in any order, some of them damaged: equal to the
    reference record for record, and every version's undamaged records decoded columnar-wise (classic
    group members carry consumer protocol structs of every version)."""
    pairs = [data.draw(_record(type_id, v)) for v in versions]  # one of each, kept undamaged
    pairs += data.draw(st.lists(st.one_of(*(_record(type_id, v) for v in versions)), max_size=20))
    if type_id == 2:
        for i, (key, value) in enumerate(pairs):
            decoded = decode_record(key, value)
            fields = {**decoded.value, "protocol_type": "consumer"}
            for member in fields["members"]:
                member.update(data.draw(consumer_protocol_of_any_version))
                member.pop("subscription_info", None)
                member.pop("assignment_info", None)
            pairs[i] = (key, encode_value(2, decoded.value_version, fields))
    extra = len(pairs) - len(versions)
    broken = data.draw(st.lists(st.integers(0, extra - 1), max_size=4)) if extra else []
    for i in broken:  # the first record of each version stays undamaged
        key, value = pairs[len(versions) + i]
        pairs[len(versions) + i] = (key, data.draw(damaged(value)))
    pairs = data.draw(st.permutations(pairs))
    keys, values = [k for k, _ in pairs], [v for _, v in pairs]
    result = check_against_reference(keys, values)
    columnar = {g.value_version for g in result.groups if g.record_type == type_id and not g.tombstone}
    assert set(versions) <= columnar, (versions, columnar)


def test_a_small_version_beside_a_large_one_of_its_pass() -> None:
    """The default policy: classic group metadata v0 with too few records for a pass of its own (its
    members' consumer protocol structs count too) is decoded in the pass of a larger v3, to the
    values the reference gives; alone, it is left to the reference."""
    key = encode_key(2, {"group": "g"})
    subscription = encode_subscription({"version": 1, "topics": ["t"], "user_data": None, "owned_partitions": []})
    member = {
        "member_id": "m",
        "group_instance_id": None,
        "client_id": "c",
        "client_host": "h",
        "rebalance_timeout": 1,
        "session_timeout": 2,
        "subscription": subscription,
        "assignment": b"",
    }
    value = {"protocol_type": "consumer", "generation": 1, "protocol": "range", "leader": "m"}
    value |= {"current_state_timestamp": 5, "members": [member]}
    v0 = [encode_value(2, 0, {**value, "generation": i}) for i in range(150)]
    v3 = [encode_value(2, 3, {**value, "generation": i}) for i in range(2000)]
    alone = check_against_reference([key] * len(v0), v0, small_groups_per_record=True)
    assert alone.too_few.all()
    both = check_against_reference([key] * (len(v0) + len(v3)), v0 + v3, small_groups_per_record=True)
    assert not both.fallback.any()
    assert {(g.record_type, g.value_version, len(g.rows)) for g in both.groups} == {(2, 0, 150), (2, 3, 2000)}


def test_only_kafkas_own_encodings_read_as_the_current_layout() -> None:
    """Kafka writes a value's varints in their shortest form and its tags in ascending order (its
    writer refuses any other). Both decoders refuse others, with the same reason: taking them let
    an old layout's bytes read as the current layout without being its encoding."""
    key = encode_key(1, {"group": "g", "topic": "t", "partition": 3})
    head = bytes.fromhex("0004000000000000000100000002")  # v4, offset 1, leader epoch 2
    tail = bytes.fromhex("0000000000000003")  # commit timestamp 3
    cases = {
        "shortest": (head + b"\x02m" + tail + b"\x00", None),
        "length 0x82 0x00": (head + b"\x82\x00m" + tail + b"\x00", Reason.BAD_VARINT),
        "tag count 0x80 0x00": (head + b"\x02m" + tail + b"\x80\x00", Reason.BAD_VARINT),
        "tags ascending": (head + b"\x02m" + tail + b"\x02\x03\x01y\x05\x01x", None),
        "tags descending": (head + b"\x02m" + tail + b"\x02\x05\x01x\x03\x01y", Reason.BAD_TAGS),
        "a tag repeated": (head + b"\x02m" + tail + b"\x02\x05\x01x\x05\x01y", Reason.BAD_TAGS),
    }
    values = [v for v, _ in cases.values()]
    got = [decode_record(key, v) for v in values]
    assert {name: r.reason for name, r in zip(cases, got, strict=True)} == {n: why for n, (_, why) in cases.items()}
    assert got[0].value["metadata"] == "m" and got[3].value[UNKNOWN_TAGS] == [(3, b"y"), (5, b"x")]
    check_against_reference([key] * len(values), values)  # the columnar decoder: the same, row for row

    # Hypothesis's find: a kafka-3.7 ConsumerGroupPartitionMetadata value whose epoch's bytes read,
    # in the current layout, as an empty array, 19 tags, tag 128 (0x80 0x01) and repeated tag 0
    old = {
        "epoch": 18055169,
        "topics": [
            {
                "topic_id": P.ZERO_UUID,
                "topic_name": "",
                "num_partitions": 0,
                "partition_metadata": [{"partition": 0, "racks": []}] * 3,
            }
        ],
    }
    encoded = encode_value(4, 0, old, "kafka-3.7")
    ref = decode_record(encode_key(4, {"group_id": "g"}), encoded)
    assert (ref.reason, ref.layout, ref.value) == (None, "kafka-3.7", old)
