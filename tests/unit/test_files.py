"""pipelines.runtime.files.read_parquet on the files Spark writes (no JVM: pyarrow writes the same
INT96 timestamps Spark does by default)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.runtime.files import read_parquet

# epoch milliseconds: before 1970, now, and after 2262 (past int64 nanoseconds; the 10M-record
# benchmark's generated clock gets there)
MS = [-1_234_567, 1_764_000_000_123, 11_053_517_538_386]


def test_int96_timestamps_come_back_as_the_milliseconds_written(tmp_path: Path) -> None:
    path = tmp_path / "part-0.parquet"
    ts = pa.array([m * 1000 + 999 for m in MS], pa.timestamp("us"))  # sub-millisecond part floored
    pq.write_table(pa.table({"t": ts, "n": pa.array([1, 2, 3])}), path, use_deprecated_int96_timestamps=True)
    assert pq.ParquetFile(path).metadata.schema.column(0).physical_type == "INT96"
    schema = pa.schema([("t", pa.int64()), ("n", pa.int64())])
    got = read_parquet([str(path)], schema, timestamps_as_ms=["t"])
    assert got.column("t").to_pylist() == MS
    assert got.column("n").to_pylist() == [1, 2, 3]
