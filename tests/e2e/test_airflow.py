"""The Airflow DAGs (dags/offsets_lakehouse.py, pipelines/orchestrate/) in real Apache Airflow
(tests/support/airflow.py): the DagBag imports the DAG file without errors, every job's DAG has the
tasks, order, schedule and retries its jobs.yaml says, and a stub CLI shows what each exit code
makes Airflow do. ``dag.test()`` of the demo job with the real CLI, four Spark processes, is in the
long tier (tests/long/test_airflow_demo.py; the issue allows a slower documented tier).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.airflow import CHAIN, airflow, airflow_venv, demo_config

# the CLI's stand-in for the exit-code mapping: job exitN exits N at stage gold, every other stage
# and job exits 0; every call is logged to $STUB_LOG
STUB = """#!/bin/sh
echo "$2 $4" >> "$STUB_LOG"
code=0
case "$2:$4" in
  exit*:gold) code=${2#exit} ;;
esac
if [ "$code" = 2 ]; then echo "error: jobs.yaml: stub configuration error" >&2; fi
if [ "$code" = 3 ]; then
  echo '{"status": "quality_failed", "stages": [{"stage": "quality", "details": [{"failed": ["gold.stub.rule"]}]}]}'
fi
exit $code
"""


@pytest.fixture(scope="module")
def venv() -> Path:
    return airflow_venv()


@pytest.fixture(scope="module")
def bag(venv: Path, tmp_path_factory: pytest.TempPathFactory):
    """What Airflow's DagBag makes of the DAG file over the demo configuration (no DAG run)."""
    tmp = tmp_path_factory.mktemp("airflow-bag")
    config = demo_config(tmp, tmp / "logs")
    probe, _ = airflow(venv, tmp / "airflow", config, "offsets-lakehouse", [])
    return probe


def test_the_dag_file_imports_without_errors(bag) -> None:
    assert bag["import_errors"] == {}
    assert sorted(bag["dags"]) == ["offsets_lakehouse.demo", "offsets_lakehouse.nightly"]


def test_each_job_has_its_stages_in_order_schedule_and_retries(bag) -> None:
    demo, nightly = bag["dags"]["offsets_lakehouse.demo"], bag["dags"]["offsets_lakehouse.nightly"]
    assert {t: v["downstream"] for t, v in demo["tasks"].items()} == CHAIN
    assert demo["schedule"] == "*/15 * * * *" and demo["catchup"] is False and demo["max_active_runs"] == 1
    assert demo["tags"] == ["offsets-lakehouse"]
    for task in demo["tasks"].values():  # the defaults of docs/airflow.md
        assert (task["retries"], task["retry_delay"], task["owner"]) == (2, 300.0, "offsets-lakehouse")
        assert task["operator"] == "PythonOperator"
    # stages listed out of order run in pipeline order; no schedule: triggered by hand
    assert {t: v["downstream"] for t, v in nightly["tasks"].items()} == {"bronze": ["gold"], "gold": []}
    assert nightly["schedule"] is None and nightly["tags"] == ["kafka", "nightly"]
    for task in nightly["tasks"].values():
        assert (task["retries"], task["retry_delay"], task["owner"]) == (0, 60.0, "data-eng")


def test_exit_codes_retry_fail_or_skip(venv: Path, tmp_path: Path) -> None:
    """Exit 1 is retried, 2 and 3 fail at once (3 pointing at the quality report), 4 skips the task
    and the stages after it; the calls the stub logged count the attempts."""
    stub = tmp_path / "stub.sh"
    stub.write_text(STUB)
    stub.chmod(0o755)
    log = tmp_path / "calls.log"
    config = tmp_path / "jobs.yaml"
    jobs = "\n".join(
        f"  exit{n}: {{sources: [s], airflow: {{retries: 2, retry_delay_minutes: 0.01}}}}" for n in (1, 2, 3, 4)
    )
    source = "s: {kind: segments, cluster: c, paths: [x]}"
    config.write_text(f"lakehouse: {{root: {tmp_path}/lh}}\nsources:\n  {source}\njobs:\n{jobs}\n")
    dag_ids = [f"offsets_lakehouse.exit{n}" for n in (1, 2, 3, 4)]
    probe, output = airflow(venv, tmp_path / "airflow", config, str(stub), dag_ids, {"STUB_LOG": str(log)})
    runs = probe["runs"]
    calls = log.read_text().splitlines()

    def attempts(job: str, stage: str) -> int:
        return calls.count(f"{job} {stage}")

    for n in (1, 2, 3):
        tasks = runs[f"offsets_lakehouse.exit{n}"]["tasks"]
        assert tasks == {"bronze": "success", "silver": "success", "gold": "failed", "quality": "upstream_failed"}
        assert runs[f"offsets_lakehouse.exit{n}"]["state"] == "failed"
    assert attempts("exit1", "gold") == 3  # the first try and the two retries
    assert attempts("exit2", "gold") == 1 and attempts("exit3", "gold") == 1
    assert "stub configuration error" in output
    assert "data-quality failure (exit 3, not retried)" in output and "offsets-lakehouse quality report" in output
    assert "gold.stub.rule" in output
    skipped = runs["offsets_lakehouse.exit4"]
    assert skipped["tasks"] == {"bronze": "success", "silver": "success", "gold": "skipped", "quality": "skipped"}
    assert attempts("exit4", "gold") == 1 and attempts("exit4", "quality") == 0
