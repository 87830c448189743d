"""One Airflow DAG per job of ``jobs.yaml``: a task per stage of the job, in ``STAGES`` order.

Imports Airflow inside :func:`build_dags` only, and never Spark: the scheduler parses the DAG file
every few seconds, so a parse reads ``jobs.yaml`` (pydantic, pyyaml, croniter: all in Airflow's own
environment too) and nothing else of the pipeline.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from pipelines.errors import ConfigError
from pipelines.orchestrate.commands import config_path as default_config
from pipelines.orchestrate.task import run_stage
from pipelines.runtime.config import STAGES, Job, load

__all__ = ["DEFAULT_START", "build_dags", "dag_id", "task_plan"]

# with catchup off, the start date only needs to be in the past
DEFAULT_START = datetime(2026, 1, 1, tzinfo=timezone.utc)
_DAG_ID = re.compile(r"^[A-Za-z0-9_.\-]+$")


def dag_id(job: str) -> str:
    """``offsets_lakehouse.<job>``; Airflow allows letters, digits, ``_``, ``.`` and ``-``."""
    if not _DAG_ID.match(job):
        raise ConfigError(f"jobs.{job}: a job name for Airflow may use only letters, digits, '_', '.' and '-'")
    return f"offsets_lakehouse.{job}"


def task_plan(job: Job) -> list[str]:
    """The job's stages in the order they run: each a task, each downstream of the one before."""
    return [s for s in STAGES if s in job.stages]


def build_dags(config_path: str | Path | None = None) -> dict[str, Any]:
    """A DAG per job of ``config_path`` (default ``$OFFSETS_LAKEHOUSE_CONFIG`` or ``jobs.yaml``), by DAG id."""
    try:  # Airflow 3
        from airflow.providers.standard.operators.python import PythonOperator
        from airflow.sdk import DAG
    except ImportError:  # Airflow 2
        from airflow import DAG
        from airflow.operators.python import PythonOperator

    path = Path(config_path).resolve() if config_path else default_config()
    config = load(path)
    dags: dict[str, Any] = {}
    for name, job in config.jobs.items():
        settings = job.airflow
        start = (
            datetime.combine(settings.start_date, datetime.min.time(), timezone.utc)
            if settings.start_date
            else DEFAULT_START
        )
        timeout = settings.execution_timeout_minutes
        dag = DAG(
            dag_id=dag_id(name),
            description=f"offsets-lakehouse job {name}: {' -> '.join(task_plan(job))} ({path})",
            schedule=job.schedule,
            start_date=start,
            catchup=False,
            max_active_runs=1,
            tags=list(settings.tags),
            default_args={
                "owner": settings.owner,
                "retries": settings.retries,
                "retry_delay": timedelta(minutes=settings.retry_delay_minutes),
                "execution_timeout": timedelta(minutes=timeout) if timeout else None,
            },
            doc_md=f"Runs `offsets-lakehouse run {name} --stage STAGE -c {path}` per stage (docs/airflow.md).",
        )
        previous = None
        for stage in task_plan(job):
            op = PythonOperator(
                task_id=stage,
                python_callable=run_stage,
                op_kwargs={"job": name, "stage": stage, "config": str(path)},
                dag=dag,
            )
            if previous is not None:
                previous >> op
            previous = op
        dags[dag.dag_id] = dag
    return dags
