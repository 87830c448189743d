"""Bronze from record dumps (JSON lines and Parquet) equals bronze from the same segments."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.bronze.dump_source import ingest_dump
from pipelines.bronze.ingest import ingest_segments
from pipelines.codec.reader import Batch, iter_log
from pipelines.codec.segments import discover
from pipelines.generate import generate
from pipelines.runtime.config import DumpSource, SegmentsSource


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dump") / "logs"
    generate(out, 1500, seed=9, partitions=3)
    return out


def records(logs: Path) -> list[dict]:
    out = []
    for seg in discover([logs]):
        for b in iter_log(seg.path):
            assert isinstance(b, Batch)
            for r in b.records or ():
                out.append(
                    {
                        "partition": seg.partition,
                        "offset": r.offset,
                        "timestamp": r.timestamp,
                        "key": r.key,
                        "value": r.value,
                        "control": b.is_control,
                    }
                )
    return out


def b64(x: bytes | None) -> str | None:
    return None if x is None else base64.b64encode(x).decode()


def snapshot(spark, tables) -> set:
    df = spark.read.format("delta").load(tables.path("bronze", "offsets_records"))
    return {
        (r["partition"], r["offset"], r["key"], r["value"], r["control"])
        for r in df.select("partition", "offset", "key", "value", "control").collect()
    }


def test_jsonl_and_parquet_dumps(spark, tables, logs: Path, tmp_path: Path) -> None:
    recs = records(logs)
    jsonl = tmp_path / "dump.jsonl"
    with open(jsonl, "w") as fh:
        for r in recs:
            fh.write(json.dumps({**r, "key": b64(r["key"]), "value": b64(r["value"])}) + "\n")
        fh.write("{not json\n")
        fh.write(json.dumps({"offset": 1, "key": None}) + "\n")  # no partition
    res = ingest_dump(
        spark, tables, "j", DumpSource(kind="dump", cluster="c1", format="jsonl", paths=[str(jsonl)]), "r1", "/"
    )
    assert res.rows_inserted == len(recs) and len(res.issues) == 2
    assert {i["reason"] for i in res.issues} == {"bad_dump_row"}
    from_dump = snapshot(spark, tables)

    again = ingest_dump(
        spark, tables, "j", DumpSource(kind="dump", cluster="c1", format="jsonl", paths=[str(jsonl)]), "r2", "/"
    )
    assert again.rows_inserted == 0
    issues = spark.read.format("delta").load(tables.path("bronze", "read_issues")).count()
    assert issues == 2, "bad lines are recorded once, not once per run"

    parquet = tmp_path / "dump.parquet"
    pq.write_table(pa.Table.from_pylist(recs), parquet)
    res = ingest_dump(
        spark, tables, "p", DumpSource(kind="dump", cluster="c2", format="parquet", paths=[str(parquet)]), "r3", "/"
    )
    assert res.rows_inserted == len(recs) and not res.issues

    segs = ingest_segments(
        spark, tables, "s", SegmentsSource(kind="segments", cluster="c3", paths=[str(logs)]), "r4", "/"
    )
    assert segs.rows_inserted == len(recs)
    df = spark.read.format("delta").load(tables.path("bronze", "offsets_records"))
    by_cluster = {
        c: {
            (r["partition"], r["offset"], r["key"], r["value"], r["control"])
            for r in df.where(f"cluster = '{c}'").collect()
        }
        for c in ("c1", "c2", "c3")
    }
    assert from_dump == by_cluster["c1"] == by_cluster["c2"] == by_cluster["c3"]
