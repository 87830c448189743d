"""A running ``serve`` on this lakehouse, for ``sql`` and ``status`` (docs/sql.md).

Starting a JVM costs a one-line query most of its time. A ``serve`` with a Spark Connect endpoint
leaves a small state file under the lakehouse root, ``_serve/connect.json``: where it listens,
which host and process serve, whether clients need TLS and a token — never a secret. ``sql`` and
``status`` read it and, when it is current, become a Spark Connect client of that session instead
of starting their own; with authentication on they present their own token (``OFFSETS_SERVE_TOKEN``
or the file in ``OFFSETS_SERVE_TOKEN_FILE``), never one taken from the state file.

A state file is ignored, with the reason said, when it is stale (its process gone, its port
closed, or another server answering there), when it names another lakehouse root (a copied
directory), or when it cannot be read. The server proves who it is by a random instance id that
is both in the file and in its session's settings.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
import ssl
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipelines.runtime import files

__all__ = ["INSTANCE_CONF", "Found", "ServeState", "find", "new_state", "remove_state", "state_uri", "write_state"]

STATE = "_serve/connect.json"
INSTANCE_CONF = "spark.offsets.serve.instance"  # the serving session's setting a client checks
TOKEN_ENV, TOKEN_FILE_ENV, CA_ENV = "OFFSETS_SERVE_TOKEN", "OFFSETS_SERVE_TOKEN_FILE", "OFFSETS_SERVE_CA"
PROBE_SECONDS = 1.0


@dataclass(frozen=True)
class ServeState:
    host: str  # the address Spark Connect listens on (0.0.0.0: every address of ``hostname``)
    port: int
    hostname: str  # the machine that serves
    pid: int
    root: str  # the lakehouse root it serves
    instance: str
    tls: bool
    token: bool  # whether clients must present a token
    started_at: str

    @property
    def url(self) -> str:
        return f"sc://{self.host}:{self.port}"


@dataclass(frozen=True)
class Found:
    """What ``find`` found: a session of the running serve, or None and why not."""

    spark: Any
    state: ServeState | None
    why: str

    def describe(self, command: str) -> str:
        if self.spark is not None and self.state is not None:
            where = (
                self.state.url
                if self.state.hostname == socket.gethostname()
                else f"{self.state.url} on {self.state.hostname}"
            )
            return f"{command}: answered by the running serve at {where} (pid {self.state.pid})"
        return f"{command}: started a Spark session of its own ({self.why})"


def state_uri(root: str) -> str:
    return f"{root.rstrip('/')}/{STATE}"


def new_state(root: str, host: str, port: int, tls: bool, token: bool) -> ServeState:
    return ServeState(
        host=host,
        port=port,
        hostname=socket.gethostname(),
        pid=os.getpid(),
        root=files.normalise(root),
        instance=uuid.uuid4().hex,
        tls=tls,
        token=token,
        started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def write_state(state: ServeState) -> str:
    uri = state_uri(state.root)
    if "://" not in uri or uri.startswith("file://"):
        Path(uri.removeprefix("file://")).parent.mkdir(parents=True, exist_ok=True)
    files.write_bytes(uri, json.dumps(asdict(state), indent=1).encode())
    return uri


def read_state(root: str) -> ServeState | None:
    """The state file of ``root``; None when there is none. A file that does not parse is an error."""
    uri = state_uri(root)
    if not files.exists(uri):  # an object store's missing key is not always a FileNotFoundError
        return None
    filesys, path = files.filesystem(uri)
    try:
        with filesys.open_input_stream(path) as stream:
            doc = json.loads(stream.read().decode("utf-8"))
    except FileNotFoundError:  # removed since: its serve stopped
        return None
    return ServeState(**doc)


def remove_state(state: ServeState) -> None:
    """Remove the state file if it is still this server's (another serve may have replaced it)."""
    try:
        current = read_state(state.root)
    except (OSError, ValueError, TypeError):
        return
    if current is not None and current.instance == state.instance:
        filesys, path = files.filesystem(state_uri(state.root))
        filesys.delete_file(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def _wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _address(state: ServeState) -> str:
    """Where this client reaches the server: loopback on the serving machine itself."""
    if _wildcard(state.host):
        return "127.0.0.1" if state.hostname == socket.gethostname() else state.hostname
    return state.host


def _token() -> str | None:
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV].strip()
    path = os.environ.get(TOKEN_FILE_ENV)
    if path and Path(path).is_file():
        return Path(path).read_text().strip() or None
    return None


def check(root: str) -> tuple[ServeState | None, str]:
    """The state file of ``root`` if it describes a serve that can be reached now, else None and
    why (in words for the user)."""
    try:
        state = read_state(root)
    except (OSError, ValueError, TypeError) as exc:
        return None, f"the serve state file {state_uri(root)} is unreadable ({type(exc).__name__}); ignored"
    if state is None:
        return None, "no serve with Spark Connect is running on this lakehouse"
    if state.root != files.normalise(root):
        return None, f"the serve state file names another lakehouse ({state.root}); ignored"
    if state.hostname == socket.gethostname() and not _alive(state.pid):
        return None, f"the serve state file is stale (pid {state.pid} is gone); ignored"
    try:
        with socket.create_connection((_address(state), state.port), timeout=PROBE_SECONDS):
            pass
    except OSError as exc:
        return None, f"the serve at {state.url} does not answer ({exc.strerror or exc}); ignored"
    return state, ""


def find(root: str) -> Found:
    """A Spark Connect session of the serve running on ``root``, or None and why not."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:  # a Connect client here would switch PySpark's mode
        return Found(None, None, "this process runs a Spark session already")
    state, why = check(root)
    if state is None:
        return Found(None, None, why)
    token = _token()
    if state.token and token is None:
        return Found(None, state, f"the serve at {state.url} needs a token: set {TOKEN_ENV} or {TOKEN_FILE_ENV}")
    address = _address(state)
    url = f"sc://{address}:{state.port}/"
    ca = Path(os.environ[CA_ENV]).read_bytes() if state.tls and os.environ.get(CA_ENV) else None
    if state.tls:
        url += ";use_ssl=true"
        # gRPC retries a failed handshake for minutes: find out first, and say why
        if (refused := _tls_refused(address, state.port, ca)) is not None:
            return Found(None, state, f"the serve at {state.url}: {refused}")
    if token is not None:
        url += f";token={token}"
    try:
        spark = _session(url, ca)
        instance = spark.conf.get(INSTANCE_CONF, None)
    except Exception as exc:  # refused token, TLS failure: the session of our own still answers
        text = str(exc).strip()
        # gRPC's own words (`details = "Invalid authentication token"`), else the first line
        details = re.search(r'details = "([^"]+)"', text)
        why = details.group(1) if details else (text.splitlines()[0] if text else type(exc).__name__)
        return Found(None, state, f"the serve at {state.url} refused the connection: {why[:200]}")
    if instance != state.instance:
        spark.stop()
        return Found(None, state, f"another server answers at {state.url}; the serve state file is stale")
    return Found(spark, state, "")


def _tls_refused(host: str, port: int, ca: bytes | None) -> str | None:
    """Why a TLS handshake with the serve fails (its certificate not trusted, a name that does not
    match), or None when it succeeds."""
    context = ssl.create_default_context(cadata=ca.decode() if ca else None)
    try:
        with (
            socket.create_connection((host, port), timeout=PROBE_SECONDS * 5) as raw,
            context.wrap_socket(raw, server_hostname=host),
        ):
            return None
    except ssl.SSLCertVerificationError as exc:
        return f"its certificate is not trusted ({exc.verify_message}): set {CA_ENV} to its CA's PEM file"
    except (OSError, ssl.SSLError) as exc:
        return f"TLS failed ({exc})"


def _session(url: str, ca: bytes | None) -> Any:
    """A Spark Connect session for ``url``, trusting ``ca`` (PEM) besides the system's roots.
    PySpark's own channel takes gRPC's default roots, which gRPC reads once, when it starts."""
    if ca is None:
        from pyspark.sql import SparkSession

        return SparkSession.builder.remote(url).getOrCreate()
    import grpc
    from pyspark.sql.connect.client import DefaultChannelBuilder
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    class Trusting(DefaultChannelBuilder):
        def toChannel(self) -> grpc.Channel:
            creds = grpc.ssl_channel_credentials(root_certificates=ca)
            if self.token is not None:
                creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(self.token))
            return self._secure_channel(self.endpoint, creds)

    return ConnectSession.builder.channelBuilder(Trusting(url)).getOrCreate()
