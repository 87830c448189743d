"""The pure parts of the Airflow DAGs (no Airflow, no JVM): the command a task runs is one the real
CLI's parser accepts, exit codes map as docs/cli.md defines them, jobs.yaml's ``airflow`` block is
validated, and building the DAGs imports neither Spark nor (before it is called) Airflow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.cli.main import (
    EXIT_CONFIG,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_QUALITY,
    EXIT_REFUSED,
    EXIT_RUNNING,
    EXIT_UNWRITABLE,
    cli,
)
from pipelines.errors import ConfigError, KafkaAccessDenied, LakehouseUnwritable, OffsetsLakehouseError, SourceNotFound
from pipelines.orchestrate.commands import cli_bin, config_path, stage_command, verdict
from pipelines.orchestrate.dags import dag_id, task_plan
from pipelines.runtime.config import load

REPO = Path(__file__).resolve().parents[2]
CONFIG = Path("/etc/lake/jobs.yaml")


@pytest.mark.parametrize("stage", ["bronze", "silver", "gold", "quality"])
def test_the_command_is_one_the_cli_parses(stage: str) -> None:
    cmd = stage_command(["offsets-lakehouse"], "demo", stage, CONFIG)
    assert cmd[1] == "run"
    ctx = cli.commands["run"].make_context("run", cmd[2:])
    assert ctx.params["job"] == "demo" and ctx.params["stage"] == stage
    assert ctx.params["config_path"] == CONFIG and ctx.params["as_json"] and ctx.params["log_format"] == "json"


def test_exit_codes_follow_the_cli() -> None:
    config = Path("jobs.yaml")
    assert verdict(EXIT_OK, "j", "gold", config).action == "ok"
    assert verdict(EXIT_FAILURE, "j", "gold", config).action == "retry"
    assert verdict(OffsetsLakehouseError.exit_code, "j", "gold", config).action == "retry"
    for code in (EXIT_CONFIG, ConfigError.exit_code, SourceNotFound.exit_code):
        v = verdict(code, "j", "gold", config, error="jobs.yaml: jobs.j: no such job")
        assert v.action == "fail" and "not retried" in v.message and "no such job" in v.message
    quality = verdict(EXIT_QUALITY, "j", "quality", config, failed_rules=["gold.current_offsets.x"])
    assert quality.action == "fail" and "offsets-lakehouse quality report -c jobs.yaml" in quality.message
    assert "gold.current_offsets.x" in quality.message
    assert verdict(EXIT_RUNNING, "j", "bronze", config).action == "skip"
    refused = verdict(EXIT_REFUSED, "j", "bronze", config, error="Kafka at b:9094 refused the SCRAM-SHA-512 login")
    assert KafkaAccessDenied.exit_code == EXIT_REFUSED
    assert refused.action == "fail" and "not retried" in refused.message and "SCRAM-SHA-512" in refused.message
    full = verdict(
        EXIT_UNWRITABLE, "j", "silver", config, error="the lakehouse's disk is full (No space left on device)"
    )
    assert LakehouseUnwritable.exit_code == EXIT_UNWRITABLE
    assert full.action == "fail" and "not retried" in full.message and "No space left" in full.message
    # killed by a signal, or anything the CLI does not document: a failure worth retrying
    assert verdict(-9, "j", "gold", config).action == "retry" and "signal 9" in verdict(-9, "j", "gold", config).message
    assert verdict(137, "j", "gold", config).action == "retry"


def test_the_cli_and_config_come_from_the_environment(tmp_path: Path) -> None:
    assert cli_bin({}) == ["offsets-lakehouse"]
    assert cli_bin({"OFFSETS_LAKEHOUSE_BIN": "/opt/lake/.venv/bin/python -m pipelines.cli.main"}) == [
        "/opt/lake/.venv/bin/python",
        "-m",
        "pipelines.cli.main",
    ]
    assert config_path({"OFFSETS_LAKEHOUSE_CONFIG": str(tmp_path / "j.yaml")}) == tmp_path / "j.yaml"
    assert config_path({}).is_absolute()


def write(tmp_path: Path, job: str) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(f"lakehouse: {{root: lh}}\nsources:\n  s: {{kind: segments, cluster: c, paths: [x]}}\njobs:\n{job}")
    return path


def test_the_airflow_block_has_defaults_and_is_validated(tmp_path: Path) -> None:
    job = load(write(tmp_path, "  j: {sources: [s], stages: [quality, bronze, gold]}\n")).jobs["j"]
    assert (job.airflow.retries, job.airflow.retry_delay_minutes, job.airflow.owner) == (2, 5, "offsets-lakehouse")
    assert task_plan(job) == ["bronze", "gold", "quality"]
    custom = "  j: {sources: [s], airflow: {retries: 0, owner: me, tags: [a], start_date: 2025-03-01}}\n"
    settings = load(write(tmp_path, custom)).jobs["j"].airflow
    assert (settings.retries, settings.owner, settings.tags, str(settings.start_date)) == (0, "me", ["a"], "2025-03-01")
    with pytest.raises(ConfigError, match=r"jobs\.j\.airflow\.retries: Input should be greater than or equal to 0"):
        load(write(tmp_path, "  j: {sources: [s], airflow: {retries: -1}}\n"))
    with pytest.raises(ConfigError, match=r"jobs\.j\.airflow\.pool: Extra inputs are not permitted"):
        load(write(tmp_path, "  j: {sources: [s], airflow: {pool: p}}\n"))


def test_dag_ids() -> None:
    assert dag_id("demo") == "offsets_lakehouse.demo"
    with pytest.raises(ConfigError, match=r"jobs\.a b"):
        dag_id("a b")


def test_parsing_the_jobs_imports_neither_spark_nor_airflow() -> None:
    code = (
        "import sys\n"
        "from pipelines.orchestrate.dags import task_plan\n"
        "from pipelines.runtime.config import load\n"
        f"cfg = load({str(REPO / 'jobs.yaml')!r})\n"
        "[task_plan(j) for j in cfg.jobs.values()]\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'delta', 'airflow', 'py4j')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_gold_recomputations_are_one_line_per_reason() -> None:
    from pipelines.runner import recomputed_summary

    entries = [f"demo/{p}: first run" for p in range(50)] + ["demo/7: late data before offset 12", "b/0: first run"]
    assert recomputed_summary(entries) == [
        "51 partitions recomputed: first run",
        "1 partition recomputed: late data before offset 12",
    ]
    assert recomputed_summary([]) == []
