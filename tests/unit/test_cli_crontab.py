"""``offsets-lakehouse crontab``: one cron line per scheduled job of jobs.yaml (docs/operations.md)."""

from __future__ import annotations

import shlex
from pathlib import Path

from click.testing import CliRunner
from croniter import croniter

from pipelines.cli.main import cli

JOBS = """
lakehouse: {root: lh}
sources:
  s: {kind: segments, cluster: c, paths: [/nowhere]}
jobs:
  often: {sources: [s], schedule: "*/5 * * * *"}
  manual: {sources: [s]}
  nightly: {sources: [s], schedule: "30 2 * * 1-5"}
"""


def test_one_line_per_scheduled_job(tmp_path: Path) -> None:
    config = tmp_path / "jobs.yaml"
    config.write_text(JOBS)
    out = CliRunner().invoke(cli, ["crontab", "-c", str(config), "--dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    lines = [line for line in out.stdout.splitlines() if not line.startswith("#")]
    want = {"often": "*/5 * * * *", "nightly": "30 2 * * 1-5"}
    assert len(lines) == len(want)
    for line, (job, schedule) in zip(lines, want.items(), strict=True):
        fields = line.split(" ", 5)
        assert " ".join(fields[:5]) == schedule and croniter.is_valid(schedule)
        words = shlex.split(fields[5])
        assert words[:2] == ["cd", str(tmp_path)]
        run = words.index("run")
        assert words[run + 1] == job and "-c" not in words, "jobs.yaml in --dir is the default"
        assert words[words.index("--log-file") + 1] == f"var/log/{job}.log" and "--json" in words
        assert words[-3:] == [">>", f"var/log/{job}-runs.jsonl", "2>&1"]


def test_another_directory_names_the_config(tmp_path: Path) -> None:
    config = tmp_path / "conf" / "jobs.yaml"
    config.parent.mkdir()
    config.write_text(JOBS)
    out = CliRunner().invoke(cli, ["crontab", "-c", str(config), "--dir", "/opt/ol"])
    lines = [line for line in out.stdout.splitlines() if not line.startswith("#")]
    assert lines and all(f"-c {config}" in line and "cd /opt/ol &&" in line for line in lines)


def test_invalid_jobs_file_is_one_line_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "jobs.yaml"
    config.write_text(JOBS.replace("*/5 * * * *", "every five minutes"))
    out = CliRunner().invoke(cli, ["crontab", "-c", str(config)])
    assert out.exit_code == 2
    assert out.stderr.strip().startswith("error: ") and "jobs.often.schedule" in out.stderr
