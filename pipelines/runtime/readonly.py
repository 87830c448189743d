"""Sessions that may only read: `serve`'s clients and `sql` (docs/security.md).

The check is Spark's own: a session extension (``tools/spark/java/.../ReadOnly.java``,
:data:`pipelines.runtime.jars.READ_ONLY_EXTENSION`) refuses, once a statement is analysed and
before it runs, anything but reading the catalog's tables — INSERT, UPDATE, DELETE, MERGE, DROP,
ALTER, CREATE TABLE, TRUNCATE, OPTIMIZE, VACUUM, RESTORE, writes to paths, files read by path,
user code — while SET, USE, SHOW, DESCRIBE, EXPLAIN and temporary views stay allowed. It is
an allow-list: a command it does not know is refused. Every session is guarded unless exempted;
the process that registers the tables exempts its own session while it does (:func:`writable`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pipelines.runtime.jars import READ_ONLY_EXTENSION

__all__ = ["allow_root", "conf", "exempt", "writable"]

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"


def conf(user_conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """Spark settings that install the read-only check (after Delta's extension and jobs.yaml's own)."""
    theirs = (user_conf or {}).get("spark.sql.extensions") or DELTA_EXTENSION
    return {"spark.sql.extensions": f"{theirs},{READ_ONLY_EXTENSION}"}


def exempt(spark: Any, on: bool) -> None:
    """Let the session ``spark`` write (``on``) or guard it again."""
    jvm = spark.sparkContext._jvm
    jvm.io.offsetslakehouse.serve.ReadOnly.exempt(spark._jsparkSession, on)


def allow_root(spark: Any, root: str) -> None:
    """Guarded sessions may read the files under ``root`` (the lakehouse's tables), and no others."""
    spark.sparkContext._jvm.io.offsetslakehouse.serve.ReadOnly.allowRoot(root)


@contextmanager
def writable(spark: Any) -> Iterator[None]:
    """The session may write inside (registering tables and views), and is guarded after."""
    exempt(spark, True)
    try:
        yield
    finally:
        exempt(spark, False)
