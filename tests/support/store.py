"""An S3-compatible object store for the tests: moto's S3 server in a process of its own, on
loopback, behind a small TCP proxy that the tests can cut.

moto is an emulator, but it starts in a second and honours the conditional writes the lakehouse's
commits and job locks rely on (``If-None-Match``, ``If-Match``: tests/unit/test_lease.py probes
them). The long tier and the object-store benchmark use a real store, SeaweedFS
(docs/object-storage.md). The proxy is what a network does to a store: it can refuse every
connection (:meth:`StoreProxy.down`, the store stopped or unreachable), and lose the answer to one
request that did reach the store (:meth:`StoreProxy.lose_answer`). It counts the requests that
pass it, by method, for the benchmark's request counts.

A process under test reaches a fault point (``OFFSETS_FAULT=<point>``) and, with
``OFFSETS_FAULT_HOOK=127.0.0.1:<proxy.hook_port>``, tells the proxy, which goes down before
answering: the store is gone at exactly that point of the run (pipelines/runtime/faults.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_REQUEST = re.compile(rb"(GET|PUT|POST|HEAD|DELETE) (\S+) HTTP/1\.1\r\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen[bytes] | None = None, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the store server exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


class _Relay:
    """The proxy's work, in a process of its own (:func:`_relay_main`): forwards bytes both ways,
    can be cut and restored, loses one answer on cue, counts requests."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.requests: Counter[str] = Counter()
        self.paths: list[tuple[str, str]] = []
        self.lost: list[str] = []
        self.hooked: list[str] = []
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._lose: re.Pattern[bytes] | None = None
        # every port is the kernel's pick, bound here and reported to the parent: a port chosen
        # by free_port() and bound later can be taken meanwhile by another worker's server, whose
        # readiness probe then lands on this relay (the likely way both tier proxies went down)
        self._hook = socket.create_server(("127.0.0.1", 0))
        self.hook_port = self._hook.getsockname()[1]
        threading.Thread(target=self._serve_hook, daemon=True).start()
        self.port = 0
        self.up()

    def up(self) -> None:
        if self._listener is not None:
            return
        # SO_REUSEADDR (create_server's default) lets the port be bound again after down(); not
        # SO_REUSEPORT, which would let another process listen on it beside this one
        listener = socket.create_server(("127.0.0.1", self.port))
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                conn.close()

    def command(self, line: str) -> Any:
        verb, _, arg = line.partition(" ")
        if verb == "up":
            self.up()
        elif verb == "down":
            self.down()
        elif verb == "lose":
            self._lose = re.compile(arg.encode())
        elif verb == "reset":
            with self._lock:
                self.requests.clear()
                self.paths.clear()
                self.lost.clear()
        elif verb == "state":
            with self._lock:
                return {"requests": dict(self.requests), "paths": self.paths, "lost": self.lost, "hooked": self.hooked}
        return None

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns |= {client, server}
            state = {"lose": False}
            threading.Thread(target=self._upstream, args=(client, server, state), daemon=True).start()
            threading.Thread(target=self._downstream, args=(server, client, state), daemon=True).start()

    def _upstream(self, client: socket.socket, server: socket.socket, state: dict[str, bool]) -> None:
        try:
            while data := client.recv(65536):
                for m in _REQUEST.finditer(data):
                    method, path = m.group(1).decode(), m.group(2).decode()
                    with self._lock:
                        self.requests[method] += 1
                        self.paths.append((method, path))
                    if self._lose is not None and self._lose.search(m.group(2)):
                        self._lose = None
                        state["lose"] = True
                        self.lost.append(f"{method} {path}")
                server.sendall(data)
        except OSError:
            pass
        finally:
            self._close(client, server)

    def _downstream(self, server: socket.socket, client: socket.socket, state: dict[str, bool]) -> None:
        try:
            while data := server.recv(65536):
                if state["lose"] and data.startswith(b"HTTP/1.1 ") and not data.startswith(b"HTTP/1.1 100"):
                    state["lose"] = False
                    return  # the store answered; the client never hears it
                client.sendall(data)
        except OSError:
            pass
        finally:
            self._close(client, server)

    def _close(self, *socks: socket.socket) -> None:
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)  # wakes the other direction's thread; sends the FIN
            with contextlib.suppress(OSError):
                s.close()
            with self._lock:
                self._conns.discard(s)

    def _serve_hook(self) -> None:
        while True:
            try:
                conn, _ = self._hook.accept()
            except OSError:
                return
            with conn:
                point = conn.makefile().readline().strip()
                if not point:  # a connection that names no fault point (a port probe) changes nothing
                    continue
                self.hooked.append(point)
                self.down()
                conn.sendall(b"ok\n")


def _relay_main(target_port: int, ports: Any) -> None:
    relay = _Relay(target_port)
    with socket.create_server(("127.0.0.1", 0)) as control:
        ports.send((relay.port, relay.hook_port, control.getsockname()[1]))
        ports.close()
        while True:
            conn, _ = control.accept()
            with conn, conn.makefile("rw") as stream:
                for line in stream:
                    stream.write(json.dumps(relay.command(line.strip())) + "\n")
                    stream.flush()


class StoreProxy:
    """A TCP proxy in front of the store, in a process of its own: a process that both runs a
    client of the store and holds Python's GIL while it waits on it (delta-rs reading a change
    feed does) would otherwise stop the proxy's threads, and itself."""

    def __init__(self, target_port: int) -> None:
        import multiprocessing

        self.target_port = target_port
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe(duplex=False)
        self._process = context.Process(target=_relay_main, args=(target_port, theirs), daemon=True)
        self._process.start()
        theirs.close()
        try:
            if not ours.poll(60):
                raise TimeoutError("the store proxy did not start within 60 s")
            self.port, self.hook_port, control_port = ours.recv()  # bound before they were sent
        except EOFError:
            raise RuntimeError(f"the store proxy exited with {self._process.exitcode} before it listened") from None
        finally:
            ours.close()
        self._control = socket.create_connection(("127.0.0.1", control_port))
        self._stream = self._control.makefile("rw")

    def _ask(self, line: str) -> Any:
        self._stream.write(line + "\n")
        self._stream.flush()
        return json.loads(self._stream.readline())

    def up(self) -> None:
        self._ask("up")

    def down(self) -> None:
        """Refuse new connections and reset the open ones: the store is gone."""
        self._ask("down")

    def lose_answer(self, path_pattern: str) -> None:
        """The next request whose path matches ``path_pattern`` reaches the store, but its answer
        is lost: the client's connection is closed instead (the client then retries)."""
        self._ask(f"lose {path_pattern}")

    def reset_counts(self) -> None:
        """Forget the requests counted and the answers lost so far."""
        self._ask("reset")

    @property
    def requests(self) -> Counter[str]:
        """Requests that passed, by HTTP method."""
        return Counter(self._ask("state")["requests"])

    @property
    def paths(self) -> list[tuple[str, str]]:
        """(method, path) of each request that passed."""
        return [tuple(p) for p in self._ask("state")["paths"]]  # type: ignore[misc]

    @property
    def lost(self) -> list[str]:
        """The requests whose answer was lost (:meth:`lose_answer`)."""
        return list(self._ask("state")["lost"])

    @property
    def hooked(self) -> list[str]:
        """The fault points processes reported at the hook port (each cut the store)."""
        return list(self._ask("state")["hooked"])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._control.close()
        self._process.terminate()
        self._process.join(timeout=10)


@dataclass
class Store:
    """A running store: the proxy's endpoint (what clients use) and the store behind it."""

    proxy: StoreProxy
    process: subprocess.Popen[bytes]
    direct: str  # the store's own endpoint, bypassing the proxy (for checks while it is cut)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.proxy.port}"

    def env(self, direct: bool = False) -> dict[str, str]:
        """The ``AWS_*`` environment every client of the lakehouse reads (runtime/storage.py)."""
        return {
            "AWS_ENDPOINT_URL": self.direct if direct else self.endpoint,
            "AWS_ACCESS_KEY_ID": "test-key",
            "AWS_SECRET_ACCESS_KEY": "test-secret-key",
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def client(self, direct: bool = True) -> Any:
        from pipelines.runtime.storage import S3Settings

        return S3Settings.resolve({}, self.env(direct)).client()

    def bucket(self, name: str) -> str:
        """Create bucket ``name`` (if needed); returns it."""
        client = self.client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou, client.exceptions.BucketAlreadyExists):
            client.create_bucket(Bucket=name)
        return name

    def upload(self, local: Path, uri: str, only: list[Path] | None = None) -> None:
        """Copy a local directory tree (or the files ``only``, with their index files) to
        ``s3://bucket/prefix``."""
        bucket, _, prefix = uri.removeprefix("s3://").removeprefix("s3a://").partition("/")
        client = self.client()
        files = sorted(p for p in local.rglob("*") if p.is_file())
        if only is not None:
            stems = {p.with_suffix("") for p in only}
            files = [p for p in files if p.with_suffix("") in stems]
        for path in files:
            key = f"{prefix.rstrip('/')}/{path.relative_to(local).as_posix()}".lstrip("/")
            client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())


def _answers_as_s3(port: int, proc: subprocess.Popen[bytes]) -> bool:
    """Whether the server on ``port`` is ``proc``'s S3: moto takes the port a moment after
    free_port() chose it, and another process may have bound it meanwhile (moto then exits)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as answer:
            ok = b"ListAllMyBucketsResult" in answer.read()
    except OSError:
        ok = False
    return ok and proc.poll() is None


def _start_moto(log_dir: Path, tries: int = 3) -> tuple[int, subprocess.Popen[bytes]]:
    for _ in range(tries):
        port = free_port()
        with open(log_dir / "moto.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "true"},
            )
        with contextlib.suppress(RuntimeError):
            _wait_listening(port, proc)
            if _answers_as_s3(port, proc):
                return port, proc
        proc.terminate()
        proc.wait(timeout=30)
    raise RuntimeError(f"moto's S3 server did not start on a port of its own ({tries} tries; {log_dir / 'moto.log'})")


@contextlib.contextmanager
def moto_store(log_dir: Path) -> Iterator[Store]:
    """moto's S3 server in its own process, behind a :class:`StoreProxy`."""
    log_dir.mkdir(parents=True, exist_ok=True)
    port, proc = _start_moto(log_dir)
    try:
        proxy = StoreProxy(port)
        try:
            yield Store(proxy, proc, f"http://127.0.0.1:{port}")
        finally:
            proxy.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def session_conf(store: Store, bucket: str) -> dict[str, str]:
    """Hadoop settings that point a running Spark session's S3A at ``bucket`` of ``store`` (per
    bucket: a session started before the store knows nothing of it)."""
    env = store.env()
    prefix = f"fs.s3a.bucket.{bucket}."
    return {
        prefix + "endpoint": env["AWS_ENDPOINT_URL"],
        prefix + "endpoint.region": env["AWS_REGION"],
        prefix + "path.style.access": "true",
        prefix + "connection.ssl.enabled": "false",
        prefix + "access.key": env["AWS_ACCESS_KEY_ID"],
        prefix + "secret.key": env["AWS_SECRET_ACCESS_KEY"],
    }


# settings for the tests' jobs on a store: S3A gives up on an unreachable store in seconds instead
# of minutes of retries (its defaults suit production, where a store comes back)
FAST_FAILING_S3A = {
    "spark.hadoop.fs.s3a.retry.limit": "1",
    "spark.hadoop.fs.s3a.retry.interval": "200ms",
    "spark.hadoop.fs.s3a.attempts.maximum": "1",
    "spark.hadoop.fs.s3a.connection.establish.timeout": "2s",
    "spark.hadoop.fs.s3a.connection.timeout": "30s",
    "spark.hadoop.fs.s3a.retry.throttle.limit": "1",
}


def as_host(name: str, cmd: list[str], disk: Path) -> list[str]:
    """``cmd`` as run on host ``name`` (as root, with ``unshare``): in namespaces of its own where
    the host name is ``name`` and resolves, like a real host's, to its loopback address (an
    ``/etc/hosts`` of its own on ``disk``), so a lock's holder names that host. The command as it
    is otherwise."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return cmd
    hosts = disk / "hosts"
    hosts.write_text(f"127.0.0.1 localhost {name}\n::1 localhost\n")
    script = f'hostname {name} && mount --bind {hosts} /etc/hosts && exec "$@"'
    return ["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *cmd]


def host_env(store: Store, disk: Path) -> dict[str, str]:
    """The environment of a "host": the store's settings and a local disk of its own (temporary
    files, Spark's scratch space)."""
    (disk / "tmp").mkdir(parents=True, exist_ok=True)
    return {
        **os.environ,
        **store.env(),
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "TMPDIR": str(disk / "tmp"),
        "SPARK_LOCAL_DIRS": str(disk / "tmp"),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
