"""A skewed workload (opt-in, ``generate(..., skew=Skew(...))``): one offsets partition holds most
of the records and millions of live offset keys, and one classic group is huge.

Real clusters are skewed: a coordinator partition is chosen by the hash of the group id, so a few
large consumer fleets can put most of a cluster's commits, and most of its live keys, into one
``__consumer_offsets`` partition, the one gold replays in a single task. This workload adds to the
ordinary mix (:class:`pipelines.generate.workload.Workload`, unchanged) a stream of operations of

* **hot groups** (``hot-group-<i>-<s>``, ``s`` the first suffix whose id Kafka's partitioner puts
  in the hot partition): consumers that commit windows of up to ``keys_per_commit`` partitions
  of their topics; each group owns ``keys_per_group`` keys (topic-partitions of ``hot-topic-*``,
  500 partitions each), created by first commits spread evenly over the run and re-committed
  (offsets moving forward) in between;
* **one big classic group** in the same partition with ``members`` members whose GroupMetadata
  assigns ``assigned`` topic-partitions (``big-topic-*``) round-robin over them: formed in one
  rebalance early in the run, two later rebalances (a member replaced), each member committing its
  own assignment (one request per member, as a consumer does).

The hot stream takes ``share`` of the records; the rest is the ordinary workload over every
partition (the hot one included). Every hot key is live at the end (no tombstones), so the hot
partition holds ``keys`` live keys from the hot stream (the big group's included) plus the
ordinary groups' keys there. The intent model covers the hot groups too, so ``generate`` checks the
reference replay against it as for any log, and ``expected-state.json`` stays exact.

The hot stream draws from its own random generator: the ordinary workload's draws are those of the
same seed without skew up to the first hot operation (the outputs differ from there, of course).
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

from pipelines.codec import primitives as P
from pipelines.codec.partitioner import partition_for
from pipelines.codec.records import encode_key
from pipelines.generate.workload import Era, Group, Workload

__all__ = ["Skew", "SkewedWorkload"]

HOT_TOPIC_PARTITIONS = 500
# the big group's rebalances, at these shares of the hot stream: formed (earlier when the hot groups
# have no keys to commit), then a member replaced twice
BIG_REBALANCES = (0.02, 0.4, 0.75)
# key creation is paced to end at this share of the hot stream (re-commits fill the rest)
CREATE_BY = 0.9


@dataclass(frozen=True)
class Skew:
    """What makes a log skewed (defaults: issue 31's figures)."""

    partition: int = 0  # the hot offsets partition
    share: float = 0.85  # share of all records the hot stream writes (all into ``partition``)
    keys: int = 2_000_000  # distinct offset keys the hot stream commits, the big group's included
    members: int = 5_000  # members of the big classic group
    assigned: int = 100_000  # topic-partitions its GroupMetadata assigns over all members
    big_topics: int = 50  # topics the big group subscribes to (``assigned`` split over them)
    keys_per_group: int = 2_000  # keys of each hot group
    keys_per_commit: int = 500  # keys one commit request of a hot group carries at most

    def check(self, records: int, partitions: int) -> None:
        if not 0 <= self.partition < partitions:
            raise ValueError(f"skew partition {self.partition} is not one of the {partitions} partitions")
        if not 0 < self.share < 1:
            raise ValueError(f"skew share must be between 0 and 1, got {self.share}")
        if self.members < 1 or self.assigned < self.members or self.big_topics < 1:
            raise ValueError("the big group needs members >= 1, assigned >= members and big_topics >= 1")
        if self.keys < self.assigned or min(self.keys_per_group, self.keys_per_commit) < 1:
            raise ValueError("skew keys must cover the big group's assigned partitions")
        # every key is created by one record; the hot stream also writes the big group's records
        # and re-commits: the keys take at most 95 % of its records
        need = math.ceil(self.keys / 0.95 / self.share)
        if records < need:
            raise ValueError(f"{self.keys:,} hot keys at share {self.share} need at least {need:,} records")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _hot_name(prefix: str, partition: int, partitions: int) -> str:
    """``<prefix>-<s>`` for the first suffix ``s`` whose id Kafka puts in ``partition``."""
    s = 0
    while partition_for(f"{prefix}-{s}", partitions) != partition:
        s += 1
    return f"{prefix}-{s}"


class SkewedWorkload(Workload):
    """The ordinary workload plus the hot stream of :class:`Skew` (see the module docstring)."""

    def __init__(self, seed: int, records: int, partitions: int, skew: Skew) -> None:
        skew.check(records, partitions)
        super().__init__(seed, records, partitions)
        self.skew = skew
        self.srng = random.Random(seed * 7_919 + 31)  # the hot stream's own draws
        self.hot_target = skew.share * records
        self.hot_written = 0
        # the big group: ``assigned`` partitions over ``big_topics`` topics
        base, extra = divmod(skew.assigned, skew.big_topics)
        big_topics = {f"big-topic-{j}": base + (j < extra) for j in range(skew.big_topics)}
        self.big = Group(_hot_name("big-group", skew.partition, partitions), "classic", big_topics)
        self.big_rebalances = 0
        self.big_assignment: dict[str, list[tuple[str, int]]] = {}
        self.big_uncommitted: deque[str] = deque()  # members not committed since the last rebalance
        self.big_created: set[tuple[str, int]] = set()
        # hot groups: keys_per_group keys each over hot topics of HOT_TOPIC_PARTITIONS partitions
        ordinary = skew.keys - skew.assigned
        n_groups = math.ceil(ordinary / skew.keys_per_group) if ordinary else 0
        per_group = math.ceil(skew.keys_per_group / HOT_TOPIC_PARTITIONS)
        n_topics = max(1, min(100, n_groups * per_group))
        self.hot: list[Group] = []
        self.hot_keys: list[list[tuple[str, int]]] = []  # each hot group's keys, in creation order
        left = ordinary
        for i in range(n_groups):
            topics = [f"hot-topic-{(i * per_group + k) % n_topics}" for k in range(per_group)]
            keys = [(t, p) for t in topics for p in range(HOT_TOPIC_PARTITIONS)][: min(skew.keys_per_group, left)]
            left -= len(keys)
            name = _hot_name(f"hot-group-{i}", skew.partition, partitions)
            self.hot.append(Group(name, "classic", {t: HOT_TOPIC_PARTITIONS for t in topics}))
            self.hot_keys.append(keys)
        for t in [*big_topics, *(f"hot-topic-{j}" for j in range(n_topics))]:
            self.topic_ids[t] = P.uuid_to_str(self.srng.randbytes(16))
        self.hot_created = [0] * n_groups  # keys of each hot group committed so far
        self.next_creator = 0  # the hot group whose next window of new keys comes next
        self.ordinary_keys = ordinary
        self.ordinary_created = 0

    # -- the interleaving -------------------------------------------------------------------------
    def step(self) -> list[tuple[int, int, list, dict, dict]]:
        if self.hot_written <= self.skew.share * self.written:
            batches = self.hot_step()
            self.hot_written += sum(len(b[2]) for b in batches)
            return batches
        return super().step()

    def hot_progress(self) -> float:
        return self.hot_written / self.hot_target

    def created(self) -> int:
        return self.ordinary_created + len(self.big_created)

    def hot_step(self) -> list:
        era = self.era()
        progress = self.hot_progress()
        ordinary_left = self.ordinary_created < self.ordinary_keys
        due = self.big_rebalances < len(BIG_REBALANCES) and progress >= BIG_REBALANCES[self.big_rebalances]
        if due or (not self.big.members and not ordinary_left):
            return self.big_rebalance(era)
        # first commits of new keys, paced to end at CREATE_BY of the hot stream
        big_left = bool(self.big.members) and len(self.big_created) < self.skew.assigned
        if (big_left or ordinary_left) and self.created() / self.skew.keys <= progress / CREATE_BY:
            big_share = len(self.big_created) / self.skew.assigned
            ordinary_share = self.ordinary_created / self.ordinary_keys if self.ordinary_keys else 1.0
            if big_left and (not ordinary_left or big_share <= ordinary_share):
                return self.big_commit(era)
            return self.hot_create(era)
        ready = any(self.hot_created)
        if self.big.members and (not ready or self.srng.random() < self.skew.assigned / self.skew.keys):
            return self.big_commit(era)
        return self.hot_recommit(era) if ready else self.hot_create(era)

    # -- hot groups -------------------------------------------------------------------------------
    def _commit_keys(self, g: Group, keys: list[tuple[str, int]], era: Era) -> list:
        """One commit request of ``g`` for ``keys`` (offsets move forward)."""
        self.tick()
        items, event_offsets = [], {}
        for t, p in keys:
            pos = g.positions.get((t, p), 0) + self.srng.randint(1, 500)
            g.positions[(t, p)] = pos
            items.append((self.key_offset(g, t, p, era), self.value_offset(pos, era, "", t)))
            self.plain(g, (t, p), pos)
            event_offsets[f"{t}:{p}"] = pos
        return [(self.part(g), self.now, items, {}, {"event": "commit", "group": g.name, "offsets": event_offsets})]

    def hot_create(self, era: Era) -> list:
        """The next window of new keys of the next hot group with keys left (round robin)."""
        n = len(self.hot)
        while self.hot_created[self.next_creator] >= len(self.hot_keys[self.next_creator]):
            self.next_creator = (self.next_creator + 1) % n
        i = self.next_creator
        self.next_creator = (i + 1) % n
        done = self.hot_created[i]
        size = min(self.skew.keys_per_commit, self.ordinary_keys - self.ordinary_created)
        keys = self.hot_keys[i][done : done + size]
        self.hot_created[i] += len(keys)
        self.ordinary_created += len(keys)
        return self._commit_keys(self.hot[i], keys, era)

    def hot_recommit(self, era: Era) -> list:
        """A hot group commits a window of keys it committed before."""
        i = self.srng.choice([i for i, n in enumerate(self.hot_created) if n])
        size = min(self.hot_created[i], self.skew.keys_per_commit)
        start = self.srng.randrange(self.hot_created[i] - size + 1)
        return self._commit_keys(self.hot[i], self.hot_keys[i][start : start + size], era)

    # -- the big group ----------------------------------------------------------------------------
    def big_rebalance(self, era: Era) -> list:
        """Formed with all its members at once (the first time), later one member replaced; its
        GroupMetadata record assigns every partition of its topics round-robin."""
        g = self.big
        self.tick()
        if not g.members:
            g.members = [f"consumer-{g.name}-{k}-{self.srng.randrange(10**6):06d}" for k in range(self.skew.members)]
        else:
            g.members.pop(self.srng.randrange(len(g.members)))
            g.members.append(f"consumer-{g.name}-{len(g.members)}-{self.srng.randrange(10**6):06d}")
        self.big_rebalances += 1
        g.generation += 1
        self.big_assignment = self.assignment(g)
        # members holding partitions nobody committed yet commit first
        fresh = {m for m in g.members if any(tp not in self.big_created for tp in self.big_assignment[m])}
        self.big_uncommitted = deque(sorted(g.members, key=lambda m: m not in fresh))  # stable: in order
        items = [(encode_key(2, {"group": g.name}), self.group_value(g, era))]
        event = {"event": "rebalance", "group": g.name, "generation": g.generation, "members": len(g.members)}
        return [(self.part(g), self.now, items, {}, event)]

    def big_commit(self, era: Era) -> list:
        """A member of the big group commits its assigned partitions: the members that have not
        since the last rebalance first (those with partitions nobody committed yet before the
        others), then any."""
        g = self.big
        member = self.big_uncommitted.popleft() if self.big_uncommitted else self.srng.choice(g.members)
        keys = self.big_assignment[member]
        self.big_created.update(keys)
        return self._commit_keys(g, keys, era)

    # -- the intent model -------------------------------------------------------------------------
    def intent(self) -> dict[tuple[str, str, int], int]:
        out = super().intent()
        for g in [*self.hot, self.big]:
            out.update({(g.name, t, p): o for (t, p), o in g.committed.items()})
        return out

    def report(self) -> dict[str, Any]:
        """What the hot stream wrote (for the manifest)."""
        return {
            **self.skew.to_json(),
            "hot_records": self.hot_written,
            "hot_keys_committed": self.created(),
            "hot_groups": len(self.hot),
            "big_group": self.big.name,
            "big_group_generation": self.big.generation,
            "big_group_members": len(self.big.members),
            "big_group_assigned": sum(len(v) for v in self.big_assignment.values()),
        }
