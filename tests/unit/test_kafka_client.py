"""The Kafka client settings a ``security`` section makes, and how Kafka's refusals are read
(bronze/kafka_client.py; the broker-side proof is tests/kafka/test_security.py)."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest

from pipelines.bronze.kafka_client import (
    KafkaAccessDenied,
    KafkaUnavailable,
    _speaks_tls,
    client_options,
    failure,
    require_listener,
)
from pipelines.runtime.config import KafkaSource


def source(**security: object) -> KafkaSource:
    return KafkaSource.model_validate(
        {"kind": "kafka", "cluster": "c", "bootstrap_servers": "b1:9093,b2:9093", "security": security}
    )


def test_scram_login_and_stores() -> None:
    opts = client_options(
        source(
            protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-256",
            username='al"ice',
            password='pa\\ss"word',
            ssl_truststore_location="/t.p12",
            ssl_truststore_password="tp",
            ssl_keystore_location="/k.jks",
            ssl_keystore_password="kp",
            ssl_keystore_type="JKS",
            ssl_key_password="key",
            properties={"ssl.endpoint.identification.algorithm": ""},
        )
    )
    assert opts["sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="al\\"ice" '
        'password="pa\\\\ss\\"word";'
    )
    assert opts["security.protocol"] == "SASL_SSL" and opts["sasl.mechanism"] == "SCRAM-SHA-256"
    assert opts["ssl.truststore.location"] == "/t.p12" and opts["ssl.truststore.password"] == "tp"
    assert opts["ssl.keystore.type"] == "JKS" and opts["ssl.keystore.password"] == "kp"
    assert opts["ssl.key.password"] == "key" and opts["ssl.endpoint.identification.algorithm"] == ""
    assert "ssl.truststore.type" not in opts


def test_plain_and_pass_through_mechanisms() -> None:
    plain = client_options(source(protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", username="u", password="p"))
    assert plain["sasl.jaas.config"].startswith("org.apache.kafka.common.security.plain.PlainLoginModule required")
    jaas = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientId='x';"
    oauth = client_options(
        source(
            protocol="SASL_SSL",
            sasl_mechanism="OAUTHBEARER",
            properties={"sasl.jaas.config": jaas, "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
        )
    )
    assert oauth["sasl.jaas.config"] == jaas and oauth["sasl.oauthbearer.token.endpoint.url"] == "https://idp/token"


def test_the_old_name_extra_still_passes_properties_through() -> None:
    assert client_options(source(extra={"client.rack": "r1"}))["client.rack"] == "r1"


# Kafka's exceptions as Spark reports an executor's failure: only as text in the message
SPARK_TEXT = (
    "Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: Lost task 0.0 "
    "(TID 3) (127.0.0.1 executor driver): org.apache.kafka.common.errors.{name}: {msg}\n\tat org.apache..."
)


@pytest.mark.parametrize(
    ("security", "name", "msg", "expected"),
    [
        (
            {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "username": "alice", "password": "x"},
            "SaslAuthenticationException",
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
            "refused the SCRAM-SHA-512 login of User:alice: wrong user name or password",
        ),
        (
            {"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "username": "alice", "password": "x"},
            "TopicAuthorizationException",
            "Not authorized to access topics: [__consumer_offsets]",
            "User:alice may not access topic __consumer_offsets",
        ),
        (
            {"protocol": "SSL", "ssl_keystore_location": "/k.p12"},
            "GroupAuthorizationException",
            "Not authorized to access group: offsets-lakehouse-spark-1-driver-0",
            "the client certificate's principal may not access consumer groups",
        ),
        (
            {"protocol": "SSL", "ssl_truststore_location": "/t.p12"},
            "SslAuthenticationException",
            "SSL handshake failed | javax.net.ssl.SSLHandshakeException: PKIX path building failed",
            "not signed by a CA in security.ssl_truststore_location (/t.p12)",
        ),
        (
            {"protocol": "SSL"},
            "SslAuthenticationException",
            "Failed to process post-handshake messages: Received fatal alert: bad_certificate",
            "the listener requires a client certificate: set security.ssl_keystore_location",
        ),
        (
            {"protocol": "SSL"},
            "SslAuthenticationException",
            "SSL handshake failed: Unrecognized SSL message, plaintext connection?",
            "does not speak TLS: use protocol PLAINTEXT",
        ),
        (
            {"protocol": "SSL"},
            "SslAuthenticationException",
            "No subject alternative names matching IP address 10.0.0.1 found",
            "does not name the host",
        ),
    ],
)
def test_refusals_name_the_cause(security: dict, name: str, msg: str, expected: str) -> None:
    err = failure(source(**security), RuntimeError(SPARK_TEXT.format(name=name, msg=msg)))
    assert isinstance(err, KafkaAccessDenied) and err.exit_code == 5
    assert expected in str(err) and "\n" not in str(err)


def test_a_broker_gone_is_not_a_refusal() -> None:
    err = failure(source(protocol="SSL"), RuntimeError("java.lang.IllegalStateException: Connection refused"))
    assert isinstance(err, KafkaUnavailable) and not isinstance(err, KafkaAccessDenied) and err.exit_code == 1


def _serve(handler) -> tuple[int, threading.Thread]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def run() -> None:
        conn, _ = server.accept()
        handler(conn)
        server.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return server.getsockname()[1], thread


def test_which_protocol_a_port_speaks(tmp_path: Path) -> None:
    from tests.support.tls_pem import self_signed

    cert, key = self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    def tls(conn: socket.socket) -> None:
        with context.wrap_socket(conn, server_side=True) as s:
            s.recv(1)

    port, thread = _serve(tls)
    assert _speaks_tls(f"127.0.0.1:{port}") is True
    thread.join(5)
    # a plaintext Kafka listener closes the connection on a ClientHello
    port, thread = _serve(lambda conn: (conn.recv(1024), conn.close()))
    assert _speaks_tls(f"127.0.0.1:{port}") is False
    thread.join(5)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    assert _speaks_tls(f"127.0.0.1:{closed}") is None


def test_a_cluster_no_server_listens_for_is_reported_at_once() -> None:
    """Refused everywhere (or a name that does not resolve): one line naming each server, without
    waiting out the clients' timeout; one server that listens is enough to go on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    gone = KafkaSource(kind="kafka", cluster="c", bootstrap_servers=f"127.0.0.1:{closed},no-such-host.invalid:9092")
    with pytest.raises(KafkaUnavailable) as err:
        require_listener(gone)
    message = str(err.value)
    assert message.startswith(f"Kafka at 127.0.0.1:{closed},no-such-host.invalid:9092: no bootstrap server accepts")
    assert f"127.0.0.1:{closed}: Connection refused" in message and "no-such-host.invalid:9092: " in message
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        servers = f"127.0.0.1:{closed},127.0.0.1:{port}"
        require_listener(KafkaSource(kind="kafka", cluster="c", bootstrap_servers=servers))
