"""Where the quality stage runs in a job, what a failing rule does to the run (stop, status
quality_failed, exit code 3 from `run` and `quality`), and the `quality report` rendering.
No JVM: the data stages, the suites and the runs table are replaced by recorders."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines import runner
from pipelines.quality.report import render_text, report_doc
from pipelines.quality.results import Outcome, action_for, summarize
from pipelines.quality.stage import QualityReport, partition_counts
from pipelines.runtime.config import STAGES, load

JOBS = """
lakehouse: {root: lh}
sources:
  a: {kind: segments, cluster: c1, paths: [logs], offsets_partitions: 50}
  b: {kind: segments, cluster: unused, paths: [more], cluster_from_path: "x/(?P<cluster>[^/]+)/"}
  c: {kind: segments, cluster: c1, paths: [other], offsets_partitions: 12}
jobs:
  j: {sources: [a]}
  two: {sources: [a, b]}
  clash: {sources: [a, c]}
"""


@pytest.mark.parametrize(
    ("stages", "checkpoints"),
    [
        (["bronze", "silver", "gold"], {"silver": ("bronze", "silver"), "gold": ("gold",)}),
        (["bronze"], {"bronze": ("bronze",)}),
        (["bronze", "gold"], {"bronze": ("bronze",), "gold": ("gold",)}),
        (["silver", "gold"], {"silver": ("silver",), "gold": ("gold",)}),
        (["gold"], {"gold": ("gold",)}),
    ],
)
def test_quality_checkpoints(stages, checkpoints) -> None:
    assert runner.quality_checkpoints(stages) == checkpoints


def test_stages_are_declared_once() -> None:
    """The runner's registry holds the data stages jobs.yaml may name, in their order, quality last."""
    assert (*runner.DATA_STAGES, "quality") == STAGES
    assert all(name == stage.name for name, stage in runner.DATA_STAGES.items())


def test_partition_counts_per_cluster(tmp_path: Path) -> None:
    (tmp_path / "jobs.yaml").write_text(JOBS)
    cfg = load(tmp_path / "jobs.yaml")
    assert partition_counts(cfg, ["a"]) == {"c1": 50}
    uris = {"/d/x/k1/__consumer_offsets-0/0.log": "k1", "/d/y/z/0.log": "other"}
    assert partition_counts(cfg, ["a", "b"], uris) == {"c1": 50, "k1": None}
    assert partition_counts(cfg, ["a", "c"]) == {"c1": None}  # two counts for one cluster: unknown


def outcome(suite: str, name: str, success: bool | None, policy: str = "fail", evaluated: bool = True) -> Outcome:
    layer, _, table = suite.partition(".")
    return Outcome(
        suite=suite,
        layer=layer,
        table=table,
        expectation=name,
        expectation_type="expect_column_values_to_be_between",
        policy=policy,
        evaluated=evaluated,
        success=success,
        action=action_for(success, evaluated, policy),
        unexpected_count=None if success is None else (0 if success else 2),
    )


@pytest.fixture()
def fake_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A Context whose data stages, quality suites and runs table only record what happens."""
    (tmp_path / "jobs.yaml").write_text(JOBS)
    calls: list[tuple] = []
    recorded: list[tuple[str, str]] = []
    verdicts: dict[str | None, bool] = {}

    for stage in ("bronze", "silver", "gold"):
        fake = dataclasses.replace(runner.DATA_STAGES[stage], run=lambda *a, _s=stage, **k: calls.append((_s,)) or [])
        monkeypatch.setitem(runner.DATA_STAGES, stage, fake)
    monkeypatch.setattr(runner, "_record", lambda ctx, report, sr, started: recorded.append((sr.stage, sr.status)))

    def fake_quality(spark, tables, run_id, settings, *, layers, after, **kw):
        calls.append(("quality", after, layers))
        ok = verdicts.get(after, True)
        report = QualityReport(run_id, after)
        report.outcomes = [outcome(f"{layers[-1]}.t", "rule", ok)]
        return report

    monkeypatch.setattr(runner, "run_quality", fake_quality)
    monkeypatch.setattr(runner, "_partition_counts", lambda ctx, sources: {})  # reads bronze
    ctx = runner.Context(tmp_path / "jobs.yaml")
    ctx._spark, ctx._tables = object(), object()
    return ctx, calls, recorded, verdicts


def test_suites_follow_their_stages_and_warnings_do_not_stop_the_run(fake_run) -> None:
    ctx, calls, recorded, _ = fake_run
    report = runner.run_job(ctx, "j")
    assert calls == [
        ("bronze",),
        ("silver",),
        ("quality", "silver", ("bronze", "silver")),
        ("gold",),
        ("quality", "gold", ("gold",)),
    ]
    assert report.status == "ok" and len(report.quality_outcomes) == 2
    assert recorded == [("bronze", "ok"), ("silver", "ok"), ("quality", "ok"), ("gold", "ok"), ("quality", "ok")]


def test_a_failing_rule_stops_the_run_before_gold(fake_run) -> None:
    ctx, calls, recorded, verdicts = fake_run
    verdicts["silver"] = False
    report = runner.run_job(ctx, "j")
    assert calls == [("bronze",), ("silver",), ("quality", "silver", ("bronze", "silver"))]
    assert report.status == "quality_failed"
    assert recorded[-1] == ("quality", "quality_failed")


def test_quality_alone_runs_every_layer(fake_run) -> None:
    ctx, calls, _, _ = fake_run
    report = runner.run_job(ctx, "j", ["quality"])
    assert calls == [("quality", None, ("bronze", "silver", "gold"))]
    assert runner.quality_job(ctx, None).job == "-"
    with pytest.raises(runner.ConfigError, match=r"jobs\.nope: no such job"):
        runner.quality_job(ctx, "nope")
    assert report.status == "ok"


@pytest.mark.parametrize(("verdict", "code"), [(True, 0), (False, 3)])
def test_cli_exit_codes(fake_run, monkeypatch: pytest.MonkeyPatch, verdict: bool, code: int) -> None:
    from pipelines.cli.main import cli

    ctx, _, _, verdicts = fake_run
    verdicts[None] = verdict
    verdicts["gold"] = verdict
    monkeypatch.setattr(runner, "Context", lambda *a, **k: ctx)
    # the CLI reads the jobs.yaml itself for the job's lock (before the runner's Context)
    config = ["-c", str(ctx.config_path)]
    result = CliRunner().invoke(cli, ["quality", "j", "--json", *config])
    assert result.exit_code == code, result.output
    assert '"status": "%s"' % ("ok" if verdict else "quality_failed") in result.output
    result = CliRunner().invoke(cli, ["run", "j", "--json", *config])
    assert result.exit_code == code, result.output


def test_summary_and_report_rendering(tmp_path: Path) -> None:
    outcomes = [
        outcome("bronze.offsets_records", "a", True),
        outcome("bronze.offsets_records", "b", False, policy="warn"),
        outcome("silver.offset_commits", "c", None, evaluated=False),
        outcome("silver.offset_commits", "d", True),
        outcome("gold.current_offsets", "e", False),
        outcome("gold.truth_snapshot", "f", None, evaluated=False),
    ]
    summary = {s.suite: (s.evaluated, s.passed, s.failed, s.not_evaluated, s.status) for s in summarize(outcomes)}
    assert summary == {
        "bronze.offsets_records": (2, 1, 1, 0, "warn"),
        "silver.offset_commits": (1, 1, 0, 1, "ok"),
        "gold.current_offsets": (1, 0, 1, 0, "failed"),
        "gold.truth_snapshot": (0, 0, 0, 1, "not_evaluated"),
    }
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "index.html").write_text("<html></html>")
    doc = report_doc("r1", outcomes, tmp_path)
    assert doc["status"] == "failed" and doc["data_docs"] == str(tmp_path / "r1" / "index.html")
    assert [(p["suite"], p["action"]) for p in doc["problems"]] == [
        ("bronze.offsets_records", "warned"),
        ("gold.current_offsets", "failed"),
    ]
    text = render_text(doc).splitlines()
    assert text[0] == "quality run r1: failed"
    assert text[1].split() == ["suite", "evaluated", "passed", "failed", "not", "evaluated", "status"]
    assert text[2].split() == ["bronze.offsets_records", "2", "1", "1", "0", "warn"]
    assert text[4].split() == ["gold.current_offsets", "1", "0", "1", "0", "failed"]
    assert text[-1] == f"Data Docs: {tmp_path / 'r1' / 'index.html'}"
    assert render_text(report_doc(None, [], None)).startswith("no quality results yet")


def test_data_docs_summary_is_static_html(tmp_path: Path) -> None:
    from pipelines.quality.docs import add_summary, point_latest

    site = tmp_path / "docs" / "r1"
    page = site / "validations" / "gold" / "current_offsets" / "r1" / "t" / "b.html"
    page.parent.mkdir(parents=True)
    page.write_text("x")
    (site / "index.html").write_text('<html><body class="x"><table id="gx"></table></body></html>')
    outcomes = [outcome("gold.current_offsets", "e", False), outcome("silver.offset_commits", "d", True)]
    add_summary(site / "index.html", "r1", outcomes)
    add_summary(site / "index.html", "r1", outcomes)  # rebuilt after the next checkpoint: replaced, not added
    text = (site / "index.html").read_text()
    assert text.count("offsets-lakehouse-quality-summary") == 1
    assert '<a href="validations/gold/current_offsets/r1/t/b.html">gold.current_offsets</a>' in text
    assert '<tr data-suite="silver.offset_commits" data-status="ok"><td>silver.offset_commits</td>' in text
    assert text.index("offsets-lakehouse-quality-summary") < text.index('<table id="gx">')
    assert point_latest(tmp_path / "docs", "r1").resolve() == (site / "index.html").resolve()
    assert (tmp_path / "docs" / "LATEST").read_text() == "r1\n"
