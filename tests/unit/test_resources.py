"""pipelines/runtime/resources.py: which errors mean the lakehouse's storage refuses writes, and
the one line each becomes (the real conditions: tests/spark/test_resources.py)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from pipelines.errors import LakehouseUnwritable
from pipelines.runtime.resources import unwritable

ROOT = "/data/lake"


def test_a_full_disk_from_python_or_from_a_spark_task() -> None:
    err = unwritable(OSError(errno.ENOSPC, "No space left on device", f"{ROOT}/_locks/j.lock"), ROOT)
    assert isinstance(err, LakehouseUnwritable) and err.exit_code == 6
    assert str(err).startswith(f"the lakehouse's disk is full (No space left on device at {ROOT}/_locks/j.lock): ")
    task = Exception(
        "[TASK_WRITE_FAILED] Task failed while writing rows to file:/data/lake/silver/offset_commits. "
        "SQLSTATE: 58030\nCaused by: java.io.IOException: No space left on device"
    )
    assert "(No space left on device at /data/lake/silver/offset_commits)" in str(unwritable(task, ROOT))
    # Spark's scratch space full: still a full disk, not said to be the lakehouse's
    scratch = unwritable(Exception("file:/tmp/spark-1/blockmgr: No space left on device"), ROOT)
    assert str(scratch).startswith("a disk the run writes to is full (No space left on device)")


def test_a_refusal_is_the_lakehouses_only_where_it_names_a_path_under_the_root() -> None:
    err = unwritable(PermissionError(errno.EACCES, "Permission denied", f"{ROOT}/gold"), ROOT)
    assert str(err).startswith(f"{ROOT} refuses writes (Permission denied at {ROOT}/gold): give the user")
    ro = unwritable(OSError(errno.EROFS, "Read-only file system", f"{ROOT}/silver/x"), ROOT)
    assert "(Read-only file system at /data/lake/silver/x)" in str(ro)
    # a source the job may not read, or a path merely beginning like the root: not the lakehouse's
    assert unwritable(PermissionError(errno.EACCES, "Permission denied", "/kafka/logs/x.log"), ROOT) is None
    assert unwritable(PermissionError(errno.EACCES, "Permission denied", "/data/lakehouse-2/x"), ROOT) is None


def test_other_errors_and_object_store_roots_are_left_alone() -> None:
    assert unwritable(ValueError("bad value"), ROOT) is None
    assert unwritable(OSError(errno.ENOSPC, "No space left on device", "/x"), "s3a://bucket/lake") is None
    already = LakehouseUnwritable("the lakehouse's disk is full (No space left on device)")
    assert unwritable(already, ROOT) is None, "not wrapped twice"


def test_a_could_not_create_without_a_cause_is_asked_of_the_directory(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    (root / "gold").mkdir(parents=True)
    msg = f"[DELTA_CANNOT_CREATE_LOG_PATH] Cannot create file:{root}/gold/t/_delta_log"
    assert unwritable(Exception(msg), str(root)) is None, "the directory takes a file: something else failed"
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only directory: the refusal is shown in tests/spark/test_resources.py")
    (root / "gold").chmod(0o555)
    try:
        err = unwritable(Exception(msg), str(root))
        assert str(err).startswith(f"{root} refuses writes (Permission denied at {root}/gold/t/_delta_log)")
    finally:
        (root / "gold").chmod(0o755)
