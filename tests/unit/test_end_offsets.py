"""End-offset snapshot files (docs/lag.md): both formats, both timestamp forms, and one clear
error per bad line or setting."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from pipelines.bronze.end_offsets import read_files
from pipelines.errors import ConfigError, InputError, SourceNotFound
from pipelines.runtime.config import EndOffsetsFile, load

T0 = datetime(2026, 11, 24, 10, 0, tzinfo=timezone.utc)


def setting(*paths: str, fmt: str | None = None) -> EndOffsetsFile:
    return EndOffsetsFile(kind="file", paths=list(paths), format=fmt)


def test_jsonl_and_csv_give_the_same_observations(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(
        '{"cluster": "east", "topic": "t", "partition": 0, "end_offset": 10, "observed_at": "2026-11-24T10:00:00Z"}\n'
        "\n"
        '{"topic": "t", "partition": 1, "end_offset": 0, "observed_at": 1795514400000}\n'
    )
    (tmp_path / "b.csv").write_text("observed_at,topic,end_offset,partition\n2026-11-24T10:00:00,u,7,3\n")
    rows = read_files(setting("*.jsonl", "b.csv"), "west", str(tmp_path))
    got = [(o.cluster, o.topic, o.partition, o.end_offset, o.observed_at) for o in rows]
    assert got == [
        ("east", "t", 0, 10, T0),
        ("west", "t", 1, 0, T0),  # epoch ms; no cluster: the source's
        ("west", "u", 3, 7, T0),  # CSV columns by header name, a zone-less time read as UTC
    ]
    assert rows[0].source == f"file:{tmp_path}/a.jsonl"


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("x.jsonl", '{"topic": "t", "partition": 0, "end_offset": 1}\n', r"x\.jsonl:1: missing observed_at"),
        ("x.jsonl", '{"topic": "t"}\nnot json\n', r"x\.jsonl:1: missing partition, end_offset, observed_at"),
        ("x.jsonl", "[1]\n", r"x\.jsonl:1: expected a JSON object"),
        (
            "x.jsonl",
            '{"topic": "t", "partition": 0, "end_offset": -1, "observed_at": 1}\n',
            r"x\.jsonl:1: end_offset: negative: -1",
        ),
        ("x.csv", "topic,partition,end_offset\n", r"x\.csv: CSV header lacks observed_at"),
        ("x.csv", "topic,partition,end_offset,observed_at\nt,0,1,yesterday\n", r"x\.csv:2: observed_at: not an ISO"),
        ("x.csv", "topic,partition,end_offset,observed_at\nt,zero,1,1\n", r"x\.csv:2: partition: not an integer"),
    ],
)
def test_a_bad_line_is_one_error_naming_file_and_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(InputError, match=message):
        read_files(setting(name), "c", str(tmp_path))


def test_a_path_matching_nothing_is_a_missing_source(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFound, match=r"end_offsets: no such file: .*/nothing-\*\.csv"):
        read_files(setting("nothing-*.csv"), "c", str(tmp_path))


def _jobs(tmp_path: Path, source: str) -> Path:
    (tmp_path / "jobs.yaml").write_text(f"lakehouse: {{root: lake}}\nsources:\n  s: {source}\njobs: {{}}\n")
    return tmp_path / "jobs.yaml"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "{kind: segments, cluster: c, paths: [x], end_offsets: {kind: admin}}",
            "sources.s.segments: end_offsets: kind admin needs a kafka source",
        ),
        (
            "{kind: dump, format: jsonl, cluster: c, paths: [x], end_offsets: {kind: file, paths: [ends.txt]}}",
            "cannot tell the format of 'ends.txt'",
        ),
        (
            "{kind: kafka, cluster: c, bootstrap_servers: b, end_offsets: {kind: rest}}",
            "does not match any of the expected tags",
        ),
    ],
)
def test_invalid_settings_are_configuration_errors(tmp_path: Path, source: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(_jobs(tmp_path, source))


def test_valid_settings(tmp_path: Path) -> None:
    cfg = load(
        _jobs(
            tmp_path,
            "{kind: kafka, cluster: c, bootstrap_servers: b, end_offsets: {kind: admin}}",
        )
    )
    assert cfg.sources["s"].end_offsets.kind == "admin"
    cfg = load(
        _jobs(
            tmp_path, "{kind: segments, cluster: c, paths: [x], end_offsets: {kind: file, paths: [e.txt], format: csv}}"
        )
    )
    assert cfg.sources["s"].end_offsets.format == "csv"
    assert load(_jobs(tmp_path, "{kind: segments, cluster: c, paths: [x]}")).sources["s"].end_offsets is None
