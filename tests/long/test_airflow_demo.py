"""``dag.test()`` of the demo job's DAG in real Apache Airflow (tests/support/airflow.py) with the
real CLI: one Spark process per task, bronze, silver, gold and quality, over a generated log, until
gold equals the generator's expected state. Long tier (``./scripts/test long``): the DAG's import,
shape and exit-code handling stay in the e2e tier (tests/e2e/test_airflow.py).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.airflow import CHAIN, REPO, airflow, airflow_venv, demo_config


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("airflow-data") / "logs"
    cmd = [sys.executable, "-m", "pipelines.cli.main", "generate", "--records", "3000", "--seed", "13"]
    subprocess.run([*cmd, "--partitions", "4", "--out", str(out)], check=True, cwd=REPO, capture_output=True)
    return out


@pytest.fixture(scope="module")
def real_run(generated: Path, tmp_path_factory: pytest.TempPathFactory):
    """The demo job's DAG run by dag.test() with the real CLI (this checkout, the project's Python)."""
    tmp = tmp_path_factory.mktemp("airflow-real")
    config = demo_config(tmp, generated)
    cli = shlex.join(["env", f"PYTHONPATH={REPO}", sys.executable, "-m", "pipelines.cli.main"])
    start = time.monotonic()
    probe, output = airflow(airflow_venv(), tmp / "airflow", config, cli, ["offsets_lakehouse.demo"])
    print(f"dag.test() of the demo job: {time.monotonic() - start:.0f} s", file=sys.stderr)
    return probe, output, config


def test_dag_test_runs_the_demo_job_into_gold(real_run, generated: Path) -> None:
    probe, output, config = real_run
    assert probe["import_errors"] == {}
    run = probe["runs"]["offsets_lakehouse.demo"]
    assert run["tasks"] == dict.fromkeys(CHAIN, "success"), output[-5000:]
    assert run["state"] == "success"
    # the lakehouse the tasks wrote, read by the project's own reader against the generator's intent
    query = "SELECT group_id, topic, partition, committed_offset FROM gold.current_offsets WHERE NOT deleted"
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli.main", "sql", query, "--json", "-c", str(config)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    gold = {(r["group_id"], r["topic"], r["partition"]): r["committed_offset"] for r in rows}
    expected = json.loads((generated / "expected-state.json").read_text())
    assert gold and gold == {(o["group"], o["topic"], o["partition"]): o["offset"] for o in expected["offsets"]}
