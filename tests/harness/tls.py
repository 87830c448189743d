"""Key and trust stores for the harness broker's TLS listeners, made with the JDK's ``keytool`` as
an operator would: a CA, a broker certificate it signs (for 127.0.0.1 and localhost), client
certificates it signs (one valid, one expired), and a second CA nobody trusts. PKCS#12 files,
one password for all (the tests' secrets are known on purpose: the leak test searches for them).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

PASSWORD = "harness-store-Secret-7f3a"


@dataclass(frozen=True)
class Stores:
    dir: Path
    password: str
    ca_pem: Path
    truststore: Path  # trusts the CA
    broker_keystore: Path
    client_keystore: Path  # CN=reader, signed by the CA
    expired_keystore: Path  # CN=reader, signed by the CA, expired
    stranger_keystore: Path  # CN=reader, signed by another CA
    stranger_truststore: Path  # trusts only the other CA


def _keytool(*args: str, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run(["keytool", *args], input=stdin, capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(f"keytool {args[0]} failed: {proc.stderr.decode(errors='replace')[-1000:]}")
    return proc.stdout


def _store(path: Path, password: str) -> list[str]:
    return ["-keystore", str(path), "-storepass", password, "-storetype", "PKCS12"]


def _ca(dir: Path, name: str, password: str) -> tuple[Path, Path]:
    store = dir / f"{name}.p12"
    _keytool(
        "-genkeypair",
        "-alias",
        "ca",
        "-dname",
        f"CN={name}",
        "-keyalg",
        "EC",
        "-validity",
        "30",
        "-ext",
        "bc:c",
        *_store(store, password),
    )
    pem = dir / f"{name}.pem"
    pem.write_bytes(_keytool("-exportcert", "-rfc", "-alias", "ca", *_store(store, password)))
    return store, pem


def _signed(
    dir: Path,
    name: str,
    dname: str,
    ca: tuple[Path, Path],
    password: str,
    *,
    san: str | None = None,
    startdate: str | None = None,
    validity: int = 30,
) -> Path:
    """A key store holding a key and its certificate chain, signed by ``ca``."""
    store = dir / f"{name}.p12"
    _keytool("-genkeypair", "-alias", name, "-dname", dname, "-keyalg", "EC", *_store(store, password))
    request = _keytool("-certreq", "-alias", name, *_store(store, password))
    gencert = ["-gencert", "-alias", "ca", "-rfc", "-validity", str(validity), *_store(ca[0], password)]
    if san:
        gencert += ["-ext", f"SAN={san}"]
    if startdate:
        gencert += ["-startdate", startdate]
    signed = _keytool(*gencert, stdin=request)
    _keytool("-importcert", "-noprompt", "-alias", "ca", "-file", str(ca[1]), *_store(store, password))
    _keytool("-importcert", "-noprompt", "-alias", name, *_store(store, password), stdin=signed)
    return store


def _truststore(dir: Path, name: str, pem: Path, password: str) -> Path:
    store = dir / f"{name}.p12"
    _keytool("-importcert", "-noprompt", "-alias", "ca", "-file", str(pem), *_store(store, password))
    return store


def make_stores(dir: Path, password: str = PASSWORD) -> Stores:
    dir.mkdir(parents=True, exist_ok=True)
    ca = _ca(dir, "harness-ca", password)
    other = _ca(dir, "stranger-ca", password)
    return Stores(
        dir=dir,
        password=password,
        ca_pem=ca[1],
        truststore=_truststore(dir, "truststore", ca[1], password),
        broker_keystore=_signed(dir, "broker", "CN=localhost", ca, password, san="ip:127.0.0.1,dns:localhost"),
        client_keystore=_signed(dir, "reader", "CN=reader,O=offsets-lakehouse", ca, password),
        # valid for one day, ten days ago
        expired_keystore=_signed(
            dir, "expired", "CN=reader,O=offsets-lakehouse", ca, password, startdate="-10d", validity=1
        ),
        stranger_keystore=_signed(dir, "stranger", "CN=reader,O=offsets-lakehouse", other, password),
        stranger_truststore=_truststore(dir, "stranger-truststore", other[1], password),
    )
