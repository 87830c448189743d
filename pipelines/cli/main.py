"""The ``offsets-lakehouse`` command line. Thin: parsing, output and exit codes only.

Exit codes (docs/cli.md): 0 ok, 1 failure (undecodable records, corrupt batches, a failed
run), 2 bad arguments or configuration, 3 data-quality failure, 4 another run of the job is in
progress (it holds the job's lock: nothing to do), 5 a Kafka cluster refused the job, 6 the
lakehouse's storage refuses writes (a full disk, permissions).
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import logging.handlers
import os
import re
import shlex
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

from pipelines.cli.render import StageProgress, render_inspect, render_rows, render_run, render_status
from pipelines.codec.segments import discover
from pipelines.errors import ConfigError, OffsetsLakehouseError
from pipelines.generate import generate as run_generate
from pipelines.inspect import inspect_segment, iter_record_json, totals
from pipelines.runtime.config import STAGES
from pipelines.runtime.storage import unreachable_message

# The commands that touch the lakehouse import the runner (and with it Spark, Delta and Great
# Expectations: seconds) when they run, so that inspect, generate, --help and a bad jobs.yaml
# answer without loading them.

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG, EXIT_QUALITY, EXIT_RUNNING, EXIT_REFUSED, EXIT_UNWRITABLE = 0, 1, 2, 3, 4, 5, 6


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


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is logged, so the progress display
    (which redirects it while live) prints log lines above itself instead of through itself."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _setup_logging(verbose: bool, log_format: str, log_file: Path | None = None) -> None:
    """Logs to stderr, or appended to ``log_file`` (for cron). A WatchedFileHandler reopens the file
    when logrotate moved it away, so rotation needs no signal and no copytruncate."""
    handler: logging.Handler
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.WatchedFileHandler(log_file, encoding="utf-8")
    else:
        handler = _StderrHandler()
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
    if store_gone := unreachable_message(text):
        return store_gone
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
    error its own (configuration 2), anything else 1. With ``verbose``, Spark logs its warnings
    too (runtime/spark.py: errors only by default)."""
    if verbose:
        os.environ.setdefault("OFFSETS_SPARK_LOG_LEVEL", "WARN")
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
_no_serve_option = click.option(
    "--no-serve",
    is_flag=True,
    help="Start a Spark session of its own even when a `serve` runs on the lakehouse (docs/sql.md).",
)
_log_file_option = click.option(
    "--log-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append the logs to this file instead of stderr (for cron; logrotate-safe). Errors stay on stderr.",
)


@contextmanager
def _job_lock(config_path: Path, job: str) -> Iterator[str]:
    """Hold JOB's lock (docs/operations.md) for the block; yields the run id it was taken for.
    Taken from jobs.yaml alone, before Spark starts: a refused run exits 4 in a moment."""
    from pipelines.runtime.lock import lock_configured_job

    with lock_configured_job(config_path, job) as holder:
        yield holder.run_id


def _progress(as_json: bool) -> StageProgress | None:
    """Per-stage progress on a terminal; none with --json or when output goes to a file or pipe."""
    if as_json or not (sys.stdout.isatty() and sys.stderr.isatty()):
        return None
    return StageProgress()


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
@_log_file_option
@_verbose_option
def run(
    job: str,
    config_path: Path,
    stage: str,
    full_refresh: bool,
    master: str | None,
    as_json: bool,
    log_format: str,
    log_file: Path | None,
    verbose: bool,
) -> None:
    """Run JOB from jobs.yaml (for Airflow/cron: exit 0 ok, 1 failure, 2 configuration, 3 data
    quality, 4 another run of JOB is in progress, 5 Kafka refused the job, 6 the lakehouse's disk
    is full or refuses writes)."""
    _setup_logging(verbose, log_format, log_file)
    with one_line_errors(verbose), _job_lock(config_path, job) as run_id:
        from pipelines.runner import Context, run_job

        progress = _progress(as_json)
        with progress or contextlib.nullcontext():
            ctx = Context(config_path, master, listener=progress)
            report = run_job(ctx, job, None if stage == "all" else [stage], full_refresh, run_id)
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
@click.option(
    "--full",
    is_flag=True,
    help="Validate every suite on its whole tables (default: a suite whose tables changed since the "
    "last validation is validated on the changes, where it can be).",
)
@click.option("--master", help="Spark master URL (overrides jobs.yaml).")
@click.option("--json", "as_json", is_flag=True, help="Print the run report (or the quality report) as JSON.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@_log_file_option
@_verbose_option
def quality(
    job: str | None,
    config_path: Path,
    run_id: str | None,
    full: bool,
    master: str | None,
    as_json: bool,
    log_format: str,
    log_file: Path | None,
    verbose: bool,
) -> None:
    """Run the quality suites on the tables as they are (JOB's policies), or `quality report`.

    `quality report [--run RUN_ID]` prints suite, evaluated, passed, failed, status and where the
    Data Docs are. Exit 0 ok, 1 failure, 2 configuration, 3 a rule with policy fail failed, 4 a run
    of JOB is in progress.
    """
    _setup_logging(verbose, log_format, log_file)
    if job == "report":
        from pipelines.quality.report import load_report, render_text
        from pipelines.runner import Context

        with one_line_errors(verbose):
            ctx = Context(config_path, master)
            doc = load_report(ctx.spark, ctx.tables, run_id)
        click.echo(json.dumps(doc, default=str) if as_json else render_text(doc), nl=as_json)
        return
    if run_id:
        raise click.UsageError("--run is for `quality report`")
    with one_line_errors(verbose), _job_lock(config_path, job) if job else contextlib.nullcontext() as lock_id:
        from pipelines.runner import Context, quality_job

        report = quality_job(Context(config_path, master), job, lock_id, full=full)
    _exit_with(report, as_json)


@cli.command()
@click.argument("job")
@_config_option
@click.option("--master", help="Spark master URL (overrides jobs.yaml).")
@click.option("--json", "as_json", is_flag=True, help="Print the run report as JSON.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@_log_file_option
@_verbose_option
def redecode(
    job: str,
    config_path: Path,
    master: str | None,
    as_json: bool,
    log_format: str,
    log_file: Path | None,
    verbose: bool,
) -> None:
    """Decode JOB's silver.quarantine again with this version's decoder (after an upgrade).

    Records it now reads move into their tables; the others stay, re-tried by this decoder
    version. Recorded in bronze.runs as a silver stage run. Exit 0 ok, 1 failure, 2 configuration,
    4 a run of JOB is in progress.
    """
    _setup_logging(verbose, log_format, log_file)
    with one_line_errors(verbose), _job_lock(config_path, job) as run_id:
        from pipelines.runner import Context, redecode_job

        report = redecode_job(Context(config_path, master), job, run_id)
    if as_json:
        click.echo(json.dumps(report.to_json(), default=str))
    else:
        render_run(report)
    sys.exit(EXIT_OK if report.status == "ok" else EXIT_FAILURE)


@cli.command()
@_config_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.option("--partitions", is_flag=True, help="Watermarks per (cluster, partition), not only per cluster.")
@_no_serve_option
@_verbose_option
def status(config_path: Path, as_json: bool, partitions: bool, no_serve: bool, verbose: bool) -> None:
    """Tables, row counts, bronze watermarks per cluster (--partitions: per partition), the Kafka
    source's positions and the last runs. Uses a running `serve` on the lakehouse when there is one."""
    from pipelines.runner import Context
    from pipelines.status import collect_status

    with one_line_errors(verbose):
        ctx = Context(config_path)
        _session(ctx, "status", "--no-serve" if no_serve else None)
        doc = collect_status(ctx, partitions)
    if as_json:
        click.echo(json.dumps(doc, default=str))
    else:
        render_status(doc)


def _session(ctx: Any, command: str, own: str | None) -> None:
    """Attach the session of a `serve` running on the lakehouse to ``ctx`` when there is one
    (runtime/served.py), unless the option ``own`` asks for a session of its own; say on stderr
    which session answers."""
    from pipelines.runtime import served

    if own is not None:
        click.echo(f"{command}: started a Spark session of its own ({own})", err=True)
        return
    found = served.find(ctx.root)
    if found.spark is not None:
        ctx.attach(found.spark)
    click.echo(found.describe(command), err=True)


@cli.command()
@_config_option
@click.option(
    "--dir",
    "workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory the lines cd into (default: the directory of jobs.yaml).",
)
def crontab(config_path: Path, workdir: Path | None) -> None:
    """Print a crontab line per job of jobs.yaml that has a schedule (docs/operations.md)."""
    from pipelines.runtime.config import load

    with one_line_errors(False):
        config = load(config_path)
    click.echo(crontab_lines(config.jobs, config_path.resolve(), (workdir or config_path.parent).resolve()), nl=False)


def crontab_lines(jobs: dict[str, Any], config: Path, workdir: Path) -> str:
    """One crontab line per scheduled job: cd to ``workdir``, run the job with its logs in
    ``var/log/<job>.log`` and its report appended to ``var/log/<job>-runs.jsonl``."""
    exe = Path(sys.executable).parent / "offsets-lakehouse"
    if not exe.exists():
        exe = Path("offsets-lakehouse")
    elif exe.is_relative_to(workdir):
        exe = exe.relative_to(workdir)
    cfg = "" if config == workdir / "jobs.yaml" else f" -c {shlex.quote(str(config))}"
    out = [f"# offsets-lakehouse: one line per scheduled job of {config}\n"]
    for name, job in jobs.items():
        if job.schedule is None:
            continue
        out.append(
            f"{job.schedule} cd {shlex.quote(str(workdir))} && mkdir -p var/log && {shlex.quote(str(exe))} run "
            f"{shlex.quote(name)}{cfg} --log-file var/log/{name}.log --json >> var/log/{name}-runs.jsonl 2>&1\n"
        )
    return "".join(out)


@cli.command()
@click.argument("query", required=False)
@_config_option
@click.option("--file", "-f", "query_file", type=click.Path(exists=True, path_type=Path), help="Read SQL from a file.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    help="table (default; --limit rows), csv (a header line, every row) or json (one object per line, every row).",
)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("--limit", type=int, default=200, show_default=True, help="Rows to print (table output).")
@click.option("--print-init", is_flag=True, help="Print SQL that registers every table, for `spark-sql -i`.")
@click.option(
    "--allow-writes",
    is_flag=True,
    help="Let the statement write (INSERT, DELETE, DROP, ...); without it, it may only read.",
)
@_no_serve_option
@_verbose_option
def sql(
    query: str | None,
    config_path: Path,
    query_file: Path | None,
    fmt: str | None,
    as_json: bool,
    limit: int,
    print_init: bool,
    allow_writes: bool,
    no_serve: bool,
    verbose: bool,
) -> None:
    """Query the lakehouse with Spark SQL: bronze.*, silver.*, gold.*, quality.* are registered by
    name. The statement may only read unless --allow-writes (docs/security.md). A running `serve`
    on the lakehouse answers when there is one (not with --allow-writes: it only reads)."""
    from pipelines.runner import Context
    from pipelines.runtime import readonly

    if not print_init and not query and not query_file:
        raise click.UsageError("give a QUERY, --file or --print-init")
    if as_json and fmt not in (None, "json"):
        raise click.UsageError(f"--json and --format {fmt} are exclusive")
    fmt = "json" if as_json else fmt or "table"
    with one_line_errors(verbose):
        ctx = Context(config_path)
        if print_init:
            click.echo(ctx.tables.init_sql(), nl=False)
            return
        # a serve only reads: a statement allowed to write takes a session of our own
        _session(ctx, "sql", "--allow-writes" if allow_writes else "--no-serve" if no_serve else None)
        text = query_file.read_text() if query_file else query
        # (ctx.tables starts the session: the read-only check must be in its settings first)
        if allow_writes:
            ctx.tables.register_existing(ctx.tables.layers_named(text))
        elif not ctx.attached:  # (a serve's session has every table registered, and only reads)
            ctx.extra_conf |= readonly.conf(ctx.config.spark.conf)
            with readonly.writable(ctx.spark):  # registering the names; the statement only reads
                # only the layers the statement names: registering a table costs a Delta snapshot
                ctx.tables.register_existing(ctx.tables.layers_named(text))
            readonly.allow_root(ctx.spark, ctx.root)
        try:
            df = ctx.spark.sql(text)
        except Exception as exc:
            if "this endpoint only reads" in str(exc):  # the read-only check: say how to write
                raise OffsetsLakehouseError(f"{error_message(exc)} (--allow-writes lets the statement write)") from None
            raise
        rows = df.limit(limit).collect() if fmt == "table" else df.collect()
    if fmt == "json":
        for r in rows:
            click.echo(json.dumps(r.asDict(recursive=True), default=str))
    elif fmt == "csv":
        write_csv(df.columns, [[_csv_value(v) for v in r] for r in rows])
    else:
        render_rows(df.columns, rows)


def write_csv(columns: list[str], rows: list[list[Any]]) -> None:
    """RFC 4180 CSV on stdout (the csv module's quoting), a header line first."""
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(columns)
    out.writerows(rows)


def _csv_value(value: Any) -> Any:
    """None as an empty field; structs, arrays and maps as JSON (a CSV field holds one string)."""
    if value is None:
        return ""
    if hasattr(value, "asDict"):
        return json.dumps(value.asDict(recursive=True), default=str)
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=lambda v: v.asDict(recursive=True) if hasattr(v, "asDict") else str(v))
    return value


@cli.command()
@_config_option
@click.option(
    "--protocol",
    type=click.Choice(["thrift", "connect", "both"]),
    default="thrift",
    show_default=True,
    help="thrift: HiveServer2 JDBC/ODBC (BI tools, beeline); connect: Spark Connect (notebooks); both.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    help="Port of the protocol (default 10000 for thrift, 15002 for connect; with both: thrift's).",
)
@click.option("--connect-port", type=click.IntRange(1, 65535), help="Spark Connect's port with --protocol both.")
@click.option(
    "--refresh",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds between registrations of new tables (0: only on SIGHUP).",
)
@click.option("--master", help="Spark master URL (overrides jobs.yaml).")
@click.option(
    "--passwords",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="OFFSETS_SERVE_PASSWORDS",
    help="Thrift clients log in with a user name and password from this file (serve-passwd writes it). "
    "[env OFFSETS_SERVE_PASSWORDS]",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="OFFSETS_SERVE_TOKEN_FILE",
    help="Spark Connect clients present the token in this file (or in SPARK_CONNECT_AUTHENTICATE_TOKEN). "
    "[env OFFSETS_SERVE_TOKEN_FILE]",
)
@click.option("--tls-cert", type=click.Path(dir_okay=False, path_type=Path), help="PEM certificate (chain): TLS.")
@click.option(
    "--tls-key",
    type=click.Path(dir_okay=False, path_type=Path),
    help="PEM private key of --tls-cert (passphrase in OFFSETS_SERVE_TLS_KEY_PASSWORD).",
)
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@_verbose_option
def serve(
    config_path: Path,
    protocol: str,
    host: str,
    port: int | None,
    connect_port: int | None,
    refresh: float,
    master: str | None,
    passwords: Path | None,
    token_file: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    log_format: str,
    verbose: bool,
) -> None:
    """Keep one Spark session with every table registered and serve it, read-only, over JDBC/ODBC or
    Spark Connect.

    Prints one line when ready ("serving the lakehouse at jdbc:hive2://127.0.0.1:10000 (...)"),
    registers tables that appear later every --refresh seconds and on SIGHUP, and stops cleanly on
    SIGINT/SIGTERM (exit 0). Clients only read; beyond loopback they must authenticate
    (--passwords, --token-file). docs/sql.md, docs/security.md.
    """
    from pipelines.serve import Access, Server, endpoints
    from pipelines.serve import serve as run_server

    if connect_port and protocol != "both":
        raise click.UsageError("--connect-port is for --protocol both (else use --port)")
    _setup_logging(verbose, log_format)
    with one_line_errors(verbose):
        token = os.environ.get("SPARK_CONNECT_AUTHENTICATE_TOKEN") or None
        if token_file is not None:
            if not token_file.is_file():
                raise ConfigError(f"--token-file: no such file: {token_file}")
            token = token_file.read_text().strip() or None
            if token is None:
                raise ConfigError(f"--token-file: {token_file} is empty")
        access = Access(passwords, token, tls_cert, tls_key, os.environ.get("OFFSETS_SERVE_TLS_KEY_PASSWORD"))
        server = Server(config_path, endpoints(protocol, host, port, connect_port), master, access)
        run_server(server, refresh, lambda line: click.echo(line))


@cli.command("serve-passwd")
@click.argument("passwords", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("user")
@click.option("--delete", is_flag=True, help="Remove USER instead.")
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input (else prompted).")
def serve_passwd(passwords: Path, user: str, delete: bool, password_stdin: bool) -> None:
    """Add USER to (or replace their password in, or --delete them from) the PASSWORDS file that
    `serve --passwords` checks Thrift logins against: salted PBKDF2-SHA256, never the password."""
    from pipelines.runtime.passwords import remove_user, set_user

    with one_line_errors(False):
        if delete:
            remove_user(passwords, user)
            return
        if password_stdin:
            password = sys.stdin.readline().rstrip("\n")
        else:
            password = click.prompt(f"password for {user}", hide_input=True, confirmation_prompt=True)
        set_user(passwords, user, password)


@cli.command()
@_config_option
@click.option("--all", "show_all", is_flag=True, help="Also the declared tables that do not exist yet.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per table.")
@_verbose_option
def tables(config_path: Path, show_all: bool, as_json: bool, verbose: bool) -> None:
    """Every table's name and location, without Spark: for delta-rs, Polars or DuckDB (docs/sql.md).
    On an object store, also the storage options those readers need (never a secret)."""
    from pipelines.runtime.config import load, resolve_root
    from pipelines.runtime.storage import reader_options
    from pipelines.runtime.tables import locations

    with one_line_errors(verbose):
        config = load(config_path)
        lh = config.lakehouse  # schema names may be renamed there
        root = resolve_root(config, config_path.resolve().parent)
        options = reader_options(root, config.spark.conf)
        found = locations(
            root, {layer: getattr(lh, f"{layer}_schema") for layer in ("bronze", "silver", "gold", "quality")}
        )
    shown = [t for t in found if show_all or t.exists]
    if as_json:
        for t in shown:
            doc = {"name": t.name, "location": t.location, "partitioned_by": list(t.partitioned_by), "exists": t.exists}
            click.echo(json.dumps(doc | ({"storage_options": options} if options else {})))
    else:
        if options:
            # what delta-rs and Polars need besides the credentials, which stay in the environment
            click.echo(f"# storage_options={json.dumps(options)} (credentials: AWS_ACCESS_KEY_ID/...)")
        for t in shown:
            click.echo(f"{t.name}\t{t.location}" + ("" if t.exists else "\t(not created yet)"))


@cli.command()
@_config_option
@click.option("--group", "-g", help="Report on this consumer group only (default: all groups, the busiest drawn).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Local directory for index.html (default: <lakehouse root>/report, also on an object store).",
)
@_verbose_option
def report(config_path: Path, group: str | None, out_dir: Path | None, verbose: bool) -> None:
    """Write a static HTML activity page (offline, inline SVG plots): commit cadence, offset
    progress, lag, rebalances per day, coordinator load (docs/report.md)."""
    from pipelines.report import build_report
    from pipelines.runner import Context

    with one_line_errors(verbose):
        ctx = Context(config_path)
        # by default beside the tables: <root>/report, on a local disk or the object store
        index = build_report(ctx, out_dir or f"{ctx.root}/report", group)
    click.echo(f"report: {index}")


def main() -> None:
    cli(prog_name="offsets-lakehouse")


if __name__ == "__main__":
    main()
