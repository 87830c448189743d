"""Build a test input once per pytest run, whichever pytest-xdist worker asks for it first.

The spark and e2e tiers run on two xdist workers, one test module each. A lakehouse that modules
on both workers need (and only read) is built by the first worker that asks, in a directory both
workers see: the run's base temporary directory, the parent of each worker's own. The other
worker waits on an exclusive ``fcntl`` lock on a file beside it; a marker written after a
complete build tells later callers it is ready, and a failed build leaves its traceback so that
the other worker fails at once instead of building it again. Without xdist everything happens
under the session's own base temporary directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

READY = ".built"  # written into the target after a complete build: what it held, file by file


def shared_root(factory: pytest.TempPathFactory) -> Path:
    """The directory every worker of this run sees (``pytest-N``; each worker's base temp is
    ``pytest-N/popen-gwK``), or the session's base temp without xdist."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if needed)."""
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file is closed, even if this process dies
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """``shared_root/name``, built by ``build(target)`` unless an earlier caller of this run built
    it. ``build`` gets an empty directory; whoever uses the result must not change it."""
    root = shared_root(factory)
    target = root / name
    failed = root / f"{name}.failed"
    with locked(root / f"{name}.lock"):
        if (target / READY).exists():
            return target
        if failed.exists():
            pytest.fail(f"building {name} failed in another worker of this run:\n{failed.read_text()}")
        shutil.rmtree(target, ignore_errors=True)  # a build whose process died half-way
        target.mkdir()
        try:
            build(target)
        except BaseException:
            failed.write_text(traceback.format_exc())
            raise
        (target / READY).write_text(json.dumps(fingerprint(target)))
    return target


def register(spark, root: Path):
    """Point this session's table names (``gold.current_offsets``...) at the lakehouse under
    ``root``: names follow the root that registered them last, and other modules register their
    own. The tables are external: dropping the schemas drops no data."""
    from pipelines.runtime.tables import LAYERS, Tables

    for db in LAYERS:
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    tables = Tables(spark, str(root))
    tables.register_existing()
    return tables


def fingerprint(root: Path) -> dict[str, str]:
    """Every file under ``root`` with a digest of its bytes (a few MB in all: cheap)."""
    return {
        str(p.relative_to(root)): hashlib.blake2b(p.read_bytes(), digest_size=16).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != READY
    }


def assert_unchanged(target: Path) -> None:
    """Fail when a file of a shared build was added, removed or rewritten since it was built: its
    users only read it (one that must change it works on a copy)."""
    built = json.loads((target / READY).read_text())
    now = fingerprint(target)
    changed = sorted(set(built) ^ set(now) | {f for f in built.keys() & now.keys() if built[f] != now[f]})
    assert not changed, f"the shared build {target} was changed by a test (it must work on a copy): {changed[:20]}"
