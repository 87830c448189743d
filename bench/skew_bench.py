"""Skew and cardinality benchmark (issue 31): a skewed log and an unskewed log of the same size through
bronze -> silver -> gold, with peak memory.

    python bench/skew_bench.py --records 2600000 [--keys 2000000] [--json out.json]

The **skewed** log (``generate(..., skew=Skew(...))``, pipelines/generate/skew.py): one offsets
partition (``--hot-partition``) holds ``--share`` of the records and ``--keys`` distinct live offset
keys, among them those of one classic group with ``--members`` members whose GroupMetadata assigns
``--assigned`` topic-partitions. The **unskewed** log: the generator's ordinary mix with the same
``--records`` and seed. Both generated once and cached under var/bench/ (256 KiB segments, as
bench/pipeline_bench.py).

Each log runs in a fresh process with its own Spark JVM (so one run's heap and caches do not
count in the other's; ``--in-process`` runs them in this process instead, one after the other): a
jobs.yaml with the repository's Spark settings (default: jobs.yaml's ``spark.driver.memory`` and
collector, ``local[*]``), an empty lakehouse in a temporary directory, then the stages bronze,
silver and gold one at a time through the runner (``run_job``). Reported per log and stage: wall
seconds; peak resident memory (sampled from /proc every 0.2 s) of the driver (this Python
process), of Spark's Python workers (the daemon and every worker it forked: where gold's replay
runs; their sum and the largest one, and the largest worker's own high-water mark, VmHWM, which a
sample can miss) and of the JVM; the JVM heap used (sampled through py4j from the JVM's
MemoryMXBean), the largest old generation left after a collection (what the heap holds live), and
the heap's configured maximum. Spark's start is timed apart and not counted; checking gold
afterwards is not counted either. Exits 1 unless gold equals each generator's expected state
(bench/common.py ``gold_differences``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import generated, gold_differences  # noqa: E402
from bench.pipeline_bench import JOB, SEGMENT_BYTES, load_average, stage_numbers, write_jobs  # noqa: E402
from pipelines.generate import Skew  # noqa: E402

STAGES = ("bronze", "silver", "gold")
LOGS = ("skewed", "unskewed")
MIB = 1024 * 1024


# -- the logs -------------------------------------------------------------------------------------------
def skew_of(args: argparse.Namespace) -> Skew:
    return Skew(
        partition=args.hot_partition,
        share=args.share,
        keys=args.keys,
        members=args.members,
        assigned=args.assigned,
        big_topics=args.big_topics,
    )


def cache_prefix(skew: Skew | None) -> str:
    """The cache directory's prefix: every skew figure in it, so another skew is another log."""
    if skew is None:
        return "unskewed"
    return (
        f"skew-p{skew.partition}-s{skew.share}-k{skew.keys}-m{skew.members}-a{skew.assigned}-t{skew.big_topics}"
        f"-g{skew.keys_per_group}-c{skew.keys_per_commit}"
    )


def log_of(label: str, args: argparse.Namespace) -> Path:
    skew = skew_of(args) if label == "skewed" else None
    return generated(args.records, args.seed, cache_prefix(skew), segment_bytes=args.segment_bytes, skew=skew)


def describe_log(logs: Path, hot: int) -> dict[str, Any]:
    """Records, records and live keys of the hot partition (and of the largest partition), and the
    largest classic group, from the generator's manifest and expected state."""
    manifest = json.loads((logs / "generator-manifest.json").read_text())
    state = json.loads((logs / "expected-state.json").read_text())
    per_part = {int(p): n for p, n in manifest["records_per_partition"].items()}
    keys: dict[int, int] = {}
    for o in state["offsets"]:
        keys[o["offsets_partition"]] = keys.get(o["offsets_partition"], 0) + 1
    biggest = max(state["classic_groups"], key=lambda g: len(g["members"]), default=None)
    top = max(per_part, key=lambda p: per_part[p])
    return {
        "records": manifest["records"],
        "hot_partition": hot,
        "hot_records": per_part.get(hot, 0),
        "hot_share": round(per_part.get(hot, 0) / manifest["records"], 4),
        "hot_live_keys": keys.get(hot, 0),
        "largest_partition": {"partition": top, "records": per_part[top], "live_keys": keys.get(top, 0)},
        "live_keys": len(state["offsets"]),
        "largest_classic_group": None
        if biggest is None
        else {
            "group": biggest["group"],
            "members": len(biggest["members"]),
            "assigned_partitions": sum(
                len(ps) for m in biggest["members"] for ps in (m["assigned_partitions"] or {}).values()
            ),
        },
        "skew": manifest.get("skew"),
    }


# -- memory ---------------------------------------------------------------------------------------------
def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, and each pid's command name, from /proc."""
    out: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        pid, rest = text.split(" (", 1)
        fields = rest.rsplit(") ", 1)[1].split()
        out.setdefault(int(fields[1]), []).append(int(pid))
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _kib(pid: int | str, field: str) -> int:
    """A ``/proc/<pid>/status`` memory field in KiB (0: the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return 0
    return 0


class Sampler:
    """Peak memory of the driver, Spark's Python workers and the JVM, and of the JVM's heap, sampled
    every ``interval`` seconds in a background thread; :meth:`take` returns the peaks since the
    last take (MiB)."""

    KEYS = (
        "driver_rss",
        "workers_rss",
        "worker_rss_max",
        "worker_hwm_max",
        "python_rss",
        "jvm_rss",
        "heap_used",
        "heap_after_gc",
        "heap_committed",
    )

    def __init__(self, spark: Any, interval: float = 0.2) -> None:
        self.interval = interval
        self.jvm_pid: int | None = None
        self.workers_seen: set[int] = set()
        self._mx = spark.sparkContext._jvm.java.lang.management.ManagementFactory
        self.heap_max = self._mx.getMemoryMXBean().getHeapMemoryUsage().getMax() // MIB
        self._pools = [p for p in self._mx.getMemoryPoolMXBeans() if str(p.getType()) == "Heap memory"]
        self._peaks = dict.fromkeys(self.KEYS, 0)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="skew-bench-memory", daemon=True)

    def _tree(self) -> tuple[int | None, list[int]]:
        """The JVM among this process's descendants, and the Python processes under it."""
        children = _children()
        todo, jvm = list(children.get(os.getpid(), ())), None
        while todo and jvm is None:
            pid = todo.pop()
            if _comm(pid) == "java":
                jvm = pid
            todo += children.get(pid, ())
        workers: list[int] = []
        todo = list(children.get(jvm, ())) if jvm else []
        while todo:
            pid = todo.pop()
            if _comm(pid).startswith("python"):
                workers.append(pid)
            todo += children.get(pid, ())
        return jvm, workers

    def sample(self) -> None:
        jvm, workers = self._tree()
        self.jvm_pid = jvm or self.jvm_pid
        self.workers_seen.update(workers)
        rss = [_kib(w, "VmRSS") for w in workers]
        heap = self._mx.getMemoryMXBean().getHeapMemoryUsage()
        after_gc = 0
        for pool in self._pools:
            usage = pool.getCollectionUsage()
            after_gc += usage.getUsed() if usage is not None else 0
        now = {
            "driver_rss": _kib("self", "VmRSS") // 1024,
            "workers_rss": sum(rss) // 1024,
            "worker_rss_max": max(rss, default=0) // 1024,
            "worker_hwm_max": max((_kib(w, "VmHWM") for w in workers), default=0) // 1024,
            "jvm_rss": _kib(jvm, "VmRSS") // 1024 if jvm else 0,
            "heap_used": heap.getUsed() // MIB,
            "heap_after_gc": after_gc // MIB,
            "heap_committed": heap.getCommitted() // MIB,
        }
        now["python_rss"] = now["driver_rss"] + now["workers_rss"]
        with self._lock:
            self._peaks = {k: max(v, now[k]) for k, v in self._peaks.items()}

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except Exception as exc:  # the JVM going away at the end must not kill the benchmark
                print(f"memory sample failed: {exc}", file=sys.stderr)

    def take(self) -> dict[str, int]:
        self.sample()
        with self._lock:
            peaks, self._peaks = self._peaks, dict.fromkeys(self.KEYS, 0)
        return peaks

    @contextmanager
    def running(self) -> Iterator[Sampler]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()


# -- one log --------------------------------------------------------------------------------------------
def run_log(
    label: str,
    logs: Path,
    work: Path,
    hot: int,
    conf: dict[str, str],
    master: str | None,
    rows_per_bucket: int | None = None,
) -> dict[str, Any]:
    """Bronze, silver and gold of ``logs`` on an empty lakehouse under ``work``, in this process
    (``rows_per_bucket``: gold's bucket size instead of pipelines/gold/buckets.py's)."""
    from pipelines.gold import buckets
    from pipelines.runner import Context, run_job

    if rows_per_bucket is not None:
        buckets.ROWS_PER_BUCKET = rows_per_bucket  # the driver plans the buckets

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    write_jobs(work / "jobs.yaml", work / "lakehouse", logs, list(STAGES), conf)
    described = describe_log(logs, hot)
    load_start = load_average()
    ctx = Context(work / "jobs.yaml", master=master)
    t = time.perf_counter()
    spark = ctx.spark
    spark_start = round(time.perf_counter() - t, 1)
    sampler = Sampler(spark)
    stages: dict[str, Any] = {}
    with sampler.running():
        sampler.take()
        for stage in STAGES:
            t = time.perf_counter()
            report = run_job(ctx, JOB, stages=[stage])
            seconds = time.perf_counter() - t
            if report.status != "ok":
                sys.exit(f"{label}: stage {stage} ended {report.status}: {json.dumps(report.to_json(), default=str)}")
            details = [d for s in report.stages for d in s.details]
            numbers = stage_numbers(stage, details)
            if stage == "gold":  # the partitions replayed in buckets (pipelines/gold/buckets.py), and how many
                numbers["bucketed"] = details[0].get("bucketed")
            stages[stage] = {"seconds": round(seconds, 2), **numbers, "peak_mib": sampler.take()}
            print(f"{label}: {stage} {seconds:.1f} s {stages[stage]['peak_mib']}", file=sys.stderr)
        load_end = load_average()
        t = time.perf_counter()
        wrong = gold_differences(spark, ctx.tables, logs / "expected-state.json")
        check_seconds = round(time.perf_counter() - t, 1)
        check_peaks = sampler.take()
    gold_keys = (
        spark.read.format("delta")
        .load(ctx.tables.path("gold", "current_offsets"))
        .where(f"offsets_partition = {hot} AND NOT deleted")
        .count()
    )
    peaks = {k: max(s["peak_mib"][k] for s in stages.values()) for k in Sampler.KEYS}
    return {
        "log": label,
        **described,
        "gold_hot_live_keys": gold_keys,
        "rows_per_bucket": buckets.ROWS_PER_BUCKET,
        "hot_partition_buckets": (stages["gold"].get("bucketed") or {}).get(f"{JOB}/{hot}", 1),
        "spark_version": spark.version,
        "master": spark.sparkContext.master,
        "driver_memory": spark.conf.get("spark.driver.memory", None),
        "spark_start_s": spark_start,
        "load_average": {"start": load_start, "end": load_end},
        "stages": stages,
        "seconds": round(sum(s["seconds"] for s in stages.values()), 2),
        "peak_mib": peaks,
        "heap_max_mib": sampler.heap_max,
        "python_workers_seen": len(sampler.workers_seen),
        "check": {"seconds": check_seconds, "peak_mib": check_peaks},
        "gold_equals_expected_state": not wrong,
        "differences": wrong,
    }


# -- the report -----------------------------------------------------------------------------------------
def _n(x: Any) -> str:
    return "-" if x is None else f"{x:,}" if isinstance(x, int) else f"{x:,.1f}"


def print_report(result: dict[str, Any]) -> None:
    runs = result["runs"]
    print(
        f"\nmachine: {result['cores']} cores, {result['memory_gib']} GiB; Spark {runs[0]['spark_version']}, "
        f"master {runs[0]['master']}, spark.driver.memory {runs[0]['driver_memory']}"
    )
    cols = [
        "log",
        "records",
        "hot partition records (share)",
        "live keys in the hot partition",
        "gold buckets of the hot partition",
        *STAGES,
        "total s",
        "peak driver RSS",
        "peak Python workers RSS (sum / largest)",
        "peak JVM RSS",
        "JVM heap used peak / after GC / max",
        "load at start / end",
    ]
    print("\n| " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * (len(cols) - 1))
    for r in runs:
        p = r["peak_mib"]
        cells = [
            r["log"],
            _n(r["records"]),
            f"{r['hot_records']:,} ({100 * r['hot_share']:.1f} %)",
            _n(r["hot_live_keys"]),
            f"{r['hot_partition_buckets']} (rows per bucket {r['rows_per_bucket']:,})",
            *(_n(r["stages"][s]["seconds"]) for s in STAGES),
            _n(r["seconds"]),
            f"{p['driver_rss']:,} MiB",
            f"{p['workers_rss']:,} / {max(p['worker_rss_max'], p['worker_hwm_max']):,} MiB",
            f"{p['jvm_rss']:,} MiB",
            f"{p['heap_used']:,} / {p['heap_after_gc']:,} / {r['heap_max_mib']:,} MiB",
            f"{r['load_average']['start'][0]} / {r['load_average']['end'][0]}",
        ]
        print("| " + " | ".join(cells) + " |")
    print("\nper stage, peak MiB: driver RSS / Python workers RSS sum / largest worker (VmHWM) / JVM RSS / heap used")
    for r in runs:
        for s in STAGES:
            p = r["stages"][s]["peak_mib"]
            print(
                f"  {r['log']:>9} {s:>6}: {r['stages'][s]['seconds']:7.1f} s  {p['driver_rss']:,} / "
                f"{p['workers_rss']:,} / {p['worker_hwm_max']:,} / {p['jvm_rss']:,} / {p['heap_used']:,}"
            )
    for r in runs:
        g = r["largest_classic_group"]
        if g:
            print(
                f"{r['log']}: largest classic group {g['group']}: {g['members']:,} members, "
                f"{g['assigned_partitions']:,} assigned partitions"
            )


# -- main -----------------------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--records", type=int, default=2_600_000, help="records of each log (cached under var/bench/)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--segment-bytes", type=int, default=SEGMENT_BYTES)
    ap.add_argument("--hot-partition", type=int, default=0)
    ap.add_argument("--share", type=float, default=0.85, help="share of the records the hot groups write")
    ap.add_argument("--keys", type=int, default=2_000_000, help="live offset keys of the hot stream")
    ap.add_argument("--members", type=int, default=5_000, help="members of the big classic group")
    ap.add_argument("--assigned", type=int, default=100_000, help="partitions its GroupMetadata assigns")
    ap.add_argument("--big-topics", type=int, default=50, help="topics the big group's partitions are in")
    ap.add_argument("--logs", default=",".join(LOGS), help="which logs to run: skewed,unskewed")
    ap.add_argument("--master", help="Spark master (default: jobs.yaml's)")
    ap.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="over jobs.yaml's")
    ap.add_argument("--rows-per-bucket", type=int, help="gold's bucket size (default: pipelines/gold/buckets.py's)")
    ap.add_argument("--in-process", action="store_true", help="run every log in this process and its JVM")
    ap.add_argument("--workdir", type=Path, help="lakehouses here (kept; default: a temporary directory)")
    ap.add_argument("--json", type=Path, help="write every number here as JSON")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # internal: run this one log, write --json
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    labels = [x for x in args.logs.split(",") if x]
    if not labels or set(labels) - set(LOGS):
        ap.error(f"--logs takes {', '.join(LOGS)}")
    conf = dict(kv.split("=", 1) for kv in args.spark_conf)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="skew-bench-"))
    try:
        if args.child:
            result = run_log(
                args.child,
                log_of(args.child, args),
                work / args.child,
                args.hot_partition,
                conf,
                args.master,
                args.rows_per_bucket,
            )
            args.json.write_text(json.dumps(result, indent=1) + "\n")
            return 0
        runs = []
        for label in labels:
            t = time.perf_counter()
            logs = log_of(label, args)
            print(f"{label}: log {logs} ready in {time.perf_counter() - t:.0f} s", file=sys.stderr)
            if args.in_process:
                runs.append(
                    run_log(label, logs, work / label, args.hot_partition, conf, args.master, args.rows_per_bucket)
                )
                continue
            out = work / f"{label}.json"
            cmd = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])]
            cmd += ["--child", label, "--json", str(out), "--workdir", str(work)]
            if subprocess.run(cmd, check=False).returncode != 0 or not out.exists():
                print(f"{label}: the run failed", file=sys.stderr)
                return 1
            runs.append(json.loads(out.read_text()))
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    result = {
        "benchmark": "skew",
        "cores": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3, 1),
        "segment_bytes": args.segment_bytes,
        "seed": args.seed,
        "runs": runs,
    }
    print_report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    failed = [r for r in runs if not r["gold_equals_expected_state"]]
    for r in failed:
        print(f"wrong result: gold of the {r['log']} log differs from the generator's expected state:", file=sys.stderr)
        for line in r["differences"]:
            print(f"  {line}", file=sys.stderr)
    if failed:
        return 1
    print("gold equals the generator's expected state for every log")
    return 0


if __name__ == "__main__":
    sys.exit(main())
