"""The ``offsets-lakehouse`` command line. Thin: parsing, output and exit codes only.

Exit codes (docs/cli.md): 0 ok, 1 failure (undecodable records, corrupt batches, a failed
run), 2 bad arguments or configuration, 3 data-quality failure.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

from pipelines.cli.render import render_inspect, render_rows, render_run, render_status
from pipelines.codec.segments import discover
from pipelines.errors import ConfigError, OffsetsLakehouseError
from pipelines.generate import generate as run_generate
from pipelines.inspect import inspect_segment, iter_record_json, totals
from pipelines.runtime.config import STAGES

# The commands that touch the lakehouse import the runner (and with it Spark, Delta and Great
# Expectations: seconds) when they run, so that inspect, generate, --help and a bad jobs.yaml
# answer without loading them.

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG, EXIT_QUALITY = 0, 1, 2, 3


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="offsets-lakehouse")
def cli() -> None:
    """Turn Kafka's __consumer_offsets topic into Delta tables, and inspect its bytes."""


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document with totals and per-file counts.")
@click.option("--records", is_flag=True, help="Stream every record as a JSON line (docs/inspect-records.md).")
def inspect(paths: tuple[Path, ...], as_json: bool, records: bool) -> None:
    """Decode log directories or .log files and report what is in them.

    Exit code 0 when everything decoded (a torn tail at the end of a partition's last
    segment is normal for a copy of a live broker), 1 when any record is undecodable
    or any batch corrupt, 2 for bad arguments.
    """
    if as_json and records:
        raise click.UsageError("--json and --records are exclusive")
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise click.BadParameter(f"no such file or directory: {', '.join(missing)}", param_hint="PATHS")
    segments = discover(list(paths))
    if not segments:
        raise click.BadParameter("no __consumer_offsets segment files (*.log) found", param_hint="PATHS")

    if records:
        failed = False
        out = sys.stdout
        for doc in iter_record_json(segments):
            failed |= doc["status"] != "ok"
            out.write(json.dumps(doc, separators=(",", ":")) + "\n")
        # corrupt batches do not appear as records: count them with a census pass
        failed |= any(r.corrupt_batches for r in map(inspect_segment, segments))
        sys.exit(EXIT_FAILURE if failed else EXIT_OK)

    reports = [inspect_segment(seg) for seg in segments]
    summary = totals(reports)
    if as_json:
        click.echo(json.dumps({"totals": summary, "files": [r.to_json() for r in reports]}, indent=2))
    else:
        render_inspect(reports, summary)
    bad = summary["undecodable"] or summary["corrupt_batches"]
    sys.exit(EXIT_FAILURE if bad else EXIT_OK)


@cli.command()
@click.option("--records", "-n", type=click.IntRange(min=1), required=True, help="Number of records to write.")
@click.option("--seed", "-s", type=int, default=1, show_default=True, help="Same seed, same bytes.")
@click.option("--out", "-o", type=click.Path(path_type=Path), required=True, help="Log directory to create.")
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="Partition count of __consumer_offsets (groups are placed by partition_for).",
)
@click.option(
    "--segment-bytes",
    type=click.IntRange(min=1024),
    default=8 * 1024 * 1024,
    show_default=True,
    help="Roll a segment once it reaches this size.",
)
@click.option("--overwrite", is_flag=True, help="Replace a non-empty output directory.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def generate(
    records: int, seed: int, out: Path, partitions: int, segment_bytes: int, overwrite: bool, as_json: bool
) -> None:
    """Write a deterministic synthetic __consumer_offsets log directory.

    Alongside the segments it writes expected-state.json (what the group coordinator
    would load, by the reference replay), generator-events.jsonl.gz and
    generator-manifest.json.
    """
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise click.BadParameter(f"{out} is not empty (pass --overwrite to replace it)", param_hint="--out")
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        transient=True,
        disable=as_json or not sys.stderr.isatty(),
        console=Console(stderr=True),
    ) as bar:
        task = bar.add_task("generating records", total=records)
        result = run_generate(
            out, records, seed, partitions, segment_bytes, progress=lambda n: bar.advance(task, n), overwrite=overwrite
        )
    doc = {
        "out": str(result.out),
        "records": result.records,
        "segments": result.segments,
        "expected_offsets": result.expected_offsets,
        "pending_transactions": result.pending_transactions,
    }
    if as_json:
        click.echo(json.dumps(doc))
    else:
        click.echo(
            f"wrote {result.records} records in {result.segments} segments to {result.out}; "
            f"expected state: {result.expected_offsets} committed offsets, "
            f"{result.pending_transactions} pending transactional offsets"
        )


def _setup_logging(verbose: bool, log_format: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("offsets_lakehouse")
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc)


_PY_TRACEBACK = "Traceback (most recent call last):"


def error_message(exc: BaseException) -> str:
    """What ``error:`` prints: configuration errors as they are (one line per invalid field), any
    other error as one line. Spark's errors carry more than that: a Python worker's traceback
    (tasks, Python data sources), a JVM stack trace, a query context; they stay for --verbose."""

    text = str(exc).strip()
    if isinstance(exc, ConfigError):
        return text or type(exc).__name__
    if _PY_TRACEBACK in text:
        # the exception line of the last traceback: its first unindented line
        for line in text.rsplit(_PY_TRACEBACK, 1)[1].splitlines():
            if line.strip() and not line[0].isspace():
                # "pipelines.errors.SourceNotFound: ..." -> "SourceNotFound: ...": the class, not its module
                return re.sub(r"^(?:\w+\.)+(\w+:)", r"\1", line.strip())
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("An error occurred while calling"):
        return lines[1].lstrip(": ")  # py4j: the Java exception is on the second line
    return lines[0] if lines else type(exc).__name__


@contextmanager
def one_line_errors(verbose: bool) -> Iterator[None]:
    """Errors inside become one line on stderr and their exit code (docs/cli.md): a package
    error its own (configuration 2), anything else 1."""
    try:
        yield
    except OffsetsLakehouseError as exc:
        _fail(exc, exc.exit_code, verbose)
    except Exception as exc:
        _fail(exc, EXIT_FAILURE, verbose)


def _fail(exc: BaseException, code: int, verbose: bool) -> None:
    """One clear line on stderr (the traceback only with --verbose), then exit with ``code``."""
    if verbose:
        traceback.print_exception(exc)
    click.echo(f"error: {error_message(exc)}", err=True)
    sys.exit(code)


_config_option = click.option(
    "--config",
    "-c",
    "config_path",
    type=click.Path(path_type=Path),
    default="jobs.yaml",
    show_default=True,
    help="jobs.yaml to use.",
)
_verbose_option = click.option("--verbose", "-v", is_flag=True, help="Debug logs and full tracebacks.")


@cli.command()
@click.argument("job")
@_config_option
@click.option(
    "--stage",
    type=click.Choice([*STAGES, "all"]),
    default="all",
    show_default=True,
    help="Run one stage, or all stages of the job.",
)
@click.option("--full-refresh", is_flag=True, help="Rebuild silver and gold from bronze (bronze is never rewritten).")
@click.option("--master", help="Spark master URL (overrides jobs.yaml).")
@click.option("--json", "as_json", is_flag=True, help="Print the run report as JSON.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@_verbose_option
def run(
    job: str,
    config_path: Path,
    stage: str,
    full_refresh: bool,
    master: str | None,
    as_json: bool,
    log_format: str,
    verbose: bool,
) -> None:
    """Run JOB from jobs.yaml (for Airflow/cron: exit 0 ok, 1 failure, 2 configuration, 3 data quality)."""
    from pipelines.runner import Context, run_job

    _setup_logging(verbose, log_format)
    with one_line_errors(verbose):
        ctx = Context(config_path, master)
        report = run_job(ctx, job, None if stage == "all" else [stage], full_refresh)
    _exit_with(report, as_json)


def _exit_with(report: Any, as_json: bool) -> None:
    """Print a run report; exit 0 ok, 3 when a quality rule with policy fail failed, else 1."""
    if as_json:
        click.echo(json.dumps(report.to_json(), default=str))
    else:
        render_run(report)
    codes = {"ok": EXIT_OK, "quality_failed": EXIT_QUALITY}
    sys.exit(codes.get(report.status, EXIT_FAILURE))


@cli.command()
@click.argument("job", required=False)
@_config_option
@click.option("--run", "run_id", help="quality report: the run to show (default: the latest).")
@click.option("--master", help="Spark master URL (overrides jobs.yaml).")
@click.option("--json", "as_json", is_flag=True, help="Print the run report (or the quality report) as JSON.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@_verbose_option
def quality(
    job: str | None,
    config_path: Path,
    run_id: str | None,
    master: str | None,
    as_json: bool,
    log_format: str,
    verbose: bool,
) -> None:
    """Run the quality suites on the tables as they are (JOB's policies), or `quality report`.

    `quality report [--run RUN_ID]` prints suite, evaluated, passed, failed, status and where the
    Data Docs are. Exit 0 ok, 1 failure, 2 configuration, 3 a rule with policy fail failed.
    """
    from pipelines.runner import Context, quality_job

    _setup_logging(verbose, log_format)
    if job == "report":
        from pipelines.quality.report import load_report, render_text

        with one_line_errors(verbose):
            ctx = Context(config_path, master)
            doc = load_report(ctx.spark, ctx.tables, run_id)
        click.echo(json.dumps(doc, default=str) if as_json else render_text(doc), nl=as_json)
        return
    if run_id:
        raise click.UsageError("--run is for `quality report`")
    with one_line_errors(verbose):
        report = quality_job(Context(config_path, master), job)
    _exit_with(report, as_json)


@cli.command()
@click.argument("job")
@_config_option
@click.option("--master", help="Spark master URL (overrides jobs.yaml).")
@click.option("--json", "as_json", is_flag=True, help="Print the run report as JSON.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@_verbose_option
def redecode(job: str, config_path: Path, master: str | None, as_json: bool, log_format: str, verbose: bool) -> None:
    """Decode JOB's silver.quarantine again with this version's decoder (after an upgrade).

    Records it now reads move into their tables; the others stay, re-tried by this decoder
    version. Recorded in bronze.runs as a silver stage run. Exit 0 ok, 1 failure, 2 configuration.
    """
    from pipelines.runner import Context, redecode_job

    _setup_logging(verbose, log_format)
    with one_line_errors(verbose):
        report = redecode_job(Context(config_path, master), job)
    if as_json:
        click.echo(json.dumps(report.to_json(), default=str))
    else:
        render_run(report)
    sys.exit(EXIT_OK if report.status == "ok" else EXIT_FAILURE)


@cli.command()
@_config_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@_verbose_option
def status(config_path: Path, as_json: bool, verbose: bool) -> None:
    """Tables, row counts, per-partition watermarks and the last runs."""
    from pipelines.runner import Context
    from pipelines.status import collect_status

    with one_line_errors(verbose):
        doc = collect_status(Context(config_path))
    if as_json:
        click.echo(json.dumps(doc, default=str))
    else:
        render_status(doc)


@cli.command()
@click.argument("query", required=False)
@_config_option
@click.option("--file", "-f", "query_file", type=click.Path(exists=True, path_type=Path), help="Read SQL from a file.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per row.")
@click.option("--limit", type=int, default=200, show_default=True, help="Rows to print (table output).")
@click.option("--print-init", is_flag=True, help="Print SQL that registers every table, for `spark-sql -i`.")
@_verbose_option
def sql(
    query: str | None,
    config_path: Path,
    query_file: Path | None,
    as_json: bool,
    limit: int,
    print_init: bool,
    verbose: bool,
) -> None:
    """Query the lakehouse with Spark SQL: bronze.*, silver.*, gold.* are registered by name."""
    from pipelines.runner import Context

    if not print_init and not query and not query_file:
        raise click.UsageError("give a QUERY, --file or --print-init")
    with one_line_errors(verbose):
        ctx = Context(config_path)
        if print_init:
            click.echo(ctx.tables.init_sql(), nl=False)
            return
        ctx.tables.register_existing()
        text = query_file.read_text() if query_file else query
        df = ctx.spark.sql(text)
        rows = df.limit(limit).collect() if not as_json else df.collect()
    if as_json:
        for r in rows:
            click.echo(json.dumps(r.asDict(recursive=True), default=str))
    else:
        render_rows(df.columns, rows)


@cli.command()
@_config_option
@click.option("--group", "-g", help="Report on this consumer group only (default: all groups, the busiest drawn).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for index.html (default: <lakehouse root>/report).",
)
@_verbose_option
def report(config_path: Path, group: str | None, out_dir: Path | None, verbose: bool) -> None:
    """Write a static HTML activity page (offline, inline SVG plots): commit cadence, offset
    progress, lag, rebalances per day, coordinator load (docs/report.md)."""
    from pipelines.report import build_report
    from pipelines.runner import Context

    with one_line_errors(verbose):
        ctx = Context(config_path)
        if out_dir is None and "://" in ctx.root:
            raise ConfigError(f"the lakehouse root {ctx.root} is not a local directory: give --out")
        index = build_report(ctx, out_dir or Path(ctx.root) / "report", group)
    click.echo(f"report: {index}")


def main() -> None:
    cli(prog_name="offsets-lakehouse")


if __name__ == "__main__":
    main()
