"""Who may import whom (docs/architecture.md): data flows one way, and so do imports.

A module may import its own layer and the layers below it, never a higher one, and never another
module's private (underscore) name. Every import counts, also the ones inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"

# lowest first; a top-level module or package of pipelines/ -> its rank
LAYERS: list[tuple[str, ...]] = [
    ("errors",),
    ("codec",),
    ("reference", "truth", "inspect"),  # pure Python over the codec: no Spark
    ("generate",),
    ("runtime",),
    ("bronze",),
    ("silver",),
    ("gold",),
    ("quality",),
    ("runner", "status", "serve", "report"),
    ("cli", "orchestrate"),  # orchestrate: Airflow DAGs that run the CLI (no Spark)
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def layer_of(module: str) -> str:
    """pipelines.silver.ingest -> silver; pipelines.runner -> runner."""
    return module.split(".")[1]


def module_name(path: Path) -> str:
    rel = path.relative_to(PIPELINES.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports(path: Path, me: str) -> list[tuple[int, str, list[str]]]:
    """(line, imported pipelines module, imported names) for every import in the file of module ``me``."""
    tree = ast.parse(path.read_text(), str(path))
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names if a.name.startswith("pipelines.")]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:  # relative import
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join([*base, mod] if mod else base)
            if mod == "pipelines" or mod.startswith("pipelines."):
                out.append((node.lineno, mod, [a.name for a in node.names]))
    return out


def modules() -> list[Path]:
    return sorted(p for p in PIPELINES.rglob("*.py") if not p.name.startswith("_") or p.name == "__init__.py")


def test_every_layer_is_ranked() -> None:
    tops = {p.relative_to(PIPELINES).parts[0].removesuffix(".py") for p in modules()} - {"__init__"}
    assert tops <= set(RANK), f"place these in LAYERS (and docs/architecture.md): {sorted(tops - set(RANK))}"


def problems(path: Path, me: str) -> list[str]:
    mine = RANK[layer_of(me)]
    out = []
    for line, mod, names in imports(path, me):
        targets = [(f"pipelines.{n}", []) for n in names] if mod == "pipelines" else [(mod, names)]
        for target, imported in targets:
            theirs = RANK.get(layer_of(target))
            if theirs is not None and theirs > mine:
                out.append(f"line {line}: {layer_of(me)} imports the higher layer {target}")
            private = [n for n in imported if n.startswith("_") and target != me]
            if private:
                out.append(f"line {line}: private names {private} of {target}")
    return out


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PIPELINES)))
def test_imports_go_down_and_stay_public(path: Path) -> None:
    me = module_name(path)
    if me != "pipelines":
        found = problems(path, me)
        assert not found, "\n".join(found)


def test_the_check_catches_upward_and_private_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from pipelines.codec.reader import iter_log\n"
        "def f():\n"
        "    from pipelines.gold.build import run_gold\n"
        "    from pipelines.codec.reader import _private\n"
    )
    found = problems(sample, "pipelines.codec.sample")
    assert found == [
        "line 3: codec imports the higher layer pipelines.gold.build",
        "line 4: private names ['_private'] of pipelines.codec.reader",
    ]
