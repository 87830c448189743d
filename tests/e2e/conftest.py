"""The e2e tier reuses the spark tier's session fixture (to read tables written by subprocesses),
and builds the fault points' template and uninterrupted run once per test run for the modules on
both xdist workers (tests/e2e/fault_cases.py)."""

from collections.abc import Iterator

import pytest

from tests.e2e.fault_cases import Template, Uninterrupted, build_template, build_uninterrupted
from tests.spark.conftest import spark, tier_store  # noqa: F401
from tests.support.build_once import assert_unchanged, build_once


@pytest.fixture(scope="session")
def fault_template(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Template]:  # noqa: F811
    """The generated log and the lakehouse after a first run on its first segments; killed runs
    start from copies of it."""
    template = Template(build_once(tmp_path_factory, "fault-template", build_template))
    yield template
    assert_unchanged(template.base)


@pytest.fixture(scope="session")
def uninterrupted(
    spark,  # noqa: F811
    fault_template: Template,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Uninterrupted]:
    """The template's incremental run over the whole log, not killed (its gold checked against the
    generator's expected state): what every killed and re-run job must equal. Read only."""
    clean = Uninterrupted(
        build_once(tmp_path_factory, "fault-uninterrupted", lambda base: build_uninterrupted(base, fault_template))
    )
    yield clean
    assert_unchanged(clean.base)
