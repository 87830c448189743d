"""A real Apache Kafka broker (KRaft combined mode) on loopback, for tests and local experiments.

Jars come from Maven Central through ``scripts/kafka-jars`` (cached outside the work tree);
nothing is downloaded once the cache is complete. The log directory is a temporary directory
the caller owns, so a test can read the broker's ``__consumer_offsets-N`` files after a clean
shutdown (:meth:`KafkaBroker.stop`) and start the broker again on the same data.

    python -m tests.harness.broker            # run one until Ctrl-C (scripts/kafka-broker)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness.tls import Stores

REPO = Path(__file__).resolve().parents[2]

# Settings a test session needs; every one can be overridden (KafkaBroker(overrides=...)).
DEFAULTS: dict[str, str] = {
    # fewer offsets-topic partitions than the default 50 keep the tier fast; 50 stays possible
    "offsets.topic.num.partitions": "5",
    "offsets.topic.replication.factor": "1",
    # 1 MiB is the smallest segment Kafka 4.x accepts; scenarios write enough to roll
    "offsets.topic.segment.bytes": str(1024 * 1024),
    # expiry within a test: retention 1 minute, checked every 5 seconds
    "offsets.retention.minutes": "1",
    "offsets.retention.check.interval.ms": "5000",
    # new-protocol (consumer, share, streams) members heartbeat every second (default 5 s) so
    # assignments settle quickly
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "1000",
    "group.streams.min.heartbeat.interval.ms": "500",
    "group.streams.heartbeat.interval.ms": "1000",
    "group.streams.initial.rebalance.delay.ms": "0",
    # a streams group's second instance gets standby tasks (records with standby task lists)
    "group.streams.num.standby.replicas": "1",
    "group.initial.rebalance.delay.ms": "0",
    "group.coordinator.rebalance.protocols": "classic,consumer,streams",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "3",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "share.coordinator.state.topic.num.partitions": "1",
    # keep the whole history in the files: the log cleaner would compact the rolled offsets
    # segments within seconds and erase what the tests look for
    "log.cleaner.min.compaction.lag.ms": "86400000",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    # a transaction left open by a failed scenario must not stall the log for long
    "transaction.max.timeout.ms": "120000",
}

# Feature levels set when the storage is formatted (share groups need share.version).
FEATURES: dict[str, str] = {"share.version": "1", "streams.version": "1"}


class BrokerError(RuntimeError):
    pass


def kafka_libs() -> Path:
    out = subprocess.run([str(REPO / "scripts" / "kafka-jars")], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Secured:
    """Two more listeners beside PLAINTEXT (docs/security.md, tests/kafka/test_security.py):
    SASL_SSL (SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN; server-side TLS) and SSL requiring a client
    certificate, with Kafka's StandardAuthorizer. The PLAINTEXT and controller listeners'
    principal (User:ANONYMOUS) is a super user, so the scenarios and the harness run as before."""

    stores: Stores
    plain_users: Mapping[str, str] = field(default_factory=dict)  # PLAIN: user -> password
    sasl_port: int = field(default_factory=free_port)
    ssl_port: int = field(default_factory=free_port)

    def settings(self) -> dict[str, str]:
        st = self.stores
        plain = " ".join(f'user_{u}="{p}"' for u, p in self.plain_users.items())
        return {
            "ssl.keystore.location": str(st.broker_keystore),
            "ssl.keystore.password": st.password,
            "ssl.key.password": st.password,
            "ssl.keystore.type": "PKCS12",
            "ssl.truststore.location": str(st.truststore),
            "ssl.truststore.password": st.password,
            "ssl.truststore.type": "PKCS12",
            "listener.name.ssl.ssl.client.auth": "required",
            # CN=reader,O=... -> User:reader
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+).*$/$1/,DEFAULT",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain};"
            ),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
        }


@dataclass
class KafkaBroker:
    """One KRaft broker+controller. ``start()`` formats the storage on first use."""

    workdir: Path
    overrides: Mapping[str, str] = field(default_factory=dict)
    features: Mapping[str, str] = field(default_factory=lambda: dict(FEATURES))
    port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    libs: Path = field(default_factory=kafka_libs)
    secured: Secured | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_ssl_bootstrap(self) -> str:
        assert self.secured is not None
        return f"127.0.0.1:{self.secured.sasl_port}"

    @property
    def ssl_bootstrap(self) -> str:
        assert self.secured is not None
        return f"127.0.0.1:{self.secured.ssl_port}"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def broker_log(self) -> Path:
        return self.workdir / "broker.out"

    def settings(self) -> dict[str, str]:
        s = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.log_dir),
            **DEFAULTS,
        }
        if self.secured is not None:
            sp, tp = self.secured.sasl_port, self.secured.ssl_port
            s["listeners"] += f",SASL_SSL://127.0.0.1:{sp},SSL://127.0.0.1:{tp}"
            s["advertised.listeners"] += f",SASL_SSL://127.0.0.1:{sp},SSL://127.0.0.1:{tp}"
            s["listener.security.protocol.map"] += ",SASL_SSL:SASL_SSL,SSL:SSL"
            s.update(self.secured.settings())
        s.update(self.overrides)
        return s

    def offsets_partition_dirs(self) -> list[Path]:
        dirs = [p for p in self.log_dir.glob("__consumer_offsets-*") if p.is_dir()]
        return sorted(dirs, key=lambda p: int(p.name.rsplit("-", 1)[1]))

    def _java(self, main: str, *args: str) -> list[str]:
        log4j = self.workdir / "log4j2.yaml"
        return [
            "java",
            "-Xms256m",
            "-Xmx768m",
            "-XX:+UseSerialGC",  # two cores: no parallel GC threads competing with Spark
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            f"{self.libs}/*",
            main,
            *args,
        ]

    def _write_config(self) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        props = self.workdir / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.settings().items()))
        (self.workdir / "log4j2.yaml").write_text(
            "Configuration:\n"
            "  Appenders:\n"
            "    Console: {name: STDOUT, PatternLayout: {pattern: '[%d] %p %m (%c)%n'}}\n"
            "  Loggers:\n"
            "    Root: {level: INFO, AppenderRef: [{ref: STDOUT}]}\n"
            "    Logger:\n"
            "      - {name: kafka.request.logger, level: WARN}\n"
            "      - {name: org.apache.kafka.controller, level: WARN}\n"
        )
        return props

    def _format(self, props: Path) -> None:
        if (self.log_dir / "meta.properties").exists():
            return
        cmd = self._java("kafka.tools.StorageTool", "format", f"--cluster-id={_cluster_id()}", "-c", str(props))
        for name, level in self.features.items():
            cmd += ["--feature", f"{name}={level}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-25:])
            raise BrokerError(f"kafka-storage format failed ({proc.returncode}):\n{tail}")

    def start(self, timeout: float = 90.0) -> KafkaBroker:
        if self.process is not None:
            return self
        props = self._write_config()
        self._format(props)
        out = self.broker_log.open("ab")
        self.process = subprocess.Popen(
            self._java("kafka.Kafka", str(props)), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerError(f"Kafka exited with {self.process.returncode} while starting:\n{self.tail_log()}")
            if b"Kafka Server started" in self.broker_log.read_bytes()[-200_000:] and _listening(self.port):
                return self
            time.sleep(0.3)
        self.stop()
        raise BrokerError(f"Kafka did not start within {timeout:.0f} s:\n{self.tail_log()}")

    def stop(self, timeout: float = 60.0) -> None:
        """Clean shutdown (SIGTERM): the broker flushes and closes every segment."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
                self.process = None
                raise BrokerError(f"Kafka did not shut down within {timeout:.0f} s:\n{self.tail_log()}") from None
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def copy_offsets_topic(self, dest: Path) -> Path:
        """Stop cleanly, copy the ``__consumer_offsets-N`` directories to ``dest``, start again."""
        self.stop()
        dest.mkdir(parents=True, exist_ok=True)
        for d in self.offsets_partition_dirs():
            shutil.copytree(d, dest / d.name)
        self.start()
        return dest

    def tail_log(self, lines: int = 60) -> str:
        if not self.broker_log.exists():
            return "(no broker log)"
        text = self.broker_log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


def _cluster_id() -> str:
    """A random KRaft cluster id: 16 bytes, URL-safe base64 without padding.

    One id in 64 starts with '-', so callers must pass it as ``--cluster-id=<id>``:
    as a separate argument argparse would read it as an option.
    """
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


@contextlib.contextmanager
def running_broker(workdir: Path, **kw) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(workdir, **kw).start()
    try:
        yield broker
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=REPO / "var" / "kafka", help="work/log directory (kept)")
    ap.add_argument("--port", type=int, default=9092)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a broker setting")
    args = ap.parse_args(argv)
    overrides = dict(s.split("=", 1) for s in args.set)
    broker = KafkaBroker(args.dir, overrides=overrides, port=args.port)
    broker.start()
    print(f"Kafka running on {broker.bootstrap}, logs in {broker.log_dir} (Ctrl-C stops it cleanly)", flush=True)
    try:
        while broker.process and broker.process.poll() is None:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
