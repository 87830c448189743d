"""The whole-pipeline benchmark, and those that read the lakehouse it keeps, cannot rot:
bench/pipeline_bench.py runs here at 20,000 records with a 5 % increment, in this process on the
tier's Spark session, through the runner. It must exit 0 — its own check: gold equals the
generator's expected state after the increment and after the no-op run — and report every number
it promises, plausibly. The numbers are not judged against targets here: speed is measured by
running the benchmark on a quiet machine (docs/performance.md). Small segments (32 KiB) so the
increment both grows active segments and rolls in new ones."""

from __future__ import annotations

import json
import re

import pytest

pytestmark = pytest.mark.spark


@pytest.fixture()
def session_conf_restored(spark):
    """The benchmark's jobs.yaml settings land on the shared session: put it back as it was."""
    before = dict(spark.conf.getAll)
    yield spark
    for key, value in spark.conf.getAll.items():
        if before.get(key) != value and spark.conf.isModifiable(key):
            if key in before:
                spark.conf.set(key, before[key])
            else:
                spark.conf.unset(key)


def test_pipeline_bench_smoke(session_conf_restored, tmp_path, capsys) -> None:
    from bench import pipeline_bench

    out = tmp_path / "result.json"
    args = ["--records", "20000", "--increment-percent", "5", "--segment-bytes", "32768"]
    args += ["--spark-conf", "spark.sql.shuffle.partitions=2", "--json", str(out), "--workdir", str(tmp_path / "w")]
    assert pipeline_bench.main(args) == 0
    printed = capsys.readouterr().out
    assert "| run | seconds |" in printed and "gold equals the generator's expected state" in printed

    result = json.loads(out.read_text())
    assert result["gold_equals_expected_state"] == {"increment": True, "no-op": True}
    assert [r["run"] for r in result["runs"]] == ["initial", "increment", "no-op"]
    assert result["stages"] == ["bronze", "silver", "gold"]
    inc = result["increment"]
    assert 4.5 <= inc["percent"] <= 5.5, inc
    assert inc["grown_segments"] > 0 and inc["new_segments"] > 0, inc
    assert len(result["load_average"]["start"]) == len(result["load_average"]["end"]) == 3
    assert result["peak_rss_mib"]["driver"] > 0 and result["peak_rss_mib"]["jvm"] > 0
    initial, increment, noop = result["runs"]
    for run in result["runs"]:
        assert run["seconds"] > 0 and run["spark_jobs"] >= 0, run
        assert run["peak_rss_mib"]["driver"] > 0 and run["peak_rss_mib"]["jvm"] > 0, run
        for stage, numbers in run["stages"].items():
            assert numbers["seconds"] > 0 and numbers["spark_jobs"] >= 0, (run["run"], stage, numbers)
    # a run this small is read, decoded, replayed and written on the driver (bronze
    # LOCAL_READ_BYTES, silver LOCAL_DECODE_ROWS, gold LOCAL_REPLAY_ROWS): bronze runs no Spark
    # job, nor does silver's first run, nor any stage of the increment (the job counter counts:
    # the Spark paths' jobs, tests/spark/test_small_runs.py)
    assert initial["stages"]["silver"]["spark_jobs"] == 0, initial["stages"]
    assert increment["spark_jobs"] == 0, increment["stages"]
    for run in (initial, increment):
        assert run["stages"]["bronze"]["spark_jobs"] == 0, run["stages"]
        assert run["stages"]["gold"]["steps"], "gold reports its steps"
    for stage, steps in (("bronze", {"plan files", "read", "write"}), ("silver", {"read and decode", "write tables"})):
        assert steps <= set(initial["stages"][stage]["steps"]), (stage, initial["stages"][stage]["steps"])
    assert "| silver: write tables |" in printed

    base = result["records"] - inc["records"]
    assert initial["new_records"] == initial["stages"]["bronze"]["inserted"] == base
    assert initial["stages"]["silver"]["rows"] == base and initial["stages"]["gold"]["rows"] > 0
    assert initial["records_per_s"] > 0 and all(initial["stages"][s]["rows_per_s"] > 0 for s in result["stages"])
    assert initial["delta_commits"] > 0 and all(initial["stages"][s]["delta_commits"] > 0 for s in result["stages"])
    assert initial["delta_commits_per_table"]["gold/current_offsets"] > 0

    assert increment["new_records"] == increment["stages"]["silver"]["rows"] == inc["records"]
    assert increment["stages"]["gold"]["rows"] > 0, "the increment reached gold"

    # nothing new: nothing inserted, decoded or replayed; no table but the run log gets a version
    assert noop["new_records"] == 0 and noop["records_per_s"] is None
    assert noop["stages"]["silver"]["rows"] == 0 and noop["stages"]["gold"]["rows"] == 0
    assert set(noop["delta_commits_per_table"]) == {"bronze/runs"}, noop["delta_commits_per_table"]

    # bench/gold_passthrough_bench.py on the lakehouse the increment left: it reads every gold state
    # table and times each step it names (numbers not judged)
    from bench import gold_passthrough_bench

    assert gold_passthrough_bench.main(["--lakehouse", str(tmp_path / "w" / "lakehouse"), "--repeat", "1"]) == 0
    printed = capsys.readouterr().out
    header = printed.splitlines()[0]
    total, passed = (int(n.replace(",", "")) for n in re.findall(r"([\d,]+) (?:persisted|passed)", header))
    assert 0 < passed < total, header
    steps = dict(re.findall(r"^\| ([^|]+) \| ([\d.]+) \|$", printed, re.M))
    assert set(steps) == {
        "split touched / passed through", "concatenate", "partition columns (with_partition)",
        "closed / open intervals", "size by nbytes", "size by buffers",
    }, printed  # fmt: skip

    # bench/task_bench.py (the decode's and the replay's Python timed in one process) on the same
    # lakehouse; it says why it refuses a directory that is not one
    from bench import task_bench

    work = tmp_path / "w"
    # a 20k-record log leaves some offsets partitions empty: three that hold records
    held = sorted(int(d.name.split("=")[1]) for d in (work / "lakehouse/bronze/offsets_records").glob("*/partition=*"))
    parts = [str(p) for p in held[:3]]
    for work_kind in ("replay", "decode"):
        assert task_bench.main([work_kind, str(work / "lakehouse"), "--partitions", ",".join(parts)]) == 0
        lines = capsys.readouterr().out.splitlines()
        timed = [line for line in lines if line.startswith("partition ")]
        assert [re.match(r"partition (\d+)", line).group(1) for line in timed] == parts, lines
        assert all(int(re.search(r": ([\d,]+) rows", line).group(1).replace(",", "")) > 0 for line in timed), lines
        assert any(line.startswith("all but the first: ") for line in lines), lines
    with pytest.raises(SystemExit):
        task_bench.main(["decode", str(tmp_path)])
    assert "not a lakehouse" in capsys.readouterr().err
