"""The whole-pipeline benchmark with the lakehouse on a real object store: SeaweedFS on loopback
(built once from the Go module proxy, tests/support/seaweedfs.py), requests counted per run.

    python bench/store_bench.py --records 1000000 [--json out.json]

Runs bench/pipeline_bench.py with ``--root s3a://bench/lakehouse --count-requests`` against it;
its numbers go beside the same benchmark on local disk in docs/performance.md. Exits as the
benchmark does (1 unless gold equals the generator's expected state)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import pipeline_bench  # noqa: E402
from tests.support.seaweedfs import seaweedfs_store  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--json", type=Path)
    args, rest = ap.parse_known_args(argv)
    with tempfile.TemporaryDirectory(prefix="store-bench-") as tmp, seaweedfs_store(Path(tmp)) as store:
        store.bucket("bench")
        # the store behind its own endpoint: the benchmark puts its counting proxy in front
        os.environ.update(store.env(direct=True))
        extra = ["--json", str(args.json)] if args.json else []
        return pipeline_bench.main(
            ["--records", str(args.records), "--root", "s3a://bench/lakehouse", "--count-requests", *extra, *rest]
        )


if __name__ == "__main__":
    sys.exit(main())
