"""Named fault-injection points for crash/replay tests.

``OFFSETS_FAULT=<point>`` makes the process die abruptly (``os._exit``: no cleanup, no
``finally``, like a kill) when it reaches that point. Points are listed in ``POINTS`` and
documented in docs/testing.md; an unknown name is refused so that a typo cannot make a
crash test pass vacuously.
"""

from __future__ import annotations

import os
import sys

POINTS = {
    "bronze.before_write": "rows read and staged, nothing written to bronze yet",
    "bronze.after_write_before_commit": "new data files written into the bronze table directory, no Delta commit",
    "bronze.after_commit": "the MERGE is committed; the run is not recorded and the process dies",
}
EXIT_CODE = 86


def point(name: str) -> None:
    wanted = os.environ.get("OFFSETS_FAULT")
    if not wanted:
        return
    if wanted not in POINTS:
        raise RuntimeError(f"OFFSETS_FAULT={wanted!r} is not a fault point ({', '.join(sorted(POINTS))})")
    if wanted == name:
        sys.stderr.write(f"fault injected at {name}\n")
        sys.stderr.flush()
        os._exit(EXIT_CODE)
