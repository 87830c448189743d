"""Kafka's Java Admin API as a command (tools/kafka/Truth.java): truth snapshots and admin calls the
Python clients lack; and the Java programs the harness runs beside it (tools/kafka/StreamsApp.java,
a Kafka Streams application). The sources are compiled once per (sources, jars) into the jar
cache."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

from tests.harness.broker import REPO, kafka_libs

SOURCES = (REPO / "tools" / "kafka" / "Truth.java", REPO / "tools" / "kafka" / "StreamsApp.java")


class AdminToolError(RuntimeError):
    pass


@cache
def _classes() -> tuple[Path, Path]:
    libs = kafka_libs()
    digest = hashlib.sha1(b"".join(s.read_bytes() for s in SOURCES) + str(libs).encode()).hexdigest()[:12]
    out = libs.parent / f"tools-{digest}"
    if not all((out / f"{s.stem}.class").exists() for s in SOURCES):
        tmp = out.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        cmd = ["javac", "-nowarn", "-d", str(tmp), "-cp", f"{libs}/*", *map(str, SOURCES)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise AdminToolError(f"javac {' '.join(s.name for s in SOURCES)} failed:\n{proc.stderr}")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return libs, out


def java_command(main_class: str, *args: str, jvm: tuple[str, ...] = ()) -> list[str]:
    """The command line running one of the compiled programs (a JVM tuned for short runs)."""
    libs, classes = _classes()
    opts = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *jvm]
    return ["java", *opts, "-cp", f"{classes}:{libs}/*", main_class, *args]


def run(command: str, bootstrap: str, *args: str, timeout: float = 120) -> Any:
    cmd = java_command("Truth", command, bootstrap, *args)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AdminToolError(f"Truth {command} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)
