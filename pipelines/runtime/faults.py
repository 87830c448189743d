"""Named fault-injection points for crash/replay tests.

``OFFSETS_FAULT=<point>`` makes the process die abruptly (``os._exit``: no cleanup, no
``finally``, like a kill) when it reaches that point. Points are listed in ``POINTS`` and
documented in docs/testing.md; an unknown name is refused so that a typo cannot make a
crash test pass vacuously.

With ``OFFSETS_FAULT_HOOK=<host>:<port>`` as well, the process does not die there: it tells the
test harness listening at that address which point it reached, waits for its answer and goes on.
The object-store tests stop the store at that moment (tests/support/store.py), so the run meets
a store that is gone in the middle of its commits.
"""

from __future__ import annotations

import os
import socket
import sys

POINTS = {
    "bronze.before_write": "rows read and staged, nothing written to bronze yet",
    "bronze.after_write_before_commit": "new data files written into the bronze table directory, no Delta commit",
    "bronze.after_commit": "the MERGE is committed; the run is not recorded and the process dies",
    "silver.after_decode": "bronze rows selected and decoded, nothing written to silver yet",
    "silver.after_write_before_commit": "one silver table committed, data files of the next written without a commit",
    "silver.after_first_table": "the first silver table's MERGE is committed, the others not",
    "silver.before_derived": "every decoded table written; topic_ids and version_inventory not updated",
    "silver.before_watermark": "every silver table written; the watermark (silver.progress) not",
    "silver.refresh_after_first_table": "full refresh: refresh_pending recorded, the first table overwritten",
    "silver.redecode_before_quarantine": "redecode: released rows inserted into their tables, quarantine untouched",
    "gold.before_merge": "processed partitions marked in flight, no gold table changed",
    "gold.between_merges": "current_offsets merged; pending_transactions, current_groups and progress not",
}
# where a test acts on the run rather than kill it (OFFSETS_FAULT_HOOK, or a patched ``point``):
# not crash points, so the kill tests do not walk them
HOOKS = {
    "bronze.listed_before_read": "segment files listed and planned, none read (tests change files here)",
}
EXIT_CODE = 86


def point(name: str) -> None:
    wanted = os.environ.get("OFFSETS_FAULT")
    if not wanted:
        return
    if wanted not in POINTS and wanted not in HOOKS:
        raise RuntimeError(f"OFFSETS_FAULT={wanted!r} is not a fault point ({', '.join(sorted(POINTS))})")
    if wanted == name:
        sys.stderr.write(f"fault injected at {name}\n")
        sys.stderr.flush()
        hook = os.environ.get("OFFSETS_FAULT_HOOK")
        if hook:
            host, _, port = hook.rpartition(":")
            with socket.create_connection((host, int(port)), timeout=60) as conn:
                conn.sendall(f"{name}\n".encode())
                conn.makefile().readline()  # the harness has done its part
            return
        os._exit(EXIT_CODE)
