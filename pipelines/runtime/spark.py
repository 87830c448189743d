"""The Spark session: any master, Delta configured (bronze registers its own data source).

``local[*]`` by default; ``spark.master`` in jobs.yaml or ``--master`` select a standalone,
YARN or Kubernetes cluster (or run the CLI under ``spark-submit``, which sets the master).
The Delta and Kafka jars come from :mod:`pipelines.runtime.jars` (Maven, cached). Executors
must import ``pipelines``: on a cluster whose workers do not have the package installed, the
package is shipped to them as a zip (``spark.submit.pyFiles``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import warnings
import zipfile
from pathlib import Path
from typing import IO

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from pipelines.runtime import jars, jvm_archive
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
# the driver's log4j2 configuration without --verbose: errors only, no start-up warnings
QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")
# start-up notices printed straight to stderr, past any log configuration: the JVM's (Spark's
# launcher adds jdk.incubator.vector to every JVM it starts, and the JVM announces it) and Spark's
# shell-level announcement, which PySpark's driver makes whatever the configured levels
JVM_NOTICES = re.compile(
    rb"^(WARNING: Using incubator modules|Setting default log level to|To adjust logging level use)"
)


def log_level() -> str:
    """Spark's log level: ERROR unless ``OFFSETS_SPARK_LOG_LEVEL`` says otherwise (the CLI's
    ``--verbose`` sets WARN: Spark's own default, start-up warnings included)."""
    return os.environ.get("OFFSETS_SPARK_LOG_LEVEL", "ERROR").upper()


def quiet() -> bool:
    return log_level() in ("ERROR", "FATAL", "OFF")


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
    added_jars = jars.resolve()
    conf["spark.jars"] = ",".join(str(p) for p in added_jars)
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
    if quiet() and "log4j2.configurationFile" not in jvm_options:  # a configuration of the user's wins
        jvm_options = f"-Dlog4j2.configurationFile={QUIET_LOG4J.as_uri()} {jvm_options}"
    # Spark's classes from the class-data-sharing archive when setup built one (runtime/jvm_archive.py)
    jvm_options = f"{jvm_options} {jvm_archive.java_options(conf, added_jars)}"
    conf["spark.driver.extraJavaOptions"] = f"{JVM_LOG_TO_STDERR} {jvm_options}".strip()
    builder = SparkSession.builder.appName(settings.app_name)
    if master and "SPARK_SUBMIT_MASTER" not in os.environ:
        builder = builder.master(master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    if quiet():
        _launch_quietly(master, settings.app_name, conf)
    spark = builder.getOrCreate()
    # pyspark warns once per thread that runs a query (silver and gold write tables in threads)
    warnings.filterwarnings("ignore", message="Spark session is not provided", category=UserWarning)
    level = log_level()
    spark.sparkContext.setLogLevel(level)
    if level in ("WARN", "ERROR", "FATAL", "OFF"):
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


def _launch_quietly(master: str | None, app_name: str, conf: dict[str, str]) -> None:
    """Start the driver's JVM as pyspark would, its stderr passed on line by line without the
    JVM's start-up notice. Once per process: later sessions reuse the JVM (as pyspark does); under
    ``spark-submit`` there is one already."""
    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    spark_conf = SparkConf(loadDefaults=False).setAll(list(conf.items())).setAppName(app_name)
    if master and "SPARK_SUBMIT_MASTER" not in os.environ:
        spark_conf.setMaster(master)
    gateway = launch_gateway(spark_conf, popen_kwargs={"stderr": subprocess.PIPE})
    proc = getattr(gateway, "proc", None)
    if proc is not None and proc.stderr is not None:
        threading.Thread(target=_pass_on, args=(proc.stderr,), name="jvm-stderr", daemon=True).start()
    SparkContext._gateway = gateway
    SparkContext._jvm = gateway.jvm


def _pass_on(stream: IO[bytes]) -> None:
    """The JVM's stderr onto ours (whatever ``sys.stderr`` is then: the progress display redirects
    it), but for its start-up notice."""
    for line in iter(stream.readline, b""):
        if JVM_NOTICES.match(line):
            continue
        try:
            sys.stderr.write(line.decode("utf-8", "replace"))
            sys.stderr.flush()
        except (OSError, ValueError):  # our stderr closed: keep draining, or the JVM blocks on a full pipe
            pass
