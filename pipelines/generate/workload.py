"""A deterministic synthetic ``__consumer_offsets`` workload.

The simulation walks a cluster through Kafka eras (0.9 legacy messages -> 2.x record
batches -> 4.0 new protocol -> 4.1+ flexible offsets with topic ids) and drives many
groups through what real clusters see: members joining and leaving, auto-commits that
repeat the same offset, manual commits with metadata, offset resets, group deletion and
recreation, ``assign()``-only groups, offset expiry, transactional commits (committed,
aborted, interleaved with plain commits, and a few left open), KIP-848 consumer groups
(with regex subscriptions), share groups and streams groups, with every codec. Share and streams
groups also pass through the states the coordinator derives (members joining before their target
assignment is computed, members not yet at the target epoch, a member left with epoch -1 by a
current assignment tombstone and removed later, streams topologies not yet validated).

Independently of the bytes it writes, it keeps its own *intent* model of which offsets
are committed; ``generate`` checks the reference replay of the written files against it,
so a disagreement between the writer's intent and the replay's rules cannot go unseen.
Memory is bounded by the number of groups, not by the number of records.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from pipelines.codec import primitives as P
from pipelines.codec.partitioner import partition_for
from pipelines.codec.records import encode_assignment, encode_control, encode_key, encode_subscription, encode_value

START_MS = 1_600_000_000_000  # 2020-09-13
DAY = 86_400_000
# the regex subscription of every third consumer group, and what it resolves to (full match, as
# the coordinator's RE2J does): topic-1, topic-10..19 and topic-100..199, 111 topics at most
# whatever the scale. A team's regex names a family of topics, not a share of the cluster
# ("topic-1.*" matched 1,111 topics at 10M records and 11,111 at 30M: 2.6M and 78M topic names
# in regex values, a workload that grew 30x for 3x the records; docs/performance.md)
REGEX = "topic-1[0-9]{0,2}"
REGEX_PATTERN = re.compile(REGEX)

# era boundaries as fractions of the run:
# (start, name, offset key type, offset value version, group value version, magic)
ERAS = [
    (0.000, "0.8.2", 0, 0, 0, 0),
    (0.005, "0.9", 1, 1, 0, 0),
    (0.020, "0.10", 1, 1, 1, 1),
    (0.080, "2.1", 1, 2, 2, 2),
    (0.150, "2.3", 1, 3, 3, 2),
    (0.550, "4.0", 1, 3, 3, 2),
    (0.750, "4.1", 1, 4, 3, 2),
]


@dataclass
class Era:
    name: str
    offset_type: int
    offset_version: int
    group_version: int
    magic: int

    @property
    def at_least_40(self) -> bool:
        return self.name in ("4.0", "4.1")

    @property
    def at_least_41(self) -> bool:
        return self.name == "4.1"


@dataclass
class Group:
    name: str
    kind: str  # classic | connect | standalone | consumer | share | streams
    topics: dict[str, int]  # topic -> partition count
    regex: str | None = None
    generation: int = 0
    epoch: int = 0
    members: list[str] = field(default_factory=list)
    positions: dict[tuple[str, int], int] = field(default_factory=dict)  # consumed position per partition
    committed: dict[tuple[str, int], int] = field(default_factory=dict)  # intent model: committed offsets
    empty_since: int | None = None
    alive: bool = True
    incarnation: int = 0
    converted: bool = False  # classic state tombstoned when the group moved to the new protocol
    plain_seq: dict[tuple[str, int], int] = field(default_factory=dict)  # last plain commit, by sequence
    # share and streams groups: members whose current assignment was tombstoned (still members)
    fenced: list[str] = field(default_factory=list)
    topology_epoch: int = 0  # streams: epoch of the latest topology record
    validated: int = -1  # streams: the topology epoch its group record says was validated


class Workload:
    """Produces batches: ``(partition, timestamp, items, batch options, event)``."""

    def __init__(self, seed: int, records: int, partitions: int = 50) -> None:
        self.rng = random.Random(seed)
        self.target = records
        self.partitions = partitions
        self.written = 0
        self.now = START_MS
        self.producer_id = 1000
        n_groups = max(12, records // 400)
        self.topics = {f"topic-{i}": self.rng.randint(1, 6) for i in range(max(4, n_groups // 3))}
        self.topic_ids = {t: P.uuid_to_str(self.rng.randbytes(16)) for t in self.topics}
        self.regex_topics = sorted(t for t in self.topics if REGEX_PATTERN.fullmatch(t))  # what REGEX resolves to
        kinds = ["classic"] * 10 + ["standalone"] * 3 + ["connect"] + ["consumer"] * 4 + ["share", "streams"]
        self.groups = [self._new_group(i, self.rng.choice(kinds)) for i in range(n_groups)]
        # every run has a share and a streams group (the last groups take the kinds no group drew)
        for i, kind in enumerate(k for k in ("share", "streams") if all(g.kind != k for g in self.groups)):
            self.groups[-1 - i] = self._new_group(n_groups - 1 - i, kind)
        # share and streams membership choices (their own stream, so other groups' draws stay put)
        self.mrng = random.Random(seed * 1_000_003 + 7)
        # open transactions: (partition, producer id) -> (group, {(topic, partition): offset}, begin sequence)
        self.open_txns: dict[tuple[int, int], tuple[Group, dict[tuple[str, int], int], int]] = {}
        self.seq = 0  # operation sequence number: orders plain commits against transactions

    # -- helpers --------------------------------------------------------------------------------
    def _new_group(self, i: int, kind: str) -> Group:
        names = self.rng.sample(sorted(self.topics), self.rng.randint(1, min(3, len(self.topics))))
        regex = REGEX if kind == "consumer" and i % 3 == 0 else None
        return Group(f"{kind}-group-{i}", kind, {t: self.topics[t] for t in names}, regex)

    def era(self) -> Era:
        frac = self.written / max(1, self.target)
        current = ERAS[0]
        for era in ERAS:
            if frac >= era[0]:
                current = era
        return Era(*current[1:])

    def part(self, g: Group) -> int:
        return partition_for(g.name, self.partitions)

    def codec(self, era: Era) -> int:
        roll = self.rng.random()
        if roll < 0.8:
            return 0
        return self.rng.choice([1, 2, 3] if era.magic < 2 else [1, 2, 3, 4])

    def tick(self) -> int:
        self.now += self.rng.randint(1, 4000)
        return self.now

    def key_offset(self, g: Group, topic: str, p: int, era: Era) -> bytes:
        return encode_key(era.offset_type, {"group": g.name, "topic": topic, "partition": p})

    def plain(self, g: Group, tp: tuple[str, int], offset: int) -> None:
        """Intent model: a non-transactional commit."""
        self.seq += 1
        g.committed[tp] = offset
        g.plain_seq[tp] = self.seq

    def value_offset(self, offset: int, era: Era, metadata: str = "", topic: str | None = None) -> bytes:
        v = era.offset_version
        if era.offset_type == 0:
            return encode_value(0, 0, {"offset": offset, "metadata": metadata, "commit_timestamp": self.now})
        fields = {
            "offset": offset,
            "leader_epoch": self.rng.randint(0, 5) if v >= 3 else -1,
            "metadata": metadata,
            "commit_timestamp": self.now,
            "expire_timestamp": self.now + 7 * DAY if v == 1 else -1,
            "topic_id": self.topic_ids[topic] if (v >= 4 and topic) else P.ZERO_UUID,
        }
        return encode_value(1, v, fields)

    def assignment(self, g: Group) -> dict[str, list[tuple[str, int]]]:
        tps = [(t, p) for t, n in sorted(g.topics.items()) for p in range(n)]
        out: dict[str, list[tuple[str, int]]] = {m: [] for m in g.members}
        for i, tp in enumerate(tps):
            if g.members:
                out[g.members[i % len(g.members)]].append(tp)
        return out

    # -- operations -----------------------------------------------------------------------------
    def step(self) -> list[tuple[int, int, list, dict, dict]]:
        """One coordinator operation: a list of batches to append, each with its event."""
        era = self.era()
        g = self.rng.choice(self.groups)
        if not g.alive:
            return self.recreate(g, era)
        kind = g.kind
        if kind in ("consumer", "share", "streams") and not era.at_least_40:
            kind = "classic"
        if kind in ("share", "streams") and not era.at_least_41:
            kind = "classic"
        roll = self.rng.random()
        if kind == "standalone":
            if roll < 0.05:
                return self.delete_group(g, era)
            if roll < 0.12 and era.magic == 2:
                return self.transaction(g, era)
            if roll < 0.16:
                return self.expire(g, era)
            return self.commit(g, era, manual=True)
        if kind in ("consumer", "share", "streams"):
            if roll < 0.25 or not g.members:
                return self.new_protocol_membership(g, era, kind)
            if roll < 0.27:
                return self.delete_new_protocol_group(g, era, kind)
            if kind == "share":
                return self.new_protocol_membership(g, era, kind)
            if roll < 0.32 and era.magic == 2 and kind == "consumer":
                return self.transaction(g, era)
            return self.commit(g, era, manual=roll < 0.4)
        # classic and connect
        if not g.members and g.committed and roll < 0.2:
            return self.reset(g, era)
        if not g.members and g.committed and roll < 0.25:
            return self.expire_empty_group(g, era)
        if roll < 0.12 or not g.members:
            return self.rebalance(g, era)
        if roll < 0.14:
            return self.leave_all(g, era)
        if roll < 0.16:
            return self.delete_group(g, era)
        if roll < 0.23 and era.magic == 2 and kind == "classic":
            return self.transaction(g, era)
        return self.commit(g, era, manual=roll < 0.35)

    def commit(self, g: Group, era: Era, manual: bool) -> list:
        self.tick()
        items, event_offsets = [], {}
        for t, n in sorted(g.topics.items()):
            for p in range(n):
                pos = g.positions.get((t, p), 0)
                if self.rng.random() < 0.6:  # auto-commit often repeats an unchanged position
                    pos += self.rng.randint(1, 500)
                g.positions[(t, p)] = pos
                meta = ""
                if manual:
                    meta = self.rng.choice(["", "manual", "checkpoint:" + "x" * 140, "batch-42"])
                items.append((self.key_offset(g, t, p, era), self.value_offset(pos, era, meta, t)))
                self.plain(g, (t, p), pos)
                event_offsets[f"{t}:{p}"] = pos
        g.empty_since = None if g.members else g.empty_since
        return [(self.part(g), self.now, items, {}, {"event": "commit", "group": g.name, "offsets": event_offsets})]

    def reset(self, g: Group, era: Era) -> list:
        self.tick()
        items = []
        for (t, p), pos in sorted(g.positions.items()):
            new = max(0, pos - self.rng.randint(1, 1000)) if self.rng.random() < 0.7 else pos + 1000
            g.positions[(t, p)] = new
            self.plain(g, (t, p), new)
            items.append((self.key_offset(g, t, p, era), self.value_offset(new, era, "", t)))
        if not items:
            return []
        return [(self.part(g), self.now, items, {}, {"event": "reset", "group": g.name})]

    def group_value(self, g: Group, era: Era) -> bytes:
        assignment = self.assignment(g)
        members = []
        for m in g.members:
            if g.kind == "connect":
                sub, asg = b"\x00\x01connect-meta", b"\x00\x01connect-assignment"
            else:
                version = self.rng.choice([0, 1, 3])
                owned = {}
                for t, p in assignment[m]:
                    owned.setdefault(t, []).append(p)
                sub = encode_subscription(
                    {
                        "version": version,
                        "topics": sorted(g.topics),
                        "user_data": None,
                        "owned_partitions": [{"topic": t, "partitions": ps} for t, ps in sorted(owned.items())],
                        "generation_id": g.generation,
                        "rack_id": None,
                    }
                )
                asg = encode_assignment(
                    {
                        "version": version,
                        "user_data": None,
                        "assigned_partitions": [{"topic": t, "partitions": ps} for t, ps in sorted(owned.items())],
                    }
                )
            members.append(
                {
                    "member_id": m,
                    "group_instance_id": None,
                    "client_id": m.rsplit("-", 1)[0],
                    "client_host": "/10.0.0." + str(len(m) % 250),
                    "rebalance_timeout": 300000,
                    "session_timeout": 45000,
                    "subscription": sub,
                    "assignment": asg,
                }
            )
        value = {
            "protocol_type": "connect" if g.kind == "connect" else "consumer",
            "generation": g.generation,
            "protocol": ("sessioned" if g.kind == "connect" else self.rng.choice(["range", "cooperative-sticky"]))
            if members
            else None,
            "leader": members[0]["member_id"] if members else None,
            "current_state_timestamp": self.now,
            "members": members,
        }
        return encode_value(2, era.group_version, value)

    def rebalance(self, g: Group, era: Era) -> list:
        self.tick()
        if g.members and self.rng.random() < 0.4:
            g.members.pop(self.rng.randrange(len(g.members)))
        else:
            g.members.append(f"consumer-{g.name}-{g.generation}-{self.rng.randrange(10**6)}")
        g.generation += 1
        g.empty_since = None if g.members else self.now
        items = [(encode_key(2, {"group": g.name}), self.group_value(g, era))]
        return [
            (
                self.part(g),
                self.now,
                items,
                {},
                {"event": "rebalance", "group": g.name, "generation": g.generation, "members": len(g.members)},
            )
        ]

    def leave_all(self, g: Group, era: Era) -> list:
        self.tick()
        g.members = []
        g.generation += 1
        g.empty_since = self.now
        items = [(encode_key(2, {"group": g.name}), self.group_value(g, era))]
        return [(self.part(g), self.now, items, {}, {"event": "empty", "group": g.name, "generation": g.generation})]

    def delete_group(self, g: Group, era: Era) -> list:
        """Admin deletion: offset tombstones, then the group tombstone, in one batch.

        Kafka only deletes empty groups, so members leave first.
        """
        first = self.leave_all(g, era) if g.members else []
        self.tick()
        items = [(self.key_offset(g, t, p, era), None) for (t, p) in sorted(g.committed)]
        # classic groups always get a group tombstone; assign()-only groups only from 4.0
        if g.kind != "standalone" or era.at_least_40:
            items.append((encode_key(2, {"group": g.name}), None))
        self._forget(g)
        if not items:
            return first
        return [*first, (self.part(g), self.now, items, {}, {"event": "delete_group", "group": g.name})]

    def expire(self, g: Group, era: Era) -> list:
        """Offsets of an assign()-only group past retention: tombstones without a group record."""
        if not g.committed:
            return []
        self.now += 7 * DAY + self.rng.randint(1, DAY)  # retention (7 days) elapses
        items = [(self.key_offset(g, t, p, era), None) for (t, p) in sorted(g.committed)]
        g.committed.clear()
        self._drop_transactions(g)  # the tombstones cancel pending transactional offsets
        return [(self.part(g), self.now, items, {}, {"event": "expire", "group": g.name})]

    def expire_empty_group(self, g: Group, era: Era) -> list:
        """An empty classic group past retention: offset tombstones and the group tombstone."""
        self.now += 7 * DAY + self.rng.randint(1, DAY)
        items = [(self.key_offset(g, t, p, era), None) for (t, p) in sorted(g.committed)]
        items.append((encode_key(2, {"group": g.name}), None))
        self._forget(g)
        return [(self.part(g), self.now, items, {}, {"event": "expire", "group": g.name})]

    def _drop_transactions(self, g: Group) -> None:
        for key in [k for k, (grp, _, _) in self.open_txns.items() if grp is g]:
            del self.open_txns[key]

    def _forget(self, g: Group) -> None:
        g.committed.clear()
        g.positions.clear()
        g.members = []
        g.fenced = []
        g.alive = False
        self._drop_transactions(g)  # deletion drops pending offsets too (tombstones)

    def recreate(self, g: Group, era: Era) -> list:
        g.alive = True
        g.incarnation += 1
        g.generation = 0
        g.epoch = 0
        g.topology_epoch = 0
        g.validated = -1
        g.converted = False
        g.plain_seq.clear()
        return self.commit(g, era, manual=False)

    def transaction(self, g: Group, era: Era) -> list:
        """Open a transaction, or finish one: COMMIT, ABORT, optionally a plain commit between."""
        part = self.part(g)
        mine = [k for k, (grp, _, _) in self.open_txns.items() if grp is g]
        self.tick()
        if not mine:
            self.producer_id += 1
            pid = self.producer_id
            offsets = {}
            items = []
            for t, n in sorted(g.topics.items()):
                for p in range(n):
                    pos = g.positions.get((t, p), 0) + self.rng.randint(1, 100)
                    g.positions[(t, p)] = pos
                    offsets[(t, p)] = pos
                    items.append((self.key_offset(g, t, p, era), self.value_offset(pos, era, "txn", t)))
            self.seq += 1
            self.open_txns[(part, pid)] = (g, offsets, self.seq)
            opts = {"transactional": True, "producer_id": pid, "producer_epoch": 0}
            return [(part, self.now, items, opts, {"event": "txn_begin", "group": g.name, "producer_id": pid})]
        (part, pid) = mine[0]
        _, offsets, begun = self.open_txns.pop((part, pid))
        batches = []
        if self.rng.random() < 0.3:  # a plain commit lands between the transactional one and its marker
            t, p = next(iter(offsets))
            plain = offsets[(t, p)] + 7
            g.positions[(t, p)] = plain
            self.plain(g, (t, p), plain)
            batches.append(
                (
                    part,
                    self.now,
                    [(self.key_offset(g, t, p, era), self.value_offset(plain, era, "", t))],
                    {},
                    {"event": "commit", "group": g.name, "offsets": {f"{t}:{p}": plain}},
                )
            )
        batches.append(self._end_txn(g, offsets, begun, part, pid, commit=self.rng.random() < 0.7))
        return batches

    # -- new protocol (KIP-848 consumer, share, streams) ------------------------------------------
    def _np_ids(self, kind: str) -> dict[str, int]:
        return {
            "consumer": {"meta": 3, "member": 5, "tmeta": 6, "target": 7, "current": 8},
            "share": {"meta": 11, "member": 10, "tmeta": 12, "target": 13, "current": 14},
            "streams": {"meta": 17, "member": 19, "tmeta": 20, "target": 21, "current": 22},
        }[kind]

    def new_protocol_membership(self, g: Group, era: Era, kind: str) -> list:
        if kind != "consumer":
            return self.modern_membership(g, era, kind)
        self.tick()
        ids = self._np_ids(kind)
        items = self._convert(g)
        leaving = bool(g.members) and self.rng.random() < 0.3
        if leaving:
            m = g.members.pop(self.rng.randrange(len(g.members)))
            for t in ("current", "target", "member"):
                items.append((encode_key(ids[t], {"group_id": g.name, "member_id": m}), None))
        else:
            m = f"{kind}-member-{self.rng.randrange(10**9):09d}"
            g.members.append(m)
            items.append((encode_key(ids["member"], {"group_id": g.name, "member_id": m}), self._np_member(kind, g)))
        g.epoch += 1
        meta = {"epoch": g.epoch, "metadata_hash": self.rng.randrange(1 << 62) if era.at_least_41 else 0}
        items.append((encode_key(ids["meta"], {"group_id": g.name}), encode_value(ids["meta"], 0, meta)))
        if g.regex and g.epoch == 1:
            resolved = self.regex_topics
            items.append(
                (
                    encode_key(16, {"group_id": g.name, "regular_expression": g.regex}),
                    encode_value(16, 0, {"topics": resolved, "version": g.epoch, "timestamp": self.now}),
                )
            )
        items += self._np_assignment(g, kind, set(g.members))
        event = {
            "event": "member_leave" if leaving else "member_join",
            "group": g.name,
            "kind": kind,
            "epoch": g.epoch,
            "members": len(g.members),
        }
        return [(self.part(g), self.now, items, {}, event)]

    def _convert(self, g: Group) -> list[tuple[bytes, bytes | None]]:
        """A group's first new-protocol write: an online migration tombstones its classic state."""
        if g.converted:
            return []
        g.converted = True
        g.members = []
        return [(encode_key(2, {"group": g.name}), None)] if g.generation else []

    def _np_assignment(self, g: Group, kind: str, current: set[str], state: int | None = None) -> list:
        """The target assignment at the group epoch (its epoch and every member's target), and the
        current assignment of the members in ``current`` at that epoch (stable)."""
        ids = self._np_ids(kind)
        items = [
            (
                encode_key(ids["tmeta"], {"group_id": g.name}),
                encode_value(ids["tmeta"], 0, {"assignment_epoch": g.epoch, "assignment_timestamp": 0}),
            )
        ]
        for member, tps in self.assignment(g).items():
            key = {"group_id": g.name, "member_id": member}
            items.append((encode_key(ids["target"], key), encode_value(ids["target"], 0, self._np_target(kind, tps))))
            if member in current:
                value = self._np_current(kind, g, tps, state)
                items.append((encode_key(ids["current"], key), encode_value(ids["current"], 0, value)))
        return items

    def _group_record(self, g: Group, kind: str) -> tuple[bytes, bytes]:
        ids = self._np_ids(kind)
        meta: dict[str, Any] = {"epoch": g.epoch, "metadata_hash": self.mrng.randrange(1 << 62)}
        if kind == "streams":
            meta |= {
                "validated_topology_epoch": g.validated,
                "last_assignment_configs": None if g.validated < 0 else [{"key": "num.standby.replicas", "value": "1"}],
                "stored_description_topology_epoch": -1,
                "failed_description_topology_epoch": -1,
            }
        return encode_key(ids["meta"], {"group_id": g.name}), encode_value(ids["meta"], 0, meta)

    def modern_membership(self, g: Group, era: Era, kind: str) -> list:
        """A share or streams group's membership change, as the coordinator writes it, sometimes
        left part-way so the group loads in the states the coordinator derives: a join whose
        target assignment is not written yet (Assigning), one whose members have not all caught
        up (Reconciling; streams members with revocations pending), a member fenced by a current
        assignment tombstone (still a member, epoch -1) and removed by a later write, a streams
        topology changed and not yet validated (NotReady). Each write bumps the group epoch."""
        self.tick()
        ids = self._np_ids(kind)
        items = self._convert(g)
        roll = self.mrng.random()
        current = set(g.members)  # members whose current assignment this write brings to the epoch
        what = "member_join"
        if g.fenced and roll < 0.3:  # the fenced members go: target (if any) and metadata tombstones
            for m in g.fenced:
                items.append((encode_key(ids["member"], {"group_id": g.name, "member_id": m}), None))
            g.fenced = []
            what = "member_remove"
        elif kind == "streams" and g.epoch and roll < 0.3:
            g.topology_epoch += 1
            items.append((encode_key(23, {"group_id": g.name}), encode_value(23, 0, self._topology(g))))
            if g.validated >= 0 and self.mrng.random() < 0.5:
                g.validated = g.topology_epoch
            what = "topology"
        elif kind == "streams" and g.epoch and g.validated != g.topology_epoch and roll < 0.65:
            g.validated = g.topology_epoch  # (a group Kafka 4.1 wrote, -1, is validated by 4.2 too)
            what = "topology_validated"
        elif g.members and roll < 0.8:
            m = g.members.pop(self.mrng.randrange(len(g.members)))
            current.discard(m)
            key = {"group_id": g.name, "member_id": m}
            items += [(encode_key(ids["current"], key), None), (encode_key(ids["target"], key), None)]
            if self.mrng.random() < 0.3:
                g.fenced.append(m)  # left with epoch -1 until a later write removes it
                what = "member_fenced"
            else:
                items.append((encode_key(ids["member"], key), None))
                what = "member_leave"
        else:
            m = f"{kind}-member-{self.mrng.randrange(10**9):09d}"
            g.members.append(m)
            current.add(m)
            key = {"group_id": g.name, "member_id": m}
            items.append((encode_key(ids["member"], key), self._np_member(kind, g)))
        g.epoch += 1
        if kind == "streams" and g.epoch == 1:
            g.validated = 0 if self.mrng.random() < 0.6 else -1  # Kafka 4.2 validates; 4.1 wrote -1
        items.append(self._group_record(g, kind))
        if kind == "streams" and g.epoch == 1:
            items.append((encode_key(23, {"group_id": g.name}), encode_value(23, 0, self._topology(g))))
        step = self.mrng.random()
        if step < 0.6:
            items += self._np_assignment(g, kind, current)
        elif step < 0.8:  # the target is computed; some members are still at their earlier epoch
            behind = set(self.mrng.sample(sorted(current), len(current) // 2))
            items += self._np_assignment(g, kind, current - behind)
            if kind == "streams" and behind:  # they are revoking tasks at their old epoch
                g.epoch -= 1
                items += [i for i in self._np_assignment(g, kind, behind, state=2) if self._is_current(i, ids)]
                g.epoch += 1
        # else: the group epoch is ahead of the target assignment until a later write
        if kind == "share" and g.epoch == 1:
            initialized = [
                {"topic_id": self.topic_ids[t], "topic_name": t, "partitions": list(range(n))}
                for t, n in sorted(g.topics.items())
            ]
            value = {"initializing_topics": [], "deleting_topics": [], "initialized_topics": initialized}
            items.append((encode_key(15, {"group_id": g.name}), encode_value(15, 0, value)))
        event = {"event": what, "group": g.name, "kind": kind, "epoch": g.epoch, "members": len(g.members)}
        return [(self.part(g), self.now, items, {}, event)]

    @staticmethod
    def _is_current(item: tuple[bytes, bytes | None], ids: dict[str, int]) -> bool:
        return int.from_bytes(item[0][:2], "big") == ids["current"]

    def _np_member(self, kind: str, g: Group) -> bytes:
        if kind == "consumer":
            v = {
                "instance_id": None,
                "rack_id": None,
                "client_id": "consumer",
                "client_host": "/10.1.0.1",
                "subscribed_topic_names": [] if g.regex else sorted(g.topics),
                "subscribed_topic_regex": g.regex,
                "rebalance_timeout_ms": 300000,
                "server_assignor": self.rng.choice([None, "uniform"]),
                "classic_member_metadata": None,
            }
            return encode_value(5, 0, v)
        if kind == "share":
            return encode_value(
                10,
                0,
                {
                    "rack_id": None,
                    "client_id": "share-consumer",
                    "client_host": "/10.2.0.1",
                    "subscribed_topic_names": sorted(g.topics),
                },
            )
        return encode_value(
            19,
            0,
            {
                "instance_id": None,
                "rack_id": None,
                "client_id": "streams-app",
                "client_host": "/10.3.0.1",
                "rebalance_timeout_ms": 300000,
                "topology_epoch": g.topology_epoch,
                "process_id": "proc-1",
                "user_endpoint": {"host": "app.local", "port": 8080},
                "client_tags": [{"key": "zone", "value": "a"}],
            },
        )

    def _np_target(self, kind: str, tps: list[tuple[str, int]]) -> dict[str, Any]:
        if kind == "streams":
            tasks = [{"subtopology_id": "0", "partitions": sorted(p for _, p in tps)}] if tps else []
            return {"active_tasks": tasks, "standby_tasks": [], "warmup_tasks": []}
        return {"topic_partitions": self._by_topic_id(tps)}

    def _np_current(self, kind: str, g: Group, tps: list[tuple[str, int]], state: int | None = None) -> dict[str, Any]:
        base = {"member_epoch": g.epoch, "previous_member_epoch": g.epoch - 1}
        if kind == "streams":
            tasks = [{"subtopology_id": "0", "partitions": sorted(p for _, p in tps), "assignment_epochs": None}]
            return {
                **base,
                "state": 1 if state is None else state,  # 1 STABLE, 2 UNREVOKED_TASKS (spec 9.6)
                "active_tasks": tasks if tps else [],
                "standby_tasks": [],
                "warmup_tasks": [],
                "active_tasks_pending_revocation": [],
                "standby_tasks_pending_revocation": [],
                "warmup_tasks_pending_revocation": [],
            }
        parts = self._by_topic_id(tps)
        if kind == "share":
            return {**base, "state": 0, "assigned_partitions": parts}
        for p in parts:
            p["assignment_epochs"] = None
        return {**base, "state": 0, "assigned_partitions": parts, "partitions_pending_revocation": []}

    def _by_topic_id(self, tps: list[tuple[str, int]]) -> list[dict[str, Any]]:
        grouped: dict[str, list[int]] = {}
        for t, p in tps:
            grouped.setdefault(t, []).append(p)
        return [{"topic_id": self.topic_ids[t], "partitions": ps} for t, ps in sorted(grouped.items())]

    def _topology(self, g: Group) -> dict[str, Any]:
        """The application's topology at its topology epoch: an odd epoch adds a repartitioning
        subtopology (a changed application)."""
        subtopologies = [
            {
                "subtopology_id": "0",
                "source_topics": sorted(g.topics),
                "source_topic_regex": [],
                "state_changelog_topics": [
                    {"name": f"{g.name}-store-changelog", "partitions": 0, "replication_factor": 0, "topic_configs": []}
                ],
                "repartition_sink_topics": [f"{g.name}-by-key-repartition"] if g.topology_epoch % 2 else [],
                "repartition_source_topics": [],
                "copartition_groups": [],
            }
        ]
        if g.topology_epoch % 2:
            repartition = {
                "name": f"{g.name}-by-key-repartition",
                "partitions": 2,
                "replication_factor": 0,
                "topic_configs": [{"key": "cleanup.policy", "value": "delete"}],
            }
            subtopologies.append(
                {
                    "subtopology_id": "1",
                    "source_topics": [],
                    "source_topic_regex": [],
                    "state_changelog_topics": [],
                    "repartition_sink_topics": [],
                    "repartition_source_topics": [repartition],
                    "copartition_groups": [
                        {"source_topics": [], "source_topic_regex": [], "repartition_source_topics": [0]}
                    ],
                }
            )
        return {"epoch": g.topology_epoch, "subtopologies": subtopologies}

    def delete_new_protocol_group(self, g: Group, era: Era, kind: str) -> list:
        """Deletion order of spec 12.3: current, target, target meta, members, regex, (4), meta."""
        self.tick()
        if not g.converted:
            return self._delete_unconverted(g, era)
        ids = self._np_ids(kind)
        items: list[tuple[bytes, bytes | None]] = []
        for t in ("current", "target"):
            items += [(encode_key(ids[t], {"group_id": g.name, "member_id": m}), None) for m in g.members]
        items.append((encode_key(ids["tmeta"], {"group_id": g.name}), None))
        members = g.members + g.fenced  # fenced members: their current and target are gone already
        items += [(encode_key(ids["member"], {"group_id": g.name, "member_id": m}), None) for m in members]
        if kind == "consumer":
            if g.regex:
                items.append((encode_key(16, {"group_id": g.name, "regular_expression": g.regex}), None))
            items.append((encode_key(4, {"group_id": g.name}), None))
        if kind == "streams":
            items.append((encode_key(23, {"group_id": g.name}), None))
        if kind == "share":
            items.append((encode_key(15, {"group_id": g.name}), None))
        items = [(self.key_offset(g, t, p, era), None) for (t, p) in sorted(g.committed)] + items
        items.append((encode_key(ids["meta"], {"group_id": g.name}), None))
        self._forget(g)
        return [(self.part(g), self.now, items, {}, {"event": "delete_group", "group": g.name, "kind": kind})]

    def _delete_unconverted(self, g: Group, era: Era) -> list:
        """A group of a new-protocol kind still on the classic protocol (its members joined before
        the new protocol's era and it never moved) is a classic group to Kafka: it is deleted as
        one — members leave, then offset tombstones and the group tombstone — not with
        new-protocol tombstones, which would leave its classic record live beside a later
        new-protocol group (spec 12.3: one family is live at a time). It draws no random numbers, so
        the rest of the run draws what it drew before."""
        batches = []
        if g.members:  # as leave_all, at the deletion's time
            g.members = []
            g.generation += 1
            g.empty_since = self.now
            items = [(encode_key(2, {"group": g.name}), self.group_value(g, era))]
            batches.append(
                (self.part(g), self.now, items, {}, {"event": "empty", "group": g.name, "generation": g.generation})
            )
        items = [(self.key_offset(g, t, p, era), None) for (t, p) in sorted(g.committed)]
        items.append((encode_key(2, {"group": g.name}), None))
        self._forget(g)
        batches.append((self.part(g), self.now, items, {}, {"event": "delete_group", "group": g.name}))
        return batches

    def close_open_transactions(self, leave_open: int = 1) -> list:
        """At the end, resolve all but ``leave_open`` transactions (hanging ones stay pending)."""
        batches = []
        for part, pid in list(self.open_txns)[leave_open:]:
            g, offsets, begun = self.open_txns.pop((part, pid))
            batches.append(self._end_txn(g, offsets, begun, part, pid, commit=True))
        return batches

    def _end_txn(
        self, g: Group, offsets: dict[tuple[str, int], int], begun: int, part: int, pid: int, commit: bool
    ) -> tuple:
        """The COMMIT or ABORT marker batch that ends a transaction (a COMMIT applies its offsets)."""
        if commit:
            self._apply_txn(g, offsets, begun)
        key, value = encode_control(1 if commit else 0, 3)
        self.tick()
        opts = {"transactional": True, "control": True, "producer_id": pid, "producer_epoch": 0}
        event = {"event": "txn_commit" if commit else "txn_abort", "group": g.name, "producer_id": pid}
        return (part, self.now, [(key, value)], opts, event)

    def _apply_txn(self, g: Group, offsets: dict[tuple[str, int], int], begun: int) -> None:
        """COMMIT: a pending offset loses to a plain commit written after the transaction began."""
        for tp, offset in offsets.items():
            if g.plain_seq.get(tp, 0) < begun:
                g.committed[tp] = offset

    def intent(self) -> dict[tuple[str, str, int], int]:
        """What the workload meant to leave committed: (group, topic, partition) -> offset."""
        return {(g.name, t, p): o for g in self.groups for (t, p), o in g.committed.items()}
