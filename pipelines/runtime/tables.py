"""Delta tables from their declarations in ``schemas/tables/*.yaml``.

Tables are path-based (``<root>/<layer>/<table>``). A job creates them from the driver by
delta-rs (:meth:`Tables.ensure`) and reads and writes them by path; readers register them by
name in their session's in-memory catalog (:meth:`Tables.register`, ``CREATE TABLE IF NOT EXISTS
bronze.x ... LOCATION``), so a scheduled run and any number of readers (`offsets-lakehouse sql`,
`spark-sql -i`) coexist without sharing a single-user Derby metastore. Delta itself refuses a
write whose columns differ from an existing table's, which catches schema drift.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from pipelines.codec.schema import load_yaml, schemas_dir
from pipelines.errors import ConfigError, DeclarationError
from pipelines.runtime import files, lake
from pipelines.runtime.ddl import arrow_type
from pipelines.runtime.lake import sql_str

log = logging.getLogger("offsets_lakehouse")

LAYERS = ("bronze", "silver", "gold", "quality")


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool = True
    comment: str = ""


@dataclass(frozen=True)
class TableSpec:
    layer: str
    name: str
    comment: str
    columns: tuple[Column, ...]
    partitioned_by: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)

    def ddl_columns(self) -> str:
        return ", ".join(
            f"`{c.name}` {c.type}{'' if c.nullable else ' NOT NULL'}"
            + (f" COMMENT {sql_str(c.comment)}" if c.comment else "")
            for c in self.columns
        )

    def struct(self) -> StructType:
        return StructType.fromDDL(", ".join(f"`{c.name}` {c.type}" for c in self.columns))

    def declared(self) -> StructType:
        """:meth:`struct` with the NOT NULLs and column comments (Spark's parser, as CREATE TABLE)."""
        return StructType.fromDDL(self.ddl_columns())

    def arrow(self) -> pa.Schema:
        """The columns as an Arrow schema (every field nullable: a writer casts to the table's own)."""
        return pa.schema([pa.field(c.name, arrow_type(c.type)) for c in self.columns])


# properties every table declares, with the value a table's log means when it does not set them
_DEFAULTS = {"delta.appendOnly": "false"}


def _properties(spec: TableSpec) -> dict[str, str]:
    """The table properties a table of ``spec`` must have."""
    return {**_DEFAULTS, **spec.properties}


def _missing_properties(spec: TableSpec, have: dict[str, str]) -> dict[str, str]:
    """The properties of ``spec`` a table whose log sets ``have`` lacks or sets otherwise."""
    return {k: v for k, v in _properties(spec).items() if have.get(k, _DEFAULTS.get(k)) != v}


def _same_location(a: str, b: str) -> bool:
    def norm(p: str) -> str:
        for scheme in ("file://", "file:"):
            if p.startswith(scheme):
                p = p[len(scheme) :]
                break
        return p.rstrip("/")

    return norm(a) == norm(b)


def load_specs(root: Path | None = None) -> dict[str, dict[str, TableSpec]]:
    """layer -> table name -> spec."""
    root = (root or schemas_dir()) / "tables"
    out: dict[str, dict[str, TableSpec]] = {}
    for path in sorted(root.glob("*.yaml")):
        doc: dict[str, Any] = load_yaml(path)
        layer = doc["layer"]
        out[layer] = {}
        for name, t in doc["tables"].items():
            cols = tuple(
                Column(c["name"], c["type"], c.get("nullable", True), c.get("comment", "")) for c in t["columns"]
            )
            unknown = set(t.get("partitioned_by", [])) - {c.name for c in cols}
            if unknown:
                raise DeclarationError(f"{path.name}: {name} is partitioned by unknown columns {sorted(unknown)}")
            out[layer][name] = TableSpec(
                layer,
                name,
                t.get("comment", ""),
                cols,
                tuple(t.get("partitioned_by", [])),
                dict(t.get("properties", {})),
            )
    return out


@dataclass(frozen=True)
class ViewSpec:
    layer: str
    name: str
    comment: str
    sql: str  # {table} placeholders name tables of the same layer


def load_views(root: Path | None = None) -> list[ViewSpec]:
    root = (root or schemas_dir()) / "tables"
    out = []
    for path in sorted(root.glob("*.yaml")):
        doc: dict[str, Any] = load_yaml(path)
        for name, v in (doc.get("views") or {}).items():
            out.append(ViewSpec(doc["layer"], name, v.get("comment", ""), v["sql"]))
    return out


class Tables:
    """Names, paths and registration of the lakehouse's tables for one session."""

    def __init__(self, spark: SparkSession, root: str, schema_names: dict[str, str] | None = None) -> None:
        self.spark = spark
        self.root = root.rstrip("/")
        self.specs = load_specs()
        self.schema_names = {layer: layer for layer in LAYERS} | (schema_names or {})

    def spec(self, layer: str, name: str) -> TableSpec:
        return self.specs[layer][name]

    def path(self, layer: str, name: str) -> str:
        return f"{self.root}/{layer}/{name}"

    def name(self, layer: str, table: str) -> str:
        return f"{self.schema_names[layer]}.{table}"

    def ensure(self, layer: str, table: str) -> str:
        """Make sure the table is at its path as declared: created when missing, given the columns
        and properties a newer declaration adds; returns its name. A job reads and writes by path,
        so this neither registers the name (:meth:`register` does, for readers) nor starts Spark
        work when it can help it: delta-rs reads or creates a table's log in milliseconds, where
        Spark takes 0.3-0.8 s to create one and 0.2-0.5 s to load one it has not seen."""
        path = self.path(layer, table)
        registered = self._registered_location(layer, table)
        if registered is not None and _same_location(registered, path):
            return self.name(layer, table)  # checked when it was registered: a catalog lookup
        if self._ensure_on_storage(self.spec(layer, table), path):
            return self.name(layer, table)
        return self.register(layer, table)

    def _ensure_on_storage(self, spec: TableSpec, path: str) -> bool:
        """:meth:`ensure` by delta-rs: True when the table is there as declared; False when Spark
        must create or upgrade it (delta-rs cannot read or create it, or a newer declaration adds
        columns or properties)."""
        try:
            have = lake.layout(path)
        except Exception as exc:
            log.debug("delta-rs cannot read %s (%s): Spark ensures it", path, exc)
            return False
        if have is None:
            lake.clear_failed_create(self.spark, path)  # a run killed mid-create left its temporary log file
            if files.exists(path):
                return False  # something else is there: Spark refuses to create over it, and says so
            return lake.create(path, spec.declared(), spec.partitioned_by, spec.comment, _properties(spec))
        missing = _missing_properties(spec, have.properties)
        return not missing and all(c.name in have.columns for c in spec.columns)

    def register(self, layer: str, table: str) -> str:
        """Register the table by name in this session's catalog, creating it (by Spark) when it is
        not there and upgrading it when a newer declaration adds columns or properties; returns the
        name. For readers (sql, status, serve) and for what delta-rs cannot ensure."""
        spec = self.spec(layer, table)
        name = self.name(layer, table)
        self.spark.sql(f"CREATE SCHEMA IF NOT EXISTS {self.schema_names[layer]}")
        registered = self._registered_location(layer, table)
        if registered is not None:
            if _same_location(registered, self.path(layer, table)):
                return name  # checked when it was registered: the common case, a catalog lookup
            # registered by another lakehouse root earlier in this session: the name must follow
            # this root (the catalog is in-memory and the table external, so no data is dropped)
            self.spark.sql(f"DROP TABLE {name}")
        path = self.path(layer, table)
        if lake.exists(self.spark, path):
            # Delta keeps schema and properties in its log: register as is, then add properties a
            # newer declaration asks for (an existing lakehouse picks them up on its next run)
            self.spark.sql(f"CREATE TABLE IF NOT EXISTS {name} USING DELTA LOCATION {sql_str(path)}")
            missing = _missing_properties(spec, lake.properties(self.spark, path))
            if missing:
                sets = ", ".join(f"{sql_str(k)} = {sql_str(v)}" for k, v in missing.items())
                self.spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ({sets})")
            self._add_new_columns(name, spec)
            return name
        lake.clear_failed_create(self.spark, path)  # a run killed mid-create left its temporary log file
        parts = f" PARTITIONED BY ({', '.join(spec.partitioned_by)})" if spec.partitioned_by else ""
        tblprops = ", ".join(f"{sql_str(k)} = {sql_str(v)}" for k, v in _properties(spec).items())
        self.spark.sql(
            f"CREATE TABLE IF NOT EXISTS {name} ({spec.ddl_columns()}) USING DELTA{parts} "
            f"LOCATION {sql_str(path)} COMMENT {sql_str(spec.comment)} TBLPROPERTIES ({tblprops})"
        )
        return name

    def _catalog_entry(self, layer: str, name: str) -> Any:
        """The session catalog's metadata of a table or view (a JVM CatalogTable), or None when the
        name is unregistered. Cheap: no DESCRIBE, which would load the Delta log."""
        jvm = self.spark.sparkContext._jvm
        ident = jvm.org.apache.spark.sql.catalyst.TableIdentifier(name, jvm.scala.Some(self.schema_names[layer]))
        catalog = self.spark._jsparkSession.sessionState().catalog()
        return catalog.getTableMetadata(ident) if catalog.tableExists(ident) else None

    def _registered_location(self, layer: str, table: str) -> str | None:
        """Where the session catalog says the table's name points, or None when unregistered."""
        entry = self._catalog_entry(layer, table)
        return None if entry is None else str(entry.location().toString())

    def _add_new_columns(self, name: str, spec: TableSpec) -> None:
        """Additive schema evolution: columns a newer declaration adds are added to an existing
        table (null in its old rows), so an upgraded lakehouse keeps working without a rebuild.
        Anything else (a removed, renamed or retyped column) is refused by Delta on write."""
        have = {f.name for f in self.spark.table(name).schema.fields}
        new = [c for c in spec.columns if c.name not in have]
        if not new:
            return
        required = [c.name for c in new if not c.nullable]
        if required:
            raise ConfigError(
                f"{name}: the declaration adds non-nullable columns {required} an existing table cannot get; "
                "rebuild the layer (delete its tables and run with --full-refresh)"
            )
        cols = ", ".join(f"`{c.name}` {c.type}" + (f" COMMENT {sql_str(c.comment)}" if c.comment else "") for c in new)
        self.spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({cols})")

    def ensure_layer(self, layer: str) -> list[str]:
        return [self.ensure(layer, t) for t in self.specs.get(layer, {})]

    def outdated(self, layer: str) -> list[str]:
        """Tables of ``layer`` on storage that an older version laid out with another partitioning
        (Delta cannot change a table's partitioning in place: the layer must rebuild them)."""
        out = []
        for name, spec in self.specs.get(layer, {}).items():
            columns = lake.partition_columns(self.spark, self.path(layer, name))
            if columns is not None and columns != list(spec.partitioned_by):
                out.append(name)
        return out

    def register_existing(self, layers: Sequence[str] | None = None) -> list[str]:
        """Register every table that already exists on storage (for readers: sql, status, serve),
        or only those of ``layers``, then the views over them. Each table costs a Delta snapshot
        (~0.3 s in a fresh JVM, more on an object store), so they are registered a few at once:
        the catalog is the session's in-memory one, whose operations are synchronised."""
        wanted = [(layer, t) for layer, ts in self.specs.items() if layers is None or layer in layers for t in ts]

        def one(item: tuple[str, str]) -> str | None:
            layer, table = item
            if not lake.exists(self.spark, self.path(layer, table)):
                return None
            try:
                return self.register(layer, table)
            except ConfigError as exc:  # an older layout: the layer's next run rebuilds it
                log.warning("%s not registered: %s", self.name(layer, table), exc)
                return None

        names = [n for n in lake.parallel_map(one, wanted) if n is not None]
        for layer in self.specs:
            if layers is None or layer in layers:
                names += self.ensure_views(layer, names)
        return names

    def layers_named(self, text: str) -> list[str] | None:
        """The layers whose schema names appear as words in the SQL ``text`` (a statement that
        names ``gold.x`` needs gold's tables registered, not silver's); None when it names none (a
        ``SHOW TABLES``: every layer)."""
        named = [
            layer for layer, schema in self.schema_names.items() if re.search(rf"\b{re.escape(schema)}\b", text, re.I)
        ]
        return named or None

    def registered(self) -> list[str]:
        """The names this session's catalog already has (a serve's session: it registered them)."""
        out = []
        for layer in self.specs:
            schema = self.schema_names[layer]
            if self.spark.catalog.databaseExists(schema):
                out += [f"{schema}.{t.name}" for t in self.spark.catalog.listTables(schema)]
        return out

    def _view_body(self, view: ViewSpec) -> str:
        names = [*self.specs.get(view.layer, {}), *(v.name for v in load_views() if v.layer == view.layer)]
        return view.sql.format(**{t: self.name(view.layer, t) for t in names})

    def _view_sql(self, view: ViewSpec, body: str | None = None) -> str:
        name = self.name(view.layer, view.name)
        return f"CREATE OR REPLACE VIEW {name} COMMENT {sql_str(view.comment)} AS {body or self._view_body(view)}"

    def ensure_views(self, layer: str, existing: list[str] | None = None) -> list[str]:
        """(Re)create the layer's views whose tables exist; returns their names."""
        existing = existing if existing is not None else [self.name(layer, t) for t in self.specs.get(layer, {})]
        out = []
        for view in load_views():
            if view.layer != layer:
                continue
            refs = re.findall(r"{(\w+)}", view.sql)
            if all(self.name(layer, r) in existing + out for r in refs):  # views may build on earlier views
                body = self._view_body(view)
                if self._registered_view_sql(layer, view.name) != body:
                    # analysing a view resolves its tables (Delta snapshots): skipped when unchanged
                    self.spark.sql(self._view_sql(view, body))
                out.append(self.name(layer, view.name))
        return out

    def _registered_view_sql(self, layer: str, view: str) -> str | None:
        """The SQL text of the view registered under the name in this session, if any."""
        entry = self._catalog_entry(layer, view)
        text = None if entry is None else entry.viewText()
        return str(text.get()) if text is not None and text.isDefined() else None

    def init_sql(self) -> str:
        """SQL that registers every table by name, for `spark-sql -i` users."""
        lines = []
        for layer, tables in self.specs.items():
            lines.append(f"CREATE SCHEMA IF NOT EXISTS {self.schema_names[layer]};")
            for t in tables:
                lines.append(
                    f"CREATE TABLE IF NOT EXISTS {self.name(layer, t)} USING DELTA "
                    f"LOCATION {sql_str(self.path(layer, t))};"
                )
        lines += [self._view_sql(v) + ";" for v in load_views()]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Location:
    name: str  # as registered: <schema>.<table>
    layer: str
    table: str
    location: str
    partitioned_by: tuple[str, ...]
    exists: bool


def locations(root: str, schema_names: dict[str, str] | None = None) -> list[Location]:
    """Every declared table with its location and whether a Delta table is there: found
    without Spark (a ``_delta_log`` directory), for readers such as delta-rs and Polars."""
    names = {layer: layer for layer in LAYERS} | (schema_names or {})
    root = root.rstrip("/")
    out = []
    for layer, tables in load_specs().items():
        for table, spec in tables.items():
            path = f"{root}/{layer}/{table}"
            out.append(
                Location(f"{names[layer]}.{table}", layer, table, path, spec.partitioned_by, _is_delta_dir(path))
            )
    return out


def _is_delta_dir(path: str) -> bool:
    from pyarrow import fs

    uri = f"{path}/_delta_log"
    if "://" in uri:
        # s3a:// is Hadoop's name for what pyarrow calls s3://
        filesystem, inner = fs.FileSystem.from_uri(re.sub(r"^s3a://", "s3://", uri))
    else:
        filesystem, inner = fs.LocalFileSystem(), uri
    return filesystem.get_file_info(inner).type == fs.FileType.Directory


def data_dictionary() -> str:
    """docs/tables.md: every table and column with its type and comment, from the declarations."""
    lines = [
        "# Tables",
        "",
        "Generated from `schemas/tables/*.yaml` by `python -m pipelines.runtime.tables > docs/tables.md`;",
        "a unit test keeps it in step. Tables live at `<lakehouse root>/<layer>/<table>` and are",
        "registered as `<layer>.<table>` in every session (`offsets-lakehouse sql`, or",
        "`spark-sql -i <(offsets-lakehouse sql --print-init)`).",
        "",
    ]
    for layer, tables in load_specs().items():
        for name, spec in tables.items():
            lines += [f"## `{layer}.{name}`", "", spec.comment, ""]
            if spec.partitioned_by:
                lines += [f"Partitioned by: {', '.join(f'`{c}`' for c in spec.partitioned_by)}.", ""]
            lines += ["| column | type | null | meaning |", "|---|---|---|---|"]
            for c in spec.columns:
                lines.append(f"| `{c.name}` | `{c.type}` | {'yes' if c.nullable else 'no'} | {c.comment} |")
            lines.append("")
    views = load_views()
    if views:
        lines += ["## Views", "", "| view | over | meaning |", "|---|---|---|"]
        for v in views:
            over = ", ".join(f"`{v.layer}.{t}`" for t in re.findall(r"{(\w+)}", v.sql))
            lines.append(f"| `{v.layer}.{v.name}` | {over} | {v.comment} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(data_dictionary(), end="")
