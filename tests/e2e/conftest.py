"""The e2e tier reuses the spark tier's session fixture (to read tables written by subprocesses)."""

from tests.spark.conftest import spark  # noqa: F401
