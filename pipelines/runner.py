"""Run a job from jobs.yaml: its stages in order, each timed and recorded in the run log.

The run log is the runner's table (``bronze.runs``: declared with bronze's tables, for its
location and name, written only here). The data stages are declared once, in :data:`DATA_STAGES`;
the quality suites run between them (:func:`quality_checkpoints`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql import SparkSession

from pipelines.bronze.end_offsets import admin_sources, ingest_end_offsets
from pipelines.bronze.ingest import ingest_source
from pipelines.bronze.kafka_client import check_access
from pipelines.bronze.kafka_source import stored_positions
from pipelines.bronze.kafka_truth import fetch_truth
from pipelines.errors import ConfigError, StageUnavailable
from pipelines.gold.build import run_gold
from pipelines.quality.engine import preload as preload_gx
from pipelines.quality.stage import QualityReport, partition_counts, run_quality
from pipelines.quality.suites import LAYERS, check_job_overrides
from pipelines.runtime import lake
from pipelines.runtime.config import (
    STAGES,
    Job,
    JobsFile,
    KafkaSource,
    QualitySettings,
    find_job,
    load,
    resolve_lock_dir,
    resolve_root,
)
from pipelines.runtime.lock import new_run_id, stage_lock
from pipelines.runtime.resources import unwritable
from pipelines.runtime.spark import build_session
from pipelines.runtime.storage import S3Settings, is_object_store
from pipelines.runtime.tables import Tables
from pipelines.silver.ingest import run_silver
from pipelines.silver.redecode import redecode_quarantine
from pipelines.truth import TruthSnapshot
from pipelines.truth import load as load_truth

log = logging.getLogger("offsets_lakehouse")

QUALITY_FAILED = "quality_failed"
# stages that work on the whole lakehouse, whichever job runs them: one at a time (runtime/lock.py)
LAKEHOUSE_STAGES = ("silver", "gold")


@dataclass
class StageReport:
    stage: str
    status: str = "ok"
    seconds: float = 0.0
    details: list[dict[str, Any]] = field(default_factory=list)
    # concurrent-modification conflicts the stage absorbed by running again (lake.retry_conflicts)
    conflicts: list[str] = field(default_factory=list)


@dataclass
class RunReport:
    run_id: str
    job: str
    stages: list[StageReport] = field(default_factory=list)
    quality_outcomes: list[Any] = field(default_factory=list)  # this run's, for its Data Docs

    @classmethod
    def start(cls, job: str, run_id: str | None = None) -> RunReport:
        """A new run of ``job``: its id (``run_id``, e.g. the one its lock was taken for, or a new
        one) is the start time (sortable) and a random suffix."""
        return cls(run_id or new_run_id(), job)

    @property
    def status(self) -> str:
        """ok, failed, or quality_failed (a rule with policy fail: exit code 3)."""
        statuses = {s.status for s in self.stages}
        if statuses - {"ok", QUALITY_FAILED}:
            return "failed"
        return QUALITY_FAILED if QUALITY_FAILED in statuses else "ok"

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "job": self.job,
            "status": self.status,
            "stages": [
                {"stage": s.stage, "status": s.status, "seconds": round(s.seconds, 2), "details": s.details}
                | ({"conflicts_retried": s.conflicts} if s.conflicts else {})
                for s in self.stages
            ],
        }


def load_jobs(path: str | Path) -> JobsFile:
    """jobs.yaml, validated: its shape (runtime.config) and its quality overrides against the suites."""
    config = load(path)
    check_job_overrides(config, path)
    return config


class StageListener(Protocol):
    """Told when a stage starts and ends (the CLI's progress display); never needed to run."""

    def stage_started(self, stage: str) -> None: ...

    def stage_finished(self, report: StageReport) -> None: ...


class Context:
    """A loaded jobs.yaml with its Spark session and tables (created lazily), and who listens to
    the stages' progress (``listener``, optional)."""

    def __init__(
        self, config_path: str | Path, master: str | None = None, listener: StageListener | None = None
    ) -> None:
        self.config_path = Path(config_path)
        # Spark settings on top of jobs.yaml's, for a session with a special role (serve.py)
        self.extra_conf: dict[str, str] = {}
        self.config: JobsFile = load_jobs(self.config_path)
        self.base_dir = self.config_path.resolve().parent
        self.root = resolve_root(self.config, self.base_dir)
        # how every client reaches a lakehouse on an object store (None: a local root); exported
        # to the environment now, for delta-rs reads before Spark starts
        self.store = S3Settings.resolve(self.config.spark.conf) if is_object_store(self.root) else None
        if self.store is not None:
            self.store.export()
        self.master = master
        self.listener = listener
        self._spark: SparkSession | None = None
        self._tables: Tables | None = None

    def stage_lock(self, stage: str, run_id: str) -> contextlib.AbstractContextManager[Any]:
        """The lakehouse-wide lock of a silver, gold or quality stage (runtime/lock.py)."""
        lh = self.config.lakehouse
        return stage_lock(
            self.root,
            stage,
            run_id,
            resolve_lock_dir(self.config, self.base_dir),
            self.store,
            lh.lock_lease_seconds,
            lh.stage_wait_minutes * 60,
        )

    def job(self, name: str) -> Job:
        """The job called ``name``; a configuration error naming the known ones when there is none."""
        return find_job(self.config, self.config_path, name)

    def attach(self, spark: SparkSession) -> None:
        """Use ``spark`` (a running serve's session over Spark Connect, runtime/served.py) instead
        of starting one."""
        self._spark = spark

    @property
    def attached(self) -> bool:
        """Whether the session is a running serve's (:meth:`attach`); never starts one."""
        return self._spark is not None and lake.remote(self._spark)

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            self._spark = build_session(self.config.spark, self.master, extra_conf=self.extra_conf, store=self.store)
        return self._spark

    @property
    def tables(self) -> Tables:
        if self._tables is None:
            lh = self.config.lakehouse
            self._tables = Tables(
                self.spark,
                self.root,
                {
                    "bronze": lh.bronze_schema,
                    "silver": lh.silver_schema,
                    "gold": lh.gold_schema,
                    "quality": lh.quality_schema,
                },
            )
        return self._tables


@contextmanager
def recorded_stage(ctx: Context, report: RunReport, stage: str) -> Iterator[StageReport]:
    """Time a stage and record it in the run log (``bronze.runs``), failed or not: the one place
    a stage's report, status and seconds are kept, for data stages, quality and redecode alike."""
    started = datetime.now(timezone.utc)
    t0 = time.monotonic()
    sr = StageReport(stage)
    if ctx.listener is not None:
        ctx.listener.stage_started(stage)
    try:
        yield sr
    except Exception as exc:
        sr.status = "failed"
        if (full_or_refused := unwritable(exc, ctx.root)) is not None:
            raise full_or_refused from exc  # one line that says what to do, not Spark's task failure
        raise
    finally:
        sr.seconds = time.monotonic() - t0
        report.stages.append(sr)
        try:
            lake.retry_conflicts("run log", lambda: _record(ctx, report, sr, started))
        except Exception as exc:
            if sr.status != "failed":
                raise
            # the stage's own error is the one to report (often the same cause: the store is gone)
            why = unwritable(exc, ctx.root) or _first_line(exc)
            log.warning("the failed %s stage could not be recorded in the run log: %s", stage, why)
        finally:
            if ctx.listener is not None:
                ctx.listener.stage_finished(sr)


def _first_line(exc: BaseException) -> str:
    """The line that says what went wrong (py4j puts the Java exception on the second)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("An error occurred while calling"):
        return lines[1]
    return lines[0] if lines else type(exc).__name__


def run_job(
    ctx: Context,
    job_name: str,
    stages: list[str] | None = None,
    full_refresh: bool = False,
    run_id: str | None = None,
) -> RunReport:
    """Run the job's stages (or ``stages``) in order, each recorded in the run log; the quality
    suites run after the stages they check, and a rule with policy fail stops the run there.
    ``run_id``: the id the caller took the job's lock for (runtime.lock), else a new one."""
    job = ctx.job(job_name)
    wanted = stages or list(job.stages)
    for stage in wanted:
        if stage not in STAGES:
            raise StageUnavailable(f"stage {stage!r} is not available in this version (available: {', '.join(STAGES)})")
    if full_refresh:
        log.info("full refresh requested: silver and gold are rebuilt from bronze; bronze is never rewritten")
    report = RunReport.start(job_name, run_id)
    data_stages = [s for s in wanted if s != "quality"]
    checks = quality_checkpoints(data_stages) if "quality" in wanted else {}
    if "quality" in wanted:
        preload_gx()  # imported while Spark starts and the data stages run
    _check_kafka(ctx, job, bronze="bronze" in data_stages, quality="quality" in wanted)
    if "quality" in wanted and not data_stages:
        _quality(ctx, job_name, report, None, full=full_refresh)
        return report
    for stage in data_stages:
        exclusive = ctx.stage_lock(stage, report.run_id) if stage in LAKEHOUSE_STAGES else contextlib.nullcontext()
        with exclusive, recorded_stage(ctx, report, stage) as sr:
            sr.details = lake.retry_conflicts(
                stage,
                lambda stage=stage: DATA_STAGES[stage].run(ctx, job.sources, report.run_id, full_refresh),
                retried=sr.conflicts.append,
            )
        # after a full refresh every table is new: one full validation costs less than the increment's two
        if stage in checks and not _quality(ctx, job_name, report, stage, checks[stage], full=full_refresh):
            log.error("quality: a rule with policy fail failed after %s: the run stops here (exit code 3)", stage)
            break
    return report


def _check_kafka(ctx: Context, job: Job | None, *, bronze: bool, quality: bool) -> None:
    """Ask each Kafka cluster the run will talk to, before anything is committed, whether it lets us
    do what the run needs (kafka_client.check_access): a refusal then ends the run with nothing
    written, instead of after bronze committed."""
    live_truth = quality and (job.quality if job else QualitySettings()).truth_snapshot == "live"
    for name in job.sources if job else []:
        source = ctx.config.sources[name]
        if isinstance(source, KafkaSource) and (bronze or live_truth):
            check_access(ctx.spark, source, groups=live_truth)


def quality_checkpoints(data_stages: list[str]) -> dict[str, tuple[str, ...]]:
    """After which data stage the suites of which layers run (docs/quality.md): a layer's suites
    right after its stage, except bronze's, which wait for silver when the job has it — bronze
    rows a rule quarantines are moved as silver rows, before gold reads them."""
    out: dict[str, tuple[str, ...]] = {}
    waiting: list[str] = []
    for stage in data_stages:
        waiting.append(stage)
        if stage == "bronze" and "silver" in data_stages[data_stages.index(stage) :]:
            continue
        out[stage] = tuple(waiting)
        waiting = []
    return out


@contextmanager
def _validating(ctx: Context, run_id: str, layers: tuple[str, ...]) -> Iterator[None]:
    """The locks a quality stage holds: its own, and silver's and gold's while it validates either.
    Delta isolates each table's snapshot, not a set of tables: a gold stage between its merges has
    current_offsets merged and partition_progress still in flight, and rules that compare tables
    would see that half. Taken in one order (quality, silver, gold) by everyone; a job holds at
    most one of silver and gold at a time, so nobody waits in a circle."""
    with contextlib.ExitStack() as held:
        held.enter_context(ctx.stage_lock("quality", run_id))
        if set(layers) & set(LAKEHOUSE_STAGES):
            for stage in LAKEHOUSE_STAGES:
                held.enter_context(ctx.stage_lock(stage, run_id))
        yield


def _quality(
    ctx: Context,
    job_name: str | None,
    report: RunReport,
    after: str | None,
    layers: tuple[str, ...] | None = None,
    full: bool = False,
) -> bool:
    """Run the suites of ``layers`` (all without), recorded as a quality stage; False when a
    rule with policy fail failed. ``full``: no suite validated on changes alone."""
    job = ctx.config.jobs.get(job_name) if job_name else None
    settings = job.quality if job else QualitySettings()
    sources = job.sources if job else list(ctx.config.sources)
    with _validating(ctx, report.run_id, layers or LAYERS), recorded_stage(ctx, report, "quality") as sr:
        what = f"{'/'.join(layers or LAYERS)} suites{f' after {after}' if after else ''}"
        log.debug("quality: %s", what)
        started = time.perf_counter()
        result = lake.retry_conflicts(
            "quality",
            lambda: run_quality(
                ctx.spark,
                ctx.tables,
                report.run_id,
                settings,
                layers=layers or LAYERS,
                partitions=_partition_counts(ctx, sources),
                truth=_truth(ctx, settings.truth_snapshot, sources),
                job=job_name,
                after=after,
                earlier=report.quality_outcomes,
                full=full,
            ),
            retried=sr.conflicts.append,
        )
        report.quality_outcomes += result.outcomes
        log.info("quality: %s: %s in %.1f s", what, quality_summary(result), time.perf_counter() - started)
        sr.details = [result.to_json()]
        sr.status = QUALITY_FAILED if result.failed else "ok"
    return sr.status == "ok"


def quality_summary(result: QualityReport) -> str:
    """``41 passed, 1 warned`` (outcomes per action, in a fixed order), and what stood unchanged."""
    actions = Counter(o.action for o in result.outcomes)
    order = ["passed", "warned", "quarantined", "failed"]
    parts = [f"{actions[a]} {a}" for a in order + sorted(set(actions) - set(order)) if actions[a]]
    text = ", ".join(parts) or "no rules"
    if any(n.startswith("nothing changed since") for n in result.notes):
        text += " (nothing changed since the last validation: its outcomes stand)"
    elif set(result.validated) - {"full"}:
        ways = {"incremental": "on their changes", "unchanged": "unchanged", "full": "in full"}
        counts = [f"{result.validated[k]} {w}" for k, w in ways.items() if result.validated.get(k)]
        text += f" (suites: {', '.join(counts)})"
    return text


def _partition_counts(ctx: Context, sources: list[str]) -> dict[str, int | None]:
    by_uri = None
    if any(getattr(ctx.config.sources[s], "cluster_from_path", None) for s in sources):
        bronze = lake.read(ctx.spark, ctx.tables.path("bronze", "offsets_records"))
        if bronze is not None:
            rows = bronze.select("source_uri", "cluster").distinct().collect()
            by_uri = {r["source_uri"]: r["cluster"] for r in rows}
    return partition_counts(ctx.config, sources, by_uri)


def _truth(ctx: Context, path: str | None, sources: list[str]) -> TruthSnapshot | None:
    if path is None:
        return None
    if path == "live":
        return _live_truth(ctx, sources)
    p = Path(path)
    p = p if p.is_absolute() else ctx.base_dir / p
    if not p.exists():
        raise ConfigError(f"{ctx.config_path}: quality.truth_snapshot: no such file: {p}")
    return load_truth(p)


def _live_truth(ctx: Context, sources: list[str]) -> TruthSnapshot | None:
    """``truth_snapshot: live``: the job's Kafka source's committed offsets, now. Compared only
    when the offsets topic has not moved since bronze read it (same end offsets in every
    partition); otherwise gold is legitimately behind and the rule is reported not evaluated."""
    kafka = [s for s in sources if ctx.config.sources[s].kind == "kafka"]
    if len(kafka) != 1:
        raise ConfigError(f"{ctx.config_path}: quality.truth_snapshot: live needs one kafka source in the job")
    src = ctx.config.sources[kafka[0]]
    truth = fetch_truth(ctx.spark, src)
    read = stored_positions(ctx.spark, ctx.tables, src.cluster, src.topic) or {}
    moved = sorted(p for p, end in truth.offsets_topic_end_offsets.items() if read.get(p) != end)
    if moved:
        log.warning(
            "quality: %s moved in partitions %s since bronze read it; live truth not compared (run again)",
            src.topic,
            moved,
        )
        return None
    return truth


def quality_job(ctx: Context, job_name: str | None, run_id: str | None = None, full: bool = False) -> RunReport:
    """``offsets-lakehouse quality [JOB]``: every suite on the tables as they are. Without a job:
    the default policies, and partition counts from every source in jobs.yaml. ``full``: every
    suite on its whole tables, none on what changed since the last validation alone."""
    job = ctx.job(job_name) if job_name is not None else None
    _check_kafka(ctx, job, bronze=False, quality=True)
    report = RunReport.start(job_name or "-", run_id)
    _quality(ctx, job_name, report, None, full=full)
    return report


def _bronze(ctx: Context, sources: list[str], run_id: str, full_refresh: bool) -> list[dict[str, Any]]:
    details = []
    ctx.spark  # noqa: B018 - start the session first: the log line below then means "reading data"
    for name in sources:
        log.debug(DATA_STAGES["bronze"].announce, name)
        result = ingest_source(ctx.spark, ctx.tables, name, ctx.config.sources[name], run_id, str(ctx.base_dir))
        detail = result.to_json()
        details.append(detail)
        line = (
            f"bronze: {name} read {result.rows_read} rows, inserted {result.rows_inserted}, "
            f"{result.conflicts} conflicts, {len(result.issues)} read issues"
        )
        eo = ingest_end_offsets(ctx.spark, ctx.tables, name, ctx.config.sources[name], run_id, str(ctx.base_dir))
        if eo is not None:  # in the source's own report: one report per source
            detail["end_offsets"] = eo.to_json()
            line += f"; end offsets: {eo.observations} observations read, {eo.inserted} new"
        log.info("%s %s", line, result.steps.summary())
    return details


def _silver(ctx: Context, sources: list[str], run_id: str, full_refresh: bool) -> list[dict[str, Any]]:
    log.debug(DATA_STAGES["silver"].announce, " (full refresh)" if full_refresh else "")
    result = run_silver(ctx.spark, ctx.tables, run_id, full_refresh)
    _log_silver(result)
    return [result.to_json()]


def _gold(ctx: Context, sources: list[str], run_id: str, full_refresh: bool) -> list[dict[str, Any]]:
    log.debug(DATA_STAGES["gold"].announce, " (full refresh)" if full_refresh else "")
    result = run_gold(
        ctx.spark,
        ctx.tables,
        run_id,
        full_refresh,
        soft_delete_retention_days=ctx.config.gold.soft_delete_retention_days,
        admin_sources=admin_sources(ctx.config.sources, sources),
    )
    recomputed = "; ".join(recomputed_summary(result.recomputed)) or "none recomputed"
    unknown = len(result.lag.get("unknown_partitions", []))
    log.info(
        "gold: %d events, %d partitions incremental (%s); %d offset rows, %d pending, %d group rows%s %s",
        result.events,
        result.partitions_incremental,
        recomputed,
        result.offsets_rows,
        result.pending_rows,
        result.group_rows,
        f"; lag unknown for {unknown} partitions (no end offset)" if unknown else "",
        result.steps.summary(),
    )
    for why in result.recomputed:
        log.debug("gold: recomputed %s", why)
    return [result.to_json()]


def recomputed_summary(recomputed: list[str]) -> list[str]:
    """One line per reason (``50 partitions recomputed: first run``) for gold's ``cluster/partition:
    why`` entries, most frequent first: a first run on 50 offsets partitions is one line at INFO,
    each partition is listed at DEBUG."""
    reasons = Counter(entry.split(": ", 1)[1] if ": " in entry else entry for entry in recomputed)
    return [
        f"{n} partition{'s' if n > 1 else ''} recomputed: {why}"
        for why, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    ]


def _log_silver(result: Any) -> None:
    log.info(
        "silver: %s, bronze version %s..%s, %d bronze rows decoded, %d quarantined, %d rows inserted %s",
        result.mode,
        result.bronze_version_from,
        result.bronze_version,
        result.bronze_rows,
        result.quarantined,
        sum(result.inserted.values()),
        result.steps.summary(),
    )
    for note in result.notes:
        log.info("silver: %s", note)


def redecode_job(ctx: Context, job_name: str, run_id: str | None = None) -> RunReport:
    """Decode the job's quarantine again (after an upgrade); recorded as a silver stage run."""
    ctx.job(job_name)
    report = RunReport.start(job_name, run_id)
    with ctx.stage_lock("silver", report.run_id), recorded_stage(ctx, report, "silver") as sr:
        result = lake.retry_conflicts(
            "redecode", lambda: redecode_quarantine(ctx.spark, ctx.tables, report.run_id), retried=sr.conflicts.append
        )
        log.info("redecode: %d quarantined rows, %d released into their tables", result.bronze_rows, result.released)
        sr.details = [result.to_json()]
    return report


def _record(ctx: Context, report: RunReport, sr: StageReport, started: datetime) -> None:
    """Append a stage's row to the run log."""
    ctx.tables.ensure("bronze", "runs")
    spec = ctx.tables.spec("bronze", "runs")
    row = {
        "run_id": report.run_id,
        "job": report.job,
        "stage": sr.stage,
        "started_at": started,
        "finished_at": datetime.now(timezone.utc),
        "status": sr.status,
        "summary": json.dumps(sr.details, default=str, sort_keys=True),
    }
    # one row: delta-rs from the driver, tens of milliseconds (a first Spark write costs seconds)
    rows = pa.Table.from_pylist([row], spec.arrow())
    lake.write_rows(ctx.spark, rows, ctx.tables.path("bronze", "runs"), spec.struct())


@dataclass(frozen=True)
class Stage:
    """A data stage of a job, declared once: its name (as in jobs.yaml, ``--stage`` and the run
    log), the function that runs it — given the context, the job's sources, the run id and
    ``--full-refresh``, it returns its report details — and the log line it announces its work
    with (a source name, or `` (full refresh)``, for its ``%s``)."""

    name: str
    run: Callable[[Context, list[str], str, bool], list[dict[str, Any]]]
    announce: str


# in the order they run; quality runs between them (quality_checkpoints); with "quality" these are
# runtime.config.STAGES, the names jobs.yaml may use
DATA_STAGES: dict[str, Stage] = {
    s.name: s
    for s in (
        Stage("bronze", _bronze, "bronze: ingesting source %s"),
        Stage("silver", _silver, "silver: decoding bronze rows not yet in silver%s"),
        Stage("gold", _gold, "gold: replaying new silver events per offsets partition%s"),
    )
}
