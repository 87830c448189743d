"""A class-data-sharing archive of the Spark driver's classes, so that every driver JVM after the
first starts without parsing and verifying Spark's, Delta's and Hadoop's classes again.

HotSpot writes the classes a JVM loaded into a *dynamic archive* when it exits
(``-XX:ArchiveClassesAtExit``); a later JVM of the same build, on the same class path, maps them
(``-XX:SharedArchiveFile``). For a driver that starts Spark and runs a small Delta job that is
about a third less JVM CPU (docs/performance.md, twentieth part): what a scheduled run, a `sql`
or `status` command and every CLI process of the tests pay at start.

``./scripts/setup`` builds it once (``python -m pipelines.cli.jvm_archive``) by running a
small job, its Spark paths and its driver paths, in a JVM that dumps at exit; the file goes to
the cache beside the jars, named by a fingerprint of the java build, the pyspark jars and the
added jars, so an upgrade of any of them simply finds no archive until setup builds it again.
:func:`java_options` gives the option when the archive is there; a JVM that cannot map it
(``-Xshare:auto``, HotSpot's default) starts as before. ``OFFSETS_JVM_ARCHIVE=off`` leaves it out.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

from pipelines.runtime import jars

DUMP_OPTION = "-XX:ArchiveClassesAtExit="
USE_OPTION = "-XX:SharedArchiveFile="
# the archive's own notices (a JVM that cannot map it says why at warning level): it is an
# optimisation, and the driver's stderr is the CLI's
QUIET_CDS = "-Xlog:cds=off:stderr -Xlog:cds+dynamic=off:stderr"
KEEP = 3  # archives kept in the cache (about 190 MB each)


def _java() -> Path | None:
    """The java that PySpark's launcher (spark-class) runs: ``$JAVA_HOME/bin/java``, else PATH's."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def fingerprint(added_jars: list[Path]) -> str | None:
    """What an archive is valid for: the java build and every jar on the driver's class path or in
    ``spark.jars`` (``added_jars``, as the session resolved them: name, size, modification time —
    HotSpot checks the same). None without java."""
    java = _java()
    if java is None:
        return None
    h = hashlib.sha1()
    jvm_files = [java, *sorted(java.parent.parent.glob("lib/server/libjvm.so"))]
    jar_files = sorted(jars.pyspark_jars_dir().glob("*.jar")) + list(added_jars)
    for path in [*jvm_files, *jar_files]:
        st = path.stat()
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:12]


def archive_path(added_jars: list[Path]) -> Path | None:
    fp = fingerprint(added_jars)
    return jars.cache_root() / f"jvm-archive-{fp}.jsa" if fp else None


def java_options(conf: dict[str, str], added_jars: list[Path]) -> str:
    """The driver's options to map the archive, or "" (none built, switched off, a class path of
    its own — the archive holds the default one's — or archive settings of the user's or of a
    JVM that dumps one)."""
    if os.environ.get("OFFSETS_JVM_ARCHIVE", "").lower() in ("off", "0", "false", "no"):
        return ""
    options = conf.get("spark.driver.extraJavaOptions", "")
    if conf.get("spark.driver.extraClassPath") or any(
        o in options for o in ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare")
    ):
        return ""  # a class path the archive was not made for, or the user's own archive settings
    path = archive_path(added_jars)
    return f"{USE_OPTION}{path} {QUIET_CDS}" if path is not None and path.is_file() else ""


def keep_newest(kept: Path) -> None:
    """Drop all but the newest archives: other checkouts (or java builds) on this machine have
    archives of their own, so a few are kept."""
    for old in sorted(kept.parent.glob("jvm-archive-*.jsa"), key=lambda p: p.stat().st_mtime)[:-KEEP]:
        if old != kept:
            old.unlink(missing_ok=True)
    # what a killed build's JVM wrote (a live build's file is younger than a day)
    for partial in kept.parent.glob("jvm-archive-*.partial"):
        if time.time() - partial.stat().st_mtime > 86400:
            partial.unlink(missing_ok=True)
