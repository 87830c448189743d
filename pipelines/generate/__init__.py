"""``offsets-lakehouse generate``: a deterministic synthetic ``__consumer_offsets`` log directory."""

from pipelines.generate.run import GenerateResult, generate

__all__ = ["GenerateResult", "generate"]
