"""The package's exceptions and the exit codes the CLI gives them (docs/cli.md)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import pipelines
from pipelines import errors
from pipelines.cli.main import EXIT_CONFIG, EXIT_FAILURE, one_line_errors


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (errors.ConfigError("jobs.yaml: x: bad"), EXIT_CONFIG),
        (errors.StageUnavailable("stage 'x' is not available"), EXIT_CONFIG),
        (errors.SourceNotFound("no such file or directory: /x"), EXIT_CONFIG),
        (errors.InputError("/x/0.log: cannot tell its partition"), EXIT_FAILURE),
        (errors.SourceUnavailable("Kafka at h:1: timeout"), EXIT_FAILURE),
        (ValueError("not ours"), EXIT_FAILURE),
        (FileNotFoundError("not ours either"), EXIT_FAILURE),
    ],
)
def test_the_cli_maps_each_error_to_its_exit_code(exc: Exception, code: int, capsys) -> None:
    with pytest.raises(SystemExit) as exit_, one_line_errors(verbose=False):
        raise exc
    assert exit_.value.code == code
    assert capsys.readouterr().err == f"error: {exc}\n"


def test_every_package_error_keeps_its_builtin_base() -> None:
    """Code that caught ValueError / FileNotFoundError / RuntimeError before still catches them."""
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.InputError, ValueError)
    assert issubclass(errors.SourceNotFound, FileNotFoundError)
    assert issubclass(errors.SourceUnavailable, RuntimeError)
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.OffsetsLakehouseError), name


def packages() -> list[str]:
    return ["pipelines"] + [
        m.name for m in pkgutil.walk_packages(pipelines.__path__, "pipelines.") if m.ispkg and "._" not in m.name
    ]


@pytest.mark.parametrize("name", packages())
def test_a_package_s_public_names_resolve(name: str) -> None:
    package = importlib.import_module(name)
    for public in getattr(package, "__all__", ()):
        assert getattr(package, public) is not None, f"{name}.{public}"
