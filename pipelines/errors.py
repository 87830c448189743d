"""The package's exceptions. The CLI maps each to its exit code (docs/cli.md), so a caller — the
CLI, Airflow, a notebook — can tell a bad configuration from a failed run without parsing text.

Each also derives from the built-in exception it used to be (``ValueError``,
``FileNotFoundError``, ``RuntimeError``), so code that caught those keeps working.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DeclarationError",
    "InputError",
    "JarResolutionError",
    "JobRunning",
    "KafkaAccessDenied",
    "LakehouseUnwritable",
    "OffsetsLakehouseError",
    "SourceNotFound",
    "SourceUnavailable",
    "StageBusy",
    "StageUnavailable",
    "StoreError",
    "UnsupportedTable",
]


class OffsetsLakehouseError(Exception):
    """Base of every error this package raises on purpose; a failed run (exit code 1)."""

    exit_code = 1


class ConfigError(OffsetsLakehouseError, ValueError):
    """jobs.yaml is missing, not valid, or names what does not exist (exit code 2)."""

    exit_code = 2


class StageUnavailable(ConfigError):
    """A job asks for a stage this version does not have (exit code 2)."""


class SourceNotFound(OffsetsLakehouseError, FileNotFoundError):
    """A source path that does not exist, or holds no segment files (exit code 2)."""

    exit_code = 2


class InputError(OffsetsLakehouseError, ValueError):
    """A source's files cannot be ingested as given: a segment outside a ``__consumer_offsets-<N>``
    directory, a path ``cluster_from_path`` does not match (exit code 1)."""


class SourceUnavailable(OffsetsLakehouseError, RuntimeError):
    """A source could not be reached or did not answer in time (exit code 1)."""


class KafkaAccessDenied(SourceUnavailable):
    """A Kafka cluster refused us, or our security settings do not fit its listener: a login
    refused, a certificate not trusted or expired, TLS spoken to a plaintext listener or the
    reverse, a principal without the ACLs the job needs (exit code 5: a retry cannot help; the
    settings or the ACLs must change — docs/security.md)."""

    exit_code = 5


class DeclarationError(OffsetsLakehouseError, ValueError):
    """A declaration shipped with the package (``schemas/``) is inconsistent (exit code 1)."""


class JarResolutionError(OffsetsLakehouseError, RuntimeError):
    """The JVM jars (Delta, Kafka) could not be found or resolved with Maven (exit code 1)."""


class JobRunning(OffsetsLakehouseError, RuntimeError):
    """Another run of the same job holds its lock: nothing to do for this one (exit code 4)."""

    exit_code = 4


class UnsupportedTable(OffsetsLakehouseError, RuntimeError):
    """A lakehouse table uses a Delta feature this version cannot read outside Spark, e.g.
    deletion vectors someone switched on (exit code 1)."""


class StoreError(OffsetsLakehouseError, RuntimeError):
    """The object store holding the lakehouse could not be reached, or refused a request (exit
    code 1: a later run, with the store back, continues where this one stopped)."""


class LakehouseUnwritable(OffsetsLakehouseError, OSError):
    """The lakehouse's storage refuses writes: its disk is full, or its permissions (or a
    read-only mount) refuse the user running the job (exit code 6: a retry cannot help until
    someone frees space or grants access; the next run then continues where this one stopped)."""

    exit_code = 6


class StageBusy(OffsetsLakehouseError, RuntimeError):
    """A lakehouse-wide stage (silver, gold, quality) stayed held by another run for longer than
    this run waits for it (exit code 1: the next run goes on where both left off)."""
