"""The whole-pipeline benchmark cannot rot: its smallest variant runs here, through the runner, and
its own check (gold equals the generator's expected state after the increment and the no-op run)
must pass. Its numbers are not judged here — speed is measured by running it (docs/performance.md)."""

from __future__ import annotations

import json


def test_pipeline_bench_smoke(spark, tmp_path) -> None:
    from bench import pipeline_bench

    out = tmp_path / "result.json"
    args = ["--records", "5000", "--increment-percent", "5", "--json", str(out), "--workdir", str(tmp_path / "w")]
    assert pipeline_bench.main(args) == 0
    result = json.loads(out.read_text())
    assert result["gold_equals_expected_state"]
    initial, increment, noop = result["runs"]
    assert [r["run"] for r in result["runs"]] == ["initial", "increment", "no-op"]
    assert 0 < result["increment_records"] < result["records"]
    assert initial["stages"]["bronze"]["rows"] == result["records"] - result["increment_records"]
    assert initial["delta_commits"] > 0 and initial["spark_jobs"] > 0
    assert increment["stages"]["gold"]["rows"] > 0, "the increment reached gold"
    assert noop["stages"]["silver"]["rows"] == 0 and not noop["stages"]["gold"]["rows"], "nothing new: nothing done"
    assert all(r["seconds"] > 0 for r in result["runs"]) and result["jvm_peak_mib"] > 0
