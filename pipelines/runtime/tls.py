"""TLS for `serve` (docs/security.md): a PEM certificate and key, made into what each server needs.

* HiveServer2 (Thrift) reads a Java keystore: :func:`keystore_from_pem` writes a PKCS#12 one,
  readable by this user only, with a random password that never leaves the process.
* Spark Connect has no TLS of its own (Spark 4.1): :class:`TlsTerminator` accepts TLS connections
  (ALPN ``h2``, what gRPC clients ask for) on the public address and relays the decrypted bytes to
  Connect, which then listens on loopback only. gRPC over plain HTTP/2 needs nothing else.

``cryptography`` reads the PEM files (the key may be encrypted: its passphrase comes from the
environment); Python's ``ssl`` module serves TLS 1.2 and 1.3.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import ssl
import tempfile
import threading
from pathlib import Path

__all__ = ["TlsTerminator", "keystore_from_pem"]


def keystore_from_pem(cert: Path, key: Path, key_password: str | None = None) -> tuple[Path, str]:
    """A PKCS#12 keystore (mode 0600, in the temporary directory) holding ``key`` and the
    certificate chain of ``cert``, and its password."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    chain = x509.load_pem_x509_certificates(cert.read_bytes())
    private = serialization.load_pem_private_key(key.read_bytes(), key_password.encode() if key_password else None)
    password = secrets.token_urlsafe(24)
    blob = pkcs12.serialize_key_and_certificates(
        b"offsets-lakehouse",
        private,  # type: ignore[arg-type]
        chain[0],
        chain[1:] or None,
        serialization.BestAvailableEncryption(password.encode()),
    )
    fd, name = tempfile.mkstemp(prefix="offsets-lakehouse-serve-", suffix=".p12")
    with os.fdopen(fd, "wb") as out:  # mkstemp: 0600
        out.write(blob)
    return Path(name), password


class TlsTerminator:
    """Accept TLS on ``host:port`` and relay each connection to ``127.0.0.1:backend_port``, in a
    thread of its own (an asyncio loop) until :meth:`close`."""

    def __init__(
        self, host: str, port: int, backend_port: int, cert: Path, key: Path, key_password: str | None = None
    ) -> None:
        self.backend_port = backend_port
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert, key, key_password)
        context.set_alpn_protocols(["h2"])
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        failed: list[BaseException] = []

        async def serve() -> None:
            try:
                self._server = await asyncio.start_server(self._relay, host, port, ssl=context)
            except BaseException as exc:
                failed.append(exc)
                raise
            finally:
                started.set()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            with contextlib.suppress(BaseException):
                self._loop.run_until_complete(serve())
            if not failed:
                self._loop.run_forever()

        self._thread = threading.Thread(target=run, name=f"tls-{host}:{port}", daemon=True)
        self._thread.start()
        started.wait(30)
        if failed:
            raise OSError(f"TLS on {host}:{port}: {failed[0]}")

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            back_reader, back_writer = await asyncio.open_connection("127.0.0.1", self.backend_port)
        except OSError:
            writer.close()
            return

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        await asyncio.gather(pump(reader, back_writer), pump(back_reader, writer))

    def close(self) -> None:
        def stop() -> None:
            self._server.close()
            self._loop.stop()

        if self._loop.is_running():
            self._loop.call_soon_threadsafe(stop)
        self._thread.join(timeout=10)
