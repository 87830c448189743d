"""The code base is ruff-clean (lint and format), so CI enforces it."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ruff_check() -> None:
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_ruff_format() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
