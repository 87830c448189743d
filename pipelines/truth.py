"""The truth snapshot: what a Kafka cluster itself reports about its consumer groups at one moment.

One JSON document (docs/truth-snapshot.md) written by the Kafka test harness from the broker's
Admin API (``listConsumerGroupOffsets``, ``describeConsumerGroups``/``describeShareGroups``/
``describeStreamsGroups``) plus
what the clients themselves observed (the classic generation), and accepted by the quality stage
as an external snapshot to reconcile gold against. ``offsets_topic_end_offsets`` says which log
position of ``__consumer_offsets`` the snapshot corresponds to, so the same state can be rebuilt
from the log by reading each partition up to (not including) that offset.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FORMAT = "offsets-lakehouse/truth-snapshot"
VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TopicPartitionRef(_Model):
    topic: str
    partition: int


class CommittedOffset(_Model):
    topic: str
    partition: int
    offset: int
    leader_epoch: int | None = None
    metadata: str | None = None


class ShareStartOffset(_Model):
    topic: str
    partition: int
    start_offset: int


class TaskIds(_Model):
    """Streams tasks of one subtopology: the task of each listed input partition."""

    subtopology_id: str
    partitions: list[int]


class StreamsTasks(_Model):
    active: list[TaskIds] = Field(default_factory=list)
    standby: list[TaskIds] = Field(default_factory=list)
    warmup: list[TaskIds] = Field(default_factory=list)


class StreamsTopic(_Model):
    """An internal topic of a streams topology (changelog or repartition) as the broker reports it."""

    name: str
    partitions: int
    replication_factor: int


class Subtopology(_Model):
    subtopology_id: str
    source_topics: list[str] = Field(default_factory=list)
    repartition_sink_topics: list[str] = Field(default_factory=list)
    state_changelog_topics: list[StreamsTopic] = Field(default_factory=list)
    repartition_source_topics: list[StreamsTopic] = Field(default_factory=list)


class Member(_Model):
    member_id: str
    client_id: str
    host: str
    group_instance_id: str | None = None
    assignment: list[TopicPartitionRef] = Field(default_factory=list)
    target_assignment: list[TopicPartitionRef] | None = None
    member_epoch: int | None = None
    upgraded: bool | None = None
    # streams groups (KIP-1071): members own tasks, not partitions
    process_id: str | None = None
    tasks: StreamsTasks | None = None
    target_tasks: StreamsTasks | None = None


class Group(_Model):
    group_id: str
    exists: bool = True
    type: Literal["classic", "consumer", "share", "streams"] | None = None
    state: str | None = None
    protocol_type: str | None = None  # as ListGroups reports it ("" for simple and Empty classic groups)
    simple_consumer_group: bool | None = None
    partition_assignor: str | None = None
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None
    topology_epoch: int | None = None  # streams groups
    subtopologies: list[Subtopology] = Field(default_factory=list)  # streams groups
    members: list[Member] = Field(default_factory=list)
    offsets: list[CommittedOffset] = Field(default_factory=list)
    share_offsets: list[ShareStartOffset] = Field(default_factory=list)
    # seen by the group's own clients, not by the Admin API (None: not observed)
    generation: int | None = None
    leader: str | None = None
    observed_by_clients: list[str] = Field(default_factory=list)
    not_observed: list[str] = Field(default_factory=list)

    def awaiting_cleanup(self) -> bool:
        """An offsets-only group that has lost its offsets: a running 4.x broker still lists it
        until its next cleanup cycle writes the group's tombstone; the coordinator loading the
        log (and gold) no longer has it (docs/gold.md)."""
        return self.type == "classic" and bool(self.simple_consumer_group) and not self.offsets and not self.members


class TruthSnapshot(_Model):
    format: Literal["offsets-lakehouse/truth-snapshot"] = FORMAT
    version: Literal[1] = VERSION
    cluster: str
    captured_at: str
    source: str = "kafka-admin-api"
    kafka_version: str | None = None
    offsets_topic_end_offsets: dict[int, int]
    groups: list[Group]
    notes: list[str] = Field(default_factory=list)

    def group(self, group_id: str) -> Group:
        for g in self.groups:
            if g.group_id == group_id:
                return g
        raise KeyError(group_id)

    def committed(self) -> dict[tuple[str, str, int], CommittedOffset]:
        """{(group, topic, partition): committed offset} over every existing group."""
        return {(g.group_id, o.topic, o.partition): o for g in self.groups if g.exists for o in g.offsets}

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def load(path: str | Path) -> TruthSnapshot:
    return TruthSnapshot.model_validate_json(Path(path).read_bytes())


def dump(snapshot: TruthSnapshot, path: str | Path) -> None:
    Path(path).write_text(json.dumps(snapshot.to_json(), indent=2, sort_keys=False) + "\n")
