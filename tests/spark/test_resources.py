"""Resources (docs/operations.md, "A full disk, or a root that refuses writes"): a lakehouse whose
disk fills up mid-run, whose root refuses writes, whose silver directory is a read-only mount.
Each ends with one error (``LakehouseUnwritable``, exit code 6 through the CLI) that says what to
do, no commit that references a file that is not there, and — with space or access back — a next
run whose tables equal those of a run that was never interrupted.

The disk is a real tmpfs mount of a size that cannot hold the run; the read-only directory a real
read-only bind mount (a refusal even root gets); the refused root real permission bits, the CLI
run without the capability that lets root ignore them. Mounting needs root: without it those two
tests are skipped (the CLI test runs as any user)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import deltalake
import pytest

from pipelines.errors import LakehouseUnwritable
from pipelines.generate import generate
from tests.e2e.fault_cases import assert_same, contents
from tests.e2e.jobrun import REPO, jobs_file, run_here

pytestmark = pytest.mark.spark

STAGES = ["bronze", "silver", "gold"]
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="mounting a tmpfs or a read-only bind mount needs root")


@pytest.fixture(scope="module")
def reference(spark, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The generated log and the tables of one uninterrupted run over it."""
    base = tmp_path_factory.mktemp("resources")
    logs = generate(base / "logs", 2000, seed=9, partitions=3, segment_bytes=16 * 1024).out
    run_here(jobs_file(base, logs, STAGES))
    lakehouse = base / "lakehouse"
    return {"logs": logs, "lakehouse": lakehouse, "rows": contents(lakehouse), "bytes": _disk_bytes(lakehouse)}


def _disk_bytes(path: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[list[Path]]:
    """Mount points to unmount after the test, whatever happened."""
    points: list[Path] = []
    yield points
    for point in reversed(points):
        subprocess.run(["umount", "-l", str(point)], check=False, capture_output=True)


def assert_no_commit_without_its_files(root: Path) -> None:
    """Every table's log is whole JSON, and every file its commits add is on disk: a failed write
    left at most files no commit references (which VACUUM removes), never a commit of missing data."""
    # a _delta_log without a commit is a table whose creation failed: nothing to read, nothing lost
    logs = [p for p in root.rglob("_delta_log") if p.is_dir() and list(p.glob("*.json"))]
    assert logs, "the run committed something before it failed"
    for log in logs:
        table = log.parent
        added = set()
        for commit in sorted(log.glob("*.json")):
            for line in commit.read_text().splitlines():
                action = json.loads(line)  # a torn commit would not parse
                if "add" in action:
                    added.add(action["add"]["path"])
                if "remove" in action:
                    added.discard(action["remove"]["path"])
        missing = [p for p in added if not (table / p).exists()]
        assert not missing, f"{table}: commits reference missing files {missing[:3]}"
        deltalake.DeltaTable(str(table)).to_pyarrow_table()  # and the table reads


@needs_root
def test_a_full_disk_stops_the_run_cleanly_and_the_next_run_completes_it(
    spark, reference: dict, tmp_path: Path, mounted: list[Path]
) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    # half of what the run writes: it fills up mid-run, after the first commits
    size = reference["bytes"] // 2 // 4096 * 4096
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk))
    mounted.append(disk)
    config = jobs_file(tmp_path, reference["logs"], STAGES, root=disk / "lakehouse")
    with pytest.raises(LakehouseUnwritable) as failed:
        run_here(config)
    message = str(failed.value)
    assert message.startswith("the lakehouse's disk is full (No space left on device at " + str(disk)), message
    assert "run the job again" in message and "\n" not in message
    assert_no_commit_without_its_files(disk / "lakehouse")

    _mount("-o", "remount,size=256m", str(disk))  # space back
    run_here(config)
    assert_same(contents(disk / "lakehouse"), reference["rows"])


@needs_root
def test_a_read_only_silver_stops_the_run_after_bronze_and_the_next_run_completes_it(
    spark, reference: dict, tmp_path: Path, mounted: list[Path]
) -> None:
    root = tmp_path / "lakehouse"
    silver = root / "silver"
    silver.mkdir(parents=True)
    _mount("--bind", str(silver), str(silver))
    mounted.append(silver)
    _mount("-o", "remount,bind,ro", str(silver))  # read-only for root too
    config = jobs_file(tmp_path, reference["logs"], STAGES, root=root)
    with pytest.raises(LakehouseUnwritable) as failed:
        run_here(config)
    message = str(failed.value)
    assert message.startswith(f"{root} refuses writes (") and f" at {silver}" in message, message
    assert "write access" in message
    assert deltalake.DeltaTable(str(root / "bronze" / "offsets_records")).to_pyarrow_table().num_rows > 0
    assert not list(silver.iterdir()), "nothing written to silver"
    assert_no_commit_without_its_files(root)

    subprocess.run(["umount", str(silver)], check=True)  # access back
    mounted.clear()
    run_here(config)
    assert_same(contents(root), reference["rows"])


def test_a_root_that_refuses_writes_is_one_line_and_exit_code_6(reference: dict, tmp_path: Path) -> None:
    """Through the CLI, on a lakehouse whose files and directories are read-only: the run ends
    before Spark starts (the job lock cannot be written), with one line, and changes nothing."""
    root = tmp_path / "lakehouse"
    shutil.copytree(reference["lakehouse"], root)
    config = jobs_file(tmp_path, reference["logs"], STAGES, root=root)
    before = contents(root)
    subprocess.run(["chmod", "-R", "a-w", str(root)], check=True)
    # root ignores permission bits through CAP_DAC_OVERRIDE: the run goes without it, as a service user would
    drop = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"] if ROOT else []
    try:
        done = subprocess.run(
            [*drop, sys.executable, "-m", "pipelines.cli.main", "run", "j", "-c", str(config)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(root)], check=True)
    assert done.returncode == 6, done.stderr
    assert done.stderr.splitlines() == [
        f"error: {root / '_locks'} refuses writes (Permission denied at {root / '_locks' / 'j.lock'}): give the "
        f"user running the job ({os.environ.get('USER') or 'root'}) write access to it, or mount it read-write, "
        "then run the job again; nothing half-written was committed"
    ], done.stderr
    assert done.stdout == ""
    assert_same(contents(root), before)
