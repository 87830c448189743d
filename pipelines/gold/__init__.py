"""Gold: the state Kafka's group coordinator would load from the log, kept by an ordered replay per
(cluster, offsets partition), plus history and analyst marts (docs/gold.md).

The public API: the stage (:func:`run_gold`, :class:`GoldResult`) and the replay engine
(:mod:`pipelines.gold.engine`, pure Python: :class:`PartitionReplay`), which Spark tasks run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines import lazy_exports

if TYPE_CHECKING:
    from pipelines.gold.build import GoldResult, run_gold
    from pipelines.gold.engine import PartitionInput, PartitionReplay

__all__ = ["GoldResult", "PartitionInput", "PartitionReplay", "run_gold"]

# the stage needs Spark; the engine does not (a Python worker imports only what it runs)
__getattr__ = lazy_exports(
    __name__,
    {"GoldResult": "build", "run_gold": "build", "PartitionInput": "engine", "PartitionReplay": "engine"},
)
