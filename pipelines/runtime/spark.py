"""The Spark session: any master, Delta configured (bronze registers its own data source).

``local[*]`` by default; ``spark.master`` in jobs.yaml or ``--master`` select a standalone,
YARN or Kubernetes cluster (or run the CLI under ``spark-submit``, which sets the master).
The Delta and Kafka jars come from :mod:`pipelines.runtime.jars` (Maven, cached). Executors
must import ``pipelines``: on a cluster whose workers do not have the package installed, the
package is shipped to them as a zip (``spark.submit.pyFiles``).
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

from pipelines.runtime import jars
from pipelines.runtime.config import SparkSettings
from pipelines.runtime.storage import S3Settings, log_store_conf

DEFAULTS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # names live in each session's catalog; tables are path-based (see tables.py)
    "spark.sql.catalogImplementation": "in-memory",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.databricks.delta.schema.autoMerge.enabled": "false",
    # MERGE keyed on log positions must see the newest snapshot of its target
    "spark.databricks.delta.merge.repartitionBeforeWrite.enabled": "true",
}


JVM_LOG_TO_STDERR = "-Xlog:disable -Xlog:all=warning:stderr"


def package_zip() -> Path:
    """The ``pipelines`` package (with ``schemas/``) as a zip for executors."""
    repo = Path(__file__).resolve().parents[2]
    target = Path(tempfile.gettempdir()) / f"offsets-lakehouse-{os.getpid()}.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in (repo / "pipelines").rglob("*.py"):
            zf.write(path, path.relative_to(repo))
        for path in (repo / "schemas").rglob("*.yaml"):
            zf.write(path, Path("pipelines/_schemas") / path.relative_to(repo / "schemas"))
    return target


QUIET_LOGGERS = (
    "org.apache.kafka.clients.NetworkClient",
    "org.apache.kafka.clients.admin.internals",
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.util.Utils",
    "org.apache.spark.sql.delta.files.DeltaFileFormatWriter",
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
)


def build_session(
    settings: SparkSettings | None = None,
    master: str | None = None,
    ship_package: bool | None = None,
    extra_conf: dict[str, str] | None = None,
    store: S3Settings | None = None,
) -> SparkSession:
    """The session for ``settings`` (jobs.yaml's ``spark``) on ``master``; ``store``: the object
    store the lakehouse is on (runtime/storage.py), whose S3A settings jobs.yaml can override.
    Delta's log store for ``s3://`` tables is set either way, so that any session that commits
    to a table on a store coordinates with the others (docs/object-storage.md)."""
    settings = settings or SparkSettings()
    master = master or os.environ.get("OFFSETS_SPARK_MASTER") or settings.master
    conf = dict(DEFAULTS) | log_store_conf()
    if store is not None:
        store.export()
        conf.update(store.spark_conf(local=master.startswith("local")))
    conf["spark.jars"] = ",".join(str(p) for p in jars.resolve())
    # Python workers must run this interpreter (this virtualenv): SparkContext reads
    # PYSPARK_PYTHON, not spark.pyspark.python, when the JVM is started from Python
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf["spark.pyspark.python"] = os.environ["PYSPARK_PYTHON"]
    if master and master.startswith("local"):
        # Delta rebuilds a table's state with 50 tasks by default, sized for clusters; on one
        # machine that task overhead dominates every read of a small table (measured: the gold
        # spark test took 40% less time with 2)
        conf["spark.databricks.delta.snapshotPartitions"] = str(max(2, os.cpu_count() or 2))
    conf.update(settings.conf)
    conf.update(extra_conf or {})
    # the JVM's own warnings (unified logging: e.g. "CodeCache is full") go to stdout by default,
    # which is the CLI's stdout when PySpark starts the driver: `--json` must stay one document
    jvm_options = conf.get("spark.driver.extraJavaOptions", "")
    conf["spark.driver.extraJavaOptions"] = f"{JVM_LOG_TO_STDERR} {jvm_options}".strip()
    builder = SparkSession.builder.appName(settings.app_name)
    if master and "SPARK_SUBMIT_MASTER" not in os.environ:
        builder = builder.master(master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # pyspark warns once per thread that runs a query (silver and gold write tables in threads)
    warnings.filterwarnings("ignore", message="Spark session is not provided", category=UserWarning)
    level = os.environ.get("OFFSETS_SPARK_LOG_LEVEL", "WARN")
    spark.sparkContext.setLogLevel(level)
    if level.upper() in ("WARN", "ERROR", "FATAL", "OFF"):
        # Kafka's client logs a refused login or TLS handshake as an ERROR with its stack trace,
        # again on every retry, and a failed task (a full disk, a refused write) is logged by the
        # task, its executor, the task set and the writer, each with the stack trace: the run
        # reports it once, as its error line (the traceback with --verbose)
        log4j = spark._jvm.org.apache.logging.log4j  # type: ignore[attr-defined]
        for logger in QUIET_LOGGERS:
            log4j.core.config.Configurator.setLevel(logger, log4j.Level.FATAL)
    if ship_package if ship_package is not None else not master.startswith("local"):
        spark.sparkContext.addPyFile(str(package_zip()))
    return spark
