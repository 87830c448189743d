"""`offsets-lakehouse serve`: one long-lived Spark session with every table registered by name,
served to other clients (docs/sql.md).

* **Thrift** (HiveServer2 protocol, ``jdbc:hive2://host:port``): what BI tools reach — DBeaver,
  Tableau, Superset through PyHive, beeline. Spark's own ``HiveThriftServer2`` started inside our
  session (``startWithContext``): it shares the session's catalog, so the in-memory catalog with
  path-based Delta tables (runtime/tables.py) works as is; no Hive metastore is needed (Hive's
  classes, which the pyspark wheel ships, only run the protocol).
* **Spark Connect** (``sc://host:port``): what notebooks reach with
  ``SparkSession.builder.remote(...)``. Spark's ``SparkConnectPlugin`` in the same session: a
  Spark setting, no code.

Every client connection gets its own Spark session (its own ``USE``, ``SET``, temporary views)
over the one shared catalog, so tables registered here are visible to all of them. Tables that
appear after start (a job's first run) are registered by a periodic refresh and on SIGHUP;
every query reads the newest Delta snapshot, so new data needs no refresh at all.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.errors import OffsetsLakehouseError
from pipelines.runner import Context
from pipelines.runtime import jars

log = logging.getLogger("offsets_lakehouse.serve")

PROTOCOLS = ("thrift", "connect", "both")
DEFAULT_PORTS = {"thrift": 10000, "connect": 15002}  # HiveServer2's and Spark Connect's usual ports


@dataclass(frozen=True)
class Endpoint:
    protocol: str  # thrift or connect
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"jdbc:hive2://{self.host}:{self.port}" if self.protocol == "thrift" else f"sc://{self.host}:{self.port}"


def endpoints(protocol: str, host: str, port: int | None, connect_port: int | None = None) -> list[Endpoint]:
    """The endpoints to open: ``port`` is the one protocol's port, or Thrift's with ``both``
    (Connect's is then ``connect_port``)."""
    if protocol == "both":
        return [
            Endpoint("thrift", host, port or DEFAULT_PORTS["thrift"]),
            Endpoint("connect", host, connect_port or DEFAULT_PORTS["connect"]),
        ]
    return [Endpoint(protocol, host, port or DEFAULT_PORTS[protocol])]


def spark_conf(eps: list[Endpoint], user_conf: dict[str, str] | None = None) -> dict[str, str]:
    """Spark settings for a serving session (on top of runtime/spark.py's defaults and jobs.yaml's)."""
    conf = {
        # Delta's jars come with spark.jars, which only the session's class loader sees; the
        # Thrift server's and Connect's handler threads build each client's session with the
        # JVM's system class loader and would not find Delta's catalog (ClassNotFoundException
        # DeltaCatalog). On the driver's class path they are seen by both; read at JVM launch.
        "spark.driver.extraClassPath": os.pathsep.join(str(p) for p in jars.resolve()),
        # the Thrift server's Hive execution client keeps an in-memory Derby (no metastore_db
        # directory) but Derby writes derby.log into the working directory: send it to tmp
        "spark.driver.extraJavaOptions": _derby_log_option(),
    }
    for ep in eps:
        if ep.protocol == "thrift":
            # HiveServer2 reads its settings from the Hadoop configuration; spark.hadoop.* lands there
            conf["spark.hadoop.hive.server2.thrift.port"] = str(ep.port)
            conf["spark.hadoop.hive.server2.thrift.bind.host"] = ep.host
            conf["spark.hadoop.hive.server2.transport.mode"] = "binary"  # what JDBC/ODBC drivers speak by default
            # one Spark session per connection (own USE/SET), all over the one shared catalog
            conf["spark.sql.hive.thriftServer.singleSession"] = "false"
        else:
            conf["spark.plugins"] = "org.apache.spark.sql.connect.SparkConnectPlugin"
            conf["spark.connect.grpc.binding.port"] = str(ep.port)
            conf["spark.connect.grpc.binding.address"] = ep.host
    # jobs.yaml's own values of these list-like settings are kept, ours added
    for key, sep in (
        ("spark.driver.extraClassPath", os.pathsep),
        ("spark.driver.extraJavaOptions", " "),
        ("spark.plugins", ","),
    ):
        theirs = (user_conf or {}).get(key)
        if theirs and key in conf:
            conf[key] = f"{theirs}{sep}{conf[key]}"
    return conf


def check_port_free(ep: Endpoint) -> None:
    """A clear error when the endpoint's address cannot be bound (in use, or not this host's)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the JVM's servers bind: TIME_WAIT is fine
        try:
            probe.bind((ep.host, ep.port))
        except OSError as exc:
            raise OffsetsLakehouseError(f"{ep.protocol} port {ep.host}:{ep.port}: {exc.strerror or exc}") from None


def _derby_log_option() -> str:
    return f"-Dderby.stream.error.file={Path(tempfile.gettempdir()) / 'offsets-lakehouse-derby.log'}"


class Server:
    """The serving session: tables registered, endpoints open, refreshed until stopped."""

    def __init__(self, config_path: str | Path, eps: list[Endpoint], master: str | None = None) -> None:
        self.eps = eps
        self.ctx = Context(config_path, master)  # validates jobs.yaml before the JVM starts
        self.ctx.extra_conf = spark_conf(eps, self.ctx.config.spark.conf)
        self._thrift: Any = None
        self._spark: Any = None  # the session, once started
        self.tables: list[str] = []

    def start(self) -> None:
        for ep in self.eps:  # before the JVM: Spark would log a stack trace and lose the cause
            check_port_free(ep)
        self._spark = self.ctx.spark
        self.refresh()
        if any(ep.protocol == "thrift" for ep in self.eps):
            spark = self._spark
            server_class = spark.sparkContext._jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2
            self._thrift = server_class.startWithContext(spark._jsparkSession.sqlContext())
        # Connect's gRPC server was started with the session by its plugin

    def refresh(self) -> list[str]:
        """Register tables and views that exist on storage now; returns the names newly registered."""
        names = self.ctx.tables.register_existing()
        new = sorted(set(names) - set(self.tables))
        self.tables = names
        return new

    def stop(self) -> None:
        if self._thrift is not None:
            self._thrift.stop()
            self._thrift = None
        if self._spark is not None:
            self._spark.stop()
            self._spark = None

    def ready_line(self) -> str:
        return f"serving the lakehouse at {' and '.join(ep.url for ep in self.eps)} (tables: {len(self.tables)})"


def serve(server: Server, refresh_seconds: float, on_ready: Callable[[str], None]) -> None:
    """Start, announce, refresh every ``refresh_seconds`` (and on SIGHUP) until SIGINT/SIGTERM."""
    stop = threading.Event()
    wake = threading.Event()  # a refresh asked for by SIGHUP

    def on_stop(signum: int, _frame: object) -> None:
        log.info("%s: stopping", signal.Signals(signum).name)
        stop.set()
        wake.set()

    def handle_signals() -> None:
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGTERM, on_stop)
        if hasattr(signal, "SIGHUP"):
            signal.signal(signal.SIGHUP, lambda *_: wake.set())

    handle_signals()
    try:
        server.start()  # inside: a failed start (a port in use) still stops the session
        # again: pyspark's SparkContext replaces the SIGINT handler with one that cancels jobs
        # and raises KeyboardInterrupt
        handle_signals()
        on_ready(server.ready_line())
        while not stop.is_set():
            wake.wait(refresh_seconds if refresh_seconds > 0 else None)
            wake.clear()
            if stop.is_set():
                break
            try:
                new = server.refresh()
            except Exception as exc:  # a table mid-creation, storage hiccup: keep serving, try again
                log.warning("refresh failed: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                continue
            if new:
                log.info("registered %s", ", ".join(new))
    finally:
        server.stop()
