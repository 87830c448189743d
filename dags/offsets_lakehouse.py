"""offsets-lakehouse jobs as Apache Airflow DAGs: copy this file into Airflow's dags folder.

One DAG per job of jobs.yaml (``$OFFSETS_LAKEHOUSE_CONFIG``), each task one stage run by the
``offsets-lakehouse`` command (``$OFFSETS_LAKEHOUSE_BIN``). ``$OFFSETS_LAKEHOUSE_HOME``: the
project's checkout, when its ``pipelines`` package is not installed in Airflow's environment.
See docs/airflow.md.
"""

from __future__ import annotations

import os
import sys

_home = os.environ.get("OFFSETS_LAKEHOUSE_HOME")
if _home and _home not in sys.path:
    sys.path.insert(0, _home)

from pipelines.orchestrate.dags import build_dags  # noqa: E402

globals().update(build_dags(os.environ.get("OFFSETS_LAKEHOUSE_CONFIG")))
