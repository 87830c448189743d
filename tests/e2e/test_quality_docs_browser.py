"""The quality Data Docs in a real browser: headless Chromium (Debian's `chromium`, installed by
scripts/setup) opens the run's index.html offline, the page shows every suite with its
evaluated/passed/failed counts, a suite's link leads to GX's validation page with the same
numbers, and a screenshot is kept in test-artifacts/.

The validations run on small hand-made DataFrames (the spark tier checks the rules themselves);
the counts below are worked out from those rows.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from pipelines.quality import frames
from pipelines.quality.stage import build_docs, evaluate_suite, params_of
from pipelines.quality.suites import load_suites
from pipelines.runtime.config import QualitySettings
from tests.support.browser import browse

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"


class SummaryRows(HTMLParser):
    """The cells of the summary table's body rows, and the href of each suite's link."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.links: dict[str, str] = {}
        self._in_summary = self._in_cell = False
        self._href: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section" and a.get("id") == "offsets-lakehouse-quality-summary":
            self._in_summary = True
        elif self._in_summary and tag == "tr" and "data-suite" in a:
            self.rows.append([])
        elif self._in_summary and tag == "td" and self.rows:
            self._in_cell = True
            self.rows[-1].append("")
        elif self._in_summary and tag == "a":
            self._href = a.get("href")

    def handle_endtag(self, tag):
        if tag == "section":
            self._in_summary = False
        elif tag == "td":
            self._in_cell = False
        elif tag == "a":
            self._href = None

    def handle_data(self, data):
        if self._in_cell:
            self.rows[-1][-1] += data.strip()
            if self._href:
                self.links[data.strip()] = self._href


def test_data_docs_show_each_suite_with_counts_in_a_browser(spark, tmp_path: Path) -> None:
    suites = load_suites()
    params = params_of(QualitySettings())
    bronze = spark.createDataFrame(
        [("c1", 0, 0, "f", 0, False, b"k"), ("c1", 0, 0, "f", 10, False, b"k"), ("c1", 0, 3, "f", 20, False, None)],
        "cluster string, partition int, offset bigint, source_uri string, batch_position bigint, "
        "control boolean, key binary",
    )
    markers = spark.createDataFrame(
        [("c1", 0, 9, "COMMIT", 5, 0)],
        "cluster string, offsets_partition int, record_offset bigint, control_type string, producer_id bigint, "
        "coordinator_epoch int",
    )
    offsets = spark.createDataFrame(
        [("c1", "g", "t", 0, 7, False), ("c1", "g", "t", 1, None, False)],
        "cluster string, group_id string, topic string, partition int, record_offset bigint, deleted boolean",
    )
    run_id = "browser-run"
    outcomes = []
    for name, frame in (
        ("bronze.offsets_records", frames.Frame(frames.bronze_offsets_records(bronze))),
        ("silver.transaction_markers", frames.Frame(markers)),
        ("gold.current_offsets", frames.Frame(frames.gold_current_offsets(offsets))),
        ("gold.truth_snapshot", frames.Frame(None, missing="no truth snapshot")),
    ):
        outcomes += evaluate_suite(suites[name], frame, params, run_id)[0]
    index = Path(build_docs(str(tmp_path / "lakehouse"), run_id, outcomes))
    assert index == tmp_path / "lakehouse" / "quality" / "data_docs" / run_id / "index.html"

    dom = browse(index.as_uri(), "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = SummaryRows()
    page.feed(dom.stdout)
    shown = {row[0]: row[1:] for row in page.rows}
    # suite: evaluated, passed, failed, not evaluated, status
    assert shown == {
        # a duplicate position (2 rows), a data record without key, offset 0 after 0 in the file;
        # the three not-null rules and the gap metric pass
        "bronze.offsets_records": ["7", "4", "3", "0", "failed"],
        "silver.transaction_markers": ["3", "3", "0", "0", "ok"],
        "gold.current_offsets": ["2", "1", "1", "0", "failed"],  # a live row without position
        "gold.truth_snapshot": ["0", "0", "0", "1", "not_evaluated"],
    }
    # the suite's link opens GX's own validation page, with the same statistics
    link = page.links["bronze.offsets_records"]
    detail = browse((index.parent / link).as_uri(), "--dump-dom")
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", detail.stdout))
    assert re.search(r"Evaluated Expectations 7 Successful Expectations 4 Unsuccessful Expectations 3", text), text[
        :3000
    ]

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "quality-data-docs.png"
    shot.unlink(missing_ok=True)
    done = browse(index.as_uri(), f"--screenshot={shot}")
    assert done.returncode == 0 and shot.stat().st_size > 10_000, done.stderr[-2000:]
