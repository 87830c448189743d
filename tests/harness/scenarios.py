"""Scenario drivers: real clients (confluent-kafka / librdkafka) doing real things to consumer groups
on a real broker, each returning the broker's truth at its end (pipelines.truth format).

Every scenario uses group ids and topics under its own prefix, so all of them share one broker.
A scenario records what it did in ``facts`` (the values it committed, the offsets it expected to
see) so the tests can assert that the broker's truth is what the scenario intended, and later
layers can compare their tables with the same snapshots.

What the Admin API does not expose (the classic generation, the leader) comes from the clients:
librdkafka's consumer group metadata (``consumer_group_metadata()``, the serialized
``rd_kafka_consumer_group_metadata_t``: ``CGMDv2:`` + int32 generation in host byte order + the
group id, member id ...) carries the member's generation; no Python client exposes which member
is the leader, so ``leader`` is always listed under ``not_observed``.
"""

from __future__ import annotations

import base64
import contextlib
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    ShareConsumer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from pipelines.codec.partitioner import partition_for
from pipelines.truth import TruthSnapshot
from tests.harness import admin as java_admin
from tests.harness.broker import KafkaBroker
from tests.harness.streams import StreamsInstance

KAFKA_VERSION = "4.2.1"


class ScenarioError(AssertionError):
    """A scenario could not drive the clients to the state it needs (the driver is broken)."""


@dataclass
class ScenarioResult:
    name: str
    groups: list[str]
    snapshots: dict[str, TruthSnapshot] = field(default_factory=dict)  # "final" is always there
    facts: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def final(self) -> TruthSnapshot:
        return self.snapshots["final"]


def cgmd_generation(consumer: Consumer) -> int | None:
    raw = consumer.consumer_group_metadata()
    if isinstance(raw, bytes) and raw.startswith(b"CGMDv2:") and len(raw) >= 11:
        return int.from_bytes(raw[7:11], sys.byteorder, signed=True)
    return None


class Harness:
    """Client factories and waiting helpers bound to one broker."""

    def __init__(self, broker: KafkaBroker, cluster: str = "harness") -> None:
        self.broker = broker
        self.cluster = cluster
        self.admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        self._open: list[Any] = []
        self._apps: list[StreamsInstance] = []
        # members a scenario leaves alive for the evidence snapshot (released after it): {group: members}
        self.kept: dict[str, list[Consumer]] = {}
        # share consumers and Streams instances left alive for the evidence (not classic members:
        # the evidence asks nothing of them, it describes their groups)
        self.kept_alive: dict[str, ShareConsumer | StreamsInstance] = {}

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    # -- clients ---------------------------------------------------------------------------------
    def consumer(self, group: str, client_id: str, protocol: str = "classic", **conf: Any) -> Consumer:
        base = {
            "bootstrap.servers": self.bootstrap,
            "group.id": group,
            "client.id": client_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "group.protocol": protocol,
        }
        if protocol == "classic":
            base.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
        base.update(conf)
        c = Consumer(base)
        self._open.append(c)
        return c

    def streams_app(self, application_id: str, client_id: str, source: str, sink: str) -> StreamsInstance:
        """A Kafka Streams instance (group.protocol=streams) with its own state directory."""
        state_dir = self.broker.workdir / f"streams-{client_id}"
        app = StreamsInstance(self.bootstrap, application_id, client_id, state_dir, source, sink)
        self._apps.append(app)
        return app

    def stop_app(self, app: StreamsInstance) -> None:
        self._apps.remove(app)
        app.stop()

    def producer(self, **conf: Any) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, **conf})

    def close(self, *consumers: Consumer) -> None:
        for c in consumers:
            c.close()
            self._open.remove(c)

    def keep(self, group: str, *members: Consumer) -> None:
        """Leave ``members`` (every live member of ``group``) alive past their scenario, for the
        evidence snapshot: :meth:`close_all` does not close them, :meth:`release` does."""
        for c in members:
            self._open.remove(c)
        self.kept[group] = list(members)

    def keep_alive(self, group: str, member: ShareConsumer | StreamsInstance) -> None:
        """Leave a share consumer or a Streams instance in ``group`` until :meth:`release`."""
        if isinstance(member, StreamsInstance):
            self._apps.remove(member)
        self.kept_alive[group] = member

    def release(self) -> None:
        for members in self.kept.values():
            for c in members:
                with contextlib.suppress(KafkaException, RuntimeError):
                    c.close()
        self.kept.clear()
        for member in self.kept_alive.values():
            if isinstance(member, StreamsInstance):
                member.kill()  # the broker stops next: no need to leave the group cleanly
            else:
                with contextlib.suppress(KafkaException, RuntimeError):
                    member.close()
        self.kept_alive.clear()

    def close_all(self) -> None:
        for c in list(self._open):
            with contextlib.suppress(KafkaException, RuntimeError):
                c.close()
        self._open.clear()
        for app in self._apps:
            app.kill()
        self._apps.clear()

    # -- topics and data -------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int) -> None:
        self.admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
        self.wait(lambda: name in self.admin.list_topics(timeout=10).topics, f"topic {name} visible")

    def delete_topic(self, name: str) -> None:
        self.admin.delete_topics([name])[name].result(30)
        self.wait(lambda: name not in self.admin.list_topics(timeout=10).topics, f"topic {name} gone")

    def topic_names(self, topics: list[str]) -> dict[str, str]:
        """{topic id in Kafka's string form (URL-safe base64, no padding): name}, from the broker."""
        out = {}
        for name, fut in self.admin.describe_topics(TopicCollection(topics)).items():
            u = fut.result(30).topic_id
            raw = b"".join(
                (bits & (2**64 - 1)).to_bytes(8, "big")
                for bits in (u.get_most_significant_bits(), u.get_least_significant_bits())
            )
            out[base64.urlsafe_b64encode(raw).decode().rstrip("=")] = name
        return out

    def produce(self, topic: str, per_partition: int, partitions: int) -> None:
        p = self.producer()
        for i in range(per_partition):
            for part in range(partitions):
                p.produce(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=part)
        if p.flush(30):
            raise ScenarioError(f"could not produce to {topic}")

    # -- group operations ------------------------------------------------------------------------
    def commit(self, consumer: Consumer, offsets: dict[tuple[str, int], int], metadata: str | None = None) -> None:
        tps = [
            TopicPartition(t, p, off, metadata) if metadata else TopicPartition(t, p, off)
            for (t, p), off in offsets.items()
        ]
        consumer.commit(offsets=tps, asynchronous=False)

    def alter_offsets(self, group: str, offsets: dict[tuple[str, int], int], metadata: str | None = None) -> None:
        tps = [
            TopicPartition(t, p, off, metadata) if metadata else TopicPartition(t, p, off)
            for (t, p), off in offsets.items()
        ]
        fut = self.admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group]
        fut.result(30)

    def delete_groups(self, *groups: str) -> None:
        for _g, fut in self.admin.delete_consumer_groups(list(groups)).items():
            fut.result(30)

    def delete_offsets(self, group: str, tps: Iterable[tuple[str, int]]) -> None:
        java_admin.run("delete-offsets", self.bootstrap, group, *(f"{t}:{p}" for t, p in tps))

    # -- waiting ---------------------------------------------------------------------------------
    @staticmethod
    def wait(cond: Callable[[], Any], what: str, timeout: float = 60.0, every: float = 0.2) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = cond()
            if got:
                return got
            time.sleep(every)
        raise ScenarioError(f"timed out after {timeout:.0f} s waiting for {what}")

    def pump(self, consumers: list[Consumer], cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
        """Poll every consumer round-robin (serving rebalances) until ``cond()`` holds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for c in consumers:
                msg = c.poll(0.05)
                if msg is not None and msg.error() and not msg.error().retriable():
                    raise ScenarioError(f"{what}: consumer error {msg.error()}")
            if cond():
                return
        raise ScenarioError(f"timed out after {timeout:.0f} s waiting for {what}")

    def offsets_gone(self, group: str) -> Callable[[], TruthSnapshot | None]:
        """Condition for :meth:`wait`: the group's snapshot once it holds no committed offset."""

        def cond() -> TruthSnapshot | None:
            snap = self.snapshot([group])
            g = snap.group(group)
            return snap if not g.exists or not g.offsets else None

        return cond

    def assigned(self, consumers: list[Consumer], total: int) -> Callable[[], bool]:
        """All ``total`` partitions assigned across the consumers, each consumer holding some."""

        def cond() -> bool:
            parts = [c.assignment() for c in consumers]
            return all(parts) and sum(len(p) for p in parts) == total

        return cond

    # -- truth -------------------------------------------------------------------------------------
    def snapshot(
        self,
        groups: list[str],
        clients: dict[str, list[Consumer]] | None = None,
        notes: Iterable[str] = (),
    ) -> TruthSnapshot:
        """The broker's view of ``groups``, retried until the offsets topic did not move meanwhile.

        ``clients``: every live member of those classic groups. Their generation goes into the
        snapshot, and the snapshot is only accepted once the group is Stable and its members (ids
        and assignments) are exactly what the clients themselves hold: a snapshot of a group
        whose rebalance has completed, whose generation's record is in the log.
        """
        clients = clients or {}
        disagreement = ""
        for _ in range(20):
            raw = java_admin.run("snapshot", self.bootstrap, *groups)
            disagreement = "; ".join(filter(None, (_clients_disagree(raw, g, cs) for g, cs in clients.items())))
            if raw["consistent"] and not disagreement:
                break
            if disagreement:  # a rebalance may still be in progress: let the members serve it
                for members in clients.values():
                    for c in members:
                        c.poll(0.05)
            time.sleep(0.2)
        else:
            raise ScenarioError(
                "no consistent snapshot in 20 attempts: "
                + (disagreement or "the offsets topic kept moving during the snapshot")
            )
        for g in raw["groups"]:
            g["not_observed"] = ["leader"] + (
                [] if g.get("type") == "classic" and clients.get(g["group_id"]) else ["generation"]
            )
            if g.get("type") == "classic" and g["group_id"] in clients:
                # the members agree on it (checked above)
                g["generation"] = cgmd_generation(clients[g["group_id"]][0])
                g["observed_by_clients"] = ["generation"]
        return TruthSnapshot(
            cluster=self.cluster,
            captured_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            kafka_version=KAFKA_VERSION,
            offsets_topic_end_offsets={int(k): v for k, v in raw["offsets_topic_end_offsets"].items()},
            groups=raw["groups"],
            notes=list(notes),
        )


def _clients_disagree(raw: dict[str, Any], group: str, clients: list[Consumer]) -> str:
    """Why the raw snapshot's ``group`` is not the group its live ``clients`` hold ("" if it is)."""
    g = next((x for x in raw["groups"] if x["group_id"] == group), None)
    if g is None or g.get("type") != "classic":
        return f"{group} is not a classic group in the snapshot"
    if g.get("state") != "Stable":
        return f"{group} is {g.get('state')}"
    gens = {cgmd_generation(c) for c in clients}
    if len(gens) != 1:
        return f"members of {group} disagree on the generation: {gens}"
    held = {c.memberid(): sorted((tp.topic, tp.partition) for tp in c.assignment()) for c in clients}
    described = {m["member_id"]: sorted((a["topic"], a["partition"]) for a in m["assignment"]) for m in g["members"]}
    return "" if held == described else f"{group}: clients hold {held}, the broker describes {described}"


# ------------------------------------------------------------------------------------ scenarios

LONG_METADATA = "checkpoint:" + "m" * 189  # 200 bytes: a length that needs two bytes as a varint


def classic_lifecycle(h: Harness) -> ScenarioResult:
    """Members join and leave (each a rebalance, one of them a static member), manual commits with
    metadata, an auto-committing member that keeps committing unchanged offsets. A snapshot after
    every completed rebalance, with all members alive: generation, members and assignments."""
    group, topic = "classic-lifecycle", "classic-lifecycle-t"
    h.create_topic(topic, 4)
    h.produce(topic, 25, 4)
    snaps: dict[str, TruthSnapshot] = {}

    def rebalanced(members: list[Consumer], what: str) -> None:
        h.pump(members, h.assigned(members, 4), what)
        snap = h.snapshot([group], clients={group: members})
        snaps[f"generation_{snap.group(group).generation}"] = snap

    # not polled while the other scenarios run: a long poll interval keeps it in the group
    c1 = h.consumer(group, "c1", **{"max.poll.interval.ms": 3_600_000})
    c1.subscribe([topic])
    rebalanced([c1], "c1 owns all 4 partitions")
    h.commit(c1, {(topic, 0): 5, (topic, 1): 6})
    h.commit(c1, {(topic, 2): 7}, metadata="short")
    h.commit(c1, {(topic, 3): 8}, metadata=LONG_METADATA)
    generations = [cgmd_generation(c1)]
    # a static member (KIP-345): its group.instance.id is in the group record; it does not send a
    # LeaveGroup when it closes, so its departure is a session timeout (6 s)
    c2 = h.consumer(group, "c2", **{"group.instance.id": "c2-static"})
    c2.subscribe([topic])
    rebalanced([c1, c2], "c1 and c2 share the partitions")
    generations.append(cgmd_generation(c1))
    # auto-commit every 200 ms, nothing consumed: librdkafka commits only changed offsets, so the
    # repeats come from an explicit re-commit of unchanged values (what Java's auto-commit does)
    c3 = h.consumer(group, "c3", **{"enable.auto.commit": True, "auto.commit.interval.ms": 200})
    c3.subscribe([topic])
    rebalanced([c1, c2, c3], "three members share the partitions")
    generations.append(cgmd_generation(c1))
    for _ in range(3):
        h.commit(c1, {(topic, 0): 5, (topic, 1): 6})
    h.close(c3)
    rebalanced([c1, c2], "c3 left")
    generations.append(cgmd_generation(c1))
    h.close(c2)
    h.pump([c1], h.assigned([c1], 4), "c2's session timed out")
    generations.append(cgmd_generation(c1))
    # c3 auto-committed what it consumed; the final commits make the end state deterministic
    h.commit(c1, {(topic, 0): 20, (topic, 1): 6})
    h.commit(c1, {(topic, 2): 7}, metadata="short")
    h.commit(c1, {(topic, 3): 8}, metadata=LONG_METADATA)
    snaps["final"] = h.snapshot([group], clients={group: [c1]})
    # c1 stays in the group until the evidence snapshot, so the broker's files end with a live
    # classic group (its subscribed offsets do not expire while it is Stable)
    h.keep(group, c1)
    return ScenarioResult(
        "classic_lifecycle",
        [group],
        snaps,
        facts={
            "topic": topic,
            "expected_offsets": {0: 20, 1: 6, 2: 7, 3: 8},
            "expected_metadata": {2: "short", 3: LONG_METADATA},
            "generations_seen": generations,
            "repeated_commits": {(topic, 0): 5, (topic, 1): 6},
            "static_member": ("c2", "c2-static"),
        },
    )


def offset_reset(h: Harness) -> ScenarioResult:
    """Commit, reset to earliest (backwards), then forwards past the old position."""
    group, topic = "offset-reset", "offset-reset-t"
    h.create_topic(topic, 2)
    h.produce(topic, 100, 2)
    c = h.consumer(group, "r1")
    c.subscribe([topic])
    h.pump([c], h.assigned([c], 2), "r1 assigned")
    h.commit(c, {(topic, 0): 60, (topic, 1): 70})
    h.close(c)
    before = h.snapshot([group])
    earliest = {(topic, p): 0 for p in (0, 1)}
    h.alter_offsets(group, earliest)
    after_back = h.snapshot([group])
    h.alter_offsets(group, {(topic, 0): 90, (topic, 1): 95})
    final = h.snapshot([group])
    return ScenarioResult(
        "offset_reset",
        [group],
        {"committed": before, "reset_to_earliest": after_back, "final": final},
        facts={"topic": topic, "sequence": [{0: 60, 1: 70}, {0: 0, 1: 0}, {0: 90, 1: 95}]},
    )


def delete_and_recreate(h: Harness) -> ScenarioResult:
    """Delete a group and recreate it under the same name; delete an assign()-only group."""
    group, standalone, topic = "delete-recreate", "standalone-assign", "delete-recreate-t"
    h.create_topic(topic, 3)
    h.produce(topic, 10, 3)
    c = h.consumer(group, "d1")
    c.subscribe([topic])
    h.pump([c], h.assigned([c], 3), "d1 assigned")
    h.commit(c, {(topic, 0): 3, (topic, 1): 4, (topic, 2): 5})
    h.close(c)
    s = h.consumer(standalone, "s1")
    s.assign([TopicPartition(topic, 0), TopicPartition(topic, 2)])
    h.commit(s, {(topic, 0): 1, (topic, 2): 2})
    h.close(s)
    before = h.snapshot([group, standalone])
    h.delete_groups(group, standalone)
    deleted = h.snapshot([group, standalone])
    c = h.consumer(group, "d2")
    c.subscribe([topic])
    h.pump([c], h.assigned([c], 3), "d2 assigned")
    h.commit(c, {(topic, 1): 9})
    final = h.snapshot([group, standalone], clients={group: [c]})
    h.close(c)
    return ScenarioResult(
        "delete_and_recreate",
        [group, standalone],
        {"before_delete": before, "deleted": deleted, "final": final},
        facts={"topic": topic, "group": group, "standalone": standalone, "recreated_offsets": {1: 9}},
    )


def transactional_commits(h: Harness) -> ScenarioResult:
    """send_offsets_to_transaction: committed, aborted, and one interleaved with a plain commit."""
    group, topic = "txn-offsets", "txn-offsets-t"
    h.create_topic(topic, 3)
    h.produce(topic, 50, 3)
    member = h.consumer(group, "tx-c")  # assign()-only: generation -1, the broker accepts it
    member.assign([TopicPartition(topic, p) for p in range(3)])
    md = member.consumer_group_metadata()
    p = h.producer(**{"transactional.id": "txn-offsets-producer", "transaction.timeout.ms": 60000})
    p.init_transactions(30)

    def txn(offsets: dict[int, int], commit: bool, between: Callable[[], None] | None = None) -> None:
        p.begin_transaction()
        p.produce(topic, b"txn-data", partition=0)
        p.send_offsets_to_transaction([TopicPartition(topic, k, v) for k, v in offsets.items()], md, 30)
        if between:
            between()
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)

    txn({0: 10}, commit=True)
    txn({1: 20}, commit=False)
    # the plain commit is written after the transactional one, so it is later in the log and the
    # COMMIT marker must not let the transaction's older value overwrite it (spec section 12)
    txn({2: 30}, commit=True, between=lambda: h.commit(member, {(topic, 2): 35}))
    final = h.snapshot([group])
    h.close(member)
    return ScenarioResult(
        "transactional_commits",
        [group],
        {"final": final},
        facts={"topic": topic, "expected_offsets": {0: 10, 2: 35}, "aborted": {1: 20}, "interleaved": {2: (30, 35)}},
    )


def expiry_start(h: Harness) -> dict[str, Any]:
    """An empty group that the coordinator will expire after offsets.retention.minutes."""
    group, topic = "expiry", "expiry-t"
    h.create_topic(topic, 2)
    h.produce(topic, 5, 2)
    c = h.consumer(group, "e1")
    c.subscribe([topic])
    h.pump([c], h.assigned([c], 2), "e1 assigned")
    h.commit(c, {(topic, 0): 2, (topic, 1): 3})
    h.close(c)
    return {"group": group, "topic": topic, "snapshot": h.snapshot([group]), "started": time.monotonic()}


def expiry_finish(h: Harness, started: dict[str, Any], timeout: float = 180.0) -> ScenarioResult:
    group = started["group"]

    final = h.wait(h.offsets_gone(group), f"offsets of {group} to expire", timeout=timeout, every=2.0)
    return ScenarioResult(
        "offset_expiry",
        [group],
        {"committed": started["snapshot"], "final": final},
        facts={"topic": started["topic"], "waited_s": round(time.monotonic() - started["started"], 1)},
    )


def new_protocol(h: Harness) -> ScenarioResult:
    """KIP-848 consumer groups: plain subscription, regex subscription, and a classic group
    upgraded online when a consumer-protocol member joins it."""
    topic, group, rx_group, mig_group = "np-t", "np-consumer", "np-regex", "np-migrated"
    h.create_topic(topic, 4)
    h.create_topic("np-rx-a", 2)
    h.create_topic("np-rx-b", 1)
    h.produce(topic, 10, 4)
    a = h.consumer(group, "np-a", protocol="consumer")
    b = h.consumer(group, "np-b", protocol="consumer")
    a.subscribe([topic])
    b.subscribe([topic])
    h.pump([a, b], h.assigned([a, b], 4), "np-a and np-b share 4 partitions")
    h.commit(a, {(tp.topic, tp.partition): 3 for tp in a.assignment()})
    h.commit(b, {(tp.topic, tp.partition): 4 for tp in b.assignment()})
    rx = h.consumer(rx_group, "np-rx", protocol="consumer")
    rx.subscribe(["^np-rx-.*"])
    h.pump([rx], h.assigned([rx], 3), "regex subscription matches np-rx-a and np-rx-b")
    h.commit(rx, {("np-rx-a", 0): 1, ("np-rx-a", 1): 1, ("np-rx-b", 0): 1})
    # online upgrade: a classic member, then a consumer-protocol member joins the same group
    old = h.consumer(mig_group, "np-old")
    old.subscribe([topic])
    h.pump([old], h.assigned([old], 4), "classic member of the group to migrate")
    h.commit(old, {(topic, 0): 7})
    new = h.consumer(mig_group, "np-new", protocol="consumer")
    new.subscribe([topic])
    h.pump([old, new], h.assigned([old, new], 4), "classic and consumer-protocol members share")
    mixed = h.snapshot([mig_group])
    h.close(old)
    h.pump([new], h.assigned([new], 4), "the classic member left")
    h.commit(new, {(topic, 1): 8})
    final = h.snapshot([group, rx_group, mig_group])
    members = {
        group: sorted(c.memberid() for c in (a, b)),
        rx_group: [rx.memberid()],
        mig_group: [new.memberid()],
    }
    h.close(a, b, rx, new)
    return ScenarioResult(
        "new_protocol",
        [group, rx_group, mig_group],
        {"mixed": mixed, "final": final},
        facts={"topic": topic, "member_ids": members, "migrated_offsets": {0: 7, 1: 8}},
    )


def topic_recreated(h: Harness) -> ScenarioResult:
    """A topic deleted and recreated under the same name (a new topic id)."""
    group, topic = "topic-recreate", "topic-recreate-t"
    h.create_topic(topic, 2)
    c = h.consumer(group, "tr1")
    c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    h.commit(c, {(topic, 0): 5, (topic, 1): 6})
    h.close(c)
    before = h.snapshot([group])
    h.delete_topic(topic)

    deleted = h.wait(h.offsets_gone(group), "offsets of the deleted topic to be removed", timeout=60, every=1.0)
    h.create_topic(topic, 1)
    c = h.consumer(group, "tr2")
    c.assign([TopicPartition(topic, 0)])
    h.commit(c, {(topic, 0): 2})
    h.close(c)
    final = h.snapshot([group])
    return ScenarioResult(
        "topic_recreated",
        [group],
        {"before_delete": before, "topic_deleted": deleted, "final": final},
        facts={"topic": topic, "expected_offsets": {0: 2}},
    )


def explicit_offset_delete(h: Harness) -> ScenarioResult:
    """Admin OffsetDelete on an empty group (kafka-consumer-groups --delete-offsets)."""
    group, topic = "offset-delete", "offset-delete-t"
    h.create_topic(topic, 2)
    c = h.consumer(group, "od1")
    c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    h.commit(c, {(topic, 0): 4, (topic, 1): 5})
    h.close(c)
    h.delete_offsets(group, [(topic, 0)])
    final = h.snapshot([group])
    return ScenarioResult(
        "explicit_offset_delete", [group], {"final": final}, facts={"topic": topic, "expected_offsets": {1: 5}}
    )


def share_group(h: Harness) -> ScenarioResult:
    """A KIP-932 share group (confluent-kafka's ShareConsumer) consuming and acknowledging; the
    consumer stays in the group until the evidence snapshot (not polled meanwhile: a long poll
    interval keeps it a member)."""
    group, topic = "share-group", "share-group-t"
    h.create_topic(topic, 2)
    sc = ShareConsumer(
        {"bootstrap.servers": h.bootstrap, "group.id": group, "client.id": "sh1", "max.poll.interval.ms": 3_600_000}
    )
    sc.subscribe([topic])
    got = 0
    produced_at = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and got < 10:
        got += sum(1 for m in sc.poll(0.5) if not m.error())  # implicit acknowledgement on next poll
        # share groups start at the latest offset once the member is in: keep producing until seen
        if produced_at is None or time.monotonic() - produced_at > 2:
            h.produce(topic, 5, 2)
            produced_at = time.monotonic()
    sc.poll(0.5)  # acknowledges the last batch
    snap = h.snapshot([group])
    if got < 10:
        sc.close()
        raise ScenarioError(f"the share consumer received {got} of 10 records")
    h.keep_alive(group, sc)
    return ScenarioResult("share_group", [group], {"final": snap}, facts={"topic": topic, "received": got})


def streams_group(h: Harness) -> ScenarioResult:
    """A KIP-1071 streams group: a Kafka Streams application (tools/kafka/StreamsApp.java,
    group.protocol=streams) runs as one instance, then two (the second gets active and standby
    tasks), then one again, then none; a snapshot at each settled step, while the members live.
    Then a third instance joins the empty group and stays in it until the evidence snapshot."""
    app_id, source, sink = "streams-counts", "streams-in", "streams-out"
    h.create_topic(source, 2)
    h.create_topic(sink, 1)
    produced = 0

    def settled(members: int, what: str) -> TruthSnapshot:
        """The snapshot once the group has ``members`` members that own their target tasks, at
        the target epoch, and every produced record was processed and committed."""

        def cond() -> TruthSnapshot | None:
            snap = h.snapshot([app_id])
            g = snap.group(app_id)
            if not g.exists or g.type != "streams" or g.state != ("Stable" if members else "Empty"):
                return None
            if len(g.members) != members or any(
                m.tasks != m.target_tasks or m.member_epoch != g.target_assignment_epoch for m in g.members
            ):
                return None
            committed = {(o.topic, o.partition): o.offset for o in g.offsets}
            # every input record is written once to the repartition topic and read from it again
            through = sum(o for (t, _), o in committed.items() if t.endswith("-repartition"))
            return snap if sum(committed.get((source, p), 0) for p in (0, 1)) == through == produced else None

        return h.wait(cond, what, timeout=120, every=0.5)

    a = h.streams_app(app_id, "streams-a", source, sink)
    a.wait_for("STATE RUNNING")
    h.produce(source, 10, 2)
    produced += 20
    one = settled(1, "streams-a processed and committed")
    b = h.streams_app(app_id, "streams-b", source, sink)
    b.wait_for("STATE RUNNING")
    h.produce(source, 10, 2)
    produced += 20
    two = settled(2, "streams-a and streams-b share the tasks")
    h.stop_app(b)
    left = settled(1, "streams-b left")
    h.stop_app(a)
    final = settled(0, "the group is empty")
    c = h.streams_app(app_id, "streams-c", source, sink)
    c.wait_for("STATE RUNNING")
    settled(1, "streams-c took every task")
    h.keep_alive(app_id, c)
    return ScenarioResult(
        "streams_group",
        [app_id],
        {"one_member": one, "two_members": two, "member_left": left, "final": final},
        facts={
            "source": source,
            "sink": sink,
            "produced": produced,
            "clients": ["streams-a", "streams-b"],
            "kept": "streams-c",
        },
    )


def bulk_roll(h: Harness, target_bytes: int = 1_300_000) -> ScenarioResult:
    """Enough commits into one offsets-topic partition to roll its 1 MiB segment."""
    group, topic = "bulk-roll", "bulk-roll-t"
    h.create_topic(topic, 50)
    metadata = "x" * 400
    per_commit = 50 * (len(metadata) + 120)
    rounds = target_bytes // per_commit + 1
    for r in range(rounds):
        h.alter_offsets(group, {(topic, p): r * 10 + p for p in range(50)}, metadata=metadata)
    final = h.snapshot([group])
    n = int(h.broker.settings()["offsets.topic.num.partitions"])
    return ScenarioResult(
        "bulk_roll",
        [group],
        {"final": final},
        facts={
            "topic": topic,
            "rounds": rounds,
            "offsets_partition": partition_for(group, n),
            "expected_offsets": {p: (rounds - 1) * 10 + p for p in range(50)},
        },
    )


def group_listing(h: Harness) -> ScenarioResult:
    """Groups Kafka lists without a live member: an assign()-only consumer that commits (an
    offsets-only "simple" group), and a classic and a KIP-848 group whose members all left. Run
    last, so the evidence snapshot sees them before the harness's 1-minute retention expires them."""
    topic = "listing-t"
    simple, classic, consumer = "listing-assign", "listing-left-classic", "listing-left-consumer"
    h.create_topic(topic, 2)
    h.produce(topic, 3, 2)
    a = h.consumer(simple, "la")
    a.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    h.commit(a, {(topic, 0): 1, (topic, 1): 2})
    h.close(a)
    for group, protocol in ((classic, "classic"), (consumer, "consumer")):
        c = h.consumer(group, f"{group}-c", protocol=protocol)
        c.subscribe([topic])
        h.pump([c], h.assigned([c], 2), f"{group} assigned")
        h.commit(c, {(topic, 0): 3, (topic, 1): 3})
        h.close(c)
    final = h.snapshot([simple, classic, consumer])
    return ScenarioResult(
        "group_listing",
        [simple, classic, consumer],
        {"final": final},
        facts={"topic": topic, "simple": simple, "members_left": [classic, consumer]},
    )


# in the order the fixture runs them (expiry starts first and finishes last, so its wait overlaps)
SCENARIOS: list[Callable[[Harness], ScenarioResult]] = [
    classic_lifecycle,
    offset_reset,
    delete_and_recreate,
    transactional_commits,
    new_protocol,
    topic_recreated,
    explicit_offset_delete,
    share_group,
    streams_group,
    bulk_roll,
    group_listing,
]


def run_all(h: Harness, only: Iterable[str] | None = None) -> dict[str, ScenarioResult | BaseException]:
    """Every scenario; a failing one is returned as its exception so the others still run."""
    wanted = set(only) if only else None
    results: dict[str, ScenarioResult | BaseException] = {}
    expiry = expiry_start(h) if wanted is None or "offset_expiry" in wanted else None
    for fn in SCENARIOS:
        if wanted is not None and fn.__name__ not in wanted:
            continue
        try:
            results[fn.__name__] = fn(h)
        except Exception as e:  # reported by the scenario's own test, with the broker log
            results[fn.__name__] = e
        finally:
            h.close_all()
    if expiry is not None:
        try:
            results["offset_expiry"] = expiry_finish(h, expiry)
        except Exception as e:
            results["offset_expiry"] = e
    return results
