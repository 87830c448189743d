"""The password file of `serve --passwords` (pipelines/runtime/passwords.py): hashes, never
passwords, in a file only its owner reads; the JVM side checks them (tests/spark/test_serve_access.py)."""

from __future__ import annotations

import base64
import hashlib
import stat
from pathlib import Path

import pytest

from pipelines.errors import ConfigError
from pipelines.runtime.passwords import hash_password, remove_user, set_user


def test_a_hash_is_salted_pbkdf2_of_the_password() -> None:
    salt = bytes(range(16))
    scheme, iterations, salt_b64, key_b64 = hash_password("correct horse", 1000, salt).split("$")
    assert (scheme, iterations, base64.b64decode(salt_b64)) == ("pbkdf2_sha256", "1000", salt)
    assert base64.b64decode(key_b64) == hashlib.pbkdf2_hmac("sha256", b"correct horse", salt, 1000, 32)
    assert hash_password("correct horse") != hash_password("correct horse")  # a new salt each time


def test_users_are_added_replaced_and_removed(tmp_path: Path) -> None:
    path = tmp_path / "passwords"
    set_user(path, "ana", "first password")
    set_user(path, "bo", "second password")
    set_user(path, "ana", "third password")  # replaced, not added twice
    lines = path.read_text().splitlines()
    assert [line.split(":")[0] for line in lines] == ["bo", "ana"]
    assert "password" not in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    remove_user(path, "bo")
    assert [line.split(":")[0] for line in path.read_text().splitlines()] == ["ana"]
    with pytest.raises(ConfigError, match="no user 'bo'"):
        remove_user(path, "bo")


@pytest.mark.parametrize(
    ("user", "password", "why"), [("a:b", "long enough", "not a user name"), ("ana", "short", "8")]
)
def test_bad_names_and_short_passwords_are_refused(tmp_path: Path, user: str, password: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        set_user(tmp_path / "passwords", user, password)
