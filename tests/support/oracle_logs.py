"""Generated logs shared by the oracle's unit tests: each seed is generated once per process."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cache
from pathlib import Path

from pipelines.generate import generate

SEEDS = (28, 21, 14)  # together: every delete cause in history, conversions, groups listed twice
RECORDS = 20_000


@cache
def _root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="oracle-logs-"))
    atexit.register(shutil.rmtree, root, True)
    return root


def generated(seed: int, records: int = RECORDS, partitions: int = 50) -> Path:
    """``offsets-lakehouse generate`` output for ``seed`` (log files and expected-state.json);
    generated once per process however the arguments are passed (``generated(1)`` and
    ``generated(1, RECORDS, 50)`` are the same log)."""
    return _generated(seed, records, partitions)


@cache
def _generated(seed: int, records: int, partitions: int) -> Path:
    out = _root() / f"seed-{seed}-{records}-{partitions}"
    generate(out, records, seed=seed, partitions=partitions)
    return out
