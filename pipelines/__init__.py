"""offsets-lakehouse: Kafka's ``__consumer_offsets`` topic as Delta tables.

Layers, lowest first (docs/architecture.md; each imports only those below it): ``codec`` (wire
format, pure Python), ``runtime`` (jobs.yaml, Spark session, lakehouse I/O), ``bronze``,
``silver``, ``gold``, ``quality``, then ``runner`` (a job's stages) and ``cli``. Every error the
package raises on purpose is an :class:`OffsetsLakehouseError` (subclasses in :mod:`pipelines.errors`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from pipelines.errors import OffsetsLakehouseError

__all__ = ["OffsetsLakehouseError", "lazy_exports"]


def lazy_exports(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) for ``package``: each public name in ``where`` is taken
    from the submodule it names when it is first used. A package's ``__init__`` then lists its API
    without importing Spark or Delta for a Spark worker that needs one pure submodule."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
