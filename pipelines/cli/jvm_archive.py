"""Build the class-data-sharing archive of the Spark driver's classes
(pipelines/runtime/jvm_archive.py): ``python -m pipelines.cli.jvm_archive [--force]``, which
``./scripts/setup`` runs. Silent when the archive for this java and these jars is there."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pipelines.runtime import jvm_archive


def build(target: Path) -> None:
    """Build the archive ``target`` in this process (which must not have started a JVM yet)."""
    from pyspark import SparkContext

    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        with tempfile.TemporaryDirectory(prefix="jvm-archive-") as work:
            _run_sample_job(Path(work), f"{jvm_archive.DUMP_OPTION}{partial} {jvm_archive.QUIET_CDS}")
            gateway = SparkContext._gateway
            proc = getattr(gateway, "proc", None)
            SparkContext._active_spark_context.stop()  # type: ignore[union-attr]
            gateway.shutdown()  # type: ignore[union-attr]
            if proc is None:
                raise RuntimeError("the JVM was not started by this process: cannot wait for its archive")
            proc.stdin.close()  # PySpark's gateway JVM exits when its stdin closes, and dumps then
            proc.wait(timeout=600)
        if not partial.is_file():
            raise RuntimeError(f"the JVM wrote no archive (exit code {proc.returncode})")
        os.replace(partial, target)  # whole or not at all: readers never see a partial archive
    finally:
        partial.unlink(missing_ok=True)  # a failed build leaves no 190 MB behind
    jvm_archive.keep_newest(target)


def _run_sample_job(work: Path, dump_options: str) -> None:
    """A first run (bronze, silver, gold, quality) and an increment (bronze, silver, gold, every
    step in Spark's tasks) over a small generated log, so that the archive holds the classes of
    both paths a job takes."""
    from pipelines.bronze import ingest as bronze_ingest
    from pipelines.generate import generate
    from pipelines.gold import build as gold_build
    from pipelines.runner import Context, run_job
    from pipelines.runtime import lake
    from pipelines.runtime.spark import build_session
    from pipelines.silver import ingest as silver_ingest

    logs = work / "logs"
    generate(logs, 1500, seed=1, partitions=2, segment_bytes=16 * 1024)
    early = work / "early"
    for part in logs.glob("__consumer_offsets-*"):
        (early / part.name).mkdir(parents=True)
        first = sorted(part.glob("*.log"))[0]
        shutil.copy(first, early / part.name / first.name)
    config = work / "jobs.yaml"
    config.write_text(
        f"""
lakehouse: {{root: "{work / "lakehouse"}"}}
spark: {{master: "local[2]", conf: {{spark.ui.enabled: "false", spark.sql.shuffle.partitions: "2"}}}}
sources:
  early: {{kind: segments, cluster: sample, paths: ["{early}"]}}
  full: {{kind: segments, cluster: sample, paths: ["{logs}"]}}
jobs:
  first: {{sources: [early], stages: [bronze, silver, gold, quality]}}
  increment: {{sources: [full], stages: [bronze, silver, gold]}}
"""
    )
    ctx = Context(config)
    spark = build_session(ctx.config.spark, extra_conf={"spark.driver.extraJavaOptions": dump_options})
    ctx._spark = spark
    run_job(ctx, "first")
    for module, name in (
        (bronze_ingest, "LOCAL_READ_BYTES"),
        (silver_ingest, "LOCAL_DECODE_ROWS"),
        (gold_build, "LOCAL_REPLAY_ROWS"),
        (lake, "LOCAL_WRITE_ROWS"),
    ):
        setattr(module, name, -1)  # every step in Spark's tasks (tests/spark/test_small_runs.py)
    run_job(ctx, "increment")


def main() -> None:
    """Build the archive unless it is there (``--force``: again); silent when there is nothing to do."""
    from pipelines.runtime import jars

    started = time.monotonic()
    target = jvm_archive.archive_path(jars.resolve())
    if target is None:
        raise SystemExit("no java found (JAVA_HOME or PATH)")
    if target.is_file() and "--force" not in sys.argv[1:]:
        return
    logging.getLogger("offsets_lakehouse").setLevel(logging.ERROR)  # the sample job's own report
    build(target)
    print(
        f"JVM class archive: {target} ({target.stat().st_size >> 20} MiB, built in {time.monotonic() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
