"""Orchestration: Apache Airflow DAGs for the jobs of ``jobs.yaml`` (docs/airflow.md).

:func:`build_dags` makes one DAG per job whose tasks run the ``offsets-lakehouse`` command, one
stage each. Nothing here imports Spark, and Airflow only inside :func:`build_dags` and a task's
run: Airflow usually lives in another virtualenv than the pipeline, its scheduler parses DAG
files every few seconds, and the rest of the project never needs Airflow installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines import lazy_exports

if TYPE_CHECKING:
    from pipelines.orchestrate.commands import Verdict, stage_command, verdict
    from pipelines.orchestrate.dags import build_dags

__all__ = ["Verdict", "build_dags", "stage_command", "verdict"]

__getattr__ = lazy_exports(
    __name__, {"build_dags": "dags", "Verdict": "commands", "stage_command": "commands", "verdict": "commands"}
)
