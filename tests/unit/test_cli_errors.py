"""CLI errors that need no JVM: the real ``offsets-lakehouse`` process, one line, documented exit codes.

A process, not click's CliRunner: the runner catches uncaught exceptions itself, so "no
traceback on the terminal" can only be checked on a real process's stderr.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.cli.main import error_message

CLI = [sys.executable, "-m", "pipelines.cli.main"]
EXIT_CONFIG = 2  # docs/cli.md

GOOD = """\
lakehouse:
  root: lakehouse
sources:
  files:
    kind: segments
    cluster: c1
    paths: [logs]
    split_bytes: 65536
jobs:
  nightly:
    sources: [files]
    stages: [bronze]
    schedule: "0 3 * * *"
"""


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda t: t.replace("split_bytes: 65536", "split_bytes: 12"), "split_bytes"),
        (lambda t: t.replace("split_bytes: 65536", "split_bytes: lots"), "split_bytes"),
        (lambda t: t.replace("cluster: c1", "cluster: c1\n    colour: blue"), "colour"),
        (lambda t: t.replace('"0 3 * * *"', '"at three"'), "schedule"),
        (lambda t: t.replace("sources: [files]", "sources: [files, nope]"), "nope"),
        (lambda t: t.replace("  root: lakehouse", "  bronze_schema: b"), "lakehouse.root"),
    ],
)
def test_invalid_field_is_one_line_naming_it(tmp_path: Path, edit, field: str) -> None:
    (tmp_path / "jobs.yaml").write_text(edit(GOOD))
    proc = cli("run", "nightly", cwd=tmp_path)
    assert proc.returncode == EXIT_CONFIG, proc.stderr
    lines = error_lines(proc)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: jobs.yaml: ") and field in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout


def test_two_invalid_fields_one_line_each(tmp_path: Path) -> None:
    text = GOOD.replace("split_bytes: 65536", "split_bytes: 12").replace('"0 3 * * *"', '"at three"')
    (tmp_path / "jobs.yaml").write_text(text)
    proc = cli("run", "nightly", cwd=tmp_path)
    assert proc.returncode == EXIT_CONFIG
    lines = error_lines(proc)
    assert len(lines) == 2 and "split_bytes" in lines[0] and "schedule" in lines[1], proc.stderr
    assert "Traceback" not in proc.stderr


def test_yaml_syntax_error(tmp_path: Path) -> None:
    (tmp_path / "jobs.yaml").write_text("lakehouse: [unclosed\n")
    proc = cli("run", "nightly", cwd=tmp_path)
    assert proc.returncode == EXIT_CONFIG
    assert "Traceback" not in proc.stderr
    assert error_lines(proc)[0].startswith("error: jobs.yaml: not valid YAML")


@pytest.mark.parametrize("command", [["run", "nightly"], ["status"], ["sql", "SELECT 1"], ["report"]])
def test_missing_jobs_yaml(tmp_path: Path, command: list[str]) -> None:
    proc = cli(*command, "--config", "absent.yaml", cwd=tmp_path)
    assert proc.returncode == EXIT_CONFIG
    assert error_lines(proc) == ["error: absent.yaml: no such file"]
    assert "Traceback" not in proc.stdout


def test_missing_default_jobs_yaml(tmp_path: Path) -> None:
    proc = cli("run", "nightly", cwd=tmp_path)  # ./jobs.yaml
    assert proc.returncode == EXIT_CONFIG
    assert error_lines(proc) == ["error: jobs.yaml: no such file"]


def test_unknown_job(tmp_path: Path) -> None:
    """Also the control for the invalid-field cases: unedited, the file passes validation."""
    (tmp_path / "jobs.yaml").write_text(GOOD)
    proc = cli("run", "weekly", cwd=tmp_path)
    assert proc.returncode == EXIT_CONFIG
    (line,) = error_lines(proc)
    assert "weekly" in line and "nightly" in line  # names the job asked for and the known ones
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.parametrize(
    "case",
    ["missing-config", "invalid-field", "unknown-job"],
)
def test_verbose_shows_the_traceback(tmp_path: Path, case: str) -> None:
    if case != "missing-config":
        text = GOOD.replace("split_bytes: 65536", "split_bytes: 12") if case == "invalid-field" else GOOD
        (tmp_path / "jobs.yaml").write_text(text)
    job = "weekly" if case == "unknown-job" else "nightly"
    quiet = cli("run", job, cwd=tmp_path)
    loud = cli("run", job, "--verbose", cwd=tmp_path)
    assert quiet.returncode == loud.returncode == EXIT_CONFIG
    assert "Traceback" not in quiet.stderr
    assert "Traceback (most recent call last):" in loud.stderr
    # the same one-line message closes the verbose output
    assert error_lines(loud)[-1] == error_lines(quiet)[-1]


@pytest.mark.parametrize(
    ("said", "host"),
    [
        (  # S3A, through py4j
            "An error occurred while calling o1.save.\n: java.net.ConnectException: getFileStatus on "
            "s3a://lh/bronze/offsets_records/_delta_log: software.amazon.awssdk.core.exception.SdkClientException: "
            "Unable to execute HTTP request: Connect to 127.0.0.1:54087 [/127.0.0.1] failed: Connection refused",
            "127.0.0.1:54087",
        ),
        (  # delta-rs (object_store), with its colours
            "Generic S3 error\n  \x1b[31m↳\x1b[0m Error performing PUT http://store:9000/lh/_delta_log/1.json - "
            "HTTP error\n error sending request\n client error (Connect)\n tcp connect error: Connection refused",
            "store:9000",
        ),
    ],
)
def test_an_unreachable_store_is_one_line_naming_it(said: str, host: str) -> None:
    line = error_message(RuntimeError(said))
    assert line.startswith(f"the object store at {host} could not be reached: Connection refused")
    assert "\n" not in line and "\x1b" not in line and "run the job again when the store answers" in line
