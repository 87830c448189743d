"""What a resumed gold partition pays per passed-through row: the Arrow steps of an increment's
replay that follow the persisted state, not the events.

    python bench/gold_passthrough_bench.py --lakehouse var/w10n/initial-lakehouse [--touched 0.15]

An increment replays the groups its events touch and passes every other group's persisted rows
through (``engine.replay``); those rows are still split off, concatenated back, given their
partition columns, sized and, for an interval table, split into closed and open intervals before
they are written again. This times those steps on a built lakehouse's gold state, per offsets
partition as the replay sees it, with a deterministic share of each partition's groups taken as
touched (``--touched``: a 1 % increment touched 43 % of the groups at 10M records, 14-17 % at
30M). Compare lakehouses of two sizes to see what grows with the history (docs/performance.md).
Reports the best of ``--repeat`` runs per step, in seconds, summed over the partitions.
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipelines.gold.build import CURRENT_FLAG, INTERVALS, split_intervals, with_partition  # noqa: E402
from pipelines.gold.engine import STATE_TABLES, split_groups  # noqa: E402
from pipelines.gold.handles import concat_all  # noqa: E402

PARTITION_COLUMNS = ("cluster", "offsets_partition", CURRENT_FLAG)


def state(lakehouse: Path) -> dict[str, tuple[pa.Schema, dict[int, pa.Table]]]:
    """Per gold state table: its schema, and its persisted rows (open intervals only) per partition,
    without the partition columns (as the replay reads them)."""
    out = {}
    for table in STATE_TABLES.values():
        try:
            rows = DeltaTable(str(lakehouse / "gold" / table)).to_pyarrow_table()
        except TableNotFoundError:  # gold creates a table in its first write: none yet
            continue
        if table in INTERVALS:
            rows = rows.filter(pc.is_null(rows.column(INTERVALS[table])))
        parts = rows.column("offsets_partition")
        keep = [c for c in rows.column_names if c not in PARTITION_COLUMNS]
        by_part = {
            p: rows.filter(pc.equal(parts, p)).select(keep).combine_chunks() for p in pc.unique(parts).to_pylist()
        }
        out[table] = (rows.schema, by_part)
    return out


def touched_groups(rows: pa.Table, share: float) -> pa.Array:
    """A deterministic ``share`` of the groups of ``rows`` (by a hash of the name)."""
    groups = pc.unique(rows.column("group_id")).to_pylist()
    cut = int(share * 2**32)
    return pa.array([g for g in groups if zlib.crc32(g.encode()) < cut], pa.string())


def best(step: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lakehouse", type=Path, required=True, help="a built lakehouse (its gold/ tables)")
    ap.add_argument("--touched", type=float, default=0.15, help="share of each partition's groups touched")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    tables = state(args.lakehouse)
    slices = [
        (table, schema, part, rows, touched_groups(rows, args.touched))
        for table, (schema, by_part) in tables.items()
        for part, rows in by_part.items()
    ]
    split: list[tuple[str, pa.Schema, int, pa.Table, pa.Table]] = []

    def split_off() -> None:  # engine.replay: the touched groups' rows, and the rest
        split.clear()
        for table, schema, part, rows, touched in slices:
            split.append((table, schema, part, *split_groups(rows, touched)))

    def concatenated() -> list[tuple[str, pa.Schema, int, pa.Table]]:
        # the replay's rows (here the touched groups' own, unchanged) and the passed-through ones
        return [(t, s, p, concat_all([mine, rest], mine.schema)) for t, s, p, mine, rest in split]

    split_off()
    outputs = concatenated()
    with_columns = [(t, with_partition(rows, "bench", p, t, s)) for t, s, p, rows in outputs]

    def open_closed() -> None:  # build.replayed: an interval table's output by its end column
        for table, rows in with_columns:
            if table in INTERVALS:
                split_intervals(rows, table)

    steps = {
        "split touched / passed through": split_off,
        "concatenate": concatenated,
        "partition columns (with_partition)": lambda: [with_partition(r, "bench", p, t, s) for t, s, p, r in outputs],
        "closed / open intervals": open_closed,
        "size by nbytes": lambda: [rows.nbytes for _, rows in with_columns],
        "size by buffers": lambda: [rows.get_total_buffer_size() for _, rows in with_columns],
    }
    n_rows = sum(rows.num_rows for _, _, _, rows, _ in slices)
    passed = sum(rest.num_rows for *_, rest in split)
    print(f"{args.lakehouse}: {n_rows:,} persisted state rows in {len(slices)} table slices; "
          f"{passed:,} passed through at {args.touched:.0%} of the groups touched")  # fmt: skip
    print("\n| step | seconds |\n|---|---:|")
    for name, step in steps.items():
        print(f"| {name} | {best(step, args.repeat):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
