"""The long tier reuses the spark tier's session fixture."""

from tests.spark.conftest import spark, tier_store  # noqa: F401
