"""``offsets-lakehouse inspect``: census and record dump of ``__consumer_offsets`` segment files.

Pure Python on top of the codec. The ``--json`` document and the ``--records`` lines
are stable contracts (docs/inspect-records.md, docs/cli.md).
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pipelines.codec.errors import DecodeError, Reason
from pipelines.codec.reader import Batch, ReadIssue, Record
from pipelines.codec.records import CONTROL_TYPES, RecordDecoding, decode_control, decode_record
from pipelines.codec.segments import SegmentFile, iter_segment


@dataclass
class FileReport:
    path: str
    partition: int | None
    size: int = 0
    batches: int = 0
    records: int = 0
    control_records: int = 0
    tombstones: int = 0
    undecodable: int = 0
    torn_tail_bytes: int = 0
    corrupt_batches: int = 0
    unreadable_bytes: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    by_type_version: Counter = field(default_factory=Counter)
    issues: list[dict[str, Any]] = field(default_factory=list)
    undecodable_records: list[dict[str, Any]] = field(default_factory=list)

    COUNTERS = (
        "batches",
        "records",
        "control_records",
        "tombstones",
        "undecodable",
        "torn_tail_bytes",
        "corrupt_batches",
        "unreadable_bytes",
    )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"path": self.path, "partition": self.partition, "size": self.size}
        doc.update({name: getattr(self, name) for name in self.COUNTERS})
        doc["first_offset"] = self.first_offset
        doc["last_offset"] = self.last_offset
        doc["by_type_version"] = dict(sorted(self.by_type_version.items(), key=_tv_order))
        doc["issues"] = self.issues
        doc["undecodable_records"] = self.undecodable_records
        return doc


def _tv_order(item: tuple[str, int]) -> tuple[int, int]:
    t, _, v = item[0].partition("/")
    return (
        int(t) if t.lstrip("-").isdigit() else 1 << 16,
        -1 if v == "null" else int(v) if v.lstrip("-").isdigit() else 1 << 16,
    )


def type_version_key(decoding: RecordDecoding) -> str:
    """``"<type>/<value version>"``; tombstones have version ``null``; unknown parts are ``?``."""
    rtype = "?" if decoding.record_type is None else str(decoding.record_type)
    version = "null" if decoding.tombstone else ("?" if decoding.value_version is None else str(decoding.value_version))
    return f"{rtype}/{version}"


def classify_issue(seg: SegmentFile, issue: ReadIssue) -> str:
    """A torn tail is normal only at the end of a partition's last segment."""
    if issue.kind == ReadIssue.TORN_TAIL and not seg.is_last:
        return ReadIssue.CORRUPT
    return issue.kind


def inspect_segment(seg: SegmentFile) -> FileReport:
    report = FileReport(str(seg.path), seg.partition, seg.path.stat().st_size)
    for batch, issue in iter_segment(seg):
        if issue is not None:
            kind = classify_issue(seg, issue)
            report.issues.append(
                {
                    "kind": kind,
                    "position": issue.position,
                    "length": issue.length,
                    "reason": issue.reason.value,
                    "detail": issue.detail,
                }
            )
            if kind == ReadIssue.TORN_TAIL:
                report.torn_tail_bytes += issue.length
            elif kind == ReadIssue.UNREADABLE:
                report.corrupt_batches += 1
                report.unreadable_bytes += issue.length
            else:
                report.corrupt_batches += 1
            continue
        assert batch is not None and batch.records is not None
        report.batches += 1
        for record in batch.records:
            report.records += 1
            if report.first_offset is None:
                report.first_offset = record.offset
            report.last_offset = record.offset
            if batch.is_control:
                report.control_records += 1
                try:
                    decode_control(record.key, record.value)
                except DecodeError as exc:
                    report.undecodable += 1
                    report.undecodable_records.append(
                        _undecodable_entry(record, exc.reason, "key", exc.position, exc.detail)
                    )
                continue
            d = decode_record(record.key, record.value)
            if d.tombstone:
                report.tombstones += 1
            if not d.ok:
                report.undecodable += 1
                report.undecodable_records.append(
                    _undecodable_entry(record, d.reason, d.error_part, d.error_position, d.error_detail)
                )
            report.by_type_version[type_version_key(d)] += 1
    return report


def _undecodable_entry(record: Record, reason: Reason | None, part: str | None, pos: int | None, detail: Any) -> dict:
    return {
        "offset": record.offset,
        "reason": reason.value if reason else None,
        "error_part": part,
        "error_position": pos,
        "error_detail": detail,
    }


def totals(reports: list[FileReport]) -> dict[str, Any]:
    doc: dict[str, Any] = {"files": len(reports)}
    for name in FileReport.COUNTERS:
        doc[name] = sum(getattr(r, name) for r in reports)
    merged: Counter = Counter()
    for r in reports:
        merged.update(r.by_type_version)
    doc["by_type_version"] = dict(sorted(merged.items(), key=_tv_order))
    return doc


# -- records as JSON ----------------------------------------------------------------------------------
def jsonable(value: Any) -> Any:
    """bytes -> base64; tuples (unknown tags) -> lists; dicts/lists recursively."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def record_json(seg: SegmentFile, batch: Batch, record: Record) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "file": str(seg.path),
        "partition": seg.partition,
        "batch_position": batch.position,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestamp_type": batch.timestamp_type,
        "magic": batch.magic,
        "codec": batch.codec_name,
        "transactional": batch.is_transactional,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "control": batch.is_control,
    }
    if batch.is_control:
        doc.update(record_type=None, record_type_name=None, key=None, tombstone=False, value_version=None, value=None)
        try:
            ctype, version, epoch = decode_control(record.key, record.value)
        except DecodeError as exc:
            doc.update(
                status="undecodable",
                reason=exc.reason.value,
                error_part="key",
                error_position=exc.position,
                error_detail=exc.detail,
                raw_key=jsonable(record.key),
                raw_value=jsonable(record.value),
            )
            return doc
        doc.update(
            status="ok",
            control_type=CONTROL_TYPES.get(ctype, "UNKNOWN"),
            control_type_id=ctype,
            control_version=version,
            coordinator_epoch=epoch,
        )
        return doc
    d = decode_record(record.key, record.value)
    doc.update(
        status="ok" if d.ok else "undecodable",
        record_type=d.record_type,
        record_type_name=d.record_type_name,
        key=d.key,
        tombstone=d.tombstone,
        value_version=d.value_version,
        value=jsonable(d.value) if d.value is not None else None,
        layout=d.layout,
    )
    if d.warnings:
        doc["warnings"] = d.warnings
    if not d.ok:
        doc.update(
            reason=d.reason.value if d.reason else None,
            error_part=d.error_part,
            error_position=d.error_position,
            error_detail=d.error_detail,
            raw_key=jsonable(record.key),
            raw_value=jsonable(record.value),
        )
    return doc


def iter_record_json(segments: list[SegmentFile]) -> Iterator[dict[str, Any]]:
    for seg in segments:
        for batch, _ in iter_segment(seg):
            if batch is not None:
                for record in batch.records or ():
                    yield record_json(seg, batch, record)
