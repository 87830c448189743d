"""A lakehouse whose storage refuses writes — a full disk, a refused permission, a read-only
mount — as one :class:`~pipelines.errors.LakehouseUnwritable` with a line that says what to do.

The same condition reaches the run in many shapes: Python's ``OSError`` (the job lock, delta-rs
through pyarrow), Hadoop's ``FSError``/``IOException`` inside a Spark task's failure, Hadoop's
"Mkdirs failed to create" (which names no cause), delta-rs's own messages. :func:`unwritable`
reads the errno or the text and returns the error to raise, or None for anything else.

Nothing half-written is committed by a failed write: a Delta commit is one atomic file (written
aside, then renamed or conditionally created), so the data files a failed stage left are
unreferenced and the next run writes its own (``VACUUM`` removes the leftovers).
"""

from __future__ import annotations

import errno
import getpass
import os
import re
import shutil
from pathlib import Path

from pipelines.errors import LakehouseUnwritable

__all__ = ["unwritable"]

_FULL = {errno.ENOSPC: "No space left on device", errno.EDQUOT: "Disk quota exceeded"}
_REFUSED = {
    errno.EACCES: "Permission denied",
    errno.EPERM: "Operation not permitted",
    errno.EROFS: "Read-only file system",
}
_TEXT = re.compile(
    r"(?P<full>No space left on device|Disk quota exceeded)"
    r"|(?P<refused>Permission denied|Operation not permitted|Read-only file system|AccessDeniedException)"
)
# Hadoop's and Delta's "could not create" names no cause (a mkdirs that returned false): the
# directory is then asked directly (_probe)
_COULD_NOT_CREATE = re.compile(r"Mkdirs failed to create|DELTA_CANNOT_CREATE_LOG_PATH|Cannot create file:")
# a local path or file: URI the message names, to say where (the first one that is under the root)
_PATH = re.compile(r"(?:file:)?(/[^\s'\",:;)\]]+)")


def unwritable(exc: BaseException, root: str) -> LakehouseUnwritable | None:
    """The error to raise instead of ``exc`` when it says the storage under ``root`` refuses
    writes; None otherwise. Only a local root's (or a mounted volume's) conditions are read:
    an object store's refusals are its own (pipelines/runtime/storage.py)."""
    if isinstance(exc, LakehouseUnwritable) or ("://" in root and not root.startswith("file:")):
        return None
    local = root.removeprefix("file://").removeprefix("file:")
    why = kind = None
    if isinstance(exc, OSError) and exc.errno in _FULL:
        kind, why = "full", _FULL[exc.errno]
    elif isinstance(exc, OSError) and exc.errno in _REFUSED:
        kind, why = "refused", _REFUSED[exc.errno]
    elif m := _TEXT.search(str(exc)):
        kind, why = ("full", m.group("full")) if m.group("full") else ("refused", m.group("refused"))
    elif _COULD_NOT_CREATE.search(str(exc)) and (where := _where(exc, local)):
        probed = _probe(where.removeprefix(" at "))
        if probed is None:
            return None
        kind, why = probed
    else:
        return None
    where = _where(exc, local)
    if kind == "full" and where is None and _nearly_full(local):
        where = f" at {local}"  # the error names no path (delta-rs's do not), the root's disk is full
    if kind == "full":
        disk = "the lakehouse's disk is full" if where else "a disk the run writes to is full"
        return LakehouseUnwritable(
            f"{disk} ({why}{where or ''}): nothing half-written was committed; free space or grow "
            "the volume, then run the job again — it continues where this run stopped"
        )
    if where is None:
        return None  # refused somewhere else (a source file, Spark's scratch): not the lakehouse's to say
    return LakehouseUnwritable(
        f"{local} refuses writes ({why}{where}): give the user running the job "
        f"({getpass.getuser()}) write access to it, or mount it read-write, then run the job again; "
        "nothing half-written was committed"
    )


def _nearly_full(local: str) -> bool:
    """Whether the disk holding ``local`` (or its nearest existing parent) has under 1 MiB free."""
    path = Path(local)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free < 1 << 20
    except OSError:
        return False


def _where(exc: BaseException, local: str) -> str | None:
    """``" at <path>"`` for the first path under the root the error names (None for none)."""
    paths = [exc.filename] if isinstance(exc, OSError) and exc.filename else []
    paths += _PATH.findall(str(exc))
    base = local.rstrip("/") or "/"
    for path in (str(p).rstrip(".") for p in paths):
        if path == base or path.startswith(base + "/"):
            return f" at {path}"
    return None


def _probe(path: str) -> tuple[str, str] | None:
    """Why nothing can be created at ``path``: a byte written beside it, in its nearest existing
    directory, answers with the errno (``("full" | "refused", why)``); None when that works."""
    directory = Path(path)
    while not directory.is_dir() and directory != directory.parent:
        directory = directory.parent
    probe = directory / f".offsets-lakehouse-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"x")  # an empty file takes no space on some file systems (tmpfs)
        finally:
            os.close(fd)
            probe.unlink()
    except OSError as exc:
        if exc.errno in _FULL:
            return "full", _FULL[exc.errno]
        if exc.errno in _REFUSED:
            return "refused", _REFUSED[exc.errno]
    return None
