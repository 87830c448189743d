"""Python's cyclic garbage collector, paused around the tasks' allocation-heavy work.

Silver's decoder and gold's replay allocate a container per record, key or history entry and free
them by reference counting (neither builds reference cycles on purpose), but every collection meanwhile
traverses the containers still alive: about 15 % of a decode on one batch, and for the replay a
share that grows with the partition (4 % of a 10M-record build's replay, 11 % of a 30M one's;
docs/performance.md). Paused, not disabled: a cycle made meanwhile is collected after.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["paused"]


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The collector off inside the block, then as it was (a caller that disabled it keeps it so)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
