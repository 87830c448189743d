"""Files that change under the reader (docs/bronze.md): a broker's ``log.dirs`` changes between
bronze's listing and its read — retention deletes segments, the log cleaner swaps in a compacted
copy (``.cleaned`` → ``.swap``, the old file left as ``.deleted``), the active segment grows, a
segment is truncated after an unclean leader election. Each change is made at the source's hook
point ``bronze.listed_before_read`` (pipelines/runtime/faults.py): after the listing and the plan,
before any byte is read — not by timing luck.

The run completes with what it read consistently and reports each changed file (a
``file_changed`` read issue with its reason); the next run leaves bronze exactly as the same
history does with the changes made before the listing (every file stable while read)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from bench.common import split_log
from pipelines.bronze.ingest import ingest_segments
from pipelines.bronze.segments_source import FILE_CHANGED
from pipelines.codec.errors import Reason
from pipelines.codec.reader import Batch, iter_log
from pipelines.codec.writer import encode_batch
from pipelines.generate import generate
from pipelines.runtime import faults
from pipelines.runtime.config import SegmentsSource
from pipelines.runtime.tables import Tables

pytestmark = pytest.mark.spark

RUN_COLUMNS = {"run_id", "ingested_at"}  # when and by which run a row was written, not what it holds
LOG_COLUMNS = ("file_uri", "partition", "size", "consumed_bytes", "last_offset", "fingerprint_position")


def batches(path: Path) -> list[Batch]:
    return [b for b in iter_log(path.read_bytes()) if isinstance(b, Batch)]


def segments(part: Path) -> list[Path]:
    return sorted(part.glob("*.log"))


class Changes:
    """The four changes, each in a partition of its own, chosen on a copy of the log (``log``:
    the whole log, ``read``: the files the first run read); applied to ``source``, a copy of it."""

    def __init__(self, log: Path, read: set[Path]) -> None:
        self.read = {p.relative_to(log) for p in read}
        parts = [p for p in sorted(log.glob("__consumer_offsets-*")) if segments(p)]
        # a partition with a rolled segment the first run has not seen (not the active one)
        rolled = [p for p in parts if any(s not in read for s in segments(p)[:-1])]
        assert len(rolled) >= 3, "the log needs rolled, unread segments in three partitions"
        self.deleted_in, self.swapped_in, self.truncated_in = (p.name for p in rolled[:3])
        grown = next(p for p in parts if p not in rolled[:3] and len(batches(segments(p)[-1])) >= 2)
        self.grown_in = grown.name
        active = segments(grown)[-1]
        cut = batches(active)[-1].position  # the active segment as listed: without its last batch
        data = active.read_bytes()
        active.write_bytes(data[:cut])
        self.appended = data[cut:]
        self.deleted_files: list[str] = []
        self.swapped_file = self.truncated_file = ""

    def unread(self, part: Path) -> Path:
        return next(s for s in segments(part)[:-1] if s.relative_to(part.parent) not in self.read)

    def apply(self, source: Path) -> None:
        self.deleted_files = self.retention(source / self.deleted_in)
        self.swapped_file = self.cleaner(source / self.swapped_in)
        self.truncated_file = self.truncation(source / self.truncated_in)
        with segments(source / self.grown_in)[-1].open("ab") as fh:  # the broker appends to the active segment
            fh.write(self.appended)

    def retention(self, part: Path) -> list[str]:
        """Delete the oldest segments, up to the first one the lakehouse has not read yet."""
        last, deleted = self.unread(part), []
        for seg in segments(part):
            if seg <= last:
                deleted.append(str(seg))
                for f in part.glob(seg.stem + ".*"):
                    f.unlink()
        return deleted

    def cleaner(self, part: Path) -> str:
        """Swap in a compacted copy of an unread rolled segment: the batches whose every key is
        written again later in the partition are gone (fewer records, same base offset)."""
        seg = self.unread(part)
        later = {r.key for s in segments(part) if s > seg for b in batches(s) for r in b.records or ()}
        kept, dropped = [], 0
        for b in batches(seg):
            records = b.records or ()
            if records and not b.is_control and all(r.key in later for r in records):
                dropped += len(records)
            else:
                kept.append(encode_batch(b))
        assert dropped and kept, f"{seg}: nothing to compact"
        cleaned = seg.with_name(seg.name + ".cleaned")
        cleaned.write_bytes(b"".join(kept))
        swap = cleaned.rename(seg.with_name(seg.name + ".swap"))
        seg.rename(seg.with_name(seg.name + ".deleted"))  # left behind for a while, as a broker does
        swap.rename(seg)
        return str(seg)

    def truncation(self, part: Path) -> str:
        """Cut the active segment at a batch boundary among the bytes added since the first run."""
        seg = segments(part)[-1]
        found = batches(seg)
        with seg.open("r+b") as fh:
            fh.truncate(found[len(found) // 2].position)
        return str(seg)


def ingest(spark, root: Path, source: Path, label: str) -> Any:
    src = SegmentsSource(kind="segments", cluster="c1", paths=[str(source)])
    return ingest_segments(spark, Tables(spark, str(root)), "live", src, label, "/")


def bronze(spark, root: Path) -> tuple[set, set]:
    tables = Tables(spark, str(root))
    df = spark.read.format("delta").load(tables.path("bronze", "offsets_records"))
    records = {repr(tuple(r)) for r in df.select(*[c for c in df.columns if c not in RUN_COLUMNS]).collect()}
    assert len(records) == df.count(), "no row twice"
    files = spark.read.format("delta").load(tables.path("bronze", "ingested_files"))
    return records, {tuple(r) for r in files.select(*LOG_COLUMNS).collect()}


@pytest.fixture(scope="module")
def history(spark, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same history on two lakehouses reading one source path: a first run; then the rest of
    the log with the changes made before the second run's listing (``reference``) or at its hook
    point (``changed``); then a third run with nothing changing."""
    work = tmp_path_factory.mktemp("changing")
    logs = generate(work / "logs", 3000, seed=11, partitions=5, segment_bytes=6 * 1024).out
    split = split_log(logs, work / "base", 40)
    source = work / "source"
    shutil.copytree(split.source, source)
    ingest(spark, work / "changed", source, "first")
    shutil.copytree(work / "changed", work / "reference")
    read = {work / "later" / p.relative_to(source) for p in source.rglob("*.log")}
    split.grow()
    shutil.copytree(split.source, work / "later")  # a private copy: the changes must not reach `logs`
    changes = Changes(work / "later", read)
    runs = {}
    for lakehouse in ("reference", "changed"):
        shutil.rmtree(source)
        shutil.copytree(work / "later", source)
        if lakehouse == "reference":
            changes.apply(source)
            second = ingest(spark, work / lakehouse, source, "second")
        else:
            original = faults.point

            def hook(name: str, original=original) -> None:
                if name == "bronze.listed_before_read":
                    changes.apply(source)
                original(name)

            faults.point = hook
            try:
                second = ingest(spark, work / lakehouse, source, "second")
            finally:
                faults.point = original
        third = ingest(spark, work / lakehouse, source, "third")
        runs[lakehouse] = (second, third, bronze(spark, work / lakehouse))
    return {"changes": changes, "runs": runs}


def test_each_change_is_reported_and_nothing_of_a_changed_file_is_kept(history: dict[str, Any]) -> None:
    second, _, _ = history["runs"]["changed"]
    changes = history["changes"]
    changed = {(i["source_uri"], i["reason"]) for i in second.issues if i["kind"] == FILE_CHANGED}
    deleted = {uri for uri, reason in changed if reason == Reason.FILE_DELETED.value}
    # the files retention deleted that the run had planned to read: the unread one, and the
    # active segment of the first run if it had grown since (the older ones were not read again)
    assert changes.deleted_files[-1] in deleted and deleted <= set(changes.deleted_files)
    assert changed - {(uri, Reason.FILE_DELETED.value) for uri in deleted} == {
        (changes.swapped_file, Reason.FILE_REPLACED.value),
        (changes.truncated_file, Reason.FILE_TRUNCATED.value),
    }
    assert any(f"{len(changed)} file(s) changed after they were listed" in n for n in second.notes), second.notes
    assert any("1 file(s) grew while read" in n for n in second.notes), second.notes
    assert second.rows_inserted > 0, "the run completes with the files that did not change"
    reference = history["runs"]["reference"][0]  # its second run
    assert not [i for i in reference.issues if i["kind"] == FILE_CHANGED], "stable files: no change reported"


def test_the_next_run_reaches_the_tables_of_stable_files(history: dict[str, Any]) -> None:
    ref_second, ref_third, reference = history["runs"]["reference"]
    second, third, changed = history["runs"]["changed"]
    assert changed[1] == reference[1], "the ingestion log: every file consumed to the same byte"
    assert changed[0] == reference[0], "bronze: the same records"
    assert third.rows_inserted > 0 and not [i for i in third.issues if i["kind"] == FILE_CHANGED]
    assert ref_third.rows_inserted == 0, "with stable files the second run read everything"
    assert second.rows_inserted + third.rows_inserted == ref_second.rows_inserted
    # the swapped-in copy had no row in the log (changed in its first read): read whole; the grown
    # segment's bytes past its listed size: read as a tail
    assert third.files["new"] >= 1 and third.files["grown"] >= 1, third.files
