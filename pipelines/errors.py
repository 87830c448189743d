"""The package's exceptions. The CLI maps each to its exit code (docs/cli.md), so a caller — the
CLI, Airflow, a notebook — can tell a bad configuration from a failed run without parsing text."""

from __future__ import annotations

__all__ = ["ConfigError", "OffsetsLakehouseError", "SourceNotFound", "StageUnavailable"]


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
