"""The class-data-sharing archive's bookkeeping (pipelines/runtime/jvm_archive.py): which archive
a driver maps, when it maps none. That a JVM really maps it: tests/spark/test_jvm_archive.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.runtime import jars, jvm_archive

ADDED: list[Path] = []


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of its own and a fake pyspark jars directory (the added jars: ``ADDED``, none)."""
    spark_jars = tmp_path / "pyspark-jars"
    spark_jars.mkdir()
    (spark_jars / "spark-core.jar").write_bytes(b"core")
    monkeypatch.setenv("OFFSETS_LAKEHOUSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("OFFSETS_JVM_ARCHIVE", raising=False)
    monkeypatch.setattr(jars, "pyspark_jars_dir", lambda: spark_jars)
    return tmp_path


def built(cache: Path) -> Path:
    path = jvm_archive.archive_path(ADDED)
    assert path is not None and path.parent == cache / "cache"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"archive")
    return path


def test_no_archive_no_option(cache: Path) -> None:
    assert jvm_archive.java_options({}, ADDED) == ""


def test_a_built_archive_is_mapped_with_its_notices_kept_off_stderr(cache: Path) -> None:
    path = built(cache)
    options = jvm_archive.java_options({"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}, ADDED)
    assert options.split() == [f"-XX:SharedArchiveFile={path}", "-Xlog:cds=off:stderr", "-Xlog:cds+dynamic=off:stderr"]


@pytest.mark.parametrize(
    "conf, env",
    [
        ({}, "off"),
        ({"spark.driver.extraClassPath": "/x.jar"}, None),  # another class path: the archive's is the default one
        ({"spark.driver.extraJavaOptions": "-XX:ArchiveClassesAtExit=/tmp/a.jsa"}, None),  # this JVM dumps one
        ({"spark.driver.extraJavaOptions": "-Xshare:off"}, None),  # the user's own choice
    ],
)
def test_cases_that_map_no_archive(cache: Path, monkeypatch: pytest.MonkeyPatch, conf: dict, env: str | None) -> None:
    built(cache)
    if env:
        monkeypatch.setenv("OFFSETS_JVM_ARCHIVE", env)
    assert jvm_archive.java_options(conf, ADDED) == ""


def test_a_changed_jar_or_java_names_another_archive(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = built(cache)
    jar = cache / "pyspark-jars" / "spark-core.jar"
    jar.write_bytes(b"core, upgraded")  # another size: HotSpot would refuse the old archive
    assert jvm_archive.archive_path(ADDED) != first
    assert jvm_archive.java_options({}, ADDED) == ""  # not built for these jars yet
    java = cache / "java"
    java.write_bytes(b"")
    monkeypatch.setattr(jvm_archive, "_java", lambda: java)
    assert jvm_archive.archive_path(ADDED) not in (first, None)


def test_without_java_there_is_no_archive(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jvm_archive, "_java", lambda: None)
    assert jvm_archive.archive_path(ADDED) is None
    assert jvm_archive.java_options({}, ADDED) == ""


def test_the_newest_archives_are_kept_and_a_killed_build_s_leftovers_go(tmp_path: Path) -> None:
    import os

    names = [f"jvm-archive-{i}.jsa" for i in range(5)]
    for age, name in enumerate(names):  # jvm-archive-0 the newest, jvm-archive-4 the oldest
        (tmp_path / name).write_bytes(b"a")
        os.utime(tmp_path / name, (1_000_000 - age, 1_000_000 - age))
    stale, live = tmp_path / "jvm-archive-9.jsa.1.partial", tmp_path / "jvm-archive-9.jsa.2.partial"
    stale.write_bytes(b"p")
    live.write_bytes(b"p")
    os.utime(stale, (1_000_000, 1_000_000))
    jvm_archive.keep_newest(tmp_path / names[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == [*names[: jvm_archive.KEEP], live.name]
