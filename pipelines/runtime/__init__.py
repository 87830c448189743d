"""Runtime: configuration (jobs.yaml), JVM jars, the Spark session and Delta table I/O.

The public API: :func:`load` (a validated jobs.yaml, :class:`JobsFile`), :func:`resolve_root`,
``STAGES``, :func:`build_session`, :class:`Tables` (declared tables by name and path) and
:mod:`pipelines.runtime.lake` (every read and write of a Delta table). Runtime knows no layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines import lazy_exports

if TYPE_CHECKING:
    from pipelines.runtime.config import STAGES, JobsFile, load, resolve_root
    from pipelines.runtime.spark import build_session
    from pipelines.runtime.tables import Tables

__all__ = ["STAGES", "JobsFile", "Tables", "build_session", "lake", "load", "resolve_root"]

# Imported on first use, not with the package: a module that needs one part of the runtime
# (faults, the lake module on a Spark worker) does not load pydantic, Spark and Delta for the rest.
_MODULES = {
    "STAGES": "config",
    "JobsFile": "config",
    "load": "config",
    "resolve_root": "config",
    "Tables": "tables",
    "build_session": "spark",
}

__getattr__ = lazy_exports(__name__, _MODULES)
