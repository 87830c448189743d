"""``jobs.yaml``: the lakehouse, Spark, sources and jobs, validated with clear errors.

Every error names the field (``sources.prod.bootstrap_servers: field required``). Strings may
use ``${ENV}`` / ``${ENV:-default}``; a missing variable is an error that names both. Secrets
(passwords, SASL JAAS configs) are ``SecretStr``: never printed, logged or put in ``--json``.
"""

from __future__ import annotations

import os
import re
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from croniter import croniter
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from pipelines.errors import ConfigError
from pipelines.runtime.storage import check_root

__all__ = [
    "STAGES",
    "AirflowSettings",
    "ConfigError",
    "EndOffsetsAdmin",
    "EndOffsetsFile",
    "JobsFile",
    "find_job",
    "load",
    "resolve_lock_dir",
    "resolve_root",
]

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Lakehouse(_Model):
    root: str = Field(description="local path or object-store URI (s3a://bucket/prefix) of the Delta tables")
    bronze_schema: str = "bronze"
    silver_schema: str = "silver"
    gold_schema: str = "gold"
    quality_schema: str = "quality"
    lock_dir: str | None = Field(
        None,
        description="a local directory for the per-job run locks (one host); default: <root>/_locks, a lock "
        "file on a local root, a lease in the store on an object-store root (docs/operations.md)",
    )
    lock_lease_seconds: float = Field(
        60.0,
        ge=5,
        description="object-store roots: a job's lease lapses this long after its holder last renewed it "
        "(every quarter of it); a run on another host may then take it over",
    )
    stage_wait_minutes: float = Field(
        60.0,
        gt=0,
        description="how long a run waits for another run's silver, gold or quality stage on the same "
        "lakehouse (one at a time, docs/operations.md) before it fails",
    )


class SparkSettings(_Model):
    master: str = "local[*]"
    app_name: str = "offsets-lakehouse"
    conf: dict[str, str] = Field(default_factory=dict)


SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"]

# settings this model owns: a pass-through property may not set them behind its back
_OWNED = {
    "bootstrap.servers",
    "security.protocol",
    "sasl.mechanism",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.keystore.type",
    "ssl.key.password",
}


class Security(_Model):
    """How the job's Kafka clients authenticate and encrypt (docs/security.md). Secrets come from
    the environment (``${KAFKA_PASSWORD}``): :func:`load` refuses one written into a jobs.yaml
    that others may read."""

    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    username: str | None = Field(None, description="PLAIN and SCRAM: the user name")
    password: SecretStr | None = Field(None, description="PLAIN and SCRAM: the password")
    ssl_truststore_location: str | None = Field(None, description="the CAs that sign the brokers' certificates")
    ssl_truststore_password: SecretStr | None = None
    ssl_truststore_type: Literal["PKCS12", "JKS", "PEM"] | None = None
    ssl_keystore_location: str | None = Field(None, description="the client certificate and key (mutual TLS)")
    ssl_keystore_password: SecretStr | None = None
    ssl_keystore_type: Literal["PKCS12", "JKS", "PEM"] | None = None
    ssl_key_password: SecretStr | None = None
    properties: dict[str, SecretStr] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("properties", "extra"),
        description="any other Kafka client property, passed to every client as is (OAUTHBEARER, GSSAPI, "
        "ssl.endpoint.identification.algorithm, …); values are treated as secrets",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Security:
        sasl = self.protocol.startswith("SASL_")
        if sasl and self.sasl_mechanism is None:
            raise ValueError(f"sasl_mechanism: required with protocol {self.protocol}")
        if not sasl and (self.sasl_mechanism or self.username or self.password):
            raise ValueError(f"sasl_mechanism, username, password: protocol {self.protocol} does not use SASL")
        if not self.protocol.endswith("SSL") and (self.ssl_truststore_location or self.ssl_keystore_location):
            raise ValueError(f"ssl_*: protocol {self.protocol} does not use TLS (SSL or SASL_SSL)")
        if self.sasl_mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            if "sasl.jaas.config" not in self.properties and (self.username is None or self.password is None):
                raise ValueError(f"username, password: required with sasl_mechanism {self.sasl_mechanism}")
        elif self.sasl_mechanism is not None and (self.username or self.password):
            raise ValueError(
                f"username, password: not used by {self.sasl_mechanism}; configure it with properties "
                "(sasl.jaas.config, sasl.login.callback.handler.class, …)"
            )
        owned = sorted(_OWNED & set(self.properties))
        if owned:
            raise ValueError(f"properties: {', '.join(owned)}: set by this section's own fields")
        prefixed = sorted(k for k in self.properties if k.startswith("kafka."))
        if prefixed:
            raise ValueError(f"properties: {', '.join(prefixed)}: write Kafka's own name, without kafka.")
        return self


class EndOffsetsFile(_Model):
    """End-offset snapshots in files (docs/lag.md): JSON lines or CSV with a header, columns
    cluster (optional: the source's), topic, partition, end_offset, observed_at."""

    kind: Literal["file"]
    paths: list[str] = Field(min_length=1, description="files or globs; relative paths are relative to jobs.yaml")
    format: Literal["jsonl", "csv"] | None = Field(None, description="default: from the file extension")

    @model_validator(mode="after")
    def _format_known(self) -> EndOffsetsFile:
        if self.format is None:
            for p in self.paths:
                if not p.endswith((".jsonl", ".json", ".csv")):
                    raise ValueError(
                        f"paths: cannot tell the format of {p!r} from its extension: set format (jsonl or csv)"
                    )
        return self


class EndOffsetsAdmin(_Model):
    """End offsets fetched at run time with the Admin API (ListOffsets latest) of a kafka source."""

    kind: Literal["admin"]


EndOffsets = Annotated[EndOffsetsFile | EndOffsetsAdmin, Field(discriminator="kind")]


class _Source(_Model):
    cluster: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")]
    offsets_partitions: int | None = Field(None, ge=1, description="partition count of __consumer_offsets")
    end_offsets: EndOffsets | None = Field(
        None, description="where the topics' end offsets for consumer lag come from (docs/lag.md); none: lag unknown"
    )

    @model_validator(mode="after")
    def _admin_needs_kafka(self) -> _Source:
        if isinstance(self.end_offsets, EndOffsetsAdmin) and getattr(self, "kind", None) != "kafka":
            raise ValueError("end_offsets: kind admin needs a kafka source (bootstrap_servers); use kind file")
        return self


class KafkaSource(_Source):
    kind: Literal["kafka"]
    bootstrap_servers: str
    topic: str = "__consumer_offsets"
    security: Security = Security()
    min_partitions: int | None = Field(None, ge=1)


class SegmentsSource(_Source):
    kind: Literal["segments"]
    paths: list[str] = Field(
        min_length=1, description="log directories, partition directories or .log files; globs allowed"
    )
    split_bytes: int = Field(64 * 1024 * 1024, ge=4096, description="byte range read by one Spark task")
    cluster_from_path: str | None = Field(
        None, description="regex with a named group 'cluster' applied to each file's path: one source, many clusters"
    )

    @field_validator("cluster_from_path")
    @classmethod
    def _cluster_group(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                pattern = re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
            if "cluster" not in pattern.groupindex:
                raise ValueError("needs a named group (?P<cluster>...)")
        return value


class DumpSource(_Source):
    kind: Literal["dump"]
    format: Literal["jsonl", "parquet"]
    paths: list[str] = Field(min_length=1)


Source = Annotated[KafkaSource | SegmentsSource | DumpSource, Field(discriminator="kind")]
# the stages of a job, in the order they run: declared once (the runner, the CLI and docs use it)
STAGES = ("bronze", "silver", "gold", "quality")
Stage = Literal[STAGES]  # type: ignore[valid-type]
Policy = Literal["fail", "warn", "quarantine"]


class QualitySettings(_Model):
    policy: Policy = "fail"
    overrides: dict[str, Policy] = Field(default_factory=dict, description="suite or expectation -> policy")
    max_clock_skew_minutes: int = Field(10, ge=0)
    max_pending_transaction_minutes: int = Field(15, ge=0)
    local_max_rows: int = Field(
        1_000_000,
        ge=0,
        description="a suite's frame of at most this many rows is validated in the driver by GX's pandas "
        "engine (one Spark job collects it) instead of on Spark (jobs per rule); 0: always on Spark",
    )
    incremental_min_rows: int = Field(
        50_000,
        ge=0,
        description="a suite whose table changed is validated on its new rows alone when the table has at least "
        "this many rows (ten times as many to be validated on its changed groups); a smaller one in full, which "
        "costs less there (docs/quality.md)",
    )
    truth_snapshot: str | None = Field(
        None,
        description="truth snapshot file (docs/truth-snapshot.md) gold must equal, or 'live': fetched from the "
        "job's kafka source",
    )


class AirflowSettings(_Model):
    """How the job's Airflow DAG runs its tasks (docs/airflow.md); every field has a default."""

    retries: int = Field(2, ge=0, description="retries of a task that failed with exit code 1")
    retry_delay_minutes: float = Field(5, gt=0)
    owner: str = Field("offsets-lakehouse", min_length=1)
    tags: list[str] = Field(default_factory=lambda: ["offsets-lakehouse"])
    start_date: date | None = Field(None, description="first data interval; default: a fixed past date (no catchup)")
    execution_timeout_minutes: float | None = Field(None, gt=0, description="a task running longer is failed")


class Job(_Model):
    sources: list[str] = Field(min_length=1)
    stages: list[Stage] = Field(default_factory=lambda: list(STAGES))
    schedule: str | None = Field(None, description="cron expression, for Airflow/cron wrappers")
    quality: QualitySettings = QualitySettings()
    airflow: AirflowSettings = AirflowSettings()

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None and not croniter.is_valid(value):
            raise ValueError(f"not a cron expression: {value!r}")
        return value


class GoldSettings(_Model):
    soft_delete_retention_days: float | None = Field(
        30,
        ge=0,
        description="keep soft-deleted current_offsets rows this many days of log time; null: forever",
    )


class JobsFile(_Model):
    lakehouse: Lakehouse
    spark: SparkSettings = SparkSettings()
    gold: GoldSettings = GoldSettings()
    sources: dict[str, Source]
    jobs: dict[str, Job]

    @model_validator(mode="after")
    def _references(self) -> JobsFile:
        for name, job in self.jobs.items():
            for src in job.sources:
                if src not in self.sources:
                    raise ValueError(f"jobs.{name}.sources: unknown source {src!r} (known: {sorted(self.sources)})")
        return self


def _interpolate(value: Any, where: str) -> Any:
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            raise ConfigError(f"{where}: environment variable {name} is not set")

        return _ENV.sub(sub, value)
    if isinstance(value, dict):
        return {k: _interpolate(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


_SECRET_FIELDS = ("password", "ssl_truststore_password", "ssl_keystore_password", "ssl_key_password")


def _check_secrets(raw: dict[str, Any], path: Path) -> None:
    """A secret written into jobs.yaml is refused unless only its owner can read the file (the
    rule ssh and ~/.pgpass apply): jobs.yaml usually lives in a repository, secrets belong in the
    environment (``${KAFKA_PASSWORD}``) or a file outside it."""
    sources = raw.get("sources")
    if not isinstance(sources, dict) or path.stat().st_mode & 0o077 == 0:
        return
    for name, src in sources.items():
        sec = src.get("security") if isinstance(src, dict) else None
        if not isinstance(sec, dict):
            continue
        props = sec.get("properties", sec.get("extra"))
        fields = [(f, sec.get(f)) for f in _SECRET_FIELDS]
        if isinstance(props, dict):
            fields += [(f"properties.{k}", v) for k, v in props.items() if _SECRET_KEY.search(str(k))]
        for field, value in fields:
            if isinstance(value, str) and not _ENV.fullmatch(value.strip()):
                raise ConfigError(
                    f"{path}: sources.{name}.security.{field}: a secret written in jobs.yaml, which others "
                    "may read: take it from the environment (${KAFKA_PASSWORD}) or make the file readable "
                    "by its owner only (chmod 600) — docs/security.md"
                )


_SECRET_KEY = re.compile(r"(?i)password|secret|jaas|token|credential|key$")


def _describe(err: ValidationError, path: Path) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"] if not str(p).startswith(("function-after", "tagged-union")))
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"{path}: {loc or '(top level)'}: {msg}")
    return "\n".join(lines)


def load(path: str | Path) -> JobsFile:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such file")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    _check_secrets(raw, path)
    try:
        return JobsFile.model_validate(_interpolate(raw, ""))
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path)) from None


def find_job(config: JobsFile, path: str | Path, name: str) -> Job:
    """The job called ``name``; a configuration error naming the known ones when there is none."""
    job = config.jobs.get(name)
    if job is None:
        raise ConfigError(f"{path}: jobs.{name}: no such job (known: {sorted(config.jobs)})")
    return job


def resolve_lock_dir(config: JobsFile, base: Path) -> str | None:
    """``lakehouse.lock_dir`` as an absolute path (relative to jobs.yaml, ``~`` expanded), or None."""
    lock_dir = config.lakehouse.lock_dir
    if lock_dir is None:
        return None
    p = Path(lock_dir).expanduser()
    return str((p if p.is_absolute() else base / p).resolve())


def resolve_root(config: JobsFile, base: Path) -> str:
    """The lakehouse root as an absolute path or URI (relative paths are relative to jobs.yaml)."""
    root = config.lakehouse.root
    if "://" in root:
        check_root(root)
        return root.rstrip("/")
    p = Path(root)
    return str((p if p.is_absolute() else base / p).resolve())
