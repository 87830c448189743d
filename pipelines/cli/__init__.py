"""The ``offsets-lakehouse`` command line (docs/cli.md): the click group ``cli``; the console
script is ``pipelines.cli.main:main``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines import lazy_exports

if TYPE_CHECKING:
    from pipelines.cli.main import cli

__all__ = ["cli"]

# not imported with the package: ``python -m pipelines.cli.main`` would then find the module
# already imported and warn on stderr, which the CLI keeps to one line per error
__getattr__ = lazy_exports(__name__, {"cli": "main"})
