"""jobs.yaml validation: clear errors that name the field, ${ENV} interpolation, secrets hidden."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.runtime.config import ConfigError, KafkaSource, SegmentsSource, load

REPO = Path(__file__).resolve().parents[2]

GOOD = """
lakehouse: {root: var/lh}
sources:
  a: {kind: segments, cluster: c1, paths: [logs]}
  k:
    kind: kafka
    cluster: prod
    bootstrap_servers: ${BOOT}
    security:
      protocol: SASL_SSL
      sasl_mechanism: PLAIN
      username: u
      password: ${PASS:-hunter2}
jobs:
  j: {sources: [a, k], schedule: "*/5 * * * *"}
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "jobs.yaml"
    p.write_text(text)
    return p


def test_repository_jobs_yaml_is_valid() -> None:
    cfg = load(REPO / "jobs.yaml")
    assert isinstance(cfg.sources["demo"], SegmentsSource) and "demo" in cfg.jobs


def test_env_interpolation_and_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOOT", "broker:9092")
    cfg = load(write(tmp_path, GOOD))
    k = cfg.sources["k"]
    assert isinstance(k, KafkaSource) and k.bootstrap_servers == "broker:9092" and k.topic == "__consumer_offsets"
    assert k.security.password.get_secret_value() == "hunter2"
    assert "hunter2" not in repr(cfg) and "hunter2" not in cfg.model_dump_json()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda t: t.replace("${BOOT}", "${NOPE}"),
            "sources.k.bootstrap_servers: environment variable NOPE is not set",
        ),
        (lambda t: t.replace("cluster: c1, ", ""), "sources.a.segments.cluster: Field required"),
        (lambda t: t.replace("kind: segments", "kind: tape"), "sources.a: Input tag 'tape'"),
        (lambda t: t.replace("[a, k]", "[a, x]"), "jobs.j.sources: unknown source 'x'"),
        (lambda t: t.replace("*/5 * * * *", "every five minutes"), "jobs.j.schedule: not a cron expression"),
        (
            lambda t: t.replace("paths: [logs]", "paths: [logs], colour: blue"),
            "sources.a.segments.colour: Extra inputs",
        ),
        (lambda t: t.replace("protocol: SASL_SSL", "protocol: CARRIER_PIGEON"), "security.protocol"),
        (lambda t: t + "  - nonsense\n:", "not valid YAML"),
    ],
)
def test_errors_name_the_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit, message: str) -> None:
    monkeypatch.setenv("BOOT", "b:1")
    with pytest.raises(ConfigError) as err:
        load(write(tmp_path, edit(GOOD)))
    assert message in str(err.value)
    assert "Traceback" not in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load(tmp_path / "absent.yaml")
