"""A new user's first run, as `./scripts/setup` makes it: the CLI's `run` of a demo-like job (every
stage, end-offset snapshots the generator wrote beside the log) on a non-terminal.

* What it prints: no Spark WARN line and no start-up notice, one INFO line per stage step
  (`--verbose` brings Spark's warnings and the steps' DEBUG lines back: tests/e2e/test_job_lock.py,
  whose first run is verbose).
* What it builds: gold.current_lag and gold.lag_history equal what the generator's snapshots,
  expected state and event log imply (tests/support/lag.py), and the report's lag panel is drawn,
  in headless Chromium.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from pipelines.generate import generate
from pipelines.generate.end_offsets import FILE, read
from tests.e2e.test_report_browser import rendered
from tests.support.jvm import SHORT_RUN_YAML
from tests.support.lag import expected_lag_history, lag_history_rows

REPO = Path(__file__).resolve().parents[2]
STAGES = ("bronze", "silver", "gold", "quality")
# a log4j line of Spark's ("26/11/28 06:08:49 WARN Utils: ...") and the JVM's own notices
SPARK_WARN = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d WARN |^WARNING: Using incubator modules")
OUR_LINE = re.compile(r"^\S+ \S+ (?P<level>[A-Z]+) offsets_lakehouse: (?P<stage>\w+): ")


def cli(config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli.main", "run", "demo", "-c", str(config), "--json", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=600,
    )


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("first-run")
    logs = base / "logs"
    generate(logs, 3000, seed=1, partitions=4, segment_bytes=64 * 1024)
    config = base / "jobs.yaml"
    # jobs.yaml's demo on a smaller log, with the tiers' small-run Spark settings
    config.write_text(f"""
lakehouse: {{root: {base / "lakehouse"}}}
spark:
  master: local[2]
  conf: {{spark.sql.shuffle.partitions: "4", spark.ui.enabled: "false", {SHORT_RUN_YAML}}}
sources:
  demo:
    kind: segments
    cluster: demo
    paths: [{logs}]
    offsets_partitions: 4
    end_offsets: {{kind: file, paths: [{logs / FILE}]}}
jobs:
  demo: {{sources: [demo], stages: [{", ".join(STAGES)}], quality: {{policy: fail}}}}
""")
    done = cli(config)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"base": base, "logs": logs, "config": config, "run": done, "report": json.loads(done.stdout)}


def test_the_first_run_prints_one_line_per_stage_step_and_no_spark_warning(first) -> None:
    err = first["run"].stderr.splitlines()
    assert not [line for line in err if SPARK_WARN.search(line)], first["run"].stderr[-3000:]
    assert not [line for line in err if "log4j" in line or "setLogLevel" in line], first["run"].stderr[-3000:]
    steps = Counter(s["stage"] for s in first["report"]["stages"])
    assert set(steps) == set(STAGES) and steps["quality"] == 2  # after silver and after gold
    info = Counter(m["stage"] for line in err if (m := OUR_LINE.match(line)) and m["level"] == "INFO")
    assert info == steps, (info, first["run"].stderr[-3000:])
    # what each line says: its stage's outcome and where its time went
    text = first["run"].stderr
    assert re.search(r"INFO offsets_lakehouse: bronze: demo read \d+ rows, inserted \d+, .*; end offsets: ", text)
    assert re.search(r"INFO offsets_lakehouse: gold: .*\(4 partitions recomputed: first run\).* in [\d.]+ s: ", text)


def test_the_demo_has_lag_as_its_snapshots_and_expected_state_imply(spark, first) -> None:
    snapshots = read(first["logs"])
    assert len({s["observed_at"] for s in snapshots}) > 5, "snapshots across the run, not one"
    lakehouse = first["base"] / "lakehouse"
    latest: dict[tuple[str, int], tuple[int, int]] = {}
    for s in snapshots:
        key = (s["topic"], s["partition"])
        latest[key] = max(latest.get(key, (0, 0)), (s["observed_at"], s["end_offset"]))
    expected = json.loads((first["logs"] / "expected-state.json").read_text())
    want = {
        (o["group"], o["topic"], o["partition"]): (o["offset"], latest[(o["topic"], o["partition"])][1])
        for o in expected["offsets"]
    }
    rows = spark.read.format("delta").load(str(lakehouse / "gold" / "current_lag")).collect()
    got = {(r["group_id"], r["topic"], r["partition"]): (r["committed_offset"], r["end_offset"]) for r in rows}
    assert len(rows) == len(got) and got == want
    assert all(r["lag"] == r["end_offset"] - r["committed_offset"] >= 0 for r in rows)

    observations = [(s["topic"], s["partition"], s["end_offset"], s["observed_at"]) for s in snapshots]
    history = spark.read.format("delta").load(str(lakehouse / "gold" / "lag_history")).collect()
    got_history = lag_history_rows(history)
    assert got_history == expected_lag_history(first["logs"], observations)
    assert all(lag >= 0 for _, _, lag in got_history.values() if lag is not None), "an end is never behind a commit"


def test_the_analyst_guides_lag_query_has_a_row_per_group(spark, first) -> None:
    """docs/analyst-guide.md's lag-per-group query on the demo: every live group, every lag known."""
    from pipelines.runner import Context
    from tests.spark.test_analyst_guide import guide_queries

    expected = json.loads((first["logs"] / "expected-state.json").read_text())
    groups = {o["group"] for o in expected["offsets"]}
    Context(first["config"]).tables.register_existing()
    query = guide_queries()["lag-per-group"].replace("${cluster}", "demo")
    rows = spark.sql(query).collect()
    assert {r["group_id"] for r in rows} == groups and len(rows) == len(groups)
    assert all(r["partitions_lag_unknown"] == 0 and r["worst_partition_lag"] is not None for r in rows)


def test_the_reports_lag_panel_is_drawn(spark, first) -> None:
    from pipelines.report import build_report
    from pipelines.runner import Context

    index = Path(build_report(Context(first["config"]), first["base"] / "report"))
    lag = rendered(index)["lag"]
    assert lag["attrs"]["data-state"] == "drawn" and lag["svg"] == 1 and lag["marks"] > 0, lag
    assert not lag["note"].strip()
