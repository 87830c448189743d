"""Whole-pipeline benchmark: a job's stages on an empty lakehouse, then an increment, then a no-op run.

    python bench/pipeline_bench.py --records 1000000 [--increment-percent 1] [--seed 1] [--json out.json]

The generator's realistic mix (256 KiB segments by default; cached under var/bench/ and shared
with bench/gold_bench.py) is split per offsets partition at a batch boundary so that about
``--increment-percent`` of its records are held back (bench/common.py ``split_log``). A job is
written for a fresh lakehouse in a temporary directory — one segments source over the split log,
stages bronze, silver and gold (and quality with ``--quality``), Spark settings from the
repository's jobs.yaml — and run through the public runner API (``Context``, ``run_job``), one
stage at a time:

With ``--root s3a://bucket/prefix`` the lakehouse is on an object store (its endpoint and keys from
the ``AWS_*`` environment, docs/object-storage.md; the source log stays on local disk), under a new
sub-prefix named by the start time; ``--count-requests`` puts a counting proxy
(tests/support/store.py) between the pipeline and the store and reports the requests of each run
by HTTP method.

1. ``initial``: the base, on the empty lakehouse;
2. ``increment``: after the held-back data appeared the way a broker writes it (active segments
   grown, new segments rolled in);
3. ``no-op``: again, nothing new.

Per run and stage: wall seconds, rows and rows/s, Delta commits (table versions under the
lakehouse root, from the ``_delta_log`` directories), Spark jobs (a job group per stage), peak
resident memory of the driver (this Python process) and of its JVM (sampled in the background);
each stage's per-step seconds; the machine's load average at start and end. Spark's start is timed
apart and not counted. Exits 1 unless gold equals the generator's expected state after the
increment and after the no-op run: a benchmark of a wrong result measures nothing. With
``--quality``, also unless the increment's quality outcomes (validated on what changed where they
can be) equal a full validation's of the same tables, rule by rule.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import ctypes
import gc
import importlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import Split, generated, gold_differences, quality_differences, split_log  # noqa: E402
from pipelines.runner import Context, quality_job, run_job  # noqa: E402

RUNS = ("initial", "increment", "no-op")
DATA_STAGES = ("bronze", "silver", "gold")
JOB = "bench"
# the gold benchmark's log: one cache for both (10M records take ~20 minutes to generate)
SEGMENT_BYTES = 256 * 1024
CACHE_PREFIX = "gold"


# -- the job ------------------------------------------------------------------------------------------
def write_jobs(path: Path, lakehouse: Path | str, source: Path, stages: list[str], conf: dict[str, str]) -> None:
    """jobs.yaml for the benchmark: the repository's Spark settings (what ``offsets-lakehouse run``
    uses, so tuning them there shows here) with ``conf`` on top."""
    spark = dict(yaml.safe_load((REPO / "jobs.yaml").read_text()).get("spark") or {})
    spark["conf"] = {
        **(spark.get("conf") or {}),
        "spark.ui.enabled": "false",
        # the status store keeps this many jobs; the per-stage job counts need every one of a stage
        "spark.ui.retainedJobs": "100000",
        **conf,
    }
    doc = {
        "lakehouse": {"root": str(lakehouse)},
        "spark": spark,
        # every soft delete kept, so that gold can be compared with the expected state in full
        "gold": {"soft_delete_retention_days": None},
        "sources": {"bench": {"kind": "segments", "cluster": "bench", "paths": [str(source)]}},
        # quality rules warn: the generator's deliberately hanging transaction must not stop a run
        "jobs": {JOB: {"sources": ["bench"], "stages": stages, "quality": {"policy": "warn"}}},
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


# -- what a run costs -----------------------------------------------------------------------------------
_COMMIT = re.compile(r"^(\d{20})\.json$")


def table_versions(root: Path | str) -> dict[str, int]:
    """Latest version of every Delta table under ``root`` (its highest ``_delta_log/<n>.json``)."""
    if isinstance(root, str):
        return _store_versions(root)
    out: dict[str, int] = {}
    for directory, subdirs, _ in os.walk(root):
        if "_delta_log" in subdirs:
            commits = [int(m.group(1)) for f in os.listdir(Path(directory, "_delta_log")) if (m := _COMMIT.match(f))]
            if commits:
                out[str(Path(directory).relative_to(root))] = max(commits)
            subdirs.clear()  # a table's data directories hold no other tables
    return out


def _store_versions(root: str) -> dict[str, int]:
    """:func:`table_versions` of a lakehouse on an object store, listed by the store's own endpoint
    (``STORE_DIRECT``: not through the counting proxy, so the benchmark's listings are not counted)."""
    from pipelines.runtime.storage import S3Settings, split_uri

    client = S3Settings.resolve({}, {**os.environ, "AWS_ENDPOINT_URL": STORE_DIRECT or ""}).client()
    bucket, prefix = split_uri(root)
    out: dict[str, int] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        for obj in page.get("Contents", []):
            table, _, name = obj["Key"][len(prefix) + 1 :].partition("/_delta_log/")
            if (m := _COMMIT.match(name)) and "/" not in name:
                out[table] = max(out.get(table, -1), int(m.group(1)))
    return out


STORE_DIRECT: str | None = None  # the store's endpoint behind the counting proxy
QUALITY_OUTCOMES: dict[str, list[Any]] = {}  # run -> its quality stage's outcomes


def commits_between(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Delta commits per table between two :func:`table_versions` (new tables from version 0)."""
    out = {t: v - before.get(t, -1) for t, v in after.items()}
    return {t: n for t, n in sorted(out.items()) if n}


def _status(pid: int | str, field: str) -> int | None:
    """A ``/proc/<pid>/status`` memory field in KiB (None: the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _jvm_pid() -> int | None:
    """The ``java`` process among this process's descendants: the JVM pyspark started."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        pid, rest = text.split(" (", 1)
        comm, fields = rest.rsplit(") ", 1)
        parents.setdefault(int(fields.split()[1]), []).append(int(pid))
        if comm == "java":
            parents.setdefault(-1, []).append(int(pid))
    java = set(parents.get(-1, ()))
    todo = list(parents.get(os.getpid(), ()))
    while todo:
        pid = todo.pop()
        if pid in java:
            return pid
        todo += parents.get(pid, ())
    return None


class Memory:
    """Resident memory (VmRSS, KiB) of the driver and its JVM, sampled every ``interval`` seconds
    in a background thread; :meth:`take` returns the peaks since the last take."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.jvm: int | None = None
        self._peaks = {"driver": 0, "jvm": 0}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pipeline-bench-rss", daemon=True)

    def sample(self) -> None:
        if self.jvm is None or _status(self.jvm, "VmRSS") is None:
            self.jvm = _jvm_pid()
        now = {"driver": _status("self", "VmRSS") or 0, "jvm": (_status(self.jvm, "VmRSS") or 0) if self.jvm else 0}
        with self._lock:
            self._peaks = {k: max(v, now[k]) for k, v in self._peaks.items()}

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def take(self) -> dict[str, int]:
        self.sample()
        with self._lock:
            peaks, self._peaks = self._peaks, {"driver": 0, "jvm": 0}
        return {k: round(v / 1024) for k, v in peaks.items()}

    def high_water_marks(self) -> dict[str, int | None]:
        """VmHWM of both processes, MiB: the peak over each process's whole life."""
        jvm = _status(self.jvm, "VmHWM") if self.jvm else None
        return {"driver": round((_status("self", "VmHWM") or 0) / 1024), "jvm": round(jvm / 1024) if jvm else None}

    def __enter__(self) -> Memory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _release_memory() -> None:
    """Hand the memory Python freed back to the system (glibc keeps freed arenas otherwise), so a
    run's peak RSS is the pipeline's, not what the benchmark's own checks left behind."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: the peaks may include the checks
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _add_steps(steps: Any) -> dict[str, float]:
    """Seconds per step summed over several sources' results."""
    total: dict[str, float] = {}
    for one in steps:
        for name, seconds in one.items():
            total[name] = round(total.get(name, 0.0) + seconds, 1)
    return total


# -- one run --------------------------------------------------------------------------------------------
def stage_numbers(stage: str, details: list[dict[str, Any]]) -> dict[str, Any]:
    """What a stage's report details say about its work: rows in, rows written, steps."""
    if stage == "bronze":
        return {
            "rows": sum(d["rows_read"] for d in details),
            "inserted": sum(d["rows_inserted"] for d in details),
            "conflicts": sum(d["conflicts"] for d in details),
            "read_issues": sum(len(d["issues"]) for d in details),
            "steps": _add_steps(d.get("steps", {}) for d in details),
        }
    if stage == "silver":
        (d,) = details
        return {
            "rows": d["bronze_rows"],
            "inserted": sum(d["inserted"].values()),
            "mode": d["mode"],
            "quarantined": d["quarantined"],
            "inserted_per_table": {t: n for t, n in sorted(d["inserted"].items()) if n},
            "steps": d["steps"],
        }
    if stage == "gold":
        (d,) = details
        return {
            "rows": d["events"],
            "inserted": None,
            "partitions_incremental": d["partitions_incremental"],
            "partitions_recomputed": d["partitions_recomputed"],
            "steps": d["steps"],
        }
    return {  # quality
        "rows": None,
        "inserted": None,
        "suites": sum(len(d["suites"]) for d in details),
        "failed": [f for d in details for f in d["failed"]],
        "quarantined": sum(d["quarantined"] for d in details),
        # suites per way of validation: unchanged, incremental (on the changes), full
        "validated": {
            k: sum(d.get("validated", {}).get(k, 0) for d in details) for k in ("unchanged", "incremental", "full")
        },
    }


def run_once(
    ctx: Context, label: str, stages: list[str], root: Path | str, memory: Memory, proxy: Any = None
) -> dict[str, Any]:
    """The job's stages one by one (``run_job`` per stage), each in its own Spark job group."""
    sc = ctx.spark.sparkContext
    tracker = sc.statusTracker()
    outside = set(tracker.getJobIdsForGroup(None))
    first = table_versions(root)
    memory.take()
    if proxy is not None:
        proxy.reset_counts()
    out: dict[str, Any] = {"run": label, "stages": {}}
    os.sync()  # no dirty pages of the benchmark's own copies written back during the run
    try:
        for stage in stages:
            group = f"pipeline-bench-{label}-{stage}"
            sc.setJobGroup(group, f"pipeline_bench {label}: {stage}")
            before = table_versions(root)
            t = time.perf_counter()
            report = run_job(ctx, JOB, stages=[stage])
            seconds = time.perf_counter() - t
            if report.status != "ok":
                sys.exit(f"{label}: stage {stage} ended {report.status}: {json.dumps(report.to_json(), default=str)}")
            if stage == "quality":
                QUALITY_OUTCOMES[label] = report.quality_outcomes
            numbers = stage_numbers(stage, [d for s in report.stages for d in s.details])
            out["stages"][stage] = {
                "seconds": round(seconds, 2),
                "reported_seconds": round(sum(s.seconds for s in report.stages), 2),  # without the run log row
                **numbers,
                "rows_per_s": round(numbers["rows"] / seconds) if numbers["rows"] else None,
                "delta_commits": sum(commits_between(before, table_versions(root)).values()),
                "spark_jobs": len(tracker.getJobIdsForGroup(group)),
            }
            print(f"{label}: {stage} {seconds:.1f} s", file=sys.stderr)
    finally:
        for prop in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            sc.setLocalProperty(prop, None)  # type: ignore[arg-type]  # None removes it
    stage_list = out["stages"].values()
    out["seconds"] = round(sum(s["seconds"] for s in stage_list), 2)
    out["new_records"] = out["stages"]["bronze"]["inserted"] if "bronze" in out["stages"] else None
    out["records_per_s"] = round(out["new_records"] / out["seconds"]) if out["new_records"] else None
    out["delta_commits_per_table"] = commits_between(first, table_versions(root))
    out["delta_commits"] = sum(out["delta_commits_per_table"].values())
    out["spark_jobs_outside_groups"] = len(set(tracker.getJobIdsForGroup(None)) - outside)
    out["spark_jobs"] = sum(s["spark_jobs"] for s in stage_list) + out["spark_jobs_outside_groups"]
    out["peak_rss_mib"] = memory.take()
    if proxy is not None:
        out["store_requests"] = dict(sorted(proxy.requests.items())) | {"total": sum(proxy.requests.values())}
    return out


# -- the report -----------------------------------------------------------------------------------------
def _n(x: Any) -> str:
    """A number for the tables: thousands separated, seconds to a tenth, "-" for none."""
    if x is None:
        return "-"
    return f"{x:,}" if isinstance(x, int) else f"{x:,.1f}"


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(c if isinstance(c, str) else _n(c) for c in cells) + " |"


def print_report(result: dict[str, Any]) -> None:
    inc, runs, stages = result["increment"], result["runs"], result["stages"]
    print(
        f"\n{result['records']:,} records (seed {result['seed']}, {result['segment_bytes'] // 1024} KiB segments), "
        f"increment {inc['records']:,} records = {inc['percent']} % ({inc['grown_segments']} active segments grown, "
        f"{inc['new_segments']} new segments); Spark {result['spark_version']}, master {result['master']}, "
        f"{result['cores']} cores; Spark start {result['spark_start_s']} s (not counted)"
        + ("; the log ends with its transactions open" if result.get("open_transactions") else "")
    )
    if result.get("constants_set"):
        print(f"constants set for this run (an experiment): {', '.join(result['constants_set'])}")
    start, end = (" ".join(map(str, result["load_average"][k])) for k in ("start", "end"))
    print(f"load average (1/5/15 min): {start} at the start, {end} at the end\n")
    head = ["run", "seconds", *(f"{s} s" for s in stages), "new records", "records/s", "Delta commits", "Spark jobs"]
    print(_row([*head, "peak RSS driver / JVM (MiB)"]))
    print("|---|" + "---:|" * len(head))
    for r in runs:
        rss = f"{_n(r['peak_rss_mib']['driver'])} / {_n(r['peak_rss_mib']['jvm'])}"
        cells = [r["run"], r["seconds"], *(r["stages"][s]["seconds"] for s in stages), r["new_records"]]
        print(_row([*cells, r["records_per_s"], r["delta_commits"], r["spark_jobs"], rss]))
    print("\n| run | stage | seconds | rows | rows/s | inserted | Delta commits | Spark jobs |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        for s in stages:
            x = r["stages"][s]
            cells = [x["seconds"], x["rows"], x["rows_per_s"], x["inserted"], x["delta_commits"], x["spark_jobs"]]
            print(_row([r["run"], s, *cells]))
    print("\n(rows: bronze records read, silver bronze rows decoded, gold events replayed; Delta commits include")
    print(" the run log's row per stage in bronze.runs)")
    print("\n" + _row(["step (seconds)", *(r["run"] for r in runs)]))
    print("|---|" + "---:|" * len(runs))
    for stage in stages:
        steps = list(dict.fromkeys(k for r in runs for k in r["stages"][stage].get("steps", {})))
        for step in steps:
            print(_row([f"{stage}: {step}", *(r["stages"][stage]["steps"].get(step) for r in runs)]))
    hwm = result["peak_rss_mib"]
    print(f"\npeak RSS over each process's life (VmHWM, the benchmark's gold checks included): "
          f"driver {_n(hwm['driver'])} MiB, JVM {_n(hwm['jvm'])} MiB")  # fmt: skip
    if any("store_requests" in r for r in runs):
        methods = sorted({m for r in runs for m in r.get("store_requests", {})} - {"total"})
        print(f"\nlakehouse root {result['root']}: requests to the store per run\n")
        print(_row(["run", *methods, "total"]))
        print("|---|" + "---:|" * (len(methods) + 1))
        for r in runs:
            reqs = r.get("store_requests", {})
            print(_row([r["run"], *(reqs.get(m, 0) for m in methods), reqs.get("total", 0)]))


# -- main -----------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--records", type=int, default=200_000, help="records to generate (cached under var/bench/)")
    ap.add_argument("--increment-percent", type=float, default=1.0, help="share of the records held back, in %%")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--segment-bytes", type=int, default=SEGMENT_BYTES, help="segment size of the generated log")
    ap.add_argument(
        "--open-transactions",
        action="store_true",
        help="a log that ends with its transactions open, as a live cluster's does: the increment is then "
        "ordinary traffic, not the generator's closing of every open transaction (cached apart)",
    )
    ap.add_argument("--quality", action="store_true", help="run the quality stage (all suites) after gold too")
    ap.add_argument("--master", help="Spark master (default: jobs.yaml's)")
    ap.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting over jobs.yaml's"
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="MODULE.NAME=VALUE",
        help="an experiment: set a module's constant in this process before the runs (a Python literal; e.g. "
        "pipelines.runtime.lake.LOCAL_WRITE_ROWS=100000); the report lists what was set",
    )
    ap.add_argument("--json", type=Path, help="write every number here as JSON")
    ap.add_argument("--workdir", type=Path, help="keep the source copy and the lakehouse here (default: a temp dir)")
    ap.add_argument(
        "--root",
        help="lakehouse root on an object store (s3a://bucket/prefix; a new sub-prefix per run); default: in --workdir",
    )
    ap.add_argument(
        "--reuse-initial",
        action="store_true",
        help="with --workdir: keep the lakehouse the initial run built (workdir/initial-lakehouse) and, when it "
        "is there from an earlier benchmark of the same log and split, start from a copy of it instead of "
        "running the initial build again (to iterate on the increment; the lakehouse was built by the code "
        "of that earlier benchmark)",
    )
    ap.add_argument(
        "--count-requests", action="store_true", help="with --root: count the requests to the store per run"
    )
    args = ap.parse_args(argv)
    if args.count_requests and not (args.root and "://" in args.root):
        ap.error("--count-requests needs --root on an object store")
    if args.reuse_initial and (args.workdir is None or args.root):
        ap.error("--reuse-initial needs --workdir and a local lakehouse (no --root)")
    if not 0 < args.increment_percent < 100:
        ap.error("--increment-percent must be between 0 and 100")
    conf = dict(kv.split("=", 1) for kv in args.spark_conf)
    for item in args.set:
        _set_constant(ap, item)

    prefix = CACHE_PREFIX if args.segment_bytes == SEGMENT_BYTES else f"pipeline-seg{args.segment_bytes}"
    logs = generated(args.records, args.seed, prefix, args.segment_bytes, open_transactions=args.open_transactions)
    # absolute: jobs.yaml, written inside it, resolves its relative paths against its own directory
    work = args.workdir.resolve() if args.workdir else Path(tempfile.mkdtemp(prefix="pipeline-bench-"))
    try:
        return _bench(args, conf, logs, work)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def _bench(args: argparse.Namespace, conf: dict[str, str], logs: Path, work: Path) -> int:
    for sub in ("source", "lakehouse"):
        shutil.rmtree(work / sub, ignore_errors=True)
    t = time.perf_counter()
    split: Split = split_log(logs, work / "source", args.increment_percent)
    print(
        f"split: {split.held_back} of {split.records} records held back in {time.perf_counter() - t:.0f} s",
        file=sys.stderr,
    )
    stages = [*DATA_STAGES, "quality"] if args.quality else list(DATA_STAGES)
    root: Path | str = work / "lakehouse"
    proxy = None
    if args.root:
        # a new prefix per benchmark: an emptied one may keep directory entries on stores that have
        # them (SeaweedFS), which Delta takes for a non-empty location
        root = f"{args.root.rstrip('/')}/{time.strftime('%Y%m%dT%H%M%S')}"
        proxy = _store_root(root, args.count_requests)
    write_jobs(work / "jobs.yaml", root, split.source, stages, conf)
    load_start = load_average()
    wrong: dict[str, list[str]] = {}
    with Memory() as memory:
        ctx = Context(work / "jobs.yaml", master=args.master)
        t = time.perf_counter()
        spark = ctx.spark  # started here: the runs measure the pipeline, not the JVM's start
        spark_start = round(time.perf_counter() - t, 1)
        runs = []
        snapshot = _initial_snapshot(args, work, split) if args.reuse_initial else None
        for label in RUNS:
            if label == "increment":
                split.grow()
            if label == "initial" and snapshot is not None and snapshot.restore(root):
                print(f"initial: reused the lakehouse in {snapshot.path} (not run)", file=sys.stderr)
                continue
            runs.append(run_once(ctx, label, stages, root, memory, proxy))
            if label == "initial" and snapshot is not None:
                snapshot.save(root)
            if label != "initial":
                wrong[label] = gold_differences(spark, ctx.tables, logs / "expected-state.json")
                _release_memory()  # the check held the expected state (5.8 GB at 30M): not the next run's
            if label == "increment" and args.quality:
                # the increment's quality outcomes against a full validation of the same tables (not timed)
                full = quality_job(ctx, JOB, full=True).quality_outcomes
                compared, differences = quality_differences(QUALITY_OUTCOMES[label], full)
                wrong["quality"] = differences
                runs[-1]["quality_compared_with_full"] = {"rules": compared, "differences": differences}
                print(f"quality after the increment: {compared} rules compared with a full validation, "
                      f"{len(differences)} differ", file=sys.stderr)  # fmt: skip
        hwm = memory.high_water_marks()
    result = {
        "benchmark": "pipeline",
        "records": split.records,
        "seed": args.seed,
        "segment_bytes": args.segment_bytes,
        "open_transactions": args.open_transactions,
        "increment": {
            "records": split.held_back,
            "percent": round(split.percent, 2),
            "requested_percent": args.increment_percent,
            "grown_segments": len(split.grown),
            "new_segments": len(split.new),
        },
        "stages": stages,
        "constants_set": args.set,
        "spark_version": spark.version,
        "master": spark.sparkContext.master,
        "root": str(root),
        "cores": os.cpu_count(),
        "spark_start_s": spark_start,
        "load_average": {"start": load_start, "end": load_average()},
        "runs": runs,
        "peak_rss_mib": hwm,
        "gold_equals_expected_state": {label: not w for label, w in wrong.items() if label != "quality"},
    }
    print_report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    failed = False
    for label, w in wrong.items():
        if w:
            failed = True
            what = (
                "the increment's quality outcomes differ from a full validation's"
                if label == "quality"
                else f"after the {label} run gold differs from the generator's expected state"
            )
            print(f"wrong result: {what}:", file=sys.stderr)
            for line in w:
                print(f"  {line}", file=sys.stderr)
    if failed:
        return 1
    print("gold equals the generator's expected state after the increment and after the no-op run")
    if args.quality:
        rules = next(r for r in runs if r["run"] == "increment")["quality_compared_with_full"]["rules"]
        print(f"the increment's quality outcomes equal a full validation's ({rules} rules compared)")
    return 0


def _set_constant(ap: argparse.ArgumentParser, item: str) -> None:
    """``--set MODULE.NAME=VALUE``: the constant must exist (a typo is an error, not a no-op)."""
    name, _, text = item.partition("=")
    module_name, _, attr = name.rpartition(".")
    try:
        module = importlib.import_module(module_name)
        getattr(module, attr)
        value = ast.literal_eval(text)
    except (ImportError, AttributeError, ValueError, SyntaxError) as exc:
        ap.error(f"--set {item}: {exc}")
    setattr(module, attr, value)
    print(f"set {name} = {value!r}", file=sys.stderr)


@dataclass
class InitialSnapshot:
    """The lakehouse an initial run built, kept beside the workdir for ``--reuse-initial``; valid
    for the same log and split only (``stamp``)."""

    path: Path
    stamp: dict[str, Any]

    def _stamp_file(self) -> Path:
        return self.path.with_suffix(".json")

    def restore(self, root: Path | str) -> bool:
        stamp = self._stamp_file()
        if not self.path.is_dir() or not stamp.exists() or json.loads(stamp.read_text()) != self.stamp:
            return False
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(self.path, root, symlinks=True)
        return True

    def save(self, root: Path | str) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self._stamp_file().unlink(missing_ok=True)
        shutil.copytree(root, self.path, symlinks=True)
        self._stamp_file().write_text(json.dumps(self.stamp))


def _initial_snapshot(args: argparse.Namespace, work: Path, split: Split) -> InitialSnapshot:
    stamp = {"records": split.records, "held_back": split.held_back, "seed": args.seed,
             "segment_bytes": args.segment_bytes, "quality": args.quality}  # fmt: skip
    if args.open_transactions:  # only then: a lakehouse kept by earlier code stays reusable
        stamp["open_transactions"] = True
    return InitialSnapshot(work / "initial-lakehouse", stamp)


def _store_root(root: str, count: bool) -> Any:
    """Empty the object-store lakehouse at ``root``; with ``count``, start a counting proxy in front
    of the store and point this process at it (returned; None otherwise)."""
    global STORE_DIRECT
    from pipelines.runtime.storage import S3Settings, split_uri

    STORE_DIRECT = os.environ.get("AWS_ENDPOINT_URL")
    client = S3Settings.resolve({}).client()
    bucket, prefix = split_uri(root)
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        for i in range(0, len(keys), 1000):
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys[i : i + 1000]})
    if not count:
        return None
    if not STORE_DIRECT:
        sys.exit("--count-requests needs AWS_ENDPOINT_URL (a store on this network)")
    from tests.support.store import StoreProxy

    _host, _, port = STORE_DIRECT.rpartition(":")
    proxy = StoreProxy(int(port.rstrip("/")))
    os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{proxy.port}"
    return proxy


if __name__ == "__main__":
    sys.exit(main())
