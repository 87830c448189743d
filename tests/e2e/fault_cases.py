"""What the fault-point modules (tests/e2e/test_fault_points_*.py) share: the generated log, the
lakehouse after a first run that every killed run starts from (the template), the same
incremental run uninterrupted and its rows, the killed runs themselves and how tables are
compared.

The template and the uninterrupted run are built once per test run, by whichever xdist worker
asks first (tests/support/build_once.py, fixtures in tests/e2e/conftest.py); after that they are
only copied or read, so the modules on both workers share them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import deltalake
import pytest

from pipelines.generate import generate
from pipelines.runtime import faults
from tests.e2e.jobrun import jobs_file, run, run_here

STAGES = ["bronze", "silver", "gold"]
# columns that record which run wrote a row, or when (wall clock); everything else is compared
RUN_COLUMNS = {"run_id", "updated_run_id", "ingested_at", "detected_at", "logged_at", "in_flight_run", "recomputed"}
# the logs of runs, not data: bronze.runs (stages), silver.progress (watermarks per run)
RUN_LOGS = {("bronze", "runs"), ("silver", "progress")}
REDECODE_POINT = "silver.redecode_before_quarantine"  # hit by `redecode`, not by `run`
# killed runs of one module running at once, beside the module's own runs in the test process:
# their JVMs fill the time this process waits on Spark's scheduler and on Delta commits
BACKGROUND_RUNS = 2


def run_points(*layers: str) -> list[str]:
    """The points of ``run`` in the given layers."""
    return sorted(p for p in faults.POINTS if p != REDECODE_POINT and p.split(".")[0] in layers)


# the two modules' shares (test_fault_points_bronze_gold.py checks that they cover every point)
BRONZE_GOLD_POINTS = run_points("bronze", "gold")
SILVER_POINTS = run_points("silver")


@dataclass(frozen=True)
class Template:
    """The generated log (``full``), its first segment per partition (``early``) and the
    lakehouse after a first run of the job on ``early`` (``lakehouse``)."""

    base: Path

    @property
    def full(self) -> Path:
        return self.base / "logs"

    @property
    def early(self) -> Path:
        return self.base / "early"

    @property
    def lakehouse(self) -> Path:
        return self.base / "lakehouse"


def build_template(base: Path) -> None:
    template = Template(base)
    generate(template.full, 3000, seed=5, partitions=3, segment_bytes=16 * 1024)
    for part in template.full.glob("__consumer_offsets-*"):
        (template.early / part.name).mkdir(parents=True)
        first = sorted(part.glob("*.log"))[0]
        shutil.copy(first, template.early / part.name / first.name)
    run_here(jobs_file(base, template.early, STAGES))


def start_from(template: Template, tmp_path: Path) -> Path:
    """A copy of the template lakehouse in ``tmp_path`` and the job over the full log."""
    shutil.copytree(template.lakehouse, tmp_path / "lakehouse")
    return jobs_file(tmp_path, template.full, STAGES)


def contents(lakehouse: Path) -> dict[str, list[str]]:
    """Every row of every bronze, silver and gold table, without run ids and run times. Read with
    delta-rs: a Spark scan per table would cost more than the runs under test."""
    out = {}
    for layer in ("bronze", "silver", "gold"):
        for table in sorted(p for p in (lakehouse / layer).iterdir() if (p / "_delta_log").is_dir()):
            if (layer, table.name) in RUN_LOGS:
                continue
            data = deltalake.DeltaTable(str(table)).to_pyarrow_table()
            data = data.drop_columns([c for c in data.column_names if c in RUN_COLUMNS])
            out[f"{layer}.{table.name}"] = sorted(json.dumps(r, default=str, sort_keys=True) for r in data.to_pylist())
    return out


@dataclass(frozen=True)
class Uninterrupted:
    """The incremental run from the template, not killed: its lakehouse and its rows."""

    base: Path

    @property
    def lakehouse(self) -> Path:
        return self.base / "lakehouse"

    @cached_property
    def rows(self) -> dict[str, list[str]]:
        return json.loads((self.base / "rows.json").read_text())


def build_uninterrupted(base: Path, template: Template) -> None:
    run_here(start_from(template, base))
    rows = contents(base / "lakehouse")
    # the comparison covers every layer, and the run read the whole log
    assert {"bronze.offsets_records", "silver.offset_commits", "gold.current_offsets", "gold.offset_history"} <= set(
        rows
    )
    exp = json.loads((template.full / "expected-state.json").read_text())
    live = {
        (r["group_id"], r["topic"], r["partition"], r["committed_offset"])
        for r in map(json.loads, rows["gold.current_offsets"])
        if not r["deleted"]
    }
    assert live == {(o["group"], o["topic"], o["partition"], o["offset"]) for o in exp["offsets"]}
    (base / "rows.json").write_text(json.dumps(rows))


def assert_same(actual: dict[str, list[str]], expected: dict[str, list[str]]) -> None:
    # an empty table and one not created yet hold the same: no rows
    actual, expected = ({t: r for t, r in d.items() if r} for d in (actual, expected))
    assert sorted(actual) == sorted(expected)
    differ = {t: (len(actual[t]), len(expected[t])) for t in expected if actual[t] != expected[t]}
    assert not differ, f"tables that differ from an uninterrupted run (rows killed+re-run, clean): {differ}"


@contextmanager
def killed_runs(
    points: list[str], template: Template, factory: pytest.TempPathFactory
) -> Iterator[dict[str, tuple[Path, Future[int]]]]:
    """Each point's run, in its own copy of the template, dying at its point: started in the
    background at once (``BACKGROUND_RUNS`` at a time), so that their JVMs overlap this process's
    own runs (the re-runs) instead of waiting for them. Point -> (its jobs.yaml, its exit code)."""
    pool = ThreadPoolExecutor(BACKGROUND_RUNS)
    runs = {}
    for point in points:
        config = start_from(template, factory.mktemp(point.replace(".", "-")))
        extra = ["--full-refresh"] if point.startswith("silver.refresh") else []
        runs[point] = (config, pool.submit(run, config, point, None, 0.0, *extra))
    try:
        yield runs
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def assert_rerun_completes_it(point: str, config: Path, dead: Future[int], expected: dict[str, list[str]]) -> None:
    """The run killed at ``point`` died there; the job re-run here leaves every table as the
    uninterrupted run did; after a gold point it recomputed the partitions marked in flight."""
    assert dead.result(timeout=1200) == faults.EXIT_CODE, f"the run did not reach {point}"
    run_here(config)
    lakehouse = config.parent / "lakehouse"
    assert_same(contents(lakehouse), expected)
    if point.startswith("gold."):
        # the dead run had marked its partitions in flight: the re-run recomputed them from the start
        progress = deltalake.DeltaTable(str(lakehouse / "gold" / "partition_progress")).to_pyarrow_table()
        progress = progress.to_pylist()
        assert progress and all(p["in_flight_run"] is None and p["recomputed"] for p in progress)
