"""Several versions of a layout read as one, for the columnar decoder (``columnar.py``).

``columnar_layout`` keeps every declared field in every version's layout, present or not, so
versions whose wire forms differ only in which fields are present (offset commits v0-v3,
classic group metadata v0-v3, the consumer protocol's subscription and assignment versions) can
be decoded in one pass: each field is read for the rows whose version has it, and holds its
default elsewhere. A pass costs a few numpy calls per field whatever the number of rows, so one
pass instead of one per version saves those calls, and lets versions with few records of their
own be decoded columnar-wise beside a larger one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipelines.codec.schema import ColumnarField, ColumnarLayout


@dataclass(frozen=True, eq=False)
class VersionedLayout:
    """The layouts of ``versions`` as one: ``layout`` is the newest one's (the fields' types, tags and
    defaults agree across the versions); per field, how it is read (from the newest version that
    has it: whether it is nullable may differ from the versions that lack it), and which versions
    have it."""

    layout: ColumnarLayout
    versions: tuple[int, ...]
    fields: tuple[ColumnarField, ...]
    present: tuple[tuple[int, ...] | None, ...]  # per field: the versions that have it; None = all of them
    elements: tuple[VersionedLayout | None, ...]  # per field: the struct elements of an array, merged alike

    def varying(self) -> int:
        """Fields (nested ones too) present in some of the versions but not all: each costs a read of a subset."""
        own = sum(1 for has in self.present if has)
        return own + sum(e.varying() for e in self.elements if e is not None)


def _bare(f: ColumnarField, nullable: bool | None = None) -> ColumnarField:
    """The field without what may differ between versions that merge (and, given, with ``nullable``)."""
    return replace(f, present=True, element=None, nullable=f.nullable if nullable is None else nullable)


def merge(layouts: dict[int, ColumnarLayout]) -> VersionedLayout | None:
    """The layouts (version -> layout) as one, or None when they differ in more than which fields are present."""
    versions = tuple(sorted(layouts))
    items = [layouts[v] for v in versions]
    newest = items[-1]
    if any(x.flexible != newest.flexible or len(x.fields) != len(newest.fields) for x in items):
        return None
    read: list[ColumnarField] = []
    present: list[tuple[int, ...] | None] = []
    elements: list[VersionedLayout | None] = []
    for i, newest_field in enumerate(newest.fields):
        fields = [x.fields[i] for x in items]
        f = next((g for g in reversed(fields) if g.present), newest_field)
        if any(_bare(g) != _bare(f) for g in fields if g.present):
            return None
        # an absent field has no tag: a tag present in some versions only does not merge
        if any(_bare(g, False) != _bare(f, False) for g in fields if not g.present):
            return None
        if any(isinstance(g.element, ColumnarField) and g.element != f.element for g in fields):
            return None
        read.append(f)
        has = tuple(v for v, g in zip(versions, fields, strict=True) if g.present)
        present.append(None if len(has) == len(versions) else has)
        element = None
        if isinstance(f.element, ColumnarLayout):
            element = merge({v: g.element for v, g in zip(versions, fields, strict=True)})  # type: ignore[misc]
            if element is None:
                return None
        elements.append(element)
    return VersionedLayout(newest, versions, tuple(read), tuple(present), tuple(elements))


class Merged:
    """``merge`` of the columnar layouts of a record type (or embedded struct), remembered per set of versions."""

    def __init__(self, layouts: dict[int, ColumnarLayout | None]) -> None:
        self.layouts = {v: layout for v, layout in layouts.items() if layout is not None}
        self._merged: dict[tuple[int, ...], VersionedLayout | None] = {}

    def of(self, versions: tuple[int, ...]) -> VersionedLayout | None:
        """The versions' layouts as one (None: they do not merge, or one has no columnar layout)."""
        if versions not in self._merged:
            if all(v in self.layouts for v in versions):
                self._merged[versions] = merge({v: self.layouts[v] for v in versions})
            else:
                self._merged[versions] = None
        return self._merged[versions]

    def classes(self, versions: list[int]) -> list[tuple[int, ...]]:
        """``versions`` (ascending, with columnar layouts) split into runs of consecutive ones that merge."""
        runs: list[tuple[int, ...]] = []
        for v in versions:
            if runs and self.of((*runs[-1], v)) is not None:
                runs[-1] = (*runs[-1], v)
            else:
                runs.append((v,))
        return runs


def single(layout: ColumnarLayout) -> VersionedLayout:
    """One version's layout as a VersionedLayout (version 0: the rows need no version)."""
    merged = merge({0: layout})
    assert merged is not None  # a layout always merges with itself
    return merged
