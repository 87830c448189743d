"""Unattended runs (docs/operations.md) with real ``offsets-lakehouse run`` processes on one small
generated log: a second run of a job while the first still runs exits 4 at once, naming the holder;
a run SIGKILLed mid-stage leaves no lock behind, and the next run completes. On a terminal (a
pseudo-terminal here) a run shows each stage's progress; with --json and piped output it shows none.

Two runs start Spark (the killed one and the next); the refused one never does."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipelines.generate import generate
from tests.e2e.jobrun import REPO, jobs_file

ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "TERM": "xterm-256color", "PYTHONPATH": str(REPO)}
# the line the progress display prints when a stage ends; no log line looks like it
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
DONE = re.compile(r"\b(bronze|silver) ok in (\d+\.\d) s")


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """The log directory and how many records the generator wrote into it."""
    out = tmp_path_factory.mktemp("job-lock") / "logs"
    return out, generate(out, 3000, seed=5, partitions=2, segment_bytes=16 * 1024).records


def cli(config: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.cli.main", "run", "j", "-c", str(config), *extra]


class TerminalRun:
    """``run`` on a pseudo-terminal (stdout and stderr), in its own process group; what it writes
    is collected by a thread (a full pty buffer would block it)."""

    def __init__(self, cmd: list[str], env: dict[str, str] | None = None) -> None:
        master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, env=env or ENV, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
        )
        os.close(slave)
        self._master = master
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._master, 4096)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not data:
                break
            self._chunks.append(data)

    @property
    def output(self) -> str:
        """What it wrote, without the terminal's colour and cursor escapes."""
        return ANSI.sub("", b"".join(self._chunks).decode(errors="replace"))

    def kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)
        self._reader.join(timeout=10)
        os.close(self._master)


def wait_for(what: str, check, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_overlapping_runs_and_a_killed_run(logs: tuple[Path, int], tmp_path: Path) -> None:
    log_dir, records = logs
    config = jobs_file(tmp_path, log_dir, ["bronze", "silver"])
    lock = tmp_path / "lakehouse" / "_locks" / "j.lock"
    first_log = tmp_path / "log" / "first.log"

    # silver holds at its fault point (decoded, nothing written) until the test lets go, which it
    # never does: a small run's silver takes a second, too short to kill in its middle otherwise
    hold = socket.create_server(("127.0.0.1", 0))
    fault = {"OFFSETS_FAULT": "silver.after_decode", "OFFSETS_FAULT_HOOK": f"127.0.0.1:{hold.getsockname()[1]}"}
    # --verbose: the stages' start lines (DEBUG) tell when silver is under way
    first = TerminalRun(cli(config, "--log-file", str(first_log), "--verbose"), env=ENV | fault)
    try:
        # the first run holds the lock once its pid is in the lock file
        def holds() -> bool:
            with contextlib.suppress(OSError, ValueError):
                return json.loads(lock.read_text())["pid"] == first.proc.pid
            return False

        wait_for("the first run to take the lock", holds, timeout=120)

        # a second run while the first one runs: exit 4, one line naming the holder, before Spark
        t0 = time.monotonic()
        second = subprocess.run(cli(config, "--json"), cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120)
        elapsed = time.monotonic() - t0
        assert second.returncode == 4, second.stderr[-2000:]
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert lines[0].startswith("error: job j is already running (pid ") and f"pid {first.proc.pid} " in lines[0]
        assert second.stdout == ""
        assert first.proc.poll() is None, "the first run was still running when the second was refused"
        assert elapsed < 20, f"refused after {elapsed:.1f} s: it should not start Spark"

        # kill the first run's process group (driver and JVM) in the middle of silver
        hold.settimeout(300)
        held, _ = hold.accept()
        assert held.makefile().readline().strip() == "silver.after_decode"
        assert "silver: decoding" in first_log.read_text()
        assert first.proc.poll() is None, "the first run ended before it could be killed mid-stage"
    finally:
        first.kill_group()
        hold.close()
    assert first.proc.returncode == -signal.SIGKILL

    # progress on the terminal: bronze's end line (silver never ended), logs in the file, not there
    shown = first.output
    assert [m.group(1) for m in DONE.finditer(shown)] == ["bronze"], shown[-3000:]
    m = DONE.search(shown)
    assert "bronze running" in shown and "silver running" in shown, "a spinner line while each stage ran"
    assert f"bronze ok in {m.group(2)} s — s: {records} rows read, {records} inserted" in shown, (
        "the stage's result is on its line"
    )
    assert "bronze: ingesting source s" not in shown, "logs go to --log-file, not the terminal"
    assert "bronze: ingesting source s" in first_log.read_text()
    # --verbose: Spark's own log configuration and warnings (hidden by default, test_first_run.py)
    # and each step's DEBUG line
    assert "Using Spark's default log4j profile" in shown and "WARNING: Using incubator modules" in shown
    assert re.search(r"DEBUG offsets_lakehouse: bronze: plan files took [\d.]+ s", first_log.read_text())

    # the killed run's lock does not block the next run, which completes; piped and --json: no progress
    next_log = tmp_path / "log" / "next.log"
    nxt = subprocess.run(
        cli(config, "--json", "--log-file", str(next_log)),
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert nxt.returncode == 0, nxt.stderr[-3000:]
    report = json.loads(nxt.stdout)
    assert report["status"] == "ok" and [s["stage"] for s in report["stages"]] == ["bronze", "silver"]
    assert DONE.search(nxt.stderr) is None and "bronze running" not in nxt.stderr, nxt.stderr[-2000:]
    # the job's lock, and the lakehouse-wide silver stage's the killed run held too (operations.md)
    taken = [line for line in next_log.read_text().splitlines() if "taken over" in line]
    assert [line for line in taken if f"lock {lock} " in line or f"lock {lock}:" in line], taken
    for line in taken:
        assert f"pid {first.proc.pid} " in line and "no longer running" in line, taken
    assert {re.search(r"_locks/(\S+)\.lock", line).group(1) for line in taken} == {"j", "stage-silver"}, taken
    assert lock.read_text() == "", "released cleanly at the end"
