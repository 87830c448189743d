"""Record layouts as data: load ``schemas/records/*.yaml`` and compile them into Python.

The declarations use the vocabulary of Kafka's own message-schema JSON files (see
``schemas/records/README.md``). For every (struct, version, flexible) combination this
module generates the source of one specialised decode and one encode function and
``exec``s it once at import time, so decoding runs straight-line ``struct`` calls
instead of interpreting the declaration per record (measured in docs/performance.md).

Decoded structs are plain dicts with snake_case keys (``commitTimestamp`` ->
``commit_timestamp``), which is also how the silver tables name their columns. Fields
a version lacks carry their declared default (spec 2.4). Unknown tagged fields are
kept, never dropped, under ``_unknown_tags`` as ``[(tag, bytes), ...]`` and written
back by the encoder.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import struct as _struct
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipelines.codec import primitives as P
from pipelines.codec.errors import DecodeError, Reason

UNKNOWN_TAGS = "_unknown_tags"

_FIXED = {"int8": "b", "int16": "h", "uint16": "H", "int32": "i", "int64": "q"}
_FIXED_SIZE = {"b": 1, "h": 2, "H": 2, "i": 4, "q": 8}
_PRIMITIVES = {*_FIXED, "uuid", "string", "bytes"}


def snake(name: str) -> str:
    """``commitTimestamp`` -> ``commit_timestamp``, ``GroupId`` -> ``group_id``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def schemas_dir() -> Path:
    """``schemas/`` of the source tree, or its copy inside an installed wheel, or — the package
    imported from a zip, as a cluster's executors import the one the driver ships
    (runtime/spark.py) — its copy in the zip, extracted once per zip."""
    here = Path(__file__).resolve()
    for candidate in (here.parents[1] / "_schemas", here.parents[2] / "schemas"):
        if (candidate / "records").is_dir():
            return candidate
    archive = next((p for p in here.parents if p.suffix == ".zip" and p.is_file()), None)
    if archive is not None:
        return _extracted_schemas(archive)
    raise FileNotFoundError("schemas/records not found next to the pipelines package")


def _extracted_schemas(archive: Path) -> Path:
    """``pipelines/_schemas/`` of the zip ``archive`` as a directory (made atomically: the Python
    workers of one executor may ask at once)."""
    stat = archive.stat()
    digest = hashlib.sha1(f"{archive}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    target = Path(tempfile.gettempdir()) / f"offsets-lakehouse-schemas-{digest}"
    if (target / "records").is_dir():
        return target
    staging = Path(tempfile.mkdtemp(prefix=target.name + "-", dir=target.parent))
    prefix = "pipelines/_schemas/"
    with zipfile.ZipFile(archive) as zf:
        for name in zf.namelist():
            if name.startswith(prefix) and not name.endswith("/"):
                out = staging / name[len(prefix) :]
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(zf.read(name))
    try:
        staging.rename(target)
    except OSError:  # another worker was first: its copy is the same
        shutil.rmtree(staging, ignore_errors=True)
    return target


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where built in: ~10x faster
_DOCS: dict[tuple[str, int], Any] = {}


def load_yaml(path: Path) -> Any:
    """A declaration file parsed once per process (until it changes on disk). Every stage reads
    the table and record declarations, some many times a run; callers must not mutate it."""
    key = (str(path), path.stat().st_mtime_ns)
    if key not in _DOCS:
        _DOCS[key] = yaml.load(path.read_text(), Loader=_LOADER)
    return _DOCS[key]


# -- declaration model ---------------------------------------------------------------------
@dataclass(frozen=True)
class Versions:
    """A Kafka version range: ``"0+"``, ``"3"``, ``"0-4"`` or ``"none"``."""

    lo: int
    hi: int | None  # None = open-ended; lo > hi encodes "none"

    @classmethod
    def parse(cls, text: Any) -> Versions:
        text = str(text).strip()
        if text == "none":
            return cls(1, 0)
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            lo, hi = text.split("-", 1)
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return version >= self.lo and (self.hi is None or version <= self.hi)

    def upto(self, limit: int) -> list[int]:
        hi = limit if self.hi is None else self.hi
        return list(range(self.lo, hi + 1))


NONE = Versions(1, 0)


@dataclass
class Field:
    name: str
    type: str
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: Any
    struct: Struct | None = None  # for struct and struct-array types

    @property
    def key(self) -> str:
        return snake(self.name)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def elem(self) -> str:
        return self.type[2:] if self.is_array else self.type


@dataclass
class Struct:
    name: str
    fields: list[Field] = field(default_factory=list)


@dataclass
class Layout:
    name: str | None  # None = the current layout
    struct: Struct


@dataclass
class RecordDecl:
    api_key: int
    name: str
    key: Struct
    valid_versions: Versions
    flexible_versions: Versions
    layouts: list[Layout]  # current layout first, then historical variants
    source: str = ""


@dataclass
class EmbeddedDecl:
    name: str
    valid_versions: Versions
    flexible_versions: Versions
    struct: Struct


def _parse_fields(raw: list[dict], common: dict[str, list[dict]], owner: str) -> list[Field]:
    out = []
    for spec in raw:
        unknown = set(spec) - {
            "name",
            "type",
            "versions",
            "nullableVersions",
            "taggedVersions",
            "tag",
            "default",
            "fields",
            "about",
            "ignorable",
        }
        if unknown:
            raise ValueError(f"{owner}.{spec.get('name')}: unknown declaration keys {sorted(unknown)}")
        f = Field(
            name=spec["name"],
            type=spec["type"],
            versions=Versions.parse(spec.get("versions", "0+")),
            nullable=Versions.parse(spec.get("nullableVersions", "none")),
            tagged=Versions.parse(spec.get("taggedVersions", "none")),
            tag=spec.get("tag"),
            default=spec.get("default", _MISSING),
        )
        if (f.tag is None) != (f.tagged == NONE):
            raise ValueError(f"{owner}.{f.name}: 'tag' and 'taggedVersions' go together")
        if f.elem not in _PRIMITIVES:
            sub = spec.get("fields") or common.get(f.elem)
            if sub is None:
                raise ValueError(f"{owner}.{f.name}: struct type {f.elem} has no fields")
            f.struct = Struct(f.elem, _parse_fields(sub, common, f"{owner}.{f.elem}"))
        out.append(f)
    return out


_MISSING = object()


def load_record_decl(path: Path) -> RecordDecl:
    doc = load_yaml(path)
    common = {s["name"]: s["fields"] for s in doc.get("commonStructs", [])}
    value = doc["value"]
    name = doc["name"]
    layouts = [Layout(None, Struct(f"{name}Value", _parse_fields(value["fields"], common, name)))]
    for variant in value.get("variants", []):
        layouts.append(Layout(variant["name"], Struct(f"{name}Value", _parse_fields(variant["fields"], common, name))))
    return RecordDecl(
        api_key=int(doc["apiKey"]),
        name=name,
        key=Struct(f"{name}Key", _parse_fields(doc["key"]["fields"], common, f"{name}Key")),
        valid_versions=Versions.parse(value["validVersions"]),
        flexible_versions=Versions.parse(value.get("flexibleVersions", "none")),
        layouts=layouts,
        source=path.name,
    )


def load_embedded_decl(path: Path) -> EmbeddedDecl:
    doc = load_yaml(path)
    common = {s["name"]: s["fields"] for s in doc.get("commonStructs", [])}
    return EmbeddedDecl(
        name=doc["name"],
        valid_versions=Versions.parse(doc["validVersions"]),
        flexible_versions=Versions.parse(doc.get("flexibleVersions", "none")),
        struct=Struct(doc["name"], _parse_fields(doc["fields"], common, doc["name"])),
    )


# -- defaults ---------------------------------------------------------------------------
def default_value(f: Field) -> Any:
    """The value Kafka materialises for a field absent from a version or an omitted tag."""
    if f.default is not _MISSING:
        if f.default is None:
            return None
        if f.elem in _FIXED:
            return int(f.default)
        return f.default
    if f.is_array:
        return []
    if f.struct is not None:
        return None
    return {"string": "", "bytes": b"", "uuid": P.ZERO_UUID}.get(f.type, 0)


# -- code generation ----------------------------------------------------------------------
class _Compiler:
    """Emits Python source for decoders/encoders of one struct at one version."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env: dict[str, Any] = {
            "P": P,
            "DecodeError": DecodeError,
            "Reason": Reason,
            "UNKNOWN_TAGS": UNKNOWN_TAGS,
        }
        self.counter = 0
        self.cache: dict[tuple[int, int, bool, str], str] = {}

    def _name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def const(self, value: Any) -> str:
        name = self._name("_c")
        self.env[name] = value
        return name

    # decoders ----------------------------------------------------------------
    def decoder(self, struct: Struct, version: int, flexible: bool) -> str:
        key = (id(struct), version, flexible, "d")
        if key in self.cache:
            return self.cache[key]
        fname = self._name(f"_dec_{struct.name}_v{version}_")
        self.cache[key] = fname
        body: list[str] = []
        result: list[str] = []
        present = [f for f in struct.fields if version in f.versions]
        regular = [f for f in present if not (flexible and version in f.tagged)]
        tagged = [f for f in present if flexible and version in f.tagged]
        absent = [f for f in struct.fields if version not in f.versions]

        i = 0
        while i < len(regular):
            f = regular[i]
            if f.type in _FIXED:
                group = []
                while i < len(regular) and regular[i].type in _FIXED:
                    group.append(regular[i])
                    i += 1
                fmt = ">" + "".join(_FIXED[g.type] for g in group)
                size = sum(_FIXED_SIZE[_FIXED[g.type]] for g in group)
                unpack = self.const(_struct.Struct(fmt).unpack_from)
                names = [f"v_{g.key}" for g in group]
                target = names[0] + "," if len(names) == 1 else ", ".join(names)
                body.append(f"{target} = {unpack}(buf, pos)")
                body.append(f"pos += {size}")
                result += [f"{g.key!r}: v_{g.key}" for g in group]
                continue
            body += self._decode_field(f, version, flexible, f"v_{f.key}")
            result.append(f"{f.key!r}: v_{f.key}")
            i += 1

        for f in absent:
            result.append(f"{f.key!r}: {self._default_expr(f)}")

        if flexible:
            for f in tagged:
                result.append(f"{f.key!r}: t_{f.key}")
                body.append(f"t_{f.key} = {self._default_expr(f)}")
            body.append("extra = None")
            body.append("if pos < end and buf[pos] == 0:  # the usual empty tagged section")
            body.append("    pos += 1")
            body.append("else:")
            body.append("    ntag, pos = P.read_uvarint(buf, pos, end)")
            body.append("    prev = -1")
            body.append("    for _ in range(ntag):")
            body.append("        at = pos")
            body.append("        tag, pos = P.read_uvarint(buf, pos, end)")
            # Kafka writes tags in ascending order and refuses to write others (RawTaggedFieldWriter):
            # taking them in any order would let an old layout's bytes read as the current layout
            body.append("        if tag <= prev:")
            body.append("            raise DecodeError(Reason.BAD_TAGS, at, f'tag {tag} after tag {prev}')")
            body.append("        prev = tag")
            body.append("        size, pos = P.read_uvarint(buf, pos, end)")
            body.append("        stop = pos + size")
            body.append("        if stop > end:")
            body.append("            raise DecodeError(Reason.TRUNCATED, pos, f'tagged field {tag} runs past the end')")
            for f in tagged:
                tagfn = self._tag_decoder(f, version)
                body.append(f"        if tag == {f.tag}:")
                body.append(f"            t_{f.key} = {tagfn}(buf[pos:stop], pos)")
                body.append("            pos = stop")
                body.append("            continue")
            body.append("        if extra is None:")
            body.append("            extra = []")
            body.append("        extra.append((tag, bytes(buf[pos:stop])))")
            body.append("        pos = stop")

        order = {f.key: i for i, f in enumerate(struct.fields)}
        result.sort(key=lambda entry: order[entry.split(":", 1)[0].strip("'")])
        src = [f"def {fname}(buf, pos, end):"]
        src += ["    " + line for line in body]
        src.append("    r = {" + ", ".join(result) + "}")
        if flexible:
            src.append("    if extra is not None:")
            src.append("        r[UNKNOWN_TAGS] = extra")
        src.append("    return r, pos")
        self.lines += [*src, ""]
        return fname

    def _default_expr(self, f: Field) -> str:
        value = default_value(f)
        # a fresh list per record: callers may mutate what they get
        return "[]" if value == [] else self.const(value)

    def _tag_decoder(self, f: Field, version: int) -> str:
        """Decode one tagged field's data region, which must be consumed exactly."""
        fname = self._name(f"_tag_{snake(f.name)}_")
        body = self._decode_field(f, version, True, "v", tagged=True)
        src = [f"def {fname}(buf, base):", "    pos = 0", "    end = len(buf)", "    try:"]
        src += ["        " + line for line in body]
        src += [
            "    except DecodeError as exc:",
            "        raise DecodeError(exc.reason, base + exc.position, exc.detail) from None",
            "    if pos != end:",
            f"        raise DecodeError(Reason.TRAILING_BYTES, base + pos, 'tag {f.tag} ({f.name}) trailing bytes')",
            "    return v",
        ]
        self.lines += [*src, ""]
        return fname

    def _decode_field(self, f: Field, version: int, flexible: bool, var: str, tagged: bool = False) -> list[str]:
        nullable = version in f.nullable
        t = f.type
        if t in _FIXED:
            unpack = self.const(_struct.Struct(">" + _FIXED[t]).unpack_from)
            return [f"{var}, = {unpack}(buf, pos)", f"pos += {_FIXED_SIZE[_FIXED[t]]}"]
        if t == "uuid":
            return [f"{var}, pos = P.read_uuid(buf, pos, end)"]
        if t in ("string", "bytes"):
            return self._inline_string(t, flexible, nullable, var)
        if f.is_array:
            reader = "read_compact_array_length" if flexible else "read_array_length"
            lines = [f"n, pos = P.{reader}(buf, pos, end, {nullable})", "if n < 0:", f"    {var} = None"]
            elem = f.elem
            if elem in ("int32", "int16"):
                code = _FIXED[elem]
                size = _FIXED_SIZE[code]
                lines += [
                    "else:",
                    f"    {var} = list(P.struct_unpack_from('>%d{code}' % n, buf, pos))",
                    f"    pos += {size} * n",
                ]
                return lines
            lines += ["else:", f"    {var} = []", "    for _ in range(n):"]
            if f.struct is not None:
                sub = self.decoder(f.struct, version, flexible)
                lines += [f"        e, pos = {sub}(buf, pos, end)", f"        {var}.append(e)"]
            else:
                inner = Field(f.name, elem, f.versions, NONE, NONE, None, _MISSING)
                lines += ["        " + ln for ln in self._decode_field(inner, version, flexible, "e")]
                lines += [f"        {var}.append(e)"]
            return lines
        assert f.struct is not None, f.type
        sub = self.decoder(f.struct, version, flexible)
        if not nullable:
            return [f"{var}, pos = {sub}(buf, pos, end)"]
        # nullable struct: a presence marker; inside a tag it is a uvarint (> 0 = present),
        # elsewhere an int8 (-1 = null, 1 = present)
        if tagged:
            return [
                "marker, pos = P.read_uvarint(buf, pos, end)",
                "if marker == 0:",
                f"    {var} = None",
                "else:",
                f"    {var}, pos = {sub}(buf, pos, end)",
            ]
        return [
            "marker, = P.INT8.unpack_from(buf, pos)",
            "if marker == -1:",
            f"    {var} = None",
            "    pos += 1",
            "elif marker == 1:",
            f"    {var}, pos = {sub}(buf, pos + 1, end)",
            "else:",
            "    raise DecodeError(Reason.BAD_MARKER, pos, f'nullable struct marker {marker}')",
        ]

    def _inline_string(self, t: str, flexible: bool, nullable: bool, var: str) -> list[str]:
        """Strings and bytes inline: they dominate real records, and a helper call per field
        costs more than the decoding itself. Invalid UTF-8 surfaces as UnicodeDecodeError,
        which the record-level wrapper turns into a positioned BAD_UTF8 (records.py)."""
        what = "string" if t == "string" else "bytes"
        if flexible:  # compact: uvarint(N + 1), 0 = null; one-byte lengths inline
            lines = [
                "if pos >= end:",
                f"    raise DecodeError(Reason.TRUNCATED, pos, '{what} length')",
                "n = buf[pos] - 1",
                "if n < 0x7F:",
                "    pos += 1",
                "else:",
                "    n, pos = P.read_uvarint(buf, pos, end)",
                "    n -= 1",
            ]
        else:
            unpack = self.const((P.INT16 if t == "string" else P.INT32).unpack_from)
            lines = [f"n, = {unpack}(buf, pos)", f"pos += {2 if t == 'string' else 4}"]
        value = "buf[pos:stop].decode()" if t == "string" else "bytes(buf[pos:stop])"
        read = [
            "stop = pos + n",
            "if stop > end:",
            f"    raise DecodeError(Reason.TRUNCATED, pos, f'{what} of {{n}} bytes runs past the end')",
            f"{var} = {value}",
            "pos = stop",
        ]
        if nullable:
            return [
                *lines,
                "if n == -1:",
                f"    {var} = None",
                "elif n < -1:",
                f"    raise DecodeError(Reason.BAD_LENGTH, pos, f'{what} length {{n}}')",
                "else:",
                *("    " + ln for ln in read),
            ]
        return [
            *lines,
            "if n < 0:",
            f"    raise DecodeError(Reason.BAD_LENGTH, pos, f'length {{n}} in a non-nullable {what}')",
            *read,
        ]

    # encoders ----------------------------------------------------------------
    def encoder(self, struct: Struct, version: int, flexible: bool) -> str:
        key = (id(struct), version, flexible, "e")
        if key in self.cache:
            return self.cache[key]
        fname = self._name(f"_enc_{struct.name}_v{version}_")
        self.cache[key] = fname
        present = [f for f in struct.fields if version in f.versions]
        regular = [f for f in present if not (flexible and version in f.tagged)]
        tagged = [f for f in present if flexible and version in f.tagged]
        body: list[str] = []
        for f in regular:
            body += self._encode_field(f, version, flexible, f"obj[{f.key!r}]")
        if flexible:
            body.append("tags = list(obj.get(UNKNOWN_TAGS) or ())")
            for f in tagged:
                default = self.const(default_value(f))
                body.append(f"v = obj.get({f.key!r}, {default})")
                body.append(f"if v != {default}:")
                body.append("    tmp = bytearray()")
                body += ["    " + ln for ln in self._encode_field(f, version, True, "v", out="tmp", tagged=True)]
                body.append(f"    tags.append(({f.tag}, bytes(tmp)))")
            body.append("tags.sort(key=lambda t: t[0])")
            body.append("P.write_uvarint(out, len(tags))")
            body.append("for tag, data in tags:")
            body.append("    P.write_uvarint(out, tag)")
            body.append("    P.write_uvarint(out, len(data))")
            body.append("    out += data")
        src = [f"def {fname}(out, obj):"] + ["    " + ln for ln in body or ["pass"]]
        self.lines += [*src, ""]
        return fname

    def _encode_field(
        self, f: Field, version: int, flexible: bool, expr: str, out: str = "out", tagged: bool = False
    ) -> list[str]:
        nullable = version in f.nullable
        t = f.type
        if t in _FIXED:
            pack = self.const(_struct.Struct(">" + _FIXED[t]).pack)
            return [f"{out} += {pack}({expr})"]
        if t == "uuid":
            return [f"{out} += P.uuid_from_str({expr})"]
        if t in ("string", "bytes"):
            if flexible:
                fn = "write_compact_string" if t == "string" else "write_compact_bytes"
            elif t == "string":
                fn = "write_nullable_string" if nullable else "write_string"
            else:
                fn = "write_bytes"
            lines = []
            if not nullable:
                lines.append(f"if {expr} is None: raise ValueError('{f.name} is not nullable')")
            return [*lines, f"P.{fn}({out}, {expr})"]
        if f.is_array:
            lines = [f"a = {expr}", "if a is None:"]
            if not nullable:
                lines.append(f"    raise ValueError('{f.name} is not nullable')")
            lines.append(f"    {out} += {'bytes([0])' if flexible else 'bytes([255, 255, 255, 255])'}")
            lines.append("else:")
            if flexible:
                lines.append(f"    P.write_uvarint({out}, len(a) + 1)")
            else:
                lines.append(f"    {out} += P.INT32.pack(len(a))")
            elem = f.elem
            if elem in ("int32", "int16"):
                lines.append(f"    {out} += P.struct_pack('>%d{_FIXED[elem]}' % len(a), *a)")
                return lines
            lines.append("    for e in a:")
            if f.struct is not None:
                sub = self.encoder(f.struct, version, flexible)
                lines.append(f"        {sub}({out}, e)")
            else:
                inner = Field(f.name, elem, f.versions, NONE, NONE, None, _MISSING)
                lines += ["        " + ln for ln in self._encode_field(inner, version, flexible, "e", out)]
            return lines
        assert f.struct is not None
        sub = self.encoder(f.struct, version, flexible)
        if not nullable:
            return [f"{sub}({out}, {expr})"]
        if tagged:
            return [f"P.write_uvarint({out}, 1)", f"{sub}({out}, {expr})"]
        return [
            f"if {expr} is None:",
            f"    {out}.append(255)",
            "else:",
            f"    {out}.append(1)",
            f"    {sub}({out}, {expr})",
        ]

    def build(self) -> dict[str, Any]:
        source = "\n".join(self.lines)
        code = compile(source, "<pipelines.codec.schema generated>", "exec")
        exec(code, self.env)
        self.env["__source__"] = source
        return self.env


# -- columnar plans --------------------------------------------------------------------------
# Types a columnar decoder reads for whole Arrow buffers at once (pipelines/codec/columnar.py),
# and arrays of them or of structs made of them. Nested structs outside arrays (nullable markers),
# tagged structs and tagged arrays of anything but fixed-width elements stay on the per-record
# decoders.
COLUMNAR_TYPES = frozenset({*_FIXED, "uuid", "string", "bytes"})
# tagged fields the columnar decoders read (and elements of tagged arrays): fixed width
COLUMNAR_TAGGED_TYPES = frozenset({*_FIXED, "uuid"})
ARRAY = "array"  # ColumnarField.type of an array; its element is ColumnarField.element


@dataclass(frozen=True)
class ColumnarField:
    """One output column of a columnar layout, in declaration order."""

    key: str  # snake_case name, as in the per-record dicts
    type: str  # one of COLUMNAR_TYPES, or ARRAY
    present: bool  # False: the version lacks the field; the column holds `default`
    nullable: bool
    compact: bool  # flexible encoding of strings, bytes and array counts (uvarint length + 1)
    tag: int | None  # read from the tagged-field section when not None
    default: Any  # the value of an absent field or an omitted tag (default_value)
    element: ColumnarField | ColumnarLayout | None = None  # of an ARRAY: a scalar or a struct


@dataclass(frozen=True)
class ColumnarLayout:
    """A struct at one version as data for the columnar decoders: what to read, in which order."""

    fields: tuple[ColumnarField, ...]
    flexible: bool  # ends with a tagged-field section

    @property
    def wire(self) -> tuple[ColumnarField, ...]:
        """The fields read in place, in wire order (tagged fields come from the section)."""
        return tuple(f for f in self.fields if f.present and f.tag is None)

    @property
    def tagged(self) -> tuple[ColumnarField, ...]:
        return tuple(f for f in self.fields if f.present and f.tag is not None)


def columnar_layout(struct: Struct, version: int, flexible: bool) -> ColumnarLayout | None:
    """The struct at ``version`` as a columnar layout, or None when a field needs the per-record path.

    Every field of the declaration counts, also those the version lacks: the columns of one
    record type keep one shape across its versions.
    """
    fields = []
    for f in struct.fields:
        column = _columnar_field(f, version, flexible)
        if column is None:
            return None
        fields.append(column)
    return ColumnarLayout(tuple(fields), flexible)


def _columnar_field(f: Field, version: int, flexible: bool) -> ColumnarField | None:
    tagged = version in f.versions and flexible and version in f.tagged
    element: ColumnarField | ColumnarLayout | None = None
    if f.is_array:
        if tagged and (f.struct is not None or f.elem not in COLUMNAR_TAGGED_TYPES):
            return None
        if f.struct is not None:
            element = columnar_layout(f.struct, version, flexible)
        elif f.elem in COLUMNAR_TYPES:
            element = ColumnarField(f.key, f.elem, True, False, flexible, None, None)
        if element is None:
            return None
    elif f.struct is not None or f.type not in COLUMNAR_TYPES or (tagged and f.type not in COLUMNAR_TAGGED_TYPES):
        return None
    return ColumnarField(
        key=f.key,
        type=ARRAY if f.is_array else f.type,
        present=version in f.versions,
        nullable=version in f.nullable,
        compact=flexible,
        tag=f.tag if tagged else None,
        default=default_value(f),
        element=element,
    )


Decoder = Callable[[bytes, int, int], tuple[dict, int]]
Encoder = Callable[[bytearray, dict], None]


@dataclass
class CompiledRecord:
    decl: RecordDecl
    key_decoder: Decoder
    key_encoder: Encoder
    # value version -> [(layout name, decoder, encoder)], current layout first
    value_layouts: dict[int, list[tuple[str | None, Decoder, Encoder]]]
    # the same as data for the columnar decoders; None where a field needs the per-record path.
    # Values: the current layout only (records that need a variant fall back to decode_record).
    key_columnar: ColumnarLayout | None = None
    value_columnar: dict[int, ColumnarLayout | None] = field(default_factory=dict)


@dataclass
class CompiledEmbedded:
    decl: EmbeddedDecl
    decoders: dict[int, Decoder]
    encoders: dict[int, Encoder]

    @property
    def max_version(self) -> int:
        return max(self.decoders)


@dataclass
class Registry:
    records: dict[int, CompiledRecord]
    embedded: dict[str, CompiledEmbedded]
    source: str  # the generated Python, for debugging (`python -m pipelines.codec.schema`)


# newest version a declaration without an upper bound is compiled for
_OPEN_VERSION_LIMIT = 16


def compile_registry(root: Path | None = None) -> Registry:
    root = root or schemas_dir()
    comp = _Compiler()
    pending_records = []
    for path in sorted((root / "records").glob("*.yaml")):
        decl = load_record_decl(path)
        key_fns = (comp.decoder(decl.key, 0, False), comp.encoder(decl.key, 0, False))
        layouts: dict[int, list[tuple[str | None, str, str]]] = {}
        for version in decl.valid_versions.upto(_OPEN_VERSION_LIMIT):
            flexible = version in decl.flexible_versions
            layouts[version] = [
                (lay.name, comp.decoder(lay.struct, version, flexible), comp.encoder(lay.struct, version, flexible))
                for lay in decl.layouts
            ]
        pending_records.append((decl, key_fns, layouts))
    pending_embedded = []
    for path in sorted((root / "embedded").glob("*.yaml")):
        edecl = load_embedded_decl(path)
        fns = {
            v: (
                comp.decoder(edecl.struct, v, v in edecl.flexible_versions),
                comp.encoder(edecl.struct, v, v in edecl.flexible_versions),
            )
            for v in edecl.valid_versions.upto(_OPEN_VERSION_LIMIT)
        }
        pending_embedded.append((edecl, fns))
    env = comp.build()

    records: dict[int, CompiledRecord] = {}
    for decl, (kd, ke), layouts in pending_records:
        if decl.api_key in records:
            raise ValueError(f"type id {decl.api_key} declared twice ({decl.source})")
        current = decl.layouts[0].struct
        records[decl.api_key] = CompiledRecord(
            decl,
            env[kd],
            env[ke],
            {v: [(name, env[d], env[e]) for name, d, e in lays] for v, lays in layouts.items()},
            key_columnar=columnar_layout(decl.key, 0, False),
            value_columnar={v: columnar_layout(current, v, v in decl.flexible_versions) for v in layouts},
        )
    embedded = {
        edecl.name: CompiledEmbedded(
            edecl, {v: env[d] for v, (d, _) in fns.items()}, {v: env[e] for v, (_, e) in fns.items()}
        )
        for edecl, fns in pending_embedded
    }
    return Registry(records, embedded, env["__source__"])


if __name__ == "__main__":  # print the generated code
    print(compile_registry().source)
