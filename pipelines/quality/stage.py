"""The quality stage: the suites of some layers on the lakehouse's tables, policies applied,
results appended to quality.results, Data Docs rebuilt for the run.

Where it runs (pipelines/runner.py, docs/quality.md): with the data stages, the bronze and
silver suites run right after silver (so rows a rule quarantines never reach gold) and the gold
suites right after gold; alone (``offsets-lakehouse quality JOB``) every suite runs.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark.util import inheritable_thread_target

from pipelines.quality import incremental
from pipelines.quality.docs import add_summary, docs_root, docs_uri, point_latest
from pipelines.quality.engine import collect_local, engine, start_engine
from pipelines.quality.frames import Frame, Inputs, fits_driver, load_frame, local_rows, sources
from pipelines.quality.quarantine import offender_keys, offenders
from pipelines.quality.results import (
    FAILED,
    NOT_EVALUATED,
    QUARANTINED,
    Outcome,
    action_for,
    plain,
    read_results,
    summarize,
    write_results,
)
from pipelines.quality.suites import LAYERS, Suite, Suites, load_suites, resolve_policy, violation_predicate
from pipelines.runtime import files, lake
from pipelines.silver import Offenders, move_to_quarantine, settle_quarantine

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.runtime.config import JobsFile, QualitySettings
    from pipelines.runtime.tables import Tables
    from pipelines.truth import TruthSnapshot

log = logging.getLogger("offsets_lakehouse")
T = TypeVar("T")

# suites validated at once: a small frame's Spark jobs mostly wait (scheduling, the Delta log), and
# its GX validation is a small part of a suite's time (measured at 200k records: GX 0.7 s of 10 s)
SUITES_AT_ONCE = 4


@dataclass
class QualityReport:
    run_id: str
    after: str | None
    outcomes: list[Outcome] = field(default_factory=list)
    data_docs: str | None = None
    quarantined: int = 0
    notes: list[str] = field(default_factory=list)
    # suites per way of validation (incremental.py): unchanged, incremental, full
    validated: dict[str, int] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(o.action == FAILED for o in self.outcomes)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "after": self.after,
            "status": "failed" if self.failed else "ok",
            "suites": [asdict(s) for s in summarize(self.outcomes)],
            "failed": [f"{o.suite}.{o.expectation}" for o in self.outcomes if o.action == FAILED],
            "quarantined": self.quarantined,
            "data_docs": self.data_docs,
            "notes": self.notes,
            "validated": self.validated,
        }


def params_of(settings: QualitySettings) -> dict[str, Any]:
    """Values the suites may refer to as ``$name``."""
    return {
        "max_clock_skew_minutes": settings.max_clock_skew_minutes,
        "max_pending_transaction_minutes": settings.max_pending_transaction_minutes,
    }


def partition_counts(config: JobsFile, sources: list[str], clusters_by_uri: dict[str, str] | None = None):
    """cluster -> offsets_partitions of the named sources (None where unknown or ambiguous).
    A ``cluster_from_path`` source names its clusters by path: ``clusters_by_uri`` (bronze's
    distinct source_uri -> cluster) says which clusters it produced."""
    counts: dict[str, set[int | None]] = {}
    for name in sources:
        src = config.sources[name]
        clusters = {src.cluster}
        if getattr(src, "cluster_from_path", None) and clusters_by_uri is not None:
            pattern = re.compile(src.cluster_from_path)
            clusters = {c for uri, c in clusters_by_uri.items() if pattern.search(uri)}
        for c in clusters:
            counts.setdefault(c, set()).add(src.offsets_partitions)
    return {c: (next(iter(v)) if len(v) == 1 else None) for c, v in counts.items()}


def _outcome(suite: Suite, exp, policy: str, **kw: Any) -> Outcome:
    return Outcome(
        suite=suite.name,
        layer=suite.layer,
        table=suite.table,
        expectation=exp.name,
        expectation_type=exp.type,
        policy=policy,
        suite_version=suite.version,
        column=exp.kwargs.get("column"),
        **kw,
    )


def evaluate_suite(
    suite: Suite,
    frame: Frame,
    params: dict[str, Any],
    run_id: str,
    default_policy: str = "fail",
    overrides: dict[str, str] | None = None,
    requirements: set[str] | None = None,
    local_max_rows: int = 0,
    docs: bool = True,
) -> tuple[list[Outcome], list[tuple[Outcome, str]]]:
    """GX on one frame. Returns the outcomes and, for rules whose policy is quarantine and that
    failed, (outcome, offending-row predicate) pairs for the mover. ``docs``: the validation is
    shown in the run's Data Docs (not the earlier state of an increment's groups)."""
    requirements = requirements or set()
    outcomes: list[Outcome] = []
    to_quarantine: list[tuple[Outcome, str]] = []
    policies = {e.name: resolve_policy(suite, e, default_policy, overrides) for e in suite.expectations}
    missing = frame.missing or (
        f"needs {suite.requires}" if suite.requires and suite.requires not in requirements else None
    )
    run: list[str] = []
    for e in suite.expectations:
        why = missing or frame.skipped.get(e.name)
        if why is None and e.requires and e.requires not in requirements and e.requires != "offsets_partitions":
            why = f"needs {e.requires}"
        if why is not None:
            outcomes.append(
                _outcome(
                    suite,
                    e,
                    policies[e.name],
                    evaluated=False,
                    success=None,
                    action=NOT_EVALUATED,
                    details={"reason": why},
                )
            )
        else:
            run.append(e.name)
    if not run or frame.df is None:
        return outcomes, to_quarantine
    # collected before the engine is asked for: the stage's first frames need no GX (start_engine)
    local = collect_local(suite, frame.df, run, local_max_rows)
    for raw in engine().validate(suite, frame.df, params, run_id, run, local, docs):
        e = raw.expectation
        r = raw.result
        details: dict[str, Any] = {"kwargs": raw.kwargs}
        for k in ("partial_unexpected_list", "missing_count"):
            if k in r:
                details[k] = r[k]
        if e.name in frame.notes:
            details["notes"] = frame.notes[e.name]
        if raw.exception:
            details["exception"] = raw.exception
        policy = policies[e.name]
        o = _outcome(
            suite,
            e,
            policy,
            evaluated=True,
            success=raw.success,
            action=action_for(raw.success, True, policy),
            observed_value=plain(r.get("observed_value")),
            element_count=r.get("element_count"),
            unexpected_count=r.get("unexpected_count"),
            unexpected_percent=r.get("unexpected_percent"),
            details=details,
        )
        outcomes.append(o)
        if o.action == QUARANTINED:
            to_quarantine.append((o, violation_predicate(e, raw.kwargs)))
    order = {e.name: i for i, e in enumerate(suite.expectations)}
    outcomes.sort(key=lambda o: order[o.expectation])
    return outcomes, to_quarantine


def run_quality(
    spark: SparkSession,
    tables: Tables,
    run_id: str,
    settings: QualitySettings,
    *,
    layers: tuple[str, ...] = LAYERS,
    partitions: dict[str, int | None] | None = None,
    truth: TruthSnapshot | None = None,
    job: str | None = None,
    after: str | None = None,
    now_ms: int | None = None,
    earlier: list[Outcome] | None = None,
    suites: Suites | None = None,
    full: bool = False,
) -> QualityReport:
    """Evaluate the suites of ``layers``; quarantine, persist results, build Data Docs. A suite is
    validated on what changed since the last validation where it can be (incremental.py);
    ``full``: every suite on its whole tables."""

    suites = suites or load_suites()
    report = QualityReport(run_id, after)
    inputs = Inputs(now_ms if now_ms is not None else int(time.time() * 1000), partitions or {}, truth)
    params = params_of(settings)
    requirements = {"truth_snapshot"} if truth is not None else set()
    if "silver" in layers:
        settled = settle_quarantine(spark, tables)  # finish a move a killed run left half done
        if settled:
            report.notes.append(f"finished an earlier quarantine move: {settled}")
    # a truth snapshot is a live input: those runs always validate
    memo = dict((lake.latest_metadata(spark, tables.path("quality", "results")) or {}).get("validated") or {})
    key, seen = "+".join(layers), None
    # every data table opened once: the fingerprint and the suites' driver reads use these snapshots
    snapshots = _snapshots(spark, tables, _input_tables(tables, suites, layers))
    if truth is None:
        with lake.pinned(snapshots):
            seen = _inputs_fingerprint(spark, tables, suites, layers, params, settings, partitions, now_ms)
        if not full and (memo.get(key) or {}).get("inputs") == seen:
            return _unchanged(spark, tables, report, memo[key]["run_id"], [s for x in layers for s in suites.layer(x)])
    start_engine()  # GX imports while the first frames are computed
    found: list[Offenders] = []
    counted: list[tuple[Outcome, DataFrame]] = []
    previous = _earlier_validation(spark, tables, memo.get(key), seen) if seen is not None and not full else None

    todo = [suite for layer in layers for suite in suites.layer(layer)]
    with lake.pinned(snapshots):
        local = {s.name: fits_driver(spark, tables, s.frame, settings.local_max_rows) for s in todo}

    def validate(suite: Suite) -> tuple[str, tuple[list[Outcome], list[tuple[Outcome, str]], Frame | None]]:
        started = time.perf_counter()
        with lake.pinned(snapshots):
            done = _validate_suite(
                spark, tables, suite, previous, seen, inputs, params, run_id, settings, requirements, local[suite.name]
            )
        log.debug("quality: %s validated (%s) in %.2f s", suite.name, done[0], time.perf_counter() - started)
        return done

    done = _validate_all(validate, todo, local)
    for suite, (kind, (outcomes, to_q, frame)) in zip(todo, done, strict=True):
        report.validated[kind] = report.validated.get(kind, 0) + 1
        report.outcomes += outcomes
        for o, predicate in to_q:
            rows = lake.spark_frame(spark, frame.df) if local_rows(frame) else frame.df
            keys = offender_keys(rows, suite.key, predicate)
            detail = f"{o.suite}.{o.expectation} ({o.expectation_type} {o.details.get('kwargs')})"
            found.append(offenders(o.suite, o.expectation, detail, suite.version, keys))
            counted.append((o, keys))
    for o, keys in counted:
        o.quarantined_rows = keys.count()
    if found:
        report.quarantined = move_to_quarantine(spark, tables, found)  # silver's write
        log.warning("quality: %d records moved to silver.quarantine", report.quarantined)
    if seen is not None:  # what each set of layers was last validated at, carried from commit to commit
        memo[key] = {"run_id": run_id, "inputs": seen}
    write_results(spark, tables, run_id, job, after, report.outcomes, {"validated": memo})
    report.data_docs = build_docs(tables.root, run_id, (earlier or []) + report.outcomes)
    for o in report.outcomes:
        if o.action in (FAILED, "warned"):
            log.warning(
                "quality: %s.%s %s (%s unexpected of %s, observed %s) -> %s",
                o.suite,
                o.expectation,
                "failed",
                o.unexpected_count,
                o.element_count,
                o.observed_value,
                o.action,
            )
    return report


def _validate_all(validate: Callable[[Suite], T], todo: list[Suite], local: dict[str, bool]) -> list[T]:
    """``validate`` of every suite, in ``todo``'s order: the suites whose frames Spark builds
    ``SUITES_AT_ONCE`` at a time in a thread of their own (their jobs mostly wait), those built on
    the driver one after another meanwhile (Python work that holds the GIL: four at once took
    0.4-0.6 s longer than one at a time on the 200k increment, docs/performance.md)."""
    on_spark = [s for s in todo if not local[s.name]]
    on_driver = [s for s in todo if local[s.name]]
    with ThreadPoolExecutor(max_workers=1) as side:
        spark_done = side.submit(inheritable_thread_target(lake.parallel_map), validate, on_spark, SUITES_AT_ONCE)
        by_name = {s.name: validate(s) for s in on_driver}
        by_name.update(zip((s.name for s in on_spark), spark_done.result(), strict=True))
    return [by_name[s.name] for s in todo]


def _settings(inputs: dict[str, Any]) -> dict[str, Any]:
    """A fingerprint without its tables: what must be equal for an earlier validation's outcomes
    to be built on."""
    return {k: v for k, v in inputs.items() if k not in ("tables", "table_ids")}


@dataclass
class _Earlier:
    """The validation an incremental one builds on: its run, table versions and outcomes."""

    run_id: str
    versions: dict[str, int | None]
    outcomes: dict[str, list[Outcome]]  # suite -> its outcomes


def _earlier_validation(
    spark: SparkSession, tables: Tables, memo: dict[str, Any] | None, seen: dict[str, Any]
) -> _Earlier | None:
    """The last validation of these layers, when it ran with the same suites and settings."""
    if not memo or not memo.get("inputs") or _settings(memo["inputs"]) != _settings(seen):
        return None
    by_suite: dict[str, list[Outcome]] = {}
    for o in read_results(spark, tables, memo["run_id"])[1]:
        by_suite.setdefault(o.suite, []).append(o)
    versions = dict(memo["inputs"]["tables"])
    ids = memo["inputs"].get("table_ids") or {}
    for name, now_id in (seen.get("table_ids") or {}).items():
        if versions.get(name) is not None and ids.get(name) != now_id:
            versions[name] = incremental.RECREATED  # dropped (and created again) since: no version in common
    return _Earlier(memo["run_id"], versions, by_suite)


def _validate_suite(
    spark: SparkSession,
    tables: Tables,
    suite: Suite,
    earlier: _Earlier | None,
    seen: dict[str, Any] | None,
    inputs: Inputs,
    params: dict[str, Any],
    run_id: str,
    settings: QualitySettings,
    requirements: set[str],
    local: bool,
) -> tuple[str, tuple[list[Outcome], list[tuple[Outcome, str]], Frame | None]]:
    """One suite, validated as :func:`incremental.plan` says (``local``: its frames built on the
    driver, frames.fits_driver); returns how, with the outcomes, the rules to quarantine and the
    frame they were found in."""
    how = incremental.Plan(incremental.FULL, "a full validation")
    if earlier is not None and seen is not None:
        previous = earlier.outcomes.get(suite.name)
        how = incremental.plan(
            spark, tables, suite, previous, earlier.versions, seen["tables"], settings.incremental_min_rows
        )
    log.debug("quality: %s: %s (%s)", suite.name, how.kind, how.reason)
    if how.kind == incremental.UNCHANGED:
        assert earlier is not None
        return how.kind, (incremental.carried(earlier.outcomes[suite.name], earlier.run_id), [], None)
    if how.kind == incremental.INCREMENTAL:
        assert earlier is not None
        done = _validate_changes(
            spark, tables, suite, how, earlier, inputs, params, run_id, settings, requirements, local
        )
        if done is not None:
            return how.kind, done
        log.debug("quality: %s: the parts of the increment do not combine: validated in full", suite.name)
    frame = load_frame(suite.frame, spark, tables, inputs, local=local)
    common = (params, run_id, settings.policy, dict(settings.overrides), requirements, settings.local_max_rows)
    outcomes, to_q = evaluate_suite(suite, frame, *common)
    return incremental.FULL, (outcomes, to_q, frame)


def _validate_changes(
    spark: SparkSession,
    tables: Tables,
    suite: Suite,
    how: incremental.Plan,
    earlier: _Earlier,
    inputs: Inputs,
    params: dict[str, Any],
    run_id: str,
    settings: QualitySettings,
    requirements: set[str],
    local: bool,
) -> tuple[list[Outcome], list[tuple[Outcome, str]], Frame] | None:
    """The suite validated on the rows or groups an increment changed, merged with the earlier
    outcomes (incremental.py); None when the parts do not combine (a full validation then)."""
    assert how.changes is not None and how.scope is not None
    names = sources(suite.frame)
    then: Frame | None = None
    if how.scope.per_row and how.changes.inserts_only:
        inserted = incremental.inserted_reader(spark, tables, how.changes, local)
        now = load_frame(suite.frame, spark, tables, inputs, inserted, local)
    else:
        reader = incremental.group_reader
        now = load_frame(suite.frame, spark, tables, inputs, reader(spark, tables, how, names, None, local), local)
        earlier_groups = reader(spark, tables, how, names, earlier.versions, local)
        then = load_frame(suite.frame, spark, tables, inputs, earlier_groups, local)
    common = (params, run_id, settings.policy, dict(settings.overrides), requirements, settings.local_max_rows)
    now_outcomes, to_q = evaluate_suite(suite, now, *common)
    then_outcomes = {o.expectation: o for o in evaluate_suite(suite, then, *common, docs=False)[0]} if then else {}
    prior = {o.expectation: o for o in earlier.outcomes[suite.name]}
    what = {"as_of_run": earlier.run_id, "how": incremental.INCREMENTAL, "changes": how.reason}
    merged: dict[str, Outcome] = {}
    for o in now_outcomes:
        m = incremental.merge(prior[o.expectation], o, then_outcomes.get(o.expectation), what)
        if m is None:
            return None
        merged[o.expectation] = m
    return list(merged.values()), [(merged[o.expectation], p) for o, p in to_q], now


# tables whose versions say nothing about the data a suite reads: the run log moves every run
_NOT_INPUTS = {("bronze", "runs"), ("quality", "results")}


def _input_tables(tables: Tables, suites: Suites, layers: tuple[str, ...]) -> list[tuple[str, str]]:
    """The tables the frames of the suites of ``layers`` read (frames.SOURCES): what their
    validation depends on. A checkpoint's fingerprint holds these alone, so gold's commits do not
    make the next run's bronze and silver suites validate again."""
    read = {source for layer in layers for suite in suites.layer(layer) for source in sources(suite.frame)}
    return [
        (layer, table)
        for layer in ("bronze", "silver", "gold")
        for table in tables.specs.get(layer, {})
        if f"{layer}.{table}" in read and (layer, table) not in _NOT_INPUTS
    ]


def _snapshots(spark: SparkSession, tables: Tables, inputs: list[tuple[str, str]]) -> dict[str, Any]:
    """The ``inputs`` tables as delta-rs opens them now (lake.pinned), or none when it cannot open
    one (every read then opens the table itself, or asks Spark)."""
    if lake.remote(spark):
        return {}
    try:
        return lake.open_tables(tables.path(layer, table) for layer, table in inputs)
    except Exception as exc:
        log.debug("quality: delta-rs cannot open every table (%s): each read opens its own", exc)
        return {}


def _inputs_fingerprint(
    spark: SparkSession,
    tables: Tables,
    suites: Suites,
    layers: tuple[str, ...],
    params: dict[str, Any],
    settings: QualitySettings,
    partitions: dict[str, int | None] | None,
    now_ms: int | None,
) -> dict[str, Any]:
    """What the suites of ``layers`` would see: the version of every table their frames read, the
    suites' expectations, the parameters, policies and partition counts, and the clock when one is given
    (a test, a replay of a past run). Equal fingerprints, equal outcomes."""
    identities = {
        f"{layer}.{table}": lake.identity(spark, tables.path(layer, table))
        for layer, table in _input_tables(tables, suites, layers)
    }
    return {
        "tables": {name: version for name, (version, _) in identities.items()},
        # a table dropped and created again restarts its versions: the memo must not take its
        # version 3 for the version 3 it validated (incremental.py reads changes between them)
        "table_ids": {name: table_id for name, (_, table_id) in identities.items()},
        "suites": {
            s.name: hashlib.sha256(repr((s.version, s.expectations)).encode()).hexdigest()[:16]
            for layer in layers
            for s in suites.layer(layer)
        },
        "clock": now_ms,
        "params": params,
        "policy": settings.policy,
        "overrides": dict(sorted(dict(settings.overrides).items())),
        "partitions": {str(k): v for k, v in sorted((partitions or {}).items())},
    }


def _unchanged(
    spark: SparkSession, tables: Tables, report: QualityReport, earlier: str, suites: list[Suite]
) -> QualityReport:
    """Nothing the suites read changed since run ``earlier`` validated it: its outcomes stand (a
    no-op run costs no validation; a rule that failed then fails this run too)."""
    _, outcomes = read_results(spark, tables, earlier)
    order = {(s.name, e.name): i for i, (s, e) in enumerate((s, e) for s in suites for e in s.expectations)}
    report.outcomes = sorted((o for o in outcomes if (o.suite, o.expectation) in order),
                             key=lambda o: order[(o.suite, o.expectation)])  # fmt: skip
    report.notes.append(f"nothing changed since quality run {earlier} validated these tables: its outcomes stand")
    log.debug("quality: nothing changed since run %s; its %d outcomes stand", earlier, len(report.outcomes))
    return report


def build_docs(lakehouse_root: str, run_id: str, outcomes: list[Outcome]) -> str:
    """The run's Data Docs under ``<root>/quality/data_docs/<run_id>/``; returns its index page.
    GX writes sites to local disks: on an object-store root they are built in a temporary
    directory and uploaded, and ``LATEST`` (no links on a store) names the newest run."""
    root = docs_root(lakehouse_root)
    if root is not None:
        site = root / run_id
        site.mkdir(parents=True, exist_ok=True)
        index = engine().build_docs(site)
        add_summary(index, run_id, outcomes)
        point_latest(root, run_id)
        return str(Path(index))
    target = f"{docs_uri(lakehouse_root)}/{run_id}"
    site = _staging() / run_id  # the same for a run's later checkpoints: GX adds to its site
    site.mkdir(exist_ok=True)
    index = engine().build_docs(site)
    add_summary(index, run_id, outcomes)
    files.upload_tree(site, target)
    files.write_bytes(f"{docs_uri(lakehouse_root)}/LATEST", (run_id + "\n").encode())
    return f"{target}/index.html"


_STAGING: list[Path] = []


def _staging() -> Path:
    """This process's local directory for Data Docs on their way to an object store (removed at exit)."""
    if not _STAGING:
        path = Path(tempfile.mkdtemp(prefix="offsets-lakehouse-docs-"))
        atexit.register(shutil.rmtree, path, ignore_errors=True)
        _STAGING.append(path)
    return _STAGING[0]
