"""JVM jars added to PySpark: Delta Lake and Spark's Kafka source, resolved by Maven once.

``tools/spark/pom.xml`` names the artifacts; Maven copies their runtime classpath into a
cache outside the work tree (``$OFFSETS_LAKEHOUSE_CACHE`` or ``~/.cache/offsets-lakehouse``).
Jars the pyspark wheel already ships (Hadoop, Parquet, Jackson, Scala, ...) are left out so
that only one version of each is on the classpath. Later runs are offline.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pyspark

from pipelines.errors import JarResolutionError

REPO = Path(__file__).resolve().parents[2]
POM = REPO / "tools" / "spark" / "pom.xml"
SETTINGS = REPO / "tools" / "maven-settings.xml"
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


def resolve(quiet: bool = True) -> list[Path]:
    """The jar files to add with ``spark.jars``; resolves them with Maven on first use."""
    versions = pom_versions()
    target = cache_root() / f"spark-{versions['spark.version']}-delta-{versions['delta.version']}"
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


if __name__ == "__main__":
    for jar in resolve(quiet=False):
        print(jar)
