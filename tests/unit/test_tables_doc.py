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


def test_a_statement_registers_the_layers_it_names() -> None:
    """`sql` registers only the layers a statement names (a Delta snapshot per table registered)."""
    from pipelines.runtime.tables import Tables

    tables = Tables(None, "/lake", {"gold": "prod_gold"})  # type: ignore[arg-type]
    assert tables.layers_named("SELECT * FROM prod_gold.live_offsets") == ["gold"]
    assert tables.layers_named("select 1 from SILVER.x join `prod_gold`.`y`") == ["silver", "gold"]
    # "gold" is not gold's schema here, and "silvery" is not a word "silver"
    assert tables.layers_named("SELECT 'gold', silvery FROM t") is None
    assert tables.layers_named("SHOW TABLES") is None
