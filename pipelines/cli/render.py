"""Human-readable output of the CLI (rich tables). JSON output never goes through here."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from pipelines.codec.records import TYPE_NAMES


def render_inspect(reports: list[Any], summary: dict[str, Any]) -> None:
    console = Console()
    table = Table(title="__consumer_offsets segments", show_lines=False)
    for col in ("file", "part", "batches", "records", "control", "tombstones", "undecodable", "torn tail B", "corrupt"):
        table.add_column(col, justify="left" if col == "file" else "right")
    for r in reports:
        table.add_row(
            _short(r.path),
            str(r.partition if r.partition is not None else "-"),
            str(r.batches),
            str(r.records),
            str(r.control_records),
            str(r.tombstones),
            _flag(r.undecodable),
            str(r.torn_tail_bytes),
            _flag(r.corrupt_batches),
        )
    table.add_section()
    table.add_row(
        f"total ({summary['files']} files)",
        "",
        str(summary["batches"]),
        str(summary["records"]),
        str(summary["control_records"]),
        str(summary["tombstones"]),
        _flag(summary["undecodable"]),
        str(summary["torn_tail_bytes"]),
        _flag(summary["corrupt_batches"]),
    )
    console.print(table)

    types = Table(title="records by type / value version")
    types.add_column("type/version")
    types.add_column("record type")
    types.add_column("count", justify="right")
    for key, count in summary["by_type_version"].items():
        t = key.split("/")[0]
        name = TYPE_NAMES.get(int(t), "unknown") if t.lstrip("-").isdigit() else "unknown"
        label = f"{name} (tombstone)" if key.endswith("/null") else name
        types.add_row(key, label, str(count))
    console.print(types)

    for r in reports:
        for issue in r.issues:
            console.print(
                f"[yellow]{issue['kind']}[/] {r.path} at byte {issue['position']} "
                f"({issue['length']} bytes): {issue['reason']} {issue['detail']}"
            )
        for u in r.undecodable_records:
            console.print(
                f"[red]undecodable[/] {r.path} offset {u['offset']}: {u['reason']} in {u['error_part']} "
                f"at byte {u['error_position']}: {u['error_detail']}"
            )


def _flag(n: int) -> str:
    return f"[red]{n}[/]" if n else "0"


def _short(path: str, width: int = 70) -> str:
    return path if len(path) <= width else "…" + path[-(width - 1) :]


def render_run(report: Any) -> None:
    console = Console()
    table = Table(title=f"run {report.run_id} of job {report.job}: {report.status}")
    for col in ("stage", "status", "seconds", "source", "read", "inserted", "conflicts", "read issues"):
        table.add_column(col)
    for s in report.stages:
        if not s.details:
            table.add_row(s.stage, s.status, f"{s.seconds:.1f}", "", "", "", "", "")
        for d in s.details:
            if "suites" in d:  # quality: suites evaluated, rules failed, records quarantined
                failed = sum(x["failed"] for x in d["suites"])
                table.add_row(
                    s.stage,
                    s.status,
                    f"{s.seconds:.1f}",
                    f"quality ({'after ' + d['after'] if d.get('after') else 'all suites'})",
                    f"{len(d['suites'])} suites",
                    f"{sum(x['passed'] for x in d['suites'])} passed",
                    f"{_flag(failed)} failed",
                    f"{_flag(d.get('quarantined', 0))} quarantined",
                )
                continue
            if "mode" in d:  # silver: bronze rows decoded, rows added to the silver tables
                table.add_row(
                    s.stage,
                    s.status,
                    f"{s.seconds:.1f}",
                    f"silver ({d['mode']})",
                    str(d.get("bronze_rows", "")),
                    str(sum(d.get("inserted", {}).values())),
                    "",
                    f"{_flag(d.get('quarantined', 0))} quarantined",
                )
                continue
            table.add_row(
                s.stage,
                s.status,
                f"{s.seconds:.1f}",
                d.get("source", ""),
                str(d.get("rows_read", "")),
                str(d.get("rows_inserted", "")),
                _flag(d.get("conflicts", 0)),
                str(len(d.get("issues", []))),
            )
    console.print(table)
    docs = []  # a run's quality stages share its Data Docs: named once
    for s in report.stages:
        for d in s.details:
            for issue in d.get("issues", []):
                console.print(
                    f"[yellow]{issue['kind']}[/] {issue['source_uri']} at byte {issue['position']} "
                    f"({issue['length']} bytes): {issue['reason']} {issue.get('detail') or ''}"
                )
            for note in d.get("notes", []):
                console.print(f"[yellow]note[/] {note}")
            for rule in d.get("failed", []):
                console.print(f"[red]quality rule failed[/] {rule} (policy fail)")
            if d.get("data_docs") and d["data_docs"] not in docs:
                docs.append(d["data_docs"])
    for page in docs:
        console.print(f"Data Docs: {page}", soft_wrap=True)


def render_status(doc: dict[str, Any]) -> None:
    console = Console()
    console.print(f"lakehouse: {doc['root']}")
    t = Table(title="tables")
    for col in ("table", "rows", "location"):
        t.add_column(col)
    for row in doc["tables"]:
        t.add_row(row["table"], str(row["rows"]), row["location"])
    console.print(t)
    w = Table(title="bronze watermarks per cluster")
    for col in ("cluster", "partitions", "records", "first offset", "last offset", "last ingested"):
        w.add_column(col)
    for row in doc["watermarks"]:
        w.add_row(
            row["cluster"],
            str(row["partitions"]),
            str(row["records"]),
            str(row["first_offset"]),
            str(row["last_offset"]),
            str(row["last_ingested"]),
        )
    console.print(w)
    if "partitions" in doc:
        p = Table(title="bronze watermarks per (cluster, partition)")
        for col in ("cluster", "partition", "records", "first offset", "last offset", "last ingested"):
            p.add_column(col)
        for row in doc["partitions"]:
            p.add_row(
                row["cluster"],
                str(row["partition"]),
                str(row["records"]),
                str(row["first_offset"]),
                str(row["last_offset"]),
                str(row["last_ingested"]),
            )
        console.print(p)
    # every partition's position with --partitions; otherwise only those an open transaction holds back
    positions = [r for r in doc.get("kafka_positions", []) if r["held_back"] or "partitions" in doc]
    if positions:
        title = "Kafka source positions (last run per cluster)"
        k = Table(title=title if "partitions" in doc else f"{title}: held back")
        for col in ("cluster", "partition", "position", "high watermark", "held back", "run"):
            k.add_column(col)
        for row in positions:
            k.add_row(
                row["cluster"],
                str(row["partition"]),
                str(row["position"]),
                str(row["high_watermark"]),
                str(row["held_back"]),
                str(row["run_id"]),
            )
        console.print(k)
    silver = doc.get("silver")
    if silver:
        t = Table(title="silver")
        for col in ("bronze version decoded", "bronze version", "last run", "mode", "at", "quarantined"):
            t.add_column(col)
        t.add_row(
            str(silver["watermark"]),
            str(silver["bronze_version"]),
            silver["last_run"],
            silver["last_mode"],
            str(silver["last_at"]),
            _flag(sum(silver["quarantined"].values())),
        )
        console.print(t)
    quality = doc.get("quality")
    if quality and quality.get("run_id"):
        q = Table(title=f"quality: run {quality['run_id']} ({quality['status']})")
        for col in ("suite", "evaluated", "passed", "failed", "not evaluated", "status"):
            q.add_column(col)
        for row in quality["suites"]:
            q.add_row(
                row["suite"],
                str(row["evaluated"]),
                str(row["passed"]),
                _flag(row["failed"]),
                str(row["not_evaluated"]),
                row["status"],
            )
        console.print(q)
        if quality.get("data_docs"):
            console.print(f"Data Docs: {quality['data_docs']}", soft_wrap=True)
    r = Table(title="last runs")
    for col in ("run", "job", "stage", "status", "started", "finished"):
        r.add_column(col)
    for row in doc["runs"]:
        r.add_row(
            row["run_id"], row["job"], row["stage"], row["status"], str(row["started_at"]), str(row["finished_at"])
        )
    console.print(r)
    for note in doc.get("notes", []):
        console.print(f"[yellow]note[/] {note}")


def render_rows(columns: list[str], rows: list[Any]) -> None:
    table = Table()
    for c in columns:
        table.add_column(c)
    for row in rows:
        table.add_row(*[("" if v is None else str(v)) for v in row])
    Console().print(table)


def stage_summary(stage: Any) -> str:
    """One line on what a finished stage did, from its report details (the run report's fields)."""
    parts = []
    for d in stage.details:
        if "suites" in d:
            failed = sum(x["failed"] for x in d["suites"])
            parts.append(f"{len(d['suites'])} suites, {failed} rules failed, {d.get('quarantined', 0)} quarantined")
        elif "mode" in d:
            parts.append(
                f"{d['mode']}, {d.get('bronze_rows', 0)} bronze rows decoded, {d.get('quarantined', 0)} quarantined"
            )
        elif "events" in d:
            parts.append(
                f"{d['events']} events, {d.get('offsets_rows', 0)} offset rows, {d.get('group_rows', 0)} group rows"
            )
        elif "source" in d:
            parts.append(f"{d['source']}: {d.get('rows_read', 0)} rows read, {d.get('rows_inserted', 0)} inserted")
        elif "released" in d:
            parts.append(f"{d['released']} released, {d.get('quarantined', 0)} still quarantined")
    return "; ".join(parts)


class StageProgress:
    """The runner's stage listener on a terminal: a spinner with the elapsed time while a stage
    runs, then one line with its status, seconds and result (``bronze ok in 12.3 s — …``). On
    stderr, so stdout keeps only the report."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._bar = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
            redirect_stderr=True,
            redirect_stdout=True,
        )
        self._task: TaskID | None = None

    def __enter__(self) -> StageProgress:
        self._bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._bar.stop()

    def stage_started(self, stage: str) -> None:
        self._task = self._bar.add_task(f"{stage} running", total=None)

    def stage_finished(self, report: Any) -> None:
        if self._task is not None:
            self._bar.remove_task(self._task)
            self._task = None
        colour = "green" if report.status == "ok" else "red"
        summary = stage_summary(report)
        self.console.print(
            f"[{colour}]{report.stage} {report.status}[/] in {report.seconds:.1f} s"
            + (f" — {summary}" if summary else ""),
            highlight=False,
        )
