"""A driver JVM started by build_session maps the class-data-sharing archive setup built
(pipelines/runtime/jvm_archive.py): Spark's and Delta's classes come from the archive, not from
their jars. (How much that saves is measured, not tested: docs/performance.md.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.runtime import jars, jvm_archive

REPO = Path(__file__).resolve().parents[2]

DRIVER = """
import sys
from pipelines.runtime.config import SparkSettings
from pipelines.runtime.spark import build_session
spark = build_session(SparkSettings(master="local[1]", conf={"spark.ui.enabled": "false"}),
                      extra_conf={"spark.driver.extraJavaOptions": f"-Xlog:class+load=info:file={sys.argv[1]}"})
print(spark.range(3).count())
"""


def test_a_driver_maps_the_archive(tmp_path: Path) -> None:
    archive = jvm_archive.archive_path(jars.resolve())
    if archive is None or not archive.is_file():
        pytest.fail(f"no JVM class archive at {archive}: ./scripts/setup --deps builds it")
    log = tmp_path / "class-load.log"
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(log)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.strip() == "3", done.stderr[-3000:]
    sources = dict(re.findall(r"\] (\S+) source: (.+)$", log.read_text(), re.M))
    shared = "shared objects file (top)"  # the dynamic archive (the JDK's own is the base layer)
    # Spark's own (the JVM's class loader) and Delta's (spark.jars: Spark's class loader)
    for cls in ("org.apache.spark.SparkContext", "io.delta.sql.DeltaSparkSessionExtension"):
        assert sources.get(cls) == shared, (cls, sources.get(cls))
    # most classes that come from a jar come from the archive instead (the rest: what the sample
    # job setup ran did not load)
    from_jars = [c for c, s in sources.items() if s.startswith(("file:", "jar:"))]
    from_archive = [c for c, s in sources.items() if s == shared]
    assert len(from_jars) < 0.1 * len(from_archive), (len(from_jars), len(from_archive), from_jars[:20])
    assert "cds" not in done.stderr  # the archive's notices stay off the driver's stderr
