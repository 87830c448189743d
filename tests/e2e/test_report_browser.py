"""`offsets-lakehouse report` in a real browser: on a lakehouse built from a generated log (the
fault-point tests' uninterrupted one, tests/e2e/fault_cases.py: a first and an incremental run,
shared and read only), the real command (a subprocess) writes the page for one group, and headless Chromium opens it
offline. Every plot is an <svg> with data marks in its `data-plot` section (lag: the placeholder
until gold.lag_history exists), and the numbers shown equal what the generator's event log and
manifest say; a screenshot is kept in test-artifacts/. A second page for all groups is built in
this process (it saves a JVM start) and checked the same way where the numbers do not depend on
which groups are drawn.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from datetime import datetime, timezone
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pipelines.report import LAG_PLACEHOLDER
from pipelines.runtime.tables import load_specs
from tests.e2e.fault_cases import STAGES, Template, Uninterrupted
from tests.e2e.jobrun import jobs_file
from tests.support.browser import browse
from tests.support.generated import Generated

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
PLOTS = ("cadence", "offset-progress", "lag", "rebalances", "coordinator-load")


class ReportPage(HTMLParser):
    """Per data-plot section: its attributes, <svg> count, data marks, table rows and note."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, dict] = {}
        self._current: dict | None = None
        self._in_note = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section" and "data-plot" in a:
            self._current = {"attrs": a, "svg": 0, "marks": 0, "bars": [], "series": {}, "note": ""}
            self.sections[a["data-plot"]] = self._current
        elif self._current is None:
            return
        elif tag == "svg":
            self._current["svg"] += 1
        elif tag == "g" and (a.get("id") or "").startswith(f"mark-{self._current['attrs']['data-plot']}-"):
            self._current["marks"] += 1
        elif tag == "tr" and "data-x" in a:
            self._current["bars"].append((a["data-x"], float(a["data-y"])))
        elif tag == "tr" and "data-series" in a:
            self._current["series"][a["data-series"]] = int(a["data-points"])
        elif tag == "p" and a.get("class") == "note":
            self._in_note = True

    def handle_endtag(self, tag):
        if tag == "section":
            self._current = None
        elif tag == "p":
            self._in_note = False

    def handle_data(self, data):
        if self._in_note and self._current is not None:
            self._current["note"] += data


def day(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).date().isoformat()


def rendered(index: Path) -> dict[str, dict]:
    dom = browse(index.as_uri(), "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = ReportPage()
    page.feed(dom.stdout)
    assert set(page.sections) == set(PLOTS), sorted(page.sections)
    for name, s in page.sections.items():
        if name == "lag":
            continue
        assert s["attrs"]["data-state"] == "drawn" and s["svg"] == 1 and s["marks"] > 0, (name, s)
    lag = page.sections["lag"]
    if "lag_history" not in load_specs()["gold"]:  # no end offsets anywhere: the placeholder
        assert lag["svg"] == 0 and lag["note"].strip() == LAG_PLACEHOLDER
    else:  # a generated log has no end offsets either, unless the lag job adds them
        assert (lag["svg"] == 1 and lag["marks"] > 0) or (lag["svg"] == 0 and lag["note"].strip()), lag
    return page.sections


@pytest.fixture(scope="module")
def lakehouse(
    fault_template: Template, uninterrupted: Uninterrupted, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Generated]:
    """A jobs.yaml over the shared uninterrupted lakehouse, in a directory of this module's own
    (where the pages go), and the generator's account of its log."""
    base = tmp_path_factory.mktemp("report")
    config = jobs_file(base, fault_template.full, STAGES, root=uninterrupted.lakehouse)
    return config, Generated(fault_template.full)


def busiest_plain_group(gen: Generated) -> str:
    """The classic (or Connect) group without transactions with the most timed commits and rebalances."""
    score = Counter(
        e["group"]
        for e in gen.events
        if e["group"].startswith(("classic-", "connect-"))
        and e["group"] not in gen.txn_groups
        and e["event"] in ("commit", "reset", "rebalance", "empty")
        and gen.log_time(e) is not None
    )
    return score.most_common(1)[0][0]


def test_report_for_a_group_shows_its_commits_offsets_and_rebalances(lakehouse) -> None:
    config, gen = lakehouse
    group = busiest_plain_group(gen)
    out = config.parent / "report-group"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.cli.main", "report", "-c", str(config), "--group", group, "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    index = out / "index.html"
    assert f"report: {index}" in done.stdout
    html = index.read_text()
    # offline: nothing to run and nothing to fetch (xmlns URIs are names, not fetched)
    assert not re.search(r"<script|<link|<img|\b(src|href)\s*=\s*[\"']?(https?:)?//", html, re.I)
    sections = rendered(index)

    mine = [e for e in gen.events if e["group"] == group and gen.log_time(e) is not None]
    commits: Counter = Counter()
    for e in mine:
        if e["event"] in ("commit", "reset"):
            commits[day(e["ts"])] += gen.requests(e)  # before magic 2 a message set may be several
    cadence = sections["cadence"]
    assert cadence["attrs"]["data-bucket"] == "day"  # the generated log spans weeks
    assert dict(cadence["bars"]) == {d: float(n) for d, n in commits.items()}
    assert int(cadence["attrs"]["data-total"]) == sum(commits.values())
    assert cadence["marks"] == len(commits)

    rebalances = Counter(day(e["ts"]) for e in mine if e["event"] in ("rebalance", "empty"))
    assert dict(sections["rebalances"]["bars"]) == {d: float(n) for d, n in rebalances.items()}

    # one line per topic partition the group committed with a log time, one point per hour
    hours: dict[str, set] = {}
    for (g, topic, p), seq in gen.key_states().items():
        if g == group:
            timed = {ts // 3_600_000 for ts, _, deleted in seq if ts is not None and not deleted}
            if timed:
                hours[f"{topic}-{p}"] = timed
    progress = sections["offset-progress"]
    assert progress["series"] == {k: len(v) for k, v in hours.items()}
    assert progress["marks"] == len(hours)

    records = {str(p): float(n) for p, n in gen.manifest["records_per_partition"].items() if n}
    assert dict(sections["coordinator-load"]["bars"]) == records

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "activity-report.png"
    shot.unlink(missing_ok=True)
    taken = browse(index.as_uri(), f"--screenshot={shot}", "--window-size=1280,2400")
    assert taken.returncode == 0 and shot.stat().st_size > 10_000, taken.stderr[-2000:]


def test_report_for_all_groups(lakehouse) -> None:
    from pipelines.report import build_report
    from pipelines.runner import Context

    config, gen = lakehouse
    index = Path(build_report(Context(config), config.parent / "report-all"))
    sections = rendered(index)
    timed = [e for e in gen.events if gen.log_time(e) is not None]
    rebalances = Counter(day(e["ts"]) for e in timed if e["event"] in ("rebalance", "empty"))
    assert dict(sections["rebalances"]["bars"]) == {d: float(n) for d, n in rebalances.items()}
    assert int(sections["coordinator-load"]["attrs"]["data-total"]) == gen.manifest["records"]
    drawn = sections["offset-progress"]["attrs"]["data-groups"].split(",")
    assert len(drawn) == 3 and 0 < len(sections["offset-progress"]["series"]) <= 12


def test_report_without_gold_says_so(lakehouse, tmp_path: Path) -> None:
    """An empty lakehouse: one error naming what is missing, no page."""
    from pipelines.report import ReportError, build_report
    from pipelines.runner import Context

    _, gen = lakehouse
    empty = jobs_file(tmp_path, gen.root, STAGES, root=tmp_path / "empty")
    with pytest.raises(ReportError, match=r"no gold.offset_history.*run a job with gold first"):
        build_report(Context(empty), tmp_path / "out")
    assert not (tmp_path / "out").exists()
