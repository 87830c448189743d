"""Wall time per step of a stage: logged for operators, reported for benchmarks and the run log."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Steps"]

log = logging.getLogger("offsets_lakehouse")


class Steps(dict[str, float]):
    """Seconds per named step (a dict, so it serialises as one). ``with steps("plan"): ...`` times
    a step and logs it at DEBUG as ``<layer>: plan took 1.2 s``; a step run twice adds up. The
    stage's one INFO line carries them all (:meth:`summary`)."""

    def __init__(self, layer: str) -> None:
        super().__init__()
        self.layer = layer

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            self[name] = round(self.get(name, 0.0) + seconds, 1)
            log.debug("%s: %s took %.1f s", self.layer, name, seconds)

    def summary(self) -> str:
        """``in 9.3 s: plan files 3.1, read 5.0, write 1.2`` (the steps' seconds, in their order)."""
        if not self:
            return ""
        parts = ", ".join(f"{name} {seconds:.1f}" for name, seconds in self.items())
        return f"in {sum(self.values()):.1f} s: {parts}"
