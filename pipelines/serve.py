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

Who may get in and what they may do (docs/security.md): every client session only reads
(runtime/readonly.py); with :class:`Access` set, Thrift clients give a user name and password
(HiveServer2's CUSTOM authentication, checked against a file of PBKDF2 hashes) and Connect clients
a token, and both protocols can be served over TLS. Anything but loopback is refused unless
clients authenticate.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipelines.errors import ConfigError, OffsetsLakehouseError
from pipelines.runner import Context
from pipelines.runtime import jars, readonly, served
from pipelines.runtime.tls import TlsTerminator, keystore_from_pem

log = logging.getLogger("offsets_lakehouse.serve")

PROTOCOLS = ("thrift", "connect", "both")
DEFAULT_PORTS = {"thrift": 10000, "connect": 15002}  # HiveServer2's and Spark Connect's usual ports


@dataclass(frozen=True)
class Endpoint:
    protocol: str  # thrift or connect
    host: str
    port: int
    backend_port: int | None = None  # connect behind our TLS terminator: where Spark Connect listens

    @property
    def url(self) -> str:
        return f"jdbc:hive2://{self.host}:{self.port}" if self.protocol == "thrift" else f"sc://{self.host}:{self.port}"

    def describe(self, access: Access) -> str:
        how = []
        if access.tls_cert is not None:
            how.append("TLS")
        if access.authenticates(self.protocol):
            how.append("password" if self.protocol == "thrift" else "token")
        return f"{self.url} ({', '.join(how) or 'loopback only, no authentication'})"


def endpoints(protocol: str, host: str, port: int | None, connect_port: int | None = None) -> list[Endpoint]:
    """The endpoints to open: ``port`` is the one protocol's port, or Thrift's with ``both``
    (Connect's is then ``connect_port``)."""
    if protocol == "both":
        return [
            Endpoint("thrift", host, port or DEFAULT_PORTS["thrift"]),
            Endpoint("connect", host, connect_port or DEFAULT_PORTS["connect"]),
        ]
    return [Endpoint(protocol, host, port or DEFAULT_PORTS[protocol])]


@dataclass(frozen=True)
class Access:
    """How clients authenticate and whether they talk TLS (docs/security.md). Secrets are read from
    files (or the environment) outside the repository, never from jobs.yaml or the command line."""

    passwords: Path | None = None  # Thrift: user:pbkdf2 lines (offsets-lakehouse serve-passwd)
    token: str | None = field(default=None, repr=False)  # Spark Connect: the shared token
    tls_cert: Path | None = None  # PEM certificate (chain) and key, for both protocols
    tls_key: Path | None = None
    tls_key_password: str | None = field(default=None, repr=False)

    def authenticates(self, protocol: str) -> bool:
        return self.passwords is not None if protocol == "thrift" else self.token is not None

    def check(self, eps: list[Endpoint]) -> None:
        """Configuration errors (exit 2): an endpoint beyond loopback that lets anyone in, a missing
        file, half a TLS pair."""
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("TLS needs both --tls-cert and --tls-key")
        for f in (self.passwords, self.tls_cert, self.tls_key):
            if f is not None and not f.is_file():
                raise ConfigError(f"no such file: {f}")
        for ep in eps:
            if not _loopback(ep.host) and not self.authenticates(ep.protocol):
                how = "--passwords FILE" if ep.protocol == "thrift" else "a token (--token-file FILE)"
                raise ConfigError(
                    f"{ep.protocol} on {ep.host} would let anyone on the network in: serving beyond this "
                    f"host needs authentication ({how}; docs/security.md)"
                )


def _loopback(host: str) -> bool:
    try:
        return all(ipaddress.ip_address(a[4][0]).is_loopback for a in socket.getaddrinfo(host, None))
    except (OSError, ValueError):
        return False


def spark_conf(
    eps: list[Endpoint], user_conf: dict[str, str] | None = None, access: Access | None = None
) -> dict[str, str]:
    """Spark settings for a serving session (on top of runtime/spark.py's defaults and jobs.yaml's)."""
    access = access or Access()
    conf = {
        # Delta's jars come with spark.jars, which only the session's class loader sees; the
        # Thrift server's and Connect's handler threads build each client's session with the
        # JVM's system class loader and would not find Delta's catalog (ClassNotFoundException
        # DeltaCatalog). On the driver's class path they are seen by both; read at JVM launch.
        "spark.driver.extraClassPath": os.pathsep.join(str(p) for p in jars.resolve()),
        # the Thrift server's Hive execution client keeps an in-memory Derby (no metastore_db
        # directory) but Derby writes derby.log into the working directory: send it to tmp
        "spark.driver.extraJavaOptions": _derby_log_option(),
        # every client session only reads (the serving session exempts itself to register tables)
        **readonly.conf(user_conf),
    }
    for ep in eps:
        if ep.protocol == "thrift":
            # HiveServer2 reads its settings from the Hadoop configuration; spark.hadoop.* lands there
            conf["spark.hadoop.hive.server2.thrift.port"] = str(ep.port)
            conf["spark.hadoop.hive.server2.thrift.bind.host"] = ep.host
            conf["spark.hadoop.hive.server2.transport.mode"] = "binary"  # what JDBC/ODBC drivers speak by default
            # one Spark session per connection (own USE/SET), all over the one shared catalog
            conf["spark.sql.hive.thriftServer.singleSession"] = "false"
            if access.passwords is not None:
                conf["spark.hadoop.hive.server2.authentication"] = "CUSTOM"
                # Hive's CUSTOM provider reads its class from a HiveConf of its own, which takes
                # hive.* system properties (not Spark's Hadoop configuration)
                conf["spark.driver.extraJavaOptions"] += (
                    f" -Dhive.server2.custom.authentication.class={jars.PASSWORD_AUTHENTICATOR}"
                    f" -Doffsets.serve.passwords={access.passwords.resolve()}"
                )
        else:
            conf["spark.plugins"] = "org.apache.spark.sql.connect.SparkConnectPlugin"
            # behind TLS, Connect itself listens on loopback only, on a port of its own
            conf["spark.connect.grpc.binding.port"] = str(ep.backend_port or ep.port)
            conf["spark.connect.grpc.binding.address"] = "127.0.0.1" if ep.backend_port else ep.host
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _derby_log_option() -> str:
    return f"-Dderby.stream.error.file={Path(tempfile.gettempdir()) / 'offsets-lakehouse-derby.log'}"


class Server:
    """The serving session: tables registered, endpoints open, refreshed until stopped."""

    def __init__(
        self, config_path: str | Path, eps: list[Endpoint], master: str | None = None, access: Access | None = None
    ) -> None:
        self.access = access or Access()
        self.access.check(eps)  # before anything starts
        if self.access.tls_cert is not None:  # Connect speaks TLS through our terminator
            eps = [replace(ep, backend_port=_free_port()) if ep.protocol == "connect" else ep for ep in eps]
        self.eps = eps
        self.ctx = Context(config_path, master)  # validates jobs.yaml before the JVM starts
        self.ctx.extra_conf = spark_conf(eps, self.ctx.config.spark.conf, self.access)
        # what sql and status find under the lakehouse root (runtime/served.py): Connect only
        connect = next((ep for ep in eps if ep.protocol == "connect"), None)
        self.state = None
        if connect is not None:
            tls, token = self.access.tls_cert is not None, self.access.token is not None
            self.state = served.new_state(self.ctx.root, connect.host, connect.port, tls, token)
        if self.state is not None:
            self.ctx.extra_conf[served.INSTANCE_CONF] = self.state.instance
        self._thrift: Any = None
        self._spark: Any = None  # the session, once started
        self._terminators: list[TlsTerminator] = []
        self._keystore: Path | None = None
        self.tables: list[str] = []

    def start(self) -> None:
        for ep in self.eps:  # before the JVM: Spark would log a stack trace and lose the cause
            check_port_free(ep)
        if self.access.token is not None:
            # read by Spark Connect from the environment: not a Spark setting (those show in the UI)
            os.environ["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = self.access.token
        if self.access.tls_cert is not None and any(ep.protocol == "thrift" for ep in self.eps):
            self._keystore, password = keystore_from_pem(
                self.access.tls_cert, self.access.tls_key, self.access.tls_key_password
            )
            self.ctx.extra_conf |= {
                "spark.hadoop.hive.server2.use.SSL": "true",
                "spark.hadoop.hive.server2.keystore.path": str(self._keystore),
                "spark.hadoop.hive.server2.keystore.password": password,
            }
        self._spark = self.ctx.spark
        readonly.exempt(self._spark, True)  # this session registers the tables; clients' only read
        readonly.allow_root(self._spark, self.ctx.root)
        self.refresh()
        if any(ep.protocol == "thrift" for ep in self.eps):
            spark = self._spark
            server_class = spark.sparkContext._jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2
            self._thrift = server_class.startWithContext(spark._jsparkSession.sqlContext())
        # Connect's gRPC server was started with the session by its plugin; TLS in front of it
        for ep in self.eps:
            if ep.backend_port is not None:
                assert self.access.tls_cert is not None and self.access.tls_key is not None
                self._terminators.append(
                    TlsTerminator(
                        ep.host,
                        ep.port,
                        ep.backend_port,
                        self.access.tls_cert,
                        self.access.tls_key,
                        self.access.tls_key_password,
                    )
                )

    def refresh(self) -> list[str]:
        """Register tables and views that exist on storage now; returns the names newly registered."""
        names = self.ctx.tables.register_existing()
        new = sorted(set(names) - set(self.tables))
        self.tables = names
        return new

    def announce(self) -> None:
        """Leave the state file that lets sql and status on this lakehouse use this session; a
        root that refuses it costs them their speed only."""
        if self.state is None:
            return
        try:
            where = served.write_state(self.state)
        except OSError as exc:
            log.warning("serve state file not written (%s): sql and status will start sessions of their own", exc)
            self.state = None
            return
        log.info("sql and status on this lakehouse use this session (state file %s)", where)

    def stop(self) -> None:
        if self.state is not None:
            try:
                served.remove_state(self.state)
            except OSError as exc:
                log.warning("serve state file not removed (%s): clients will find it stale", exc)
        for terminator in self._terminators:
            terminator.close()
        self._terminators = []
        if self._thrift is not None:
            self._thrift.stop()
            self._thrift = None
        if self._spark is not None:
            self._spark.stop()
            self._spark = None
        if self._keystore is not None:
            self._keystore.unlink(missing_ok=True)
            self._keystore = None

    def ready_line(self) -> str:
        where = " and ".join(ep.describe(self.access) for ep in self.eps)
        return f"serving the lakehouse at {where} (tables: {len(self.tables)}; read-only)"


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
        server.announce()
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
