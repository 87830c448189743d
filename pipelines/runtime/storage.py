"""Where the lakehouse lives, and how every reader and writer reaches it the same way.

A root is a local directory (or ``file://``) or an S3 / S3-compatible object store (``s3://`` or
``s3a://``, the same thing). On a store, four clients touch the same bytes: Spark (Hadoop's S3A
connector, and Delta's log store for commits), delta-rs (small commits and log reads on the
driver), pyarrow (segment files and data files read in Python tasks) and boto3 (the job lock).
:class:`S3Settings` is the one place their settings come from, so they cannot disagree.

Settings come from the environment every AWS SDK reads (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``; without
keys, the SDKs' default chains, instance roles included), or from jobs.yaml's
``spark.hadoop.fs.s3a.*`` with ``${ENV}`` values; jobs.yaml wins where both are given. They are
exported to this process's environment before Spark starts, so pyarrow, delta-rs, boto3 and
Spark's local Python workers see the same, and handed to a cluster's executors as
``spark.executorEnv`` (Spark redacts the secret ones in its UI and event log). Secrets are never
copied into Spark's configuration.

Commits on a store are coordinated by the store's conditional writes (``If-None-Match: *``):
Spark through :data:`pipelines.runtime.jars.LOG_STORE_CLASS`, delta-rs through its
``conditional_put=etag`` (docs/object-storage.md). :func:`check_conditional_writes` refuses a
store that ignores them, where concurrent commits could be lost.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipelines.errors import ConfigError, StoreError

__all__ = [
    "OBJECT_STORE_SCHEMES",
    "S3Settings",
    "check_conditional_writes",
    "check_root",
    "delta_rs_options",
    "is_object_store",
    "reader_options",
    "split_uri",
    "unreachable",
    "unreachable_message",
]

# what S3A (the AWS SDK), delta-rs and pyarrow say when the object store does not answer
_CONNECT = re.compile(
    r"(?:Connect to |request for url \(https?://|Error performing \w+ https?://)(?P<host>[\w.\-]+:\d+)"
    r".{0,600}?(?P<why>Connection refused|timed out|Connection reset|No route to host)"
    r"|NETWORK_CONNECTION.{0,300}?(?P<why2>Couldn't connect to server|Connection refused|timed out)"
    # boto3 (the run's lock): its message, then the cause it wraps (runtime/lock.py adds it)
    r'|Could not connect to the endpoint URL: "https?://(?P<host3>[\w.\-]+:\d+)'
    r".{0,600}?(?P<why3>Connection refused|timed out|Connection reset|No route to host)",
    re.S,
)
_WHERE = re.compile(r"(?P<uri>s3a?://[^\s:;,)]+)")


def unreachable(text: str) -> re.Match[str] | None:
    """Where an error's text says the object store did not answer: ``host`` and ``why`` (or
    ``why2``) groups, whichever client (S3A, delta-rs, pyarrow) said so; None otherwise."""
    return _CONNECT.search(re.sub(r"\x1b\[[0-9;]*m", "", text))


def unreachable_message(text: str) -> str | None:
    """One line for an error whose text says the object store did not answer (:func:`unreachable`),
    whichever client said so, or None."""
    m = unreachable(text)
    if m is None:
        return None
    host = m.group("host") or m.group("host3")
    host = host or os.environ.get("AWS_ENDPOINT_URL", "").split("://")[-1] or "its endpoint"
    where = _WHERE.search(text)
    at = f" (at {where.group('uri')})" if where else ""
    return (
        f"the object store at {host} could not be reached: {m.group('why') or m.group('why2') or m.group('why3')}"
        f"{at}. Nothing half-written was committed; run the job again when the store answers "
        "(docs/object-storage.md)"
    )


log = logging.getLogger("offsets_lakehouse")

OBJECT_STORE_SCHEMES = ("s3", "s3a")
# Delta can coordinate commits on these natively, but this version neither ships nor tests their
# Hadoop connectors (docs/object-storage.md)
_NOT_SUPPORTED = ("abfs", "abfss", "wasb", "wasbs", "gs", "adl", "oss", "cos", "hdfs")
_S3A = "spark.hadoop.fs.s3a."


def is_object_store(uri: str) -> bool:
    """Whether ``uri`` names an object store (``s3://`` or ``s3a://``) rather than a local path."""
    return uri.partition("://")[0].lower() in OBJECT_STORE_SCHEMES if "://" in uri else False


def check_root(root: str) -> None:
    """A configuration error for a root this version cannot write (exit code 2)."""
    if "://" not in root:
        return
    scheme = root.partition("://")[0].lower()
    if scheme == "file" or scheme in OBJECT_STORE_SCHEMES:
        if scheme in OBJECT_STORE_SCHEMES and not split_uri(root)[0]:
            raise ConfigError(f"lakehouse.root: {root} names no bucket (s3a://bucket/prefix)")
        return
    hint = " (see docs/object-storage.md: Azure and Google Cloud Storage)" if scheme in _NOT_SUPPORTED else ""
    raise ConfigError(f"lakehouse.root: {scheme}:// is not supported; use a local path or s3a://bucket/prefix{hint}")


def split_uri(uri: str) -> tuple[str, str]:
    """(bucket, key) of an ``s3://`` or ``s3a://`` URI; the key without a trailing ``/``."""
    rest = uri.partition("://")[2]
    bucket, _, key = rest.partition("/")
    return bucket, key.strip("/")


def _truthy(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class S3Settings:
    """How to reach the S3 or S3-compatible store: one resolution for every client."""

    endpoint: str | None = None
    region: str | None = None
    path_style: bool = False
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @classmethod
    def resolve(cls, spark_conf: Mapping[str, str], environ: Mapping[str, str] | None = None) -> S3Settings:
        """From jobs.yaml's ``spark.conf`` (its ``spark.hadoop.fs.s3a.*``) over the environment."""
        env = os.environ if environ is None else environ

        def pick(conf_key: str, *env_keys: str) -> str | None:
            value = spark_conf.get(_S3A + conf_key)
            if value:
                return value
            for key in env_keys:
                if env.get(key):
                    return env[key]
            return None

        endpoint = pick("endpoint", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
        if endpoint and "://" not in endpoint:
            secure = _truthy(spark_conf.get(_S3A + "connection.ssl.enabled"))
            endpoint = f"{'http' if secure is False else 'https'}://{endpoint}"
        region = pick("endpoint.region", "AWS_REGION", "AWS_DEFAULT_REGION")
        if region is None and endpoint:
            region = "us-east-1"  # S3-compatible stores accept any region; S3A needs one with an endpoint
        path_style = _truthy(spark_conf.get(_S3A + "path.style.access"))
        return cls(
            endpoint=endpoint.rstrip("/") if endpoint else None,
            region=region,
            # an S3-compatible store at an endpoint usually serves buckets as paths, not host names
            path_style=bool(endpoint) if path_style is None else path_style,
            access_key=pick("access.key", "AWS_ACCESS_KEY_ID"),
            secret_key=pick("secret.key", "AWS_SECRET_ACCESS_KEY"),
            session_token=pick("session.token", "AWS_SESSION_TOKEN"),
        )

    def environ(self) -> dict[str, str]:
        """The ``AWS_*`` variables that give pyarrow, delta-rs and boto3 these settings."""
        out = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": self.region,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_SESSION_TOKEN": self.session_token,
        }
        if self.endpoint and self.endpoint.startswith("http://"):
            out["AWS_ALLOW_HTTP"] = "true"  # delta-rs refuses plain HTTP unless told
        if self.endpoint:
            # no instance-metadata look-ups against a store that is not AWS
            out["AWS_EC2_METADATA_DISABLED"] = "true"
        return {k: v for k, v in out.items() if v}

    def export(self) -> None:
        """Put :meth:`environ` into this process's environment (before Spark starts: its local
        Python workers inherit it)."""
        os.environ.update(self.environ())

    def spark_conf(self, local: bool) -> dict[str, str]:
        """Spark settings for S3A and Delta on the store; ``local`` False adds what a cluster's
        executors need (the ``AWS_*`` variables as ``spark.executorEnv``)."""
        conf = {"spark.hadoop.fs.s3a.path.style.access": str(self.path_style).lower()}
        if self.endpoint:
            conf["spark.hadoop.fs.s3a.endpoint"] = self.endpoint
            conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(self.endpoint.startswith("https://")).lower()
        if self.region:
            conf["spark.hadoop.fs.s3a.endpoint.region"] = self.region
        if not local:
            for key, value in self.environ().items():
                conf[f"spark.executorEnv.{key}"] = value
        return conf

    def client(self) -> Any:
        """A boto3 S3 client with these settings (the job lock's lease, the probe)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            aws_session_token=self.session_token,
            config=Config(
                s3={"addressing_style": "path" if self.path_style else "auto"},
                retries={"mode": "standard", "max_attempts": 3},
                connect_timeout=10,
                read_timeout=30,
            ),
        )


def log_store_conf() -> dict[str, str]:
    """Every session's settings for ``s3://`` and ``s3a://`` tables: S3A for both schemes, and
    Delta's log store that commits by conditional write."""
    from pipelines.runtime.jars import LOG_STORE_CLASS

    return {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.delta.logStore.s3a.impl": LOG_STORE_CLASS,
        "spark.delta.logStore.s3.impl": LOG_STORE_CLASS,
    }


def delta_rs_options(uri: str, writing: bool = False) -> dict[str, str]:
    """delta-rs storage options for the table at ``uri``: on a store, commits by conditional
    write (``If-None-Match``, as Spark's log store) and plain HTTP when the endpoint is; the
    endpoint and keys delta-rs reads from the environment (:meth:`S3Settings.export`).

    ``writing``: no request retries. A commit whose answer was lost is retried by the store
    client, refused by the commit file it did write, and taken by delta-rs for another writer's
    commit: it commits the same actions again at the next version, and the change data feed then
    shows its rows twice. Without retries the write fails instead, as if the run was killed after
    its commit, which every stage recovers from (measured: tests/spark/test_object_store.py)."""
    if not is_object_store(uri):
        return {}
    options = {"conditional_put": "etag"}
    if os.environ.get("AWS_ENDPOINT_URL", "").startswith("http://"):
        options["AWS_ALLOW_HTTP"] = "true"
    if writing:
        options["max_retries"] = "0"
    else:
        # a few quick retries, then the error: every caller reading with delta-rs falls back to
        # Spark, whose S3A client has the job's own retry settings (the default, 10 retries over
        # 3 minutes, outlasts a stage lock's lease when the store is gone)
        options |= {"max_retries": "3", "retry_timeout": "10s"}
    return options


def reader_options(root: str, spark_conf: Mapping[str, str]) -> dict[str, str]:
    """What a reader outside this package (delta-rs, Polars) passes as ``storage_options`` to read
    the lakehouse at ``root``: the endpoint and region, never the credentials (those stay in the
    environment, where delta-rs also reads them). Exports the settings, for this process's reads."""
    if not is_object_store(root):
        return {}
    settings = S3Settings.resolve(spark_conf)
    settings.export()
    env = settings.environ()
    keep = ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ALLOW_HTTP")
    return {k: env[k] for k in keep if k in env}


_checked: set[tuple[str, str]] = set()


def check_conditional_writes(client: Any, bucket: str, prefix: str) -> None:
    """Refuse a store that ignores conditional writes (:class:`ConfigError`, exit code 2): there,
    two writers could each believe they committed the same table version, and one commit would
    be lost. Three small requests under ``<prefix>/_coordination/``, once per process."""
    from botocore.exceptions import BotoCoreError, ClientError

    if (bucket, prefix) in _checked:
        return
    key = f"{prefix}/_coordination/probe-{uuid.uuid4().hex}" if prefix else f"_coordination/probe-{uuid.uuid4().hex}"

    def refused(**kwargs: Any) -> bool:
        try:
            client.put_object(Bucket=bucket, Key=key, Body=b"probe", **kwargs)
        except ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 412:
                return True
            raise StoreError(f"s3://{bucket}/{key}: {exc}") from None
        except BotoCoreError as exc:  # no credentials, no connection
            raise StoreError(f"s3://{bucket}/{key}: {exc}") from None
        return False

    try:
        refused(IfNoneMatch="*")
        create_refused = refused(IfNoneMatch="*")
        replace_refused = refused(IfMatch='"0000000000000000000000000000000f"')
    finally:
        try:
            client.delete_object(Bucket=bucket, Key=key)
        except (ClientError, BotoCoreError):
            log.debug("could not delete the probe s3://%s/%s", bucket, key)
    missing = [h for h, ok in (("If-None-Match", create_refused), ("If-Match", replace_refused)) if not ok]
    if missing:
        raise ConfigError(
            f"the object store at s3://{bucket} ignores conditional writes ({', '.join(missing)}): "
            "concurrent commits could be lost there. Use a store that honours them (AWS S3, MinIO, "
            "SeaweedFS, Ceph RGW; docs/object-storage.md)"
        )
    _checked.add((bucket, prefix))
