"""Many jobs on one lakehouse (issue 31, docs/operations.md "Several jobs on one lakehouse"): two
clusters' jobs, a quality run of the whole lakehouse and an SQL reader started together, round
after round, on one local lakehouse.

    python bench/many_jobs_bench.py [--records 60000] [--rounds 3] [--json out.json]

Each cluster's log (generated once, cached under var/bench/) is revealed in ``--rounds`` steps (the
log as it was before its last share, bench/common.py ``split_log``: segments grow and roll); in
every round the two jobs (``offsets-lakehouse run``), a ``quality`` run and an ``sql`` query start
at the same moment, each a process of its own, as cron would start them. Reported per round and
process: exit code, wall seconds, the stage commits that lost a race and ran again
(``conflicts_retried``), and how long quality waited for the jobs' stages. Exits 1 unless every
process ends 0 and gold then equals each generator's expected state with every record once in
bronze.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, generated, gold_differences, split_log

CLUSTERS = {"a": 41, "b": 42}
READER_SQL = "SELECT count(*) AS n FROM gold.current_offsets"


def jobs_yaml(work: Path, sources: dict[str, Path]) -> Path:
    lines = [
        f"lakehouse: {{root: {work / 'lakehouse'}}}",
        "spark:",
        "  master: local[2]",
        '  conf: {spark.sql.shuffle.partitions: "4", spark.ui.enabled: "false"}',
        # soft deletes kept, as the expected state keeps them (the default purges them after 30
        # days of log time, docs/gold.md; the generated log spans years): as bench/pipeline_bench.py
        "gold: {soft_delete_retention_days: null}",
        "sources:",
        *(f"  {c}: {{kind: segments, cluster: {c}, paths: [{p}]}}" for c, p in sources.items()),
        "jobs:",
        *(f"  job-{c}: {{sources: [{c}], stages: [bronze, silver, gold]}}" for c in sources),
    ]
    path = work / "jobs.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def start(config: Path, *args: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "pipelines.cli.main", *args, "-c", str(config)]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=60_000, help="records per cluster")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    logs = {
        c: generated(args.records, seed, prefix="many-jobs", segment_bytes=256 * 1024) for c, seed in CLUSTERS.items()
    }
    work = Path(tempfile.mkdtemp(prefix="many-jobs-"))
    sources = {c: work / f"source-{c}" for c in CLUSTERS}
    config = jobs_yaml(work, sources)
    rows, ok = [], True
    try:
        for n in range(args.rounds):
            held_back = 100 * (args.rounds - 1 - n) / args.rounds
            for c, log in logs.items():
                if held_back:
                    split_log(log, sources[c], held_back)
                else:
                    shutil.rmtree(sources[c], ignore_errors=True)
                    shutil.copytree(log, sources[c], ignore=shutil.ignore_patterns("*.json", "*.gz"))
            t0 = time.monotonic()
            procs = {f"job-{c}": start(config, "run", f"job-{c}", "--json") for c in CLUSTERS}
            if n:  # from the second round, when there is gold to read
                procs["quality"] = start(config, "quality", "--json")
                procs["reader"] = start(config, "sql", READER_SQL, "--format", "json")
            for name, proc in procs.items():
                out, err = proc.communicate(timeout=3600)
                seconds = time.monotonic() - t0
                retried, waited = [], "waiting:" in err
                if proc.returncode == 0 and name != "reader":
                    report = json.loads(out)
                    retried = [f"{s['stage']}: {r}" for s in report["stages"] for r in s.get("conflicts_retried", [])]
                ok &= proc.returncode == 0
                rows.append(
                    {"round": n + 1, "process": name, "exit": proc.returncode, "seconds": round(seconds, 1),
                     "conflicts_retried": retried, "waited_for_a_stage": waited}
                )  # fmt: skip
                if proc.returncode:
                    print(err[-2000:], file=sys.stderr)
        from pipelines.runtime.config import load
        from pipelines.runtime.spark import build_session
        from pipelines.runtime.tables import Tables

        spark = build_session(load(config).spark)
        tables = Tables(spark, str(work / "lakehouse"))
        differences = {c: gold_differences(spark, tables, logs[c] / "expected-state.json", cluster=c) for c in CLUSTERS}
        bronze = spark.read.format("delta").load(tables.path("bronze", "offsets_records"))
        counts = {r["cluster"]: r["count"] for r in bronze.groupBy("cluster").count().collect()}
        distinct = bronze.select("cluster", "partition", "offset").distinct().count()
        want = {c: json.loads((logs[c] / "generator-manifest.json").read_text())["records"] for c in CLUSTERS}
        gold_ok = not any(differences.values()) and counts == want and distinct == sum(want.values())
        for c, found in differences.items():
            for line in found:
                print(f"gold of cluster {c} differs from its expected state: {line}", file=sys.stderr)
        if distinct != sum(want.values()):
            print(f"bronze: {distinct} distinct log positions, {sum(want.values())} records", file=sys.stderr)
        ok &= gold_ok
    finally:
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept for a look: {work}", file=sys.stderr)
    load_avg = Path("/proc/loadavg").read_text().split()[:3]
    for r in rows:
        print(f"round {r['round']} {r['process']:8} exit {r['exit']} {r['seconds']:7.1f} s "
              f"retried {len(r['conflicts_retried'])} waited {r['waited_for_a_stage']}")  # fmt: skip
    print(
        f"gold equal to both expected states, every record once in bronze: {gold_ok} (bronze {counts}); load {load_avg}"
    )
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "gold_ok": gold_ok, "bronze": counts, "load": load_avg}, indent=1)
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
