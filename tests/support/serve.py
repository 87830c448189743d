"""Waiting for an ``offsets-lakehouse serve`` process the tests started."""

from __future__ import annotations

import queue
import subprocess
import threading
from pathlib import Path

import pytest


def ready_line(proc: subprocess.Popen[str], stderr: Path, timeout: float = 300) -> str:
    """The first line serve prints on stdout (it prints it once it listens); the test fails with
    the end of ``stderr`` if none comes within ``timeout`` seconds. stdout keeps being drained."""
    assert proc.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    try:
        return lines.get(timeout=timeout).strip()
    except queue.Empty:
        proc.kill()
        pytest.fail("serve did not get ready: " + stderr.read_text()[-3000:])
