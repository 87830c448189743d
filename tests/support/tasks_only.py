"""Run the CLI with every read, decode, replay and large write in Spark's tasks, none on the driver.

A test's log is small, so a run would take the driver's shortcuts (bronze ``LOCAL_READ_BYTES``,
silver ``LOCAL_DECODE_ROWS``, gold ``LOCAL_REPLAY_ROWS``, the data tables' delta-rs commits up
to ``lake.LOCAL_WRITE_BYTES``); a test that must prove the executors' side (a cluster whose workers
see only the object store) runs ``python -c COMMAND run ...`` instead of the CLI, which sets those
bounds in the CLI's own process and then calls it.
"""

from __future__ import annotations

COMMAND = "from tests.support.tasks_only import cli; cli()"


def cli() -> None:
    from pipelines.bronze import ingest as bronze_ingest
    from pipelines.cli.main import main
    from pipelines.gold import build as gold_build
    from pipelines.runtime import lake
    from pipelines.silver import ingest as silver_ingest

    bronze_ingest.LOCAL_READ_BYTES = -1
    silver_ingest.LOCAL_DECODE_ROWS = -1
    gold_build.LOCAL_REPLAY_ROWS = -1
    lake.LOCAL_WRITE_BYTES = -1  # the data tables' writes; control tables stay delta-rs commits
    main()
