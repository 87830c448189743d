"""The Airflow DAGs (dags/offsets_lakehouse.py, pipelines/orchestrate/) in real Apache Airflow.

Airflow is installed from PyPI into a virtualenv of its own (as docs/airflow.md tells users to),
under the project's cache directory: built in a temporary directory and renamed when complete, so
an interrupted install is never reused. Airflow's Python then runs in a subprocess with its home,
sqlite database and dags folder in tmp: the DagBag imports the DAG file without errors, every
job's DAG has the tasks, order, schedule and retries its jobs.yaml says, ``dag.test()`` runs the
real CLI over a generated log until gold equals the generator's expected state, and a stub CLI
shows what each exit code makes Airflow do.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.runtime.jars import cache_root

AIRFLOW_VERSION = "3.3.2"
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PY = f"py{sys.version_info.major}{sys.version_info.minor}"

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
    constraints = HERE / f"airflow-constraints-{PY}.txt"
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


@pytest.fixture(scope="module")
def venv() -> Path:
    return airflow_venv()


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


CHAIN = {"bronze": ["silver"], "silver": ["gold"], "gold": ["quality"], "quality": []}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("airflow-data") / "logs"
    cmd = [sys.executable, "-m", "pipelines.cli.main", "generate", "--records", "3000", "--seed", "13"]
    subprocess.run([*cmd, "--partitions", "4", "--out", str(out)], check=True, cwd=REPO, capture_output=True)
    return out


@pytest.fixture(scope="module")
def real_run(venv: Path, generated: Path, tmp_path_factory: pytest.TempPathFactory):
    """The demo job's DAG run by dag.test() with the real CLI (this checkout, the project's Python)."""
    tmp = tmp_path_factory.mktemp("airflow-real")
    config = tmp / "jobs.yaml"
    config.write_text(f"""
lakehouse: {{root: {tmp / "lakehouse"}}}
spark:
  master: local[2]
  conf: {{spark.sql.shuffle.partitions: "4", spark.ui.enabled: "false"}}
sources:
  demo: {{kind: segments, cluster: demo, paths: [{generated}], offsets_partitions: 4}}
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
    cli = shlex.join(["env", f"PYTHONPATH={REPO}", sys.executable, "-m", "pipelines.cli.main"])
    start = time.monotonic()
    probe, output = airflow(venv, tmp / "airflow", config, cli, ["offsets_lakehouse.demo"])
    print(f"dag.test() of the demo job: {time.monotonic() - start:.0f} s", file=sys.stderr)
    return probe, output, config


def test_the_dag_file_imports_without_errors(real_run) -> None:
    probe, _, _ = real_run
    assert probe["import_errors"] == {}
    assert sorted(probe["dags"]) == ["offsets_lakehouse.demo", "offsets_lakehouse.nightly"]


def test_each_job_has_its_stages_in_order_schedule_and_retries(real_run) -> None:
    probe, _, _ = real_run
    demo, nightly = probe["dags"]["offsets_lakehouse.demo"], probe["dags"]["offsets_lakehouse.nightly"]
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


def test_dag_test_runs_the_demo_job_into_gold(real_run, generated: Path) -> None:
    probe, output, config = real_run
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
