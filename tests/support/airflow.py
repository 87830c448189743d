"""Real Apache Airflow for the tests (tests/e2e/test_airflow.py, tests/long/test_airflow_demo.py).

Airflow is installed from PyPI into a virtualenv of its own (as docs/airflow.md tells users to),
under the project's cache directory: built in a temporary directory and renamed when complete, so
an interrupted install is never reused. Airflow's Python then runs in a subprocess with its home,
sqlite database and dags folder in tmp (:func:`airflow`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.runtime.jars import cache_root
from tests.support.jvm import SHORT_RUN_YAML

AIRFLOW_VERSION = "3.3.2"
REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS_DIR = REPO / "tests" / "e2e"  # airflow-constraints-<python>.txt
PY = f"py{sys.version_info.major}{sys.version_info.minor}"
# the DAGs' stages, each task pointing at the next
CHAIN = {"bronze": ["silver"], "silver": ["gold"], "gold": ["quality"], "quality": []}

# runs inside Airflow's virtualenv: the DagBag over the dags folder, each DAG's shape, and a
# dag.test() of each DAG named on the command line; one JSON line on stdout
PROBE = r"""
import json, os, sys
try:
    from airflow.dag_processing.dagbag import DagBag
except ImportError:
    from airflow.models.dagbag import DagBag

def value(state):
    return getattr(state, "value", state)

bag = DagBag(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
out = {"import_errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": {}, "runs": {}}
for dag_id in bag.dag_ids:
    dag = bag.get_dag(dag_id)
    out["dags"][dag_id] = {
        "schedule": getattr(dag, "schedule", None),
        "catchup": dag.catchup,
        "max_active_runs": dag.max_active_runs,
        "tags": sorted(dag.tags),
        "tasks": {
            t.task_id: {
                "downstream": sorted(t.downstream_task_ids),
                "retries": t.retries,
                "retry_delay": t.retry_delay.total_seconds(),
                "owner": t.owner,
                "operator": type(t).__name__,
            }
            for t in dag.tasks
        },
    }
for dag_id in sys.argv[1:]:
    run = bag.get_dag(dag_id).test()
    out["runs"][dag_id] = {
        "state": value(run.state),
        "tasks": {ti.task_id: value(ti.state) for ti in run.get_task_instances()},
    }
print("PROBE " + json.dumps(out, default=str))
"""


def airflow_venv() -> Path:
    """Airflow's own virtualenv in the cache, installed on first use (atomically: built under a
    temporary name, renamed when complete). Used as ``python -m airflow``: a renamed virtualenv's
    console scripts keep the old path in their first line, its interpreter does not."""
    target = cache_root() / f"airflow-{AIRFLOW_VERSION}-{PY}"
    if (target / ".complete").exists():
        return target
    staging = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(staging)], check=True)
    cmd = [str(staging / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    constraints = CONSTRAINTS_DIR / f"airflow-constraints-{PY}.txt"
    if constraints.exists():  # every package pinned, as Airflow's own constraints files do
        cmd += ["-c", str(constraints)]
    proc = subprocess.run([*cmd, f"apache-airflow=={AIRFLOW_VERSION}"], capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        pytest.fail(f"pip could not install apache-airflow=={AIRFLOW_VERSION}:\n{(proc.stdout + proc.stderr)[-3000:]}")
    seconds = time.monotonic() - start
    (staging / ".complete").write_text(f"installed in {seconds:.0f} s\n")
    try:
        staging.rename(target)
    except OSError:  # another process completed it first
        shutil.rmtree(staging, ignore_errors=True)
    print(f"apache-airflow {AIRFLOW_VERSION} installed in {seconds:.0f} s", file=sys.stderr)
    return target


def airflow(venv: Path, home: Path, config: Path, cli: str, runs: list[str], extra_env: dict[str, str] | None = None):
    """Migrate a fresh sqlite database in ``home``, copy the DAG file into its dags folder and run
    the probe there; returns the probe's JSON and Airflow's whole output."""
    dags = home / "dags"
    dags.mkdir(parents=True)
    shutil.copy(REPO / "dags" / "offsets_lakehouse.py", dags)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "OFFSETS_FAULT")}
    env = {k: v for k, v in env.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        OFFSETS_LAKEHOUSE_HOME=str(REPO),  # the DAG file puts the checkout on sys.path
        OFFSETS_LAKEHOUSE_CONFIG=str(config),
        OFFSETS_LAKEHOUSE_BIN=cli,
        **(extra_env or {}),
    )
    python = str(venv / "bin" / "python")
    migrate = subprocess.run([python, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True)
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    (home / "probe.py").write_text(PROBE)
    log = home / "airflow-output.log"  # Airflow's and the tasks' logs, also while it runs
    with open(log, "w") as out:
        proc = subprocess.Popen([python, str(home / "probe.py"), *runs], env=env, cwd=home, stdout=out, stderr=out)
        try:
            code = proc.wait(timeout=1200)
        except subprocess.TimeoutExpired:
            proc.terminate()  # SIGTERM: Airflow ends the running task, which ends the CLI's process group
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            pytest.fail(f"Airflow did not finish in 1200 s; its log {log} ends:\n{log.read_text()[-5000:]}")
    output = log.read_text()
    lines = [line for line in output.splitlines() if line.startswith("PROBE ")]
    assert code == 0 and lines, output[-5000:]
    return json.loads(lines[-1].removeprefix("PROBE ")), output


def demo_config(tmp: Path, logs: Path) -> Path:
    """``tmp/jobs.yaml``: the demo job (all four stages, every 15 minutes) over ``logs`` and a
    ``nightly`` job with its stages listed out of order and Airflow settings of its own."""
    config = tmp / "jobs.yaml"
    config.write_text(f"""
lakehouse: {{root: {tmp / "lakehouse"}}}
spark:
  master: local[2]
  conf: {{spark.sql.shuffle.partitions: "4", spark.ui.enabled: "false", {SHORT_RUN_YAML}}}
sources:
  demo: {{kind: segments, cluster: demo, paths: [{logs}], offsets_partitions: 4}}
jobs:
  demo:
    sources: [demo]
    stages: [bronze, silver, gold, quality]
    schedule: "*/15 * * * *"
  nightly:
    sources: [demo]
    stages: [gold, bronze]
    schedule: null
    airflow: {{retries: 0, retry_delay_minutes: 1, owner: data-eng, tags: [kafka, nightly]}}
""")
    return config
