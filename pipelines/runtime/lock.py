"""One run of a job at a time, on one host or many: the job's lock, held for the whole run.

On a local root (``<root>/_locks/<job>.lock``, or ``lakehouse.lock_dir``) the lock is a file held
with ``fcntl.flock``: the kernel releases it when its holder exits, however it exits, so a
SIGKILLed run never blocks the next one. The file also holds who holds it (pid, host, run id,
start time, one JSON object): a refused run names the holder, and a run that finds a holder left
behind (the file is emptied on a clean release) logs that it took over.

On an object-store root the lock is a lease kept in the store (``<root>/_locks/<job>.lock``), so
runs on any host see it: created with ``If-None-Match: *`` (of two runs exactly one creates it),
renewed by its holder every quarter of the lease with ``If-Match`` on the object's ETag, released
by an ``If-Match`` overwrite with an empty body. A lease not renewed for its duration (a holder
that died) is taken over with ``If-Match`` on the stale ETag, so of two runs taking it over one
wins. Staleness is judged by the store's clock (its ``Date`` against the object's
``Last-Modified``), not the hosts'. A holder that cannot renew before its lease runs out stops its
run (:func:`stop_run`): after that moment another host may rightly take the lease over.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from pipelines.errors import JobRunning, StageBusy, StoreError
from pipelines.runtime.config import find_job, load, resolve_lock_dir, resolve_root
from pipelines.runtime.resources import unwritable
from pipelines.runtime.storage import (
    S3Settings,
    check_conditional_writes,
    is_object_store,
    split_uri,
    unreachable_message,
)

__all__ = [
    "Holder",
    "hold",
    "job_lock",
    "lease",
    "lock_configured_job",
    "lock_path",
    "new_run_id",
    "stage_lock",
    "stop_run",
]

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


def lock_path(root: str, job: str, lock_dir: str | Path | None = None) -> Path:
    """The lock file of ``job`` on a local disk: in ``lock_dir`` when given, else in the lakehouse."""
    base = Path(lock_dir).expanduser() if lock_dir is not None else Path(root.removeprefix("file://")) / "_locks"
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
def hold(path: Path, job: str, run_id: str, what: str | None = None) -> Iterator[Holder]:
    """Hold the lock file ``path`` for ``job`` while the block runs; :class:`JobRunning` (exit
    code 4) naming the holder when another process holds it (``what`` is running: "job JOB")."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # no O_TRUNC: the holder's info is read by others
    except OSError as exc:
        raise unwritable(exc, str(path.parent)) or exc from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            other = _read_holder(fd)
            who = other.describe() if other else "holder not yet recorded"
            raise JobRunning(f"{what or f'job {job}'} is already running ({who}); lock {path}") from None
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
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(asdict(me)) + "\n").encode(), 0)
        except OSError as exc:  # a full disk: not even the holder's line fits
            raise unwritable(exc, str(path.parent)) or exc from None
        try:
            yield me
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # released cleanly: nothing left for the next run to take over
    finally:
        os.close(fd)  # closing the only descriptor releases the flock


def stop_run(message: str) -> None:
    """What a holder does when its lease is lost: say so and end the process at once, as a kill
    would (the stages are idempotent; the run holding the lease now finishes the work)."""
    log.error("%s", message)
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    os._exit(1)


class _Lease:
    """A lease object in the store: its key, the body that names the holder, its current ETag."""

    def __init__(self, client: Any, bucket: str, key: str, me: Holder, seconds: float) -> None:
        self.client, self.bucket, self.key, self.me, self.seconds = client, bucket, key, me, seconds
        self.etag: str | None = None
        self.renewals = 0

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def body(self) -> bytes:
        # the renewal count changes the bytes, hence the ETag: a run that judged the lease stale
        # from an older copy cannot take it over after a renewal (its If-Match fails)
        doc = asdict(self.me) | {"lease_seconds": self.seconds, "renewals": self.renewals}
        return (json.dumps(doc) + "\n").encode()

    def put(self, **condition: str) -> bool:
        """Write the body under ``condition``; False when the store refuses it (412)."""
        from botocore.exceptions import BotoCoreError, ClientError

        body = self.body()
        try:
            answer = self.client.put_object(Bucket=self.bucket, Key=self.key, Body=body, **condition)
        except BotoCoreError as exc:  # no credentials, no connection
            raise StoreError(f"{self.uri}: {exc}") from None
        except ClientError as exc:
            if _status(exc) != 412:
                raise StoreError(f"{self.uri}: {exc}") from None
            # the SDK retries a request whose answer was lost; the retry of a write that did land
            # is refused by the object it wrote: the same bytes there are our own success
            try:
                got = self.client.get_object(Bucket=self.bucket, Key=self.key)
            except ClientError:
                return False
            if got["Body"].read() != body:
                return False
            answer = got
        self.etag = answer["ETag"]
        return True

    def current(self) -> tuple[str, Holder | None, float, float] | None:
        """(ETag, holder or None when released, seconds since its last write by the store's clock,
        the holder's lease) of the lease object, or None when there is none."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            got = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except BotoCoreError as exc:
            raise StoreError(f"{self.uri}: {exc}") from None
        except ClientError as exc:
            if _status(exc) == 404:
                return None
            raise StoreError(f"{self.uri}: {exc}") from None
        raw = got["Body"].read()
        now = parsedate_to_datetime(got["ResponseMetadata"]["HTTPHeaders"]["date"])
        age = (now - got["LastModified"]).total_seconds()
        try:
            doc = json.loads(raw)
            holder = Holder(int(doc["pid"]), str(doc["host"]), str(doc["run_id"]), str(doc["started_at"]))
            seconds = float(doc.get("lease_seconds", self.seconds))
        except (ValueError, KeyError, TypeError):
            holder, seconds = None, 0.0  # released (empty), or not ours
        return got["ETag"], holder, age, seconds

    def acquire(self, job: str, what: str | None = None) -> None:
        for _ in range(5):
            if self.put(IfNoneMatch="*"):
                return
            found = self.current()
            if found is None:
                continue  # removed meanwhile: create it again
            etag, holder, age, seconds = found
            # a holder on this host whose process is gone died: no need to wait for its lease
            dead = holder is not None and holder.host == self.me.host and holder.alive() is False
            if holder is not None and age <= seconds and not dead:
                raise JobRunning(
                    f"{what or f'job {job}'} is already running ({holder.describe()}; lease renewed {age:.0f} s ago, "
                    f"lapses after {seconds:.0f} s without renewal); lock {self.uri}"
                )
            if self.put(IfMatch=etag):
                if holder is not None:
                    why = "no longer running" if dead else f"its lease lapsed {age - seconds:.0f} s ago"
                    log.warning(
                        "lock %s: taken over from a run that did not release it (%s; %s)",
                        self.uri,
                        holder.describe(),
                        why,
                    )
                return
            # another run took it over between our read and our write: read again, and be refused
        raise JobRunning(f"job {job}: the lease {self.uri} changed hands repeatedly while taking it; try again")

    def renew(self) -> bool:
        self.renewals += 1
        return self.put(IfMatch=self.etag or "")

    def release(self) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key, Body=b"", IfMatch=self.etag or "")
        except ClientError as exc:
            log.warning("lock %s: not released (%s); it lapses after %.0f s", self.uri, exc, self.seconds)
        except Exception as exc:  # the store is unreachable: the lease lapses by itself
            log.warning("lock %s: not released (%s); it lapses after %.0f s", self.uri, exc, self.seconds)


def _status(exc: Any) -> int | None:
    return exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def _with_causes(exc: BaseException) -> str:
    """The error's text and its causes': boto3 names the endpoint it could not connect to, and the
    reason (refused, timed out) is the error it wraps."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 8:
        parts.append(str(seen))
        wrapped = getattr(seen, "kwargs", None)
        if isinstance(wrapped, dict) and wrapped.get("error") is not None:
            parts.append(str(wrapped["error"]))
        seen = seen.__cause__ or seen.__context__
    return " | ".join(parts)


class _Renewer(threading.Thread):
    """Renews a lease every quarter of its duration; calls ``on_lost`` when the store refuses a
    renewal (another run took it over) or when renewals have failed for most of the lease."""

    def __init__(self, lease: _Lease, on_lost: Callable[[str], None]) -> None:
        super().__init__(name=f"lease-{lease.key}", daemon=True)
        self.lease, self.on_lost = lease, on_lost
        self.stopped = threading.Event()

    def run(self) -> None:
        lease = self.lease
        last = time.monotonic()
        while not self.stopped.wait(lease.seconds / 4):
            try:
                if not lease.renew():
                    self.on_lost(f"lost the lock {lease.uri}: another run took it over; this run stops")
                    return
                last = time.monotonic()
            except Exception as exc:
                if time.monotonic() - last > lease.seconds * 0.75:
                    self.on_lost(
                        unreachable_message(_with_causes(exc))
                        or f"could not renew the lock {lease.uri} for {time.monotonic() - last:.0f} s ({exc}); "
                        "another run may take it over, so this run stops"
                    )
                    return
                log.warning("lock %s: renewal failed (%s); retrying", lease.uri, exc)


@contextmanager
def lease(
    client: Any,
    uri: str,
    job: str,
    run_id: str,
    seconds: float,
    on_lost: Callable[[str], None] = stop_run,
    what: str | None = None,
) -> Iterator[Holder]:
    """Hold the lease at ``uri`` (``s3://bucket/key``) for ``job`` while the block runs:
    :class:`JobRunning` (exit code 4) naming the holder when a live run holds it."""
    bucket, key = split_uri(uri)
    me = Holder(os.getpid(), socket.gethostname(), run_id, f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ}")
    held = _Lease(client, bucket, key, me, seconds)
    held.acquire(job, what)
    renewer = _Renewer(held, on_lost)
    renewer.start()
    try:
        yield me
    finally:
        renewer.stopped.set()
        renewer.join()
        held.release()


def _lock_place(root: str, name: str, lock_dir: str | Path | None) -> Path | str:
    """Where the lock called ``name`` lives: a local file, or (object-store root, no ``lock_dir``)
    the URI of its lease object."""
    if lock_dir is not None or not is_object_store(root):
        return lock_path(root, name, lock_dir)
    bucket, prefix = split_uri(root)
    return f"s3://{bucket}/{prefix}/_locks/{name}.lock" if prefix else f"s3://{bucket}/_locks/{name}.lock"


@contextmanager
def _held(
    root: str,
    name: str,
    run_id: str,
    lock_dir: str | Path | None,
    store: S3Settings | None,
    lease_seconds: float,
    what: str,
) -> Iterator[Holder]:
    place = _lock_place(root, name, lock_dir)
    if isinstance(place, Path):
        with hold(place, name, run_id, what) as me:
            yield me
        return
    client = (store or S3Settings.resolve({})).client()
    bucket, prefix = split_uri(root)
    check_conditional_writes(client, bucket, prefix)
    with lease(client, place, name, run_id, lease_seconds, what=what) as me:
        yield me


@contextmanager
def job_lock(
    root: str,
    job: str,
    run_id: str,
    lock_dir: str | Path | None = None,
    store: S3Settings | None = None,
    lease_seconds: float = 60.0,
) -> Iterator[Holder]:
    """Hold the lock of ``job`` of the lakehouse at ``root``: a file (:func:`hold`, see
    :func:`lock_path`) for a local root or a given ``lock_dir``, else a :func:`lease` in the store."""
    with _held(root, job, run_id, lock_dir, store, lease_seconds, f"job {job}") as me:
        yield me


@contextmanager
def stage_lock(
    root: str,
    stage: str,
    run_id: str,
    lock_dir: str | Path | None = None,
    store: S3Settings | None = None,
    lease_seconds: float = 60.0,
    wait_seconds: float = 3600.0,
    poll_seconds: float = 2.0,
) -> Iterator[Holder]:
    """One ``stage`` (silver, gold, quality) at a time in the lakehouse at ``root``, whatever job
    and host runs it: these stages work on the whole lakehouse — silver decodes every bronze row
    not yet decoded, gold replays every new silver event, quality validates every table — so two
    at once would do the same work twice (and silver would append it twice). A second run waits
    for the first one's stage to end (it then finds little left to do), at most ``wait_seconds``;
    the lock is the job lock's kind (``<root>/_locks/stage-<stage>.lock``)."""
    what = f"the {stage} stage of another run"
    deadline = time.monotonic() + wait_seconds
    waiting = False
    with contextlib.ExitStack() as stack:
        while True:
            try:  # only taking the lock is retried, never the work under it
                me = stack.enter_context(_held(root, f"stage-{stage}", run_id, lock_dir, store, lease_seconds, what))
                break
            except JobRunning as busy:
                if time.monotonic() > deadline:
                    raise StageBusy(f"{busy} for more than {wait_seconds:.0f} s") from None
                if not waiting:
                    log.info("%s: waiting: %s", stage, busy)
                    waiting = True
                time.sleep(poll_seconds)
        if waiting:
            log.info("%s: the other run's %s stage ended; going on", stage, stage)
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
    store = S3Settings.resolve(config.spark.conf) if is_object_store(root) else None
    with job_lock(
        root,
        job,
        run_id or new_run_id(),
        resolve_lock_dir(config, base),
        store,
        config.lakehouse.lock_lease_seconds,
    ) as me:
        yield me
