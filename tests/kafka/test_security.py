"""Kafka security end to end (docs/security.md) on the tier broker's secured listeners
(conftest.secure): SASL_SSL with SCRAM-SHA-512, and SSL requiring a client certificate, behind
Kafka's StandardAuthorizer. Key and trust stores are made by keytool (tests/harness/tls.py), users
and ACLs through the Admin API (tests/harness/principals.py).

* the live job through each secured listener gives the bronze rows the plaintext listener gives;
* each refusal (wrong password, untrusted or expired certificate, TLS port reached in plaintext,
  missing ACLs) ends the run with exit code 5 and a line naming the cause, nothing committed;
* a whole run (bronze to quality, end offsets and truth from the Admin API, the report, status)
  writes neither the SASL password nor the key store password anywhere: logs, ``--json``, the
  lakehouse, Spark's event log, query plans.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipelines.bronze.kafka_client import check_access
from pipelines.bronze.kafka_source import partition_ends, read_range, stored_positions
from pipelines.errors import KafkaAccessDenied
from pipelines.runner import Context, run_job
from pipelines.runtime.config import KafkaSource
from tests.support.jvm import SHORT_RUN_CONF

REPO = Path(__file__).resolve().parents[2]

# secrets reach jobs.yaml only as ${ENV} references (a literal one is refused: test_config)
ENV = {
    "ALICE_PASSWORD": "alice",
    "BOB_PASSWORD": "bob",
    "MALLORY_PASSWORD": "mallory",
}


@pytest.fixture(scope="module")
def secrets_env(secure) -> Iterator[dict[str, str]]:
    values = {name: secure.passwords[user] for name, user in ENV.items()}
    values["STORE_PASSWORD"] = secure.stores.password
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    yield values
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def trust(stores: Any, truststore: Path | None = None) -> dict[str, str]:
    return {
        "ssl_truststore_location": str(truststore or stores.truststore),
        "ssl_truststore_password": "${STORE_PASSWORD}",
    }


def scram(secure: Any, user: str, password: str | None = None) -> dict[str, Any]:
    return {
        "protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "username": user,
        "password": password or f"${{{user.upper()}_PASSWORD}}",
        **trust(secure.stores),
    }


def mtls(secure: Any, keystore: Path | None = None, truststore: Path | None = None) -> dict[str, Any]:
    return {
        "protocol": "SSL",
        "ssl_keystore_location": str(keystore or secure.stores.client_keystore),
        "ssl_keystore_password": "${STORE_PASSWORD}",
        **trust(secure.stores, truststore),
    }


def write_jobs(
    path: Path,
    root: Path,
    sources: dict[str, tuple[str, dict[str, Any] | None]],
    *,
    stages: tuple[str, ...] = ("bronze",),
    quality: dict[str, Any] | None = None,
    conf: dict[str, str] | None = None,
    end_offsets_admin: bool = False,
) -> Path:
    """jobs.yaml with one job per source (named like it); ``sources``: name -> (bootstrap, security)."""
    doc: dict[str, Any] = {
        "lakehouse": {"root": str(root)},
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4", **(conf or {})}},
        "sources": {},
        "jobs": {},
    }
    for name, (bootstrap, security) in sources.items():
        src: dict[str, Any] = {"kind": "kafka", "cluster": f"via-{name}", "bootstrap_servers": bootstrap}
        if security:
            src["security"] = security
        if end_offsets_admin:
            src["end_offsets"] = {"kind": "admin"}
        doc["sources"][name] = src
        doc["jobs"][name] = {"sources": [name], "stages": list(stages), **({"quality": quality} if quality else {})}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o644)  # readable by others, like a jobs.yaml in a repository
    return path


def context(path: Path, spark: Any) -> Context:
    ctx = Context(path)
    ctx._spark = spark  # the tier's session: a run here starts no JVM of its own
    return ctx


def delta_versions(root: Path) -> dict[str, int]:
    """Every Delta table under ``root``: its latest commit version."""
    out = {}
    for log in root.rglob("_delta_log"):
        commits = [int(p.stem) for p in log.glob("*.json") if p.stem.isdigit()]
        out[str(log.parent.relative_to(root))] = max(commits, default=-1)
    return out


@pytest.fixture(scope="module")
def secured_lake(spark, secure, secrets_env, tmp_path_factory) -> tuple[Path, Context]:
    """The same offsets topic ingested through the plaintext, SASL_SSL and SSL listeners, each as
    its own cluster name, by the live job (runner.run_job: the access check, then bronze)."""
    for db in ("bronze", "silver", "gold", "quality"):
        spark.sql(f"DROP SCHEMA IF EXISTS {db} CASCADE")
    work = tmp_path_factory.mktemp("secured")
    b = secure.broker
    path = write_jobs(
        work / "jobs.yaml",
        work / "lakehouse",
        {
            "plaintext": (b.bootstrap, None),
            "sasl": (b.sasl_ssl_bootstrap, scram(secure, "alice")),
            "mtls": (b.ssl_bootstrap, mtls(secure)),
        },
    )
    ctx = context(path, spark)
    for job in ("plaintext", "sasl", "mtls"):
        run_job(ctx, job)
    return work / "lakehouse", ctx


def test_live_job_through_each_secured_listener_equals_plaintext(secured_lake):
    _, ctx = secured_lake
    spark, tables = ctx.spark, ctx.tables
    ends = {c: stored_positions(spark, tables, f"via-{c}", "__consumer_offsets") for c in ("plaintext", "sasl", "mtls")}
    assert all(ends.values()), ends
    # the broker kept writing between the runs (expiry): compare the range every run read
    common = {p: min(e[p] for e in ends.values()) for p in ends["plaintext"]}
    bronze = spark.read.format("delta").load(tables.path("bronze", "offsets_records")).collect()
    rows: dict[str, set[tuple]] = {c: set() for c in ends}
    for r in bronze:
        if r["offset"] < common[r["partition"]]:
            value = None if r["value"] is None else bytes(r["value"])
            rows[r["cluster"].removeprefix("via-")].add((r["partition"], r["offset"], bytes(r["key"]), value))
    assert len(rows["plaintext"]) > 1000
    assert rows["sasl"] == rows["plaintext"]
    assert rows["mtls"] == rows["plaintext"]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_other_sasl_mechanisms_log_in(spark, secure, secrets_env, mechanism):
    """SCRAM-SHA-512 carries the job above; the listener's other mechanisms get the same clients."""
    security = {
        **scram(secure, "alice"),
        "sasl_mechanism": mechanism,
        "password": secrets_env["ALICE_PASSWORD"],
        "ssl_truststore_password": secrets_env["STORE_PASSWORD"],
    }
    source = KafkaSource.model_validate(
        {"kind": "kafka", "cluster": "c", "bootstrap_servers": secure.broker.sasl_ssl_bootstrap, "security": security}
    )
    check_access(spark, source, groups=True)
    ends = partition_ends(spark, source)
    assert sum(e["high_watermark"] for e in ends.values()) > 1000


def _refusals(secure: Any) -> dict[str, tuple[str, dict[str, Any], dict[str, Any], list[str]]]:
    """name -> (bootstrap, security, job settings, what the error line must say)."""
    b, st = secure.broker, secure.stores
    return {
        "wrong_password": (
            b.sasl_ssl_bootstrap,
            scram(secure, "alice", password="${BOB_PASSWORD}"),
            {},
            ["refused the SCRAM-SHA-512 login of User:alice", "wrong user name or password"],
        ),
        "untrusted_broker_certificate": (
            b.ssl_bootstrap,
            mtls(secure, truststore=st.stranger_truststore),
            {},
            ["TLS handshake failed", "not signed by a CA in security.ssl_truststore_location"],
        ),
        "expired_client_certificate": (
            b.ssl_bootstrap,
            mtls(secure, keystore=st.expired_keystore),
            {},
            ["the client certificate CN=reader", "expired on", "renew it"],
        ),
        "client_certificate_from_unknown_ca": (
            b.ssl_bootstrap,
            mtls(secure, keystore=st.stranger_keystore),
            {},
            ["the broker refused the client certificate"],
        ),
        "plaintext_to_tls_listener": (
            b.ssl_bootstrap,
            {},
            {},
            ["speaks TLS on that port", "security.protocol is PLAINTEXT"],
        ),
        "no_acls": (
            b.sasl_ssl_bootstrap,
            scram(secure, "mallory"),
            {},
            ["User:mallory may not access topic __consumer_offsets", "grant it READ and DESCRIBE"],
        ),
        "no_group_acl": (
            b.sasl_ssl_bootstrap,
            scram(secure, "bob"),
            {},
            ["User:bob may not describe group offsets-lakehouse-spark", "prefix offsets-lakehouse-spark"],
        ),
        "live_truth_without_every_group": (
            b.ssl_bootstrap,
            mtls(secure),
            {"stages": ("bronze", "silver", "gold", "quality"), "quality": {"truth_snapshot": "live"}},
            ["may not describe group", "DESCRIBE on every group"],
        ),
    }


REFUSALS = [
    "wrong_password",
    "untrusted_broker_certificate",
    "expired_client_certificate",
    "client_certificate_from_unknown_ca",
    "plaintext_to_tls_listener",
    "no_acls",
    "no_group_acl",
    "live_truth_without_every_group",
]


@pytest.mark.parametrize("case", REFUSALS)
def test_refusal_ends_the_run_with_exit_5_and_commits_nothing(case, secured_lake, secure, tmp_path):
    root, lake_ctx = secured_lake
    bootstrap, security, job, expected = _refusals(secure)[case]
    before = delta_versions(root)
    assert before, "the lakehouse of the listener runs has tables"
    path = write_jobs(tmp_path / "jobs.yaml", root, {"bad": (bootstrap, security or None)}, **job)
    with pytest.raises(KafkaAccessDenied) as caught:
        run_job(context(path, lake_ctx.spark), "bad")
    message = str(caught.value)
    assert caught.value.exit_code == 5
    assert "\n" not in message
    for fragment in expected:
        assert fragment in message, message
    assert delta_versions(root) == before


def cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pipelines.cli.main", *args]
    return subprocess.run(cmd, cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, timeout=900)


def test_cli_refusal_is_one_error_line_with_exit_code_5(secure, secrets_env, tmp_path):
    path = write_jobs(
        tmp_path / "jobs.yaml",
        tmp_path / "lakehouse",
        {"bad": (secure.broker.sasl_ssl_bootstrap, scram(secure, "alice", password="${BOB_PASSWORD}"))},
        conf=SHORT_RUN_CONF,
    )
    proc = cli("run", "bad", "-c", str(path), cwd=tmp_path, env=secrets_env)
    assert proc.returncode == 5, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [proc.stderr.strip().splitlines()[-1]], proc.stderr[-3000:]
    assert "wrong user name or password" in errors[0]
    # Kafka's client logs the refused login with a stack trace on each retry: silenced, said once
    assert "SaslAuthenticationException" not in proc.stderr
    assert not (tmp_path / "lakehouse" / "bronze").exists()


def files_containing(root: Path, secrets: dict[str, str]) -> dict[str, list[str]]:
    """secret name -> the files under ``root`` whose bytes contain it."""
    found: dict[str, list[str]] = {name: [] for name in secrets}
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for name, value in secrets.items():
                if value.encode() in data:
                    found[name].append(str(path.relative_to(root)))
    return found


def test_secrets_never_leak(spark, secure, secrets_env, tmp_path):
    """A whole run with a known SASL password and a known key store password — through SASL_SSL,
    with a client key store, end offsets and a truth snapshot from the Admin API, Spark's event
    log on — then ``status --json``, ``tables`` and the report: no file any of them wrote, and no
    query plan of the Kafka read, holds either password."""
    secrets = {"sasl": secrets_env["ALICE_PASSWORD"], "store": secrets_env["STORE_PASSWORD"]}
    security = {**scram(secure, "alice"), **mtls(secure), "protocol": "SASL_SSL"}
    events = tmp_path / "events"
    events.mkdir()
    conf = {
        **SHORT_RUN_CONF,
        "spark.eventLog.enabled": "true",
        "spark.eventLog.compress": "false",  # searchable as written
        "spark.eventLog.dir": events.as_uri(),
        "spark.local.dir": str(tmp_path / "spark-local"),
    }
    path = write_jobs(
        tmp_path / "jobs.yaml",
        tmp_path / "lakehouse",
        {"live": (secure.broker.sasl_ssl_bootstrap, security)},
        stages=("bronze", "silver", "gold", "quality"),
        quality={"truth_snapshot": "live", "policy": "warn"},
        conf=conf,
        end_offsets_admin=True,
    )
    run = cli(
        "run", "live", "-c", str(path), "--json", "--log-file", str(tmp_path / "run.log"), cwd=tmp_path, env=secrets_env
    )
    assert run.returncode == 0, run.stderr[-3000:]
    outputs = {"run.json": run.stdout, "run.err": run.stderr}
    for name, args in {
        "status": ("status", "-c", str(path), "--json"),
        "tables": ("tables", "-c", str(path)),
        "report": ("report", "-c", str(path)),
    }.items():
        proc = cli(*args, cwd=tmp_path, env=secrets_env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        outputs[f"{name}.out"], outputs[f"{name}.err"] = proc.stdout, proc.stderr
    for name, text in outputs.items():
        (tmp_path / name).write_text(text)

    # the searched files hold what a leak would be in: the Kafka options, the run's report
    report = json.loads(run.stdout)
    assert report["status"] == "ok"
    event_text = "\n".join(p.read_text(errors="replace") for p in events.rglob("*") if p.is_file())
    assert "KafkaRelation" in event_text and "SparkListenerEnvironmentUpdate" in event_text
    assert list((tmp_path / "lakehouse").rglob("_delta_log/*.json"))
    assert (tmp_path / "run.log").stat().st_size > 0

    # query plans of the Kafka read, with its options, in every explain mode
    source = KafkaSource.model_validate(
        {"kind": "kafka", "cluster": "plan", "bootstrap_servers": secure.broker.sasl_ssl_bootstrap,
         "security": {**security, "password": secrets["sasl"], "ssl_truststore_password": secrets["store"],
                      "ssl_keystore_password": secrets["store"]}}
    )  # fmt: skip
    frame = read_range(spark, source, {0: 0}, {0: 1})
    qe = frame._jdf.queryExecution()
    plans = [qe.toString(), *(qe.explainString(mode) for mode in _explain_modes(spark))]
    (tmp_path / "plans.txt").write_text("\n".join(plans))
    assert "KafkaRelation" in plans[0]

    assert files_containing(tmp_path, secrets) == {"sasl": [], "store": []}
    # the search finds a secret where there is one
    (tmp_path / "canary").write_text(f"x{secrets['sasl']}x")
    assert files_containing(tmp_path, secrets)["sasl"] == ["canary"]


def _explain_modes(spark: Any) -> list[Any]:
    modes = spark._jvm.org.apache.spark.sql.execution.ExplainMode
    return [modes.fromString(m) for m in ("simple", "extended", "codegen", "cost", "formatted")]
