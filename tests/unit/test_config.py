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


KAFKA = """
lakehouse: {root: var/lh}
sources:
  k:
    kind: kafka
    cluster: prod
    bootstrap_servers: b:9093
    security:
SECURITY
jobs:
  j: {sources: [k]}
"""


def kafka_security(tmp_path: Path, security: str, mode: int = 0o644) -> Path:
    body = "\n".join(f"      {line}" for line in security.strip().splitlines())
    path = write(tmp_path, KAFKA.replace("SECURITY", body))
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    "security",
    [
        "{protocol: SASL_SSL, sasl_mechanism: SCRAM-SHA-512, username: u, password: s3cret-literal}",
        "{protocol: SSL, ssl_keystore_location: /k.p12, ssl_keystore_password: s3cret-literal}",
        "{protocol: SSL, ssl_key_password: s3cret-literal}",
        "{protocol: SASL_SSL, sasl_mechanism: OAUTHBEARER, properties: {sasl.jaas.config: 's3cret-literal'}}",
    ],
)
def test_a_secret_written_in_a_readable_jobs_yaml_is_refused(tmp_path: Path, security: str) -> None:
    with pytest.raises(ConfigError, match=r"a secret written in jobs.yaml.*\$\{KAFKA_PASSWORD\}.*chmod 600") as e:
        load(kafka_security(tmp_path, security))
    assert "s3cret-literal" not in str(e.value)
    # readable by its owner only, like ~/.pgpass: accepted
    cfg = load(kafka_security(tmp_path, security, mode=0o600))
    assert "s3cret-literal" not in cfg.model_dump_json()


def test_secrets_from_the_environment_are_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KP", "from-env")
    path = kafka_security(
        tmp_path,
        "{protocol: SSL, ssl_keystore_location: /k.p12, ssl_keystore_password: '${KP}', ssl_key_password: '${KP}',"
        " ssl_truststore_location: /t.p12, ssl_truststore_password: '${KP}', ssl_keystore_type: JKS}",
    )
    sec = load(path).sources["k"].security
    assert sec.ssl_keystore_password.get_secret_value() == "from-env" and sec.ssl_keystore_type == "JKS"


@pytest.mark.parametrize(
    ("security", "message"),
    [
        ("{protocol: SASL_SSL}", "sasl_mechanism: required with protocol SASL_SSL"),
        ("{protocol: SSL, sasl_mechanism: PLAIN}", "protocol SSL does not use SASL"),
        ("{protocol: SASL_PLAINTEXT, sasl_mechanism: SCRAM-SHA-256}", "username, password: required"),
        ("{protocol: SASL_SSL, sasl_mechanism: MD5, username: u}", "sasl_mechanism"),
        ("{protocol: SASL_SSL, sasl_mechanism: GSSAPI, username: u}", "not used by GSSAPI"),
        ("{protocol: PLAINTEXT, ssl_truststore_location: /t}", "does not use TLS"),
        ("{protocol: SSL, properties: {ssl.keystore.location: /k}}", "set by this section's own fields"),
        ("{protocol: SSL, properties: {kafka.client.id: x}}", "without kafka."),
    ],
)
def test_inconsistent_security_is_refused_naming_the_field(tmp_path: Path, security: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"sources\.k") as e:
        load(kafka_security(tmp_path, security))
    assert message in str(e.value)
