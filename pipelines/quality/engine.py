"""Great Expectations Core 1.x: suites built from their YAML, run on the frames quality builds.

One ephemeral GX context per process (creating it is cheap, its stores are in memory), with two
data sources of one DataFrame asset per suite each:

* ``pandas``: a frame of at most ``local_max_rows`` rows (jobs.yaml ``quality.local_max_rows``)
  is collected to the driver once (only the columns its rules read, through Arrow) and validated
  by GX's pandas engine. On Spark, GX computes every rule with Spark jobs of its own (about 13
  per suite): for the frames of a 200k-record lakehouse that was most of the stage's time.
* ``spark``: larger frames stay distributed.

Both engines give the same counts on the same rows (tests/spark/test_quality_rules.py runs every
rule on both). Validation results stay in the context's in-memory store for the Data Docs of the
current run (cleared when the run changes).

The stage computes several suites' frames at once (their Spark jobs are small and mostly wait);
the GX context is not made for threads, so whatever touches it holds the engine's lock, and only
the frames' computation runs in parallel.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pipelines.quality.suites import ExpectationSpec, Suite, substitute

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("offsets_lakehouse")

DATASOURCE = "offsets_lakehouse"
LOCAL_DATASOURCE = "offsets_lakehouse_local"
RESULT_FORMAT = {"result_format": "BASIC", "partial_unexpected_count": 10}
# Counts come from aggregates GX bundles into one Spark query per domain, but each sample of
# unexpected values is a query of its own per expectation (a filtered scan under a limit, run
# even when nothing is unexpected). A first pass asks for counts only (a limit of 0, which Spark
# answers without a job); only a suite with a failing rule is validated again with samples.
COUNTS_ONLY = {"result_format": "BASIC", "partial_unexpected_count": 0}


@dataclass
class RawResult:
    """What GX said about one expectation."""

    expectation: ExpectationSpec
    kwargs: dict[str, Any]
    success: bool
    result: dict[str, Any]
    exception: str | None = None


# Held around every import of Great Expectations. GX's package imports itself in circles; two
# threads importing it at once (the preload below and a stage's first use) make Python's import
# machinery break the cycle by handing one of them a partly initialised module (ImportError:
# "cannot import name ... from partially initialized module"). Once one import finished, the
# others are dictionary lookups.
_IMPORTING = threading.Lock()


def import_gx() -> Any:
    """The ``great_expectations`` package, imported once, by one thread at a time."""
    with _IMPORTING:
        # read at import: GX would otherwise send usage statistics
        os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
        import great_expectations as gx
        import great_expectations.expectations  # a subpackage: bound on gx once imported

        return gx


def expectation_class(type_name: str) -> type:
    """``expect_column_values_to_be_between`` -> ``gx.expectations.ExpectColumnValuesToBeBetween``."""
    gxe = import_gx().expectations
    cls = getattr(gxe, "".join(p.capitalize() for p in type_name.split("_")), None)
    if cls is None:
        raise ValueError(f"not a Great Expectations expectation type: {type_name!r}")
    return cls


def build_suite(suite: Suite, params: dict[str, Any], names: list[str] | None = None):
    """The GX ExpectationSuite of ``suite`` (only the expectations in ``names`` when given)."""
    gx = import_gx()
    gx_suite = gx.ExpectationSuite(name=suite.name, meta={"version": suite.version, "description": suite.description})
    for e in suite.expectations:
        if names is not None and e.name not in names:
            continue
        kwargs = substitute(e.kwargs, params)
        gx_suite.add_expectation(expectation_class(e.type)(**kwargs, meta={"name": e.name}))
    return gx_suite


class Engine:
    """The GX context of this process."""

    def __init__(self) -> None:
        # Great Expectations is imported here, not with the module: it is heavy (seconds), and
        # only a run that validates needs it
        gx = import_gx()
        self.gx = gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.context = gx.get_context(mode="ephemeral")
        # no per-metric progress bars on stderr: the stage logs what it validates
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        self.sources = {
            "spark": self.context.data_sources.add_spark(DATASOURCE),
            "pandas": self.context.data_sources.add_pandas(LOCAL_DATASOURCE),
        }
        self.run_id: str | None = None
        self._sites: set[str] = set()
        # suite -> (engine and what it checks, its GX validation definition): _definition
        self._definitions: dict[str, tuple[str, Any]] = {}
        self._lock = threading.RLock()  # the context, its stores and GX's objects: one thread at a time

    def _start_run(self, run_id: str) -> None:
        if run_id != self.run_id:
            store = self.context.validation_results_store
            for key in list(store.list_keys()):
                store.remove_key(key)
            self.run_id = run_id

    def _definition(self, suite: Suite, params: dict[str, Any], names: list[str] | None, kind: str):
        """The GX validation definition of the suite (its expectations in ``names``, with ``params``)
        on the ``kind`` engine: kept for the process, made again only when what it checks changes
        (making one saves the suite and the definition in GX's stores, 60-70 ms a suite)."""
        chosen = [e for e in suite.expectations if names is None or e.name in names]
        # per suite, not per engine: both engines' definitions share the suite GX stores by name,
        # and making one replaces it (GX then refuses the other's as stale)
        key = repr([kind, suite.version, *((e.name, e.type, substitute(e.kwargs, params)) for e in chosen)])
        kept = self._definitions.get(suite.name)
        if kept is not None and kept[0] == key:
            return kept[1]
        ctx = self.context
        source = self.sources[kind]
        try:
            asset = source.get_asset(suite.name)
        except LookupError:
            asset = source.add_dataframe_asset(suite.name)
        try:
            batch = asset.get_batch_definition("whole")
        except (KeyError, LookupError):
            batch = asset.add_batch_definition_whole_dataframe("whole")
        saved = ctx.suites.add_or_update(build_suite(suite, params, names))
        name = f"validate {suite.name} ({kind})"
        with contextlib.suppress(Exception):  # not there on first use in this process
            ctx.validation_definitions.delete(name)
        definition = ctx.validation_definitions.add(self.gx.ValidationDefinition(name=name, data=batch, suite=saved))
        self._definitions[suite.name] = (key, definition)
        return definition

    def validate(
        self,
        suite: Suite,
        df: DataFrame,
        params: dict[str, Any],
        run_id: str,
        names: list[str] | None = None,
        local: Any = None,
        docs: bool = True,
    ) -> list[RawResult]:
        """Run the suite's expectations (or those in ``names``) on ``df``; one result each. Counts
        first; when a rule fails, again with samples of unexpected values, and that validation
        replaces the first in the store the Data Docs are built from. ``local``: ``df`` as
        :func:`collect_local` collected it, validated by GX's pandas engine; None: by Spark.
        ``docs``: the validation stays in the store the run's Data Docs are built from."""
        if local is not None:
            return self._stored(suite, names, "pandas", local, params, run_id, docs)
        # GX reads the frame once per rule and per retry: computed once, kept for those reads
        df = df.persist()
        try:
            return self._stored(suite, names, "spark", df, params, run_id, docs)
        finally:
            df.unpersist()

    def _stored(self, suite: Suite, names, kind: str, data, params: dict[str, Any], run_id: str, docs: bool):
        """:meth:`_validate` under the lock; ``docs`` False: its results leave the store again."""
        with self._lock:
            self._start_run(run_id)
            store = self.context.validation_results_store
            stored = set(store.list_keys())
            try:
                return self._validate(self._definition(suite, params, names, kind), suite, data, params, run_id)
            finally:
                if not docs:
                    for key in set(store.list_keys()) - stored:
                        store.remove_key(key)

    def _validate(self, definition, suite: Suite, data, params: dict[str, Any], run_id: str):
        store = self.context.validation_results_store
        stored = set(store.list_keys())
        results = self._run(definition, suite, data, params, run_id, COUNTS_ONLY)
        if all(r.success for r in results):
            return results
        for key in set(store.list_keys()) - stored:
            store.remove_key(key)
        return self._run(definition, suite, data, params, run_id, RESULT_FORMAT)

    def _run(self, definition, suite: Suite, data, params: dict[str, Any], run_id: str, result_format: dict):
        run = self.gx.RunIdentifier(run_name=run_id, run_time=datetime.now(timezone.utc))
        validation = definition.run(batch_parameters={"dataframe": data}, result_format=result_format, run_id=run)
        out = []
        for r in validation.results:
            spec = suite.expectation(r.expectation_config.meta["name"])
            info = r.exception_info or {}
            raised = info.get("raised_exception") if isinstance(info, dict) else None
            message = info.get("exception_message") if raised else None
            result = dict(r.result or {})
            if result.get("element_count") == 0:  # no rows, nothing counted: Spark says None, pandas 0
                result.update(unexpected_count=None, unexpected_percent=None)
            out.append(RawResult(spec, substitute(spec.kwargs, params), bool(r.success), result, message))
        return out

    def build_docs(self, directory: Path) -> Path:
        """Data Docs of this run's validation results under ``directory``; returns index.html."""
        with self._lock:
            site = f"site-{directory.name}"
            if site not in self._sites:
                backend = {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(directory)}
                self.context.add_data_docs_site(
                    site,
                    {
                        "class_name": "SiteBuilder",
                        "store_backend": backend,
                        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
                    },
                )
                self._sites.add(site)
            self.context.build_data_docs(site_names=[site])
        return directory / "index.html"


def collect_local(suite: Suite, df: Any, names: list[str] | None, local_max_rows: int):
    """``df`` as a pandas DataFrame for GX's pandas engine when it has at most ``local_max_rows``
    rows, else None (0: never). A Spark frame is computed and collected by one Spark job; it needs
    no GX, so a stage's first frames are computed while GX is still being imported
    (:func:`start_engine`), and outside the engine's lock, while other suites validate. A frame
    built on the driver (an Arrow table, local_frames.py) is converted as Spark's ``toPandas``
    converts what it collects."""
    if isinstance(df, pa.Table):
        return df.select(columns_read(suite, df.column_names, names)).to_pandas(
            date_as_object=True, coerce_temporal_nanoseconds=True
        )
    if local_max_rows <= 0:
        return None
    local = local_frame(df.limit(local_max_rows + 1), suite, names)
    return local if len(local) <= local_max_rows else None


def columns_read(suite: Suite, columns: list[str], names: list[str] | None = None) -> list[str]:
    """The columns the suite's expectations (those in ``names`` when given) read, of ``columns``
    (all of them when one reads none by name: a table-level rule)."""
    read: list[str] = []
    for e in suite.expectations:
        if names is not None and e.name not in names:
            continue
        named = [c for c in (e.kwargs.get("column"), *(e.kwargs.get("column_list") or [])) if c]
        if not named:
            return list(columns)
        read += [c for c in named if c not in read]
    return read


def local_frame(df: DataFrame, suite: Suite, names: list[str] | None = None):
    """``df`` as a pandas DataFrame of the columns the suite's expectations (those in ``names``
    when given) read (:func:`columns_read`)."""
    return df.select(*columns_read(suite, df.columns, names)).toPandas()


_ENGINE: Engine | None = None
_CREATING = threading.Lock()


def engine() -> Engine:
    """The process's GX engine (created on first use)."""
    global _ENGINE
    with _CREATING:
        if _ENGINE is None:
            _ENGINE = Engine()
    return _ENGINE


def preload() -> None:
    """Import Great Expectations in a thread of its own (3-4 s on 2 cores, the import alone) while
    a run's data stages work and Spark starts: its quality stage then only makes GX's context. The
    context itself is made later (:func:`start_engine`): GX's Spark data source takes the session
    that exists when it is made, which must be the run's own."""
    if _ENGINE is None and "great_expectations" not in sys.modules:
        threading.Thread(target=_import_quietly, name="gx-import", daemon=True).start()


def _import_quietly() -> None:
    with contextlib.suppress(Exception):  # the engine imports it again, and says what failed
        import_gx()


def start_engine() -> None:
    """Create the process's GX engine in a thread of its own: importing Great Expectations and
    making its context take seconds (3-5 s here), which a stage spends computing its first frames
    instead of waiting. A failure there is raised again by the next :func:`engine` call."""
    if _ENGINE is None:
        threading.Thread(target=_create_quietly, name="gx-engine", daemon=True).start()


def _create_quietly() -> None:
    with contextlib.suppress(Exception):
        engine()
