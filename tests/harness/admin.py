"""Kafka's Java Admin API as a command (tools/kafka/Truth.java): truth snapshots and admin calls the
Python clients lack. The source is compiled once per (source, jars) into the jar cache."""

from __future__ import annotations

import hashlib
import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

from tests.harness.broker import REPO, kafka_libs

SOURCE = REPO / "tools" / "kafka" / "Truth.java"


class AdminToolError(RuntimeError):
    pass


@cache
def _classes() -> tuple[Path, Path]:
    libs = kafka_libs()
    digest = hashlib.sha1(SOURCE.read_bytes() + str(libs).encode()).hexdigest()[:12]
    out = libs.parent / f"truth-{digest}"
    if not (out / "Truth.class").exists():
        tmp = out.with_suffix(".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            ["javac", "-nowarn", "-d", str(tmp), "-cp", f"{libs}/*", str(SOURCE)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise AdminToolError(f"javac {SOURCE.name} failed:\n{proc.stderr}")
        tmp.rename(out)
    return libs, out


def run(command: str, bootstrap: str, *args: str, timeout: float = 120) -> Any:
    libs, classes = _classes()
    cmd = ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", f"{classes}:{libs}/*", "Truth"]
    cmd += [command, bootstrap, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AdminToolError(f"Truth {command} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)
