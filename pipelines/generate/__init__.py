"""``offsets-lakehouse generate``: a deterministic synthetic ``__consumer_offsets`` log directory."""

from pipelines.generate.run import GenerateResult, generate
from pipelines.generate.skew import Skew

__all__ = ["GenerateResult", "Skew", "generate"]
