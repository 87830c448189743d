"""Finding a running serve through its state file (pipelines/runtime/served.py): which files are
believed and which are ignored, and why. The Spark Connect half is tested against a real serve in
tests/spark/test_serve.py and tests/spark/test_serve_access.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from pipelines.runtime import served


@pytest.fixture
def listening() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def _write(lakehouse: Path, **changes) -> served.ServeState:
    """A state file under ``lakehouse`` (whatever root the state names, as a copied directory's)."""
    state = replace(served.new_state(str(lakehouse), "127.0.0.1", 1, tls=False, token=False), **changes)
    (lakehouse / "_serve").mkdir(exist_ok=True)
    (lakehouse / "_serve" / "connect.json").write_text(json.dumps(asdict(state)))
    return state


def test_a_current_state_file_is_believed(tmp_path: Path, listening: int) -> None:
    state = _write(tmp_path, port=listening)
    found, why = served.check(str(tmp_path))
    assert found == state and why == ""
    doc = json.loads((tmp_path / "_serve" / "connect.json").read_text())
    assert set(doc) == set(asdict(state)) and "secret" not in json.dumps(doc).lower()


def test_no_state_file(tmp_path: Path) -> None:
    assert served.check(str(tmp_path)) == (None, "no serve with Spark Connect is running on this lakehouse")


def test_a_state_file_of_another_root_is_ignored(tmp_path: Path, listening: int) -> None:
    _write(tmp_path, port=listening, root="/elsewhere/lakehouse")
    found, why = served.check(str(tmp_path))
    assert found is None and "names another lakehouse (/elsewhere/lakehouse)" in why


def test_a_state_file_whose_process_is_gone_is_stale(tmp_path: Path, listening: int) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _write(tmp_path, port=listening, pid=int(gone.stdout))
    found, why = served.check(str(tmp_path))
    assert found is None and f"stale (pid {int(gone.stdout)} is gone)" in why


def test_a_state_file_whose_port_is_closed_is_stale(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _write(tmp_path, port=port, pid=os.getpid())
    found, why = served.check(str(tmp_path))
    assert found is None and f"sc://127.0.0.1:{port} does not answer" in why


def test_an_unreadable_state_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "_serve").mkdir()
    (tmp_path / "_serve" / "connect.json").write_text("{not json")
    found, why = served.check(str(tmp_path))
    assert found is None and "unreadable (JSONDecodeError); ignored" in why


def test_a_serve_needing_a_token_is_not_used_without_one(tmp_path: Path, listening: int, monkeypatch) -> None:
    monkeypatch.delenv(served.TOKEN_ENV, raising=False)
    monkeypatch.delenv(served.TOKEN_FILE_ENV, raising=False)
    _write(tmp_path, port=listening, token=True)
    found = served.find(str(tmp_path))
    assert found.spark is None and found.state is not None
    assert found.describe("sql") == (
        f"sql: started a Spark session of its own (the serve at sc://127.0.0.1:{listening} needs a token: "
        "set OFFSETS_SERVE_TOKEN or OFFSETS_SERVE_TOKEN_FILE)"
    )


def test_stopping_removes_only_its_own_state_file(tmp_path: Path) -> None:
    first = served.new_state(str(tmp_path), "127.0.0.1", 1, tls=False, token=False)
    served.write_state(first)
    second = replace(first, instance="another")  # a second serve took over the root
    served.write_state(second)
    served.remove_state(first)
    assert (tmp_path / "_serve" / "connect.json").exists()
    served.remove_state(second)
    assert not (tmp_path / "_serve" / "connect.json").exists()
