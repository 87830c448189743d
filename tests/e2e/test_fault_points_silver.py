"""Every fault point of silver's ``run`` (pipelines/runtime/faults.py), hit by a real
``offsets-lakehouse`` process; bronze's, gold's and ``redecode``'s are in
test_fault_points_bronze_gold.py (two modules, so that both xdist workers share the points).

Each case starts from the same lakehouse (a first run of the job on the first segment of each
partition), lets a separate ``offsets-lakehouse run j`` process (its own JVM) die at one named point
of the next, incremental run (``os._exit``: nothing after the point happens, like a kill), re-runs
the job in this process and requires EVERY table of bronze, silver and gold to hold what an
uninterrupted run gives -- not only ``current_offsets``. Only the columns that name the run or the
wall-clock time of the run that wrote a row are left out of the comparison.
``silver.refresh_after_first_table`` dies in a ``run --full-refresh``. The template and the
uninterrupted run are shared with the other module (tests/e2e/fault_cases.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from tests.e2e.fault_cases import SILVER_POINTS, Template, Uninterrupted, assert_rerun_completes_it, killed_runs

POINTS = SILVER_POINTS


@pytest.fixture(scope="module")
def dead_runs(
    fault_template: Template, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, tuple[Path, Future[int]]]]:
    with killed_runs(POINTS, fault_template, tmp_path_factory) as runs:
        yield runs


@pytest.mark.parametrize("point", POINTS)
def test_killed_at_point_then_rerun(spark, dead_runs, uninterrupted: Uninterrupted, point: str) -> None:
    config, dead = dead_runs[point]
    assert_rerun_completes_it(point, config, dead, uninterrupted.rows)
