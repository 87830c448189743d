"""The ``offsets-lakehouse`` command line (docs/cli.md): the click group ``cli``; the console
script is ``pipelines.cli.main:main``."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipelines.cli.main import cli

__all__ = ["cli"]


def __getattr__(name: str) -> Any:
    # not imported with the package: ``python -m pipelines.cli.main`` would then find the module
    # already imported and warn on stderr, which the CLI keeps to one line per error
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.main"), name)
