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
    a step and logs it as ``<layer>: plan took 1.2 s``; a step run twice adds up."""

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
            log.info("%s: %s took %.1f s", self.layer, name, seconds)
