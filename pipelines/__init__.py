"""offsets-lakehouse: Kafka's ``__consumer_offsets`` topic as Delta tables.

Layers, lowest first (docs/architecture.md; each imports only those below it): ``codec`` (wire
format, pure Python), ``runtime`` (jobs.yaml, Spark session, lakehouse I/O), ``bronze``,
``silver``, ``gold``, ``quality``, then ``runner`` (a job's stages) and ``cli``. The package's
exceptions (:mod:`pipelines.errors`) are importable from here.
"""

from pipelines.errors import (
    ConfigError,
    DeclarationError,
    InputError,
    JarResolutionError,
    OffsetsLakehouseError,
    SourceNotFound,
    SourceUnavailable,
    StageUnavailable,
)

__all__ = [
    "ConfigError",
    "DeclarationError",
    "InputError",
    "JarResolutionError",
    "OffsetsLakehouseError",
    "SourceNotFound",
    "SourceUnavailable",
    "StageUnavailable",
]
