"""Hypothesis strategies derived from the record declarations themselves.

For every declared (type, value version, layout) this builds values that are valid for
that version: fields the version lacks hold their default, tagged fields are either
default (omitted on the wire) or random, and flexible structs may carry unknown tags.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from pipelines.codec import primitives as P
from pipelines.codec.schema import UNKNOWN_TAGS, Field, Struct, default_value

_INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}

texts = st.text(max_size=12)
uuids = st.binary(min_size=16, max_size=16).map(P.uuid_to_str)


def _scalar(type_name: str, nullable: bool) -> st.SearchStrategy[Any]:
    if type_name in _INT_RANGES:
        lo, hi = _INT_RANGES[type_name]
        base: st.SearchStrategy[Any] = st.integers(lo, hi)
    elif type_name == "uuid":
        base = uuids
    elif type_name == "string":
        base = texts
    elif type_name == "bytes":
        base = st.binary(max_size=24)
    else:
        raise AssertionError(type_name)
    return st.none() | base if nullable else base


def field_strategy(f: Field, version: int, flexible: bool, unknown_tags: bool) -> st.SearchStrategy[Any]:
    nullable = version in f.nullable
    if f.is_array:
        if f.struct is not None:
            elem = struct_strategy(f.struct, version, flexible, unknown_tags)
        else:
            elem = _scalar(f.elem, False)
        arr = st.lists(elem, max_size=3)
        return st.none() | arr if nullable else arr
    if f.struct is not None:
        sub = struct_strategy(f.struct, version, flexible, unknown_tags)
        return st.none() | sub if nullable else sub
    return _scalar(f.type, nullable)


def struct_strategy(struct: Struct, version: int, flexible: bool, unknown_tags: bool = True) -> st.SearchStrategy:
    parts: dict[str, st.SearchStrategy[Any]] = {}
    known_tags = set()
    for f in struct.fields:
        if version not in f.versions:
            parts[f.key] = st.just(default_value(f)) if default_value(f) != [] else st.builds(list)
        elif flexible and version in f.tagged:
            known_tags.add(f.tag)
            parts[f.key] = st.just(default_value(f)) | field_strategy(f, version, flexible, unknown_tags)
        else:
            parts[f.key] = field_strategy(f, version, flexible, unknown_tags)
    base = st.fixed_dictionaries(parts)
    if not (flexible and unknown_tags):
        return base
    free_tags = st.integers(0, 40).filter(lambda t: t not in known_tags)
    extra = st.lists(st.tuples(free_tags, st.binary(max_size=8)), max_size=2, unique_by=lambda t: t[0])

    def attach(pair: tuple[dict, list]) -> dict:
        obj, tags = pair
        if tags:
            obj[UNKNOWN_TAGS] = sorted(tags)
        return obj

    return st.tuples(base, extra).map(attach)
