"""Spark DDL type strings (as ``schemas/tables/*.yaml`` declare columns) as Arrow types. No Spark.

The silver decoder and gold's replay engine build Arrow data in Python workers, where the Spark
session is not at hand; the table declarations stay the one source of column types.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["arrow_type"]

_SIMPLE = {
    "string": pa.string(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "smallint": pa.int16(),
    "tinyint": pa.int8(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "double": pa.float64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "date": pa.date32(),
}


def arrow_type(ddl: str) -> pa.DataType:
    """Arrow type of a Spark DDL type string (``array<struct<topic:string,partitions:array<int>>>``)."""
    text = ddl.replace(" ", "")
    result, pos = _parse_type(text, 0)
    if pos != len(text):
        raise ValueError(f"cannot parse type {ddl!r} at {pos}")
    return result


def _parse_type(text: str, pos: int) -> tuple[pa.DataType, int]:
    if text.startswith("array<", pos):
        elem, pos = _parse_type(text, pos + 6)
        return pa.list_(pa.field("element", elem)), _expect(text, pos, ">")
    if text.startswith("struct<", pos):
        pos += 7
        fields = []
        while True:
            colon = text.index(":", pos)
            name = text[pos:colon].strip("`")
            ftype, pos = _parse_type(text, colon + 1)
            fields.append(pa.field(name, ftype))
            if text[pos] == ",":
                pos += 1
                continue
            return pa.struct(fields), _expect(text, pos, ">")
    end = pos
    while end < len(text) and text[end].isalnum():
        end += 1
    name = text[pos:end]
    if name not in _SIMPLE:
        raise ValueError(f"unsupported type {name!r} in {text!r}")
    return _SIMPLE[name], end


def _expect(text: str, pos: int, char: str) -> int:
    if pos >= len(text) or text[pos] != char:
        raise ValueError(f"expected {char!r} at {pos} in {text!r}")
    return pos + 1
