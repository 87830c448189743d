"""The password file of `serve --passwords` (docs/security.md): one ``user:hash`` line per user,
the hash ``pbkdf2_sha256$<iterations>$<salt>$<key>`` (base64), checked by the JVM at each Thrift
login (tools/spark/java/.../PasswordAuthenticator.java). Written by `offsets-lakehouse
serve-passwd`; the file holds no password, and is created readable by its owner only."""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from pathlib import Path

from pipelines.errors import ConfigError

__all__ = ["hash_password", "remove_user", "set_user"]

# OWASP's 2023 figure for PBKDF2-HMAC-SHA256; a login costs about a third of a second
ITERATIONS = 600_000


def hash_password(password: str, iterations: int = ITERATIONS, salt: bytes | None = None) -> str:
    salt = salt if salt is not None else secrets.token_bytes(16)
    key = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations, dklen=32)
    b64 = base64.b64encode
    return f"pbkdf2_sha256${iterations}${b64(salt).decode()}${b64(key).decode()}"


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _write(path: Path, lines: list[str]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("".join(line + "\n" for line in lines))
    os.replace(tmp, path)


def set_user(path: Path, user: str, password: str) -> None:
    """Add ``user`` with ``password`` to the file, or replace their password."""
    if not user or ":" in user or user != user.strip():
        raise ConfigError(f"not a user name: {user!r} (no colon, no surrounding spaces)")
    if len(password) < 8:
        raise ConfigError("a password needs at least 8 characters")
    kept = [line for line in _lines(path) if not line.startswith(f"{user}:")]
    _write(path, [*kept, f"{user}:{hash_password(password)}"])


def remove_user(path: Path, user: str) -> None:
    lines = _lines(path)
    kept = [line for line in lines if not line.startswith(f"{user}:")]
    if len(kept) == len(lines):
        raise ConfigError(f"{path}: no user {user!r}")
    _write(path, kept)
