"""One run of a job at a time: a per-job lock file held with ``fcntl.flock`` for the whole run.

The kernel releases a ``flock`` when its holder exits, however it exits, so a SIGKILLed run never
blocks the next one. The lock file also holds who holds it (pid, host, run id, start time, one JSON
object): a refused run names the holder, and a run that finds a holder left behind (a run that
died without releasing: the file is emptied on a clean release) logs that it took over.

The lock file lives in the lakehouse (``<root>/_locks/<job>.lock``) when the root is a local path;
an object store has no locks, so for ``s3a://…`` roots it lives in a local directory
(``lakehouse.lock_dir``, by default ``~/.cache/offsets-lakehouse/locks/<sha1 of root>``), and the
runs of a job must then be scheduled from one host (docs/operations.md).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from pipelines.errors import JobRunning
from pipelines.runtime.config import find_job, load, resolve_lock_dir, resolve_root

__all__ = ["Holder", "default_lock_dir", "hold", "job_lock", "lock_configured_job", "lock_path", "new_run_id"]

log = logging.getLogger("offsets_lakehouse")


def new_run_id() -> str:
    """A run's id: its start time (sortable) and a random suffix."""
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) a job's lock."""

    pid: int
    host: str
    run_id: str
    started_at: str

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host} since {self.started_at}, run {self.run_id}"

    def alive(self) -> bool | None:
        """Whether the holder's process still exists; None when it ran on another host."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # exists, another user's
            return True
        return True


def default_lock_dir(root: str) -> Path:
    """Where the locks of an object-store root live unless ``lakehouse.lock_dir`` says otherwise."""
    digest = hashlib.sha1(root.encode()).hexdigest()
    return Path.home() / ".cache" / "offsets-lakehouse" / "locks" / digest


def lock_path(root: str, job: str, lock_dir: str | Path | None = None) -> Path:
    """The lock file of ``job``: ``lock_dir`` when given; else in the lakehouse for a local root,
    in :func:`default_lock_dir` for an object-store URI."""
    if lock_dir is not None:
        base = Path(lock_dir).expanduser()
    elif "://" in root and not root.startswith("file://"):
        base = default_lock_dir(root)
    else:
        base = Path(root.removeprefix("file://")) / "_locks"
    return base / f"{job}.lock"


def _read_holder(fd: int) -> Holder | None:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 4096)
    try:
        doc = json.loads(raw)
        return Holder(int(doc["pid"]), str(doc["host"]), str(doc["run_id"]), str(doc["started_at"]))
    except (ValueError, KeyError, TypeError):
        return None  # empty (released cleanly, or the holder has not written it yet) or foreign


@contextmanager
def hold(path: Path, job: str, run_id: str) -> Iterator[Holder]:
    """Hold the lock file ``path`` for ``job`` while the block runs; :class:`JobRunning` (exit
    code 4) naming the holder when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # no O_TRUNC: the holder's info is read by others
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            other = _read_holder(fd)
            who = other.describe() if other else "holder not yet recorded"
            raise JobRunning(f"job {job} is already running ({who}); lock {path}") from None
        left = _read_holder(fd)
        if left is not None:
            state = {False: "no longer running", None: "on another host", True: "alive but not holding it"}
            log.warning(
                "lock %s: taken over from a run that did not release it (%s; %s)",
                path,
                left.describe(),
                state[left.alive()],
            )
        me = Holder(os.getpid(), socket.gethostname(), run_id, f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ}")
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(asdict(me)) + "\n").encode(), 0)
        try:
            yield me
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # released cleanly: nothing left for the next run to take over
    finally:
        os.close(fd)  # closing the only descriptor releases the flock


@contextmanager
def job_lock(root: str, job: str, run_id: str, lock_dir: str | Path | None = None) -> Iterator[Holder]:
    """:func:`hold` the lock of ``job`` in the lakehouse at ``root`` (see :func:`lock_path`)."""
    with hold(lock_path(root, job, lock_dir), job, run_id) as me:
        yield me


@contextmanager
def lock_configured_job(config_path: str | Path, job: str, run_id: str | None = None) -> Iterator[Holder]:
    """Hold the lock of ``job`` of the jobs.yaml at ``config_path`` for a new run (its id is the
    holder's ``run_id``). Reads only jobs.yaml — no Spark — so a refused run ends in a moment."""
    config_path = Path(config_path)
    config = load(config_path)
    find_job(config, config_path, job)
    base = config_path.resolve().parent
    root = resolve_root(config, base)
    with job_lock(root, job, run_id or new_run_id(), resolve_lock_dir(config, base)) as me:
        yield me
