"""Talking to a Kafka cluster safely (docs/security.md): the client settings a ``security`` section
makes, a check before a run commits anything, and Kafka's refusals turned into one line that says
what to fix.

Every client — Spark's Kafka source on the executors, the driver's consumer that finds the
positions, the Admin API for end offsets and truth snapshots — gets the same settings from
:func:`client_options`. Secrets reach the JVM only as client properties (``sasl.jaas.config``,
``ssl.*.password``), whose names or values Spark's redaction pattern matches wherever it prints
options (plans, the UI, the event log); the kafka tier searches a whole run's files for them.

A refusal is a :class:`~pipelines.errors.KafkaAccessDenied` (exit code 5); an unreachable cluster
stays :class:`KafkaUnavailable` (exit code 1, a later run may succeed).
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from py4j.protocol import Py4JJavaError

from pipelines.errors import ConfigError, KafkaAccessDenied, SourceUnavailable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.runtime.config import KafkaSource

__all__ = [
    "TIMEOUT_S",
    "KafkaAccessDenied",
    "KafkaUnavailable",
    "admin_client",
    "check_access",
    "client_options",
    "java_properties",
    "refusal",
    "require_listener",
]

TIMEOUT_S = 20

# Spark's Kafka source looks up the committed offsets of a throwaway group of its own (a group id
# with this prefix) before it reads, so the principal needs DESCRIBE on groups with the prefix
SPARK_GROUP_PREFIX = "offsets-lakehouse-spark"
# group ids no one uses: asking for their offsets shows whether the principal may DESCRIBE groups
# with Spark's prefix, and any group at all (live truth snapshots describe every group)
SPARK_PROBE_GROUP = f"{SPARK_GROUP_PREFIX}-acl-probe"
ANY_PROBE_GROUP = "acl-probe-of-offsets-lakehouse"

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


class KafkaUnavailable(SourceUnavailable):
    """The cluster could not be reached or did not answer in time."""


def client_options(source: KafkaSource) -> dict[str, str]:
    """Kafka client settings (without the ``kafka.`` prefix Spark wants); secrets resolved here only."""
    sec = source.security
    opts = {"bootstrap.servers": source.bootstrap_servers, "security.protocol": sec.protocol}
    if sec.sasl_mechanism:
        opts["sasl.mechanism"] = sec.sasl_mechanism
        module = _LOGIN_MODULES.get(sec.sasl_mechanism)
        if module and sec.username is not None and sec.password is not None:
            user = _jaas_quote(sec.username)
            pwd = _jaas_quote(sec.password.get_secret_value())
            opts["sasl.jaas.config"] = f'{module} required username="{user}" password="{pwd}";'
    for name in ("truststore", "keystore"):
        location = getattr(sec, f"ssl_{name}_location")
        password = getattr(sec, f"ssl_{name}_password")
        kind = getattr(sec, f"ssl_{name}_type")
        if location:
            opts[f"ssl.{name}.location"] = location
        if password is not None:
            opts[f"ssl.{name}.password"] = password.get_secret_value()
        if kind:
            opts[f"ssl.{name}.type"] = kind
    if sec.ssl_key_password is not None:
        opts["ssl.key.password"] = sec.ssl_key_password.get_secret_value()
    for k, v in sec.properties.items():
        opts[k] = v.get_secret_value()
    return opts


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def java_properties(spark: SparkSession, source: KafkaSource, **more: str) -> Any:
    """A ``java.util.Properties`` with the client settings and ``more``."""
    props = spark._jvm.java.util.Properties()  # type: ignore[attr-defined]
    for k, v in {**client_options(source), **more}.items():
        props.setProperty(k, v)
    return props


# -- what went wrong -----------------------------------------------------------------------------------
_REMOTE = re.compile(r"((?:org\.apache\.kafka|javax\.net\.ssl|java\.security|sun\.security)[\w.$]*): ([^\n]*)")


def java_chain(exc: BaseException) -> list[tuple[str, str]]:
    """(class name, message) of a py4j error's Java exception and its causes; a Spark job's error
    carries the executors' exceptions only as text, so those are parsed out of the messages."""
    out: list[tuple[str, str]] = []
    if isinstance(exc, Py4JJavaError):
        e, depth = exc.java_exception, 0
        while e is not None and depth < 20:
            out.append((str(e.getClass().getName()), str(e.getMessage() or "")))
            e, depth = e.getCause(), depth + 1
    else:
        out.append((type(exc).__name__, str(exc)))
    for _, msg in list(out):
        out += [(m.group(1), m.group(2)) for m in _REMOTE.finditer(msg)]
    return out


def _principal(source: KafkaSource) -> str:
    sec = source.security
    if sec.protocol.startswith("SASL_"):
        return f"User:{sec.username}" if sec.username else f"the {sec.sasl_mechanism} principal"
    if sec.protocol == "SSL" and sec.ssl_keystore_location:
        return "the client certificate's principal"
    return "User:ANONYMOUS"


def refusal(source: KafkaSource, exc: BaseException) -> KafkaAccessDenied | None:
    """The refusal ``exc`` stands for, as one line naming the cause and what to fix; None when it is
    not one (a timeout, a broker gone)."""
    chain = java_chain(exc)
    names = " ".join(n for n, _ in chain)
    text = " | ".join(m for _, m in chain)
    where = f"Kafka at {source.bootstrap_servers}"
    sec = source.security
    who = _principal(source)

    def has(*needles: str) -> bool:
        return any(n.lower() in (names + " " + text).lower() for n in needles)

    if has("SaslAuthenticationException"):
        if has("invalid credentials", "Authentication failed"):
            return KafkaAccessDenied(
                f"{where} refused the {sec.sasl_mechanism} login of {who}: wrong user name or password "
                "(security.username, security.password)"
            )
        return KafkaAccessDenied(f"{where} refused the SASL login of {who}: {_first(chain, 'Sasl')}")
    if has("UnsupportedSaslMechanismException", "IllegalSaslStateException"):
        return KafkaAccessDenied(
            f"{where} does not accept SASL mechanism {sec.sasl_mechanism} on this listener: "
            f"{_first(chain, 'Sasl')} (security.sasl_mechanism)"
        )
    if has("Failed to load SSL keystore", "Failed to load SSL truststore", "keystore password was incorrect"):
        store = "truststore" if has("SSL truststore") else "keystore"
        return KafkaAccessDenied(
            f"security.ssl_{store}_location: cannot open {getattr(sec, f'ssl_{store}_location')}: "
            f"{_deepest(chain)} (a wrong security.ssl_{store}_password or ssl_{store}_type?)"
        )
    if has("SslAuthenticationException", "SSLHandshakeException", "SSLException"):
        return KafkaAccessDenied(f"{where}: TLS handshake failed: {_tls_cause(source, has, chain)}")
    for kind, resource, fix in (
        ("TopicAuthorization", f"topic {source.topic}", f"READ and DESCRIBE on topic {source.topic}"),
        ("GroupAuthorization", "consumer groups", f"DESCRIBE on groups with the prefix {SPARK_GROUP_PREFIX}"),
        ("ClusterAuthorization", "the cluster", "DESCRIBE on the cluster"),
    ):
        if has(f"{kind}Exception"):
            return KafkaAccessDenied(
                f"{where}: {who} may not access {resource} ({_first(chain, kind)}): grant it {fix} "
                "(kafka-acls --add …; docs/security.md)"
            )
    return None


def _tls_cause(source: KafkaSource, has: Any, chain: list[tuple[str, str]]) -> str:
    sec = source.security
    if has("Unrecognized SSL message", "plaintext connection"):
        return (
            f"the listener does not speak TLS: use protocol {sec.protocol.replace('SSL', 'PLAINTEXT')} or the "
            "port of the cluster's TLS listener (security.protocol)"
        )
    if has("PKIX path", "unable to find valid certification path"):
        return (
            "the broker's certificate is not signed by a CA in security.ssl_truststore_location "
            f"({sec.ssl_truststore_location or 'the JVM default CAs'}): add the CA that signed it"
        )
    if has("CertificateExpiredException", "NotAfter"):
        return "the broker's certificate has expired: the broker must renew it"
    if has("No subject alternative", "No name matching"):
        return (
            f"the broker's certificate does not name the host in {source.bootstrap_servers}: connect by a name "
            "it holds, or (not recommended) set properties ssl.endpoint.identification.algorithm: ''"
        )
    if has("bad_certificate", "certificate_unknown", "certificate_required", "unknown_ca", "certificate_expired"):
        if sec.ssl_keystore_location is None:
            return "the listener requires a client certificate: set security.ssl_keystore_location (mutual TLS)"
        return (
            f"the broker refused the client certificate in {sec.ssl_keystore_location}: is it signed by a CA "
            "the broker trusts (its ssl.truststore) and still valid?"
        )
    return _deepest(chain)


def _first(chain: list[tuple[str, str]], name: str) -> str:
    return next((m for n, m in chain if name in n and m), _deepest(chain))


def _deepest(chain: list[tuple[str, str]]) -> str:
    named = [(n, m) for n, m in chain if m]
    if not named:
        return chain[-1][0] if chain else "unknown error"
    n, m = named[-1]
    return f"{n.rsplit('.', 1)[-1]}: {m}"


def failure(source: KafkaSource, exc: BaseException) -> SourceUnavailable:
    """What a failed call to the cluster means: a refusal (:func:`refusal`), TLS spoken to a
    listener that has none, or the cluster unreachable."""
    denied = refusal(source, exc)
    if denied is not None:
        return denied
    chain = java_chain(exc)
    where = f"Kafka at {source.bootstrap_servers}"
    protocol = source.security.protocol
    if any("Timeout" in n for n, _ in chain):
        # a listener that speaks the other protocol just drops the connection: the client retries
        # until its timeout, so ask the port directly which it speaks
        tls = _speaks_tls(source.bootstrap_servers)
        if tls and not protocol.endswith("SSL"):
            return KafkaAccessDenied(
                f"{where} speaks TLS on that port, but security.protocol is {protocol}: use "
                f"{protocol.replace('PLAINTEXT', 'SSL')} with ssl_truststore_location (docs/security.md)"
            )
        if tls is False and protocol.endswith("SSL"):
            return KafkaAccessDenied(
                f"{where} does not speak TLS on that port, but security.protocol is {protocol}: use "
                f"{protocol.replace('SSL', 'PLAINTEXT')}, or the port of the cluster's TLS listener"
            )
    top = next(((n, m) for n, m in chain[1:] if m), chain[0])
    return KafkaUnavailable(f"{where}: {top[0].rsplit('.', 1)[-1]}: {top[1]}")


def _addresses(bootstrap: str) -> list[tuple[str, tuple[str, int] | None]]:
    """Each bootstrap server as written, with its (host, port); None for one that is not
    ``host:port`` (an IPv6 host in brackets loses them)."""
    out: list[tuple[str, tuple[str, int] | None]] = []
    for server in (s.strip() for s in bootstrap.split(",")):
        host, _, port = server.rpartition(":")
        out.append((server, (host.strip("[]"), int(port)) if host and port.isdigit() else None))
    return out


def _speaks_tls(bootstrap: str, timeout: float = 3.0) -> bool | None:
    """Whether the bootstrap servers complete a TLS handshake (certificate unchecked: only whether
    they speak TLS matters here): True if one does, False if every one that accepts a connection
    does not, None if none accepts one. A plaintext Kafka listener closes the connection at once
    on a ClientHello."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    answer = None
    for _, address in _addresses(bootstrap):
        if address is None:
            continue
        host, port = address
        try:
            raw = socket.create_connection((host, port), timeout=timeout)
        except OSError:
            continue
        with raw:
            try:
                with context.wrap_socket(raw, server_hostname=host):
                    return True
            except (OSError, ssl.SSLError):
                answer = False
    return answer


def require_listener(source: KafkaSource, timeout: float = 3.0) -> None:
    """Raise :class:`KafkaUnavailable` at once when no bootstrap server accepts a TCP connection
    (refused, or a host name that does not resolve): Kafka's clients retry such a server until
    their timeout (:data:`TIMEOUT_S`) and then report only that. A server that accepts, or whose
    connection attempt times out (a firewall that drops), is left to the client."""
    refused = []
    for server, address in _addresses(source.bootstrap_servers):
        if address is None:
            return  # not host:port: the client says what is wrong with it
        try:
            socket.create_connection(address, timeout=timeout).close()
            return
        except (ConnectionRefusedError, socket.gaierror) as exc:
            refused.append(f"{server}: {exc.strerror or exc}")
        except OSError:
            return
    raise KafkaUnavailable(
        f"Kafka at {source.bootstrap_servers}: no bootstrap server accepts a connection ({'; '.join(refused)})"
    )


# -- before a run --------------------------------------------------------------------------------------
def check_access(spark: SparkSession, source: KafkaSource, *, groups: bool = False) -> None:
    """Everything the job will ask of the cluster, asked once before anything is committed: the
    client certificate still valid, the login accepted, READ and DESCRIBE on the offsets topic,
    DESCRIBE on Spark's groups, and with ``groups`` (live truth snapshots) DESCRIBE on every group.
    Raises a :class:`KafkaAccessDenied` naming the cause and the ACL to grant, or
    :class:`KafkaUnavailable`."""
    _check_stores(spark, source)
    with admin_client(spark, source, "offsets-lakehouse-check") as admin:
        jvm = spark._jvm  # type: ignore[attr-defined]
        unit = jvm.java.util.concurrent.TimeUnit.SECONDS
        options = jvm.org.apache.kafka.clients.admin.DescribeTopicsOptions().includeAuthorizedOperations(True)
        topics = jvm.java.util.Collections.singletonList(source.topic)
        described = admin.describeTopics(topics, options).allTopicNames().get(TIMEOUT_S, unit)
        allowed = described.get(source.topic).authorizedOperations()
        # null: the broker did not say (no authorizer, or an old broker); the run finds out itself
        if allowed is not None:
            names = {str(op.name()) for op in allowed}
            missing = [op for op in ("READ", "DESCRIBE") if op not in names]
            if missing:
                raise KafkaAccessDenied(
                    f"Kafka at {source.bootstrap_servers}: {_principal(source)} may not "
                    f"{' or '.join(missing)} topic {source.topic}: grant it READ and DESCRIBE on topic "
                    f"{source.topic} (kafka-acls --add …; docs/security.md)"
                )
        _probe_group(admin, unit, source, SPARK_PROBE_GROUP)
        if groups:
            _probe_group(admin, unit, source, ANY_PROBE_GROUP)


def _probe_group(admin: Any, unit: Any, source: KafkaSource, group: str) -> None:
    try:
        admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(TIMEOUT_S, unit)
    except Py4JJavaError as exc:
        chain = java_chain(exc)
        if any("GroupIdNotFound" in n for n, _ in chain):
            return  # allowed to ask, and the group does not exist: what we wanted to know
        if not any("GroupAuthorization" in n for n, _ in chain):
            raise
        if group == SPARK_PROBE_GROUP:
            need = (
                f"DESCRIBE on groups with the prefix {SPARK_GROUP_PREFIX} (Spark's Kafka source looks up "
                f"its own group's offsets: kafka-acls --add --resource-pattern-type prefixed --group "
                f"{SPARK_GROUP_PREFIX} --operation Describe …)"
            )
        else:
            need = "DESCRIBE on every group (quality.truth_snapshot: live): kafka-acls --add --group '*' …"
        raise KafkaAccessDenied(
            f"Kafka at {source.bootstrap_servers}: {_principal(source)} may not describe group {group}: grant it "
            f"{need}; docs/security.md"
        ) from exc


@contextlib.contextmanager
def admin_client(spark: SparkSession, source: KafkaSource, client_id: str) -> Iterator[Any]:
    """A JVM Admin client with the source's settings and our timeouts, closed on exit; a py4j
    error from creating it or from the block becomes :func:`failure`'s exception."""
    require_listener(source)
    jvm = spark._jvm  # type: ignore[attr-defined]
    # the admin client refuses an API timeout below the request timeout (30 s by default)
    props = java_properties(
        spark,
        source,
        **{
            "client.id": client_id,
            "default.api.timeout.ms": str(TIMEOUT_S * 1000),
            "request.timeout.ms": str(TIMEOUT_S * 1000),
        },
    )
    try:
        admin = jvm.org.apache.kafka.clients.admin.Admin.create(props)
    except Py4JJavaError as exc:  # a setting the client refuses, a key store it cannot open
        raise failure(source, exc) from exc
    try:
        yield admin
    except Py4JJavaError as exc:  # the cluster did not answer, or refused us
        raise failure(source, exc) from exc
    finally:
        admin.close()


def _check_stores(spark: SparkSession, source: KafkaSource) -> None:
    """The key and trust stores exist and open; the client certificate is within its validity
    (a broker refuses an expired one with a bare handshake alert, which cannot say why)."""
    sec = source.security
    jvm = spark._jvm  # type: ignore[attr-defined]
    for name in ("truststore", "keystore"):
        location = getattr(sec, f"ssl_{name}_location")
        if not location or getattr(sec, f"ssl_{name}_type") == "PEM":
            continue
        if not jvm.java.io.File(location).canRead():
            raise ConfigError(f"security.ssl_{name}_location: no such readable file: {location}")
        secret = getattr(sec, f"ssl_{name}_password")
        chars = None if secret is None else _char_array(spark, secret.get_secret_value())
        store = jvm.java.security.KeyStore.getInstance(getattr(sec, f"ssl_{name}_type") or "PKCS12")
        stream = jvm.java.io.FileInputStream(location)
        try:
            store.load(stream, chars)
        except Py4JJavaError as exc:
            raise KafkaAccessDenied(
                f"security.ssl_{name}_location: cannot open {location}: {_deepest(java_chain(exc))} "
                f"(a wrong security.ssl_{name}_password or ssl_{name}_type?)"
            ) from exc
        finally:
            stream.close()
        if name == "keystore":
            _check_validity(jvm, store, location)


def _char_array(spark: SparkSession, text: str) -> Any:
    """A Java ``char[]`` (py4j turns every Java String into a Python str, so toCharArray cannot)."""
    gateway = spark.sparkContext._gateway  # type: ignore[attr-defined]
    chars = gateway.new_array(gateway.jvm.char, len(text))
    for i, c in enumerate(text):
        chars[i] = c
    return chars


def _check_validity(jvm: Any, store: Any, location: str) -> None:
    aliases = store.aliases()
    while aliases.hasMoreElements():
        alias = aliases.nextElement()
        if not store.isKeyEntry(alias):
            continue
        cert = store.getCertificate(alias)
        try:
            cert.checkValidity()
        except Py4JJavaError as exc:
            expired = "Expired" in str(exc.java_exception.getClass().getName())
            when = cert.getNotAfter() if expired else cert.getNotBefore()
            raise KafkaAccessDenied(
                f"security.ssl_keystore_location: the client certificate {cert.getSubjectX500Principal().getName()} "
                f"in {location} {'expired on' if expired else 'is not valid before'} "
                f"{jvm.java.time.Instant.ofEpochMilli(when.getTime()).toString()}: renew it"
            ) from exc
