"""docs/tables.md is generated from the table declarations and kept in step."""

from pathlib import Path

from pipelines.runtime.tables import data_dictionary, load_specs

REPO = Path(__file__).resolve().parents[2]


def test_data_dictionary_is_current() -> None:
    assert (REPO / "docs" / "tables.md").read_text() == data_dictionary(), (
        "run: python -m pipelines.runtime.tables > docs/tables.md"
    )


def test_every_column_is_documented() -> None:
    for tables in load_specs().values():
        for spec in tables.values():
            assert spec.comment, spec.name
            for col in spec.columns:
                assert col.comment, f"{spec.layer}.{spec.name}.{col.name} has no comment"
