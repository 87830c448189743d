"""JVM jars added to PySpark: Delta Lake, Spark's Kafka source and Hadoop's S3A connector,
resolved by Maven once, and the project's Delta log store for object stores, compiled once.

``tools/spark/pom.xml`` names the artifacts; Maven copies their runtime classpath into a
cache outside the work tree (``$OFFSETS_LAKEHOUSE_CACHE`` or ``~/.cache/offsets-lakehouse``),
keyed by the pom, so a changed dependency resolves again. Jars the pyspark wheel already ships
(Hadoop, Parquet, Jackson, Netty, Scala, ...) are left out so that only one version of each is
on the classpath. The project's own JVM classes, ``tools/spark/java/`` — the Delta log store for
object stores (:data:`LOG_STORE_CLASS`, docs/object-storage.md), the read-only SQL endpoint's
session extension and password check (:data:`READ_ONLY_EXTENSION`, :data:`PASSWORD_AUTHENTICATOR`,
docs/security.md) — are compiled by ``javac`` against that classpath into a jar of their own,
keyed by their sources.
Later runs are offline.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import pyspark

from pipelines.errors import JarResolutionError

REPO = Path(__file__).resolve().parents[2]
POM = REPO / "tools" / "spark" / "pom.xml"
SETTINGS = REPO / "tools" / "maven-settings.xml"
JVM_SOURCES = REPO / "tools" / "spark" / "java"
# Delta's log store for s3:// and s3a:// tables (runtime/storage.py configures it)
LOG_STORE_CLASS = "io.offsetslakehouse.delta.S3ConditionalPutLogStore"
# `serve` and `sql`: the session extension that lets client sessions only read, and HiveServer2's
# CUSTOM password check (pipelines/serve.py)
READ_ONLY_EXTENSION = "io.offsetslakehouse.serve.ReadOnly"
PASSWORD_AUTHENTICATOR = "io.offsetslakehouse.serve.PasswordAuthenticator"
_VERSIONED = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[\w.\-]*)\.jar$")


def cache_root() -> Path:
    return Path(os.environ.get("OFFSETS_LAKEHOUSE_CACHE", Path.home() / ".cache" / "offsets-lakehouse"))


def pom_versions(pom: Path = POM) -> dict[str, str]:
    text = pom.read_text()
    return {
        name: re.search(rf"<{name}>([^<]+)</{name}>", text).group(1)  # type: ignore[union-attr]
        for name in ("spark.version", "delta.version")
    }


def pyspark_jars_dir() -> Path:
    return Path(pyspark.__file__).parent / "jars"


def _artifact(name: str) -> str:
    m = _VERSIONED.match(name)
    return m.group("artifact") if m else name


def _digest(*paths: Path) -> str:
    h = hashlib.sha1()
    for path in paths:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:8]


def resolve(quiet: bool = True) -> list[Path]:
    """The jar files to add with ``spark.jars``; resolves and compiles them on first use."""
    maven = _maven_jars(quiet)
    return [*maven, _project_jar(maven)]


def _maven_jars(quiet: bool) -> list[Path]:
    versions = pom_versions()
    name = f"spark-{versions['spark.version']}-delta-{versions['delta.version']}-{_digest(POM)}"
    target = cache_root() / name
    done = target / ".complete"
    if not done.exists():
        mvn = shutil.which("mvn")
        if mvn is None:
            raise JarResolutionError(
                f"Delta/Kafka jars are not cached in {target} and Maven (mvn) is not installed to resolve them"
            )
        staging = target.with_name(target.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [
            mvn,
            "-B",
            "-s",
            str(SETTINGS),
            "-f",
            str(POM),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}",
            "-DincludeScope=runtime",
        ]
        if quiet:
            cmd.insert(1, "-q")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise JarResolutionError(f"Maven could not resolve {POM.name}:\n{(proc.stdout + proc.stderr)[-3000:]}")
        shipped = {_artifact(p.name) for p in pyspark_jars_dir().glob("*.jar")}
        for jar in staging.glob("*.jar"):
            if _artifact(jar.name) in shipped:
                jar.unlink()
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        done.touch()
    return sorted(target.glob("*.jar"))


def _project_jar(classpath: list[Path]) -> Path:
    """The project's JVM classes compiled against ``classpath`` and pyspark's jars (``javac``, once)."""
    sources = sorted(JVM_SOURCES.rglob("*.java"))
    jar = cache_root() / f"jvm-{_digest(*sources)}-{classpath[0].parent.name}" / "offsets-lakehouse-jvm.jar"
    if jar.exists():
        return jar
    javac = shutil.which("javac")
    if javac is None:
        raise JarResolutionError(f"{jar} is not built and the JDK's javac is not installed to build it")
    cp = os.pathsep.join([*map(str, classpath), str(pyspark_jars_dir() / "*")])
    with tempfile.TemporaryDirectory() as tmp:
        classes = Path(tmp) / "classes"
        cmd = [javac, "-nowarn", "--release", "17", "-d", str(classes), "-cp", cp, *map(str, sources)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise JarResolutionError(f"javac could not compile {JVM_SOURCES}:\n{proc.stderr[-3000:]}")
        staging = Path(tmp) / jar.name
        with zipfile.ZipFile(staging, "w", zipfile.ZIP_DEFLATED) as zf:
            for f in sorted(classes.rglob("*.class")):
                zf.write(f, f.relative_to(classes).as_posix())
        jar.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), jar.with_suffix(".tmp"))
        os.replace(jar.with_suffix(".tmp"), jar)
    return jar


if __name__ == "__main__":
    for jar in resolve(quiet=False):
        print(jar)
