"""A truth snapshot fetched from a live cluster (``quality.truth_snapshot: live``).

Kafka's Admin API, through the kafka-clients jar Spark's Kafka source already puts in the JVM:
the committed offsets of every consumer group (listConsumerGroupOffsets), tied to a log position
by reading the offsets topic's high watermarks before and after; a snapshot taken while the
topic moved is retried, so the offsets are the state at exactly those end offsets
(docs/truth-snapshot.md). Members, generations and share groups are not fetched: the quality
rule compares committed offsets only.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession

from pipelines.bronze.kafka_client import TIMEOUT_S, KafkaUnavailable, admin_client
from pipelines.bronze.kafka_source import partition_ends
from pipelines.truth import CommittedOffset, Group, TruthSnapshot

if TYPE_CHECKING:
    from pipelines.runtime.config import KafkaSource

ATTEMPTS = 5


def fetch_truth(spark: SparkSession, source: KafkaSource) -> TruthSnapshot:
    unit = spark._jvm.java.util.concurrent.TimeUnit.SECONDS  # type: ignore[attr-defined]
    with admin_client(spark, source, "offsets-lakehouse-truth") as admin:
        for _ in range(ATTEMPTS):
            before = {p: e["high_watermark"] for p, e in partition_ends(spark, source).items()}
            groups = []
            listings = admin.listConsumerGroups().all().get(TIMEOUT_S, unit)
            for listing in sorted(listings, key=lambda g: g.groupId()):
                group_id = listing.groupId()
                offsets = admin.listConsumerGroupOffsets(group_id).partitionsToOffsetAndMetadata().get(TIMEOUT_S, unit)
                committed = []
                for tp in offsets.keySet():
                    om = offsets.get(tp)
                    if om is None:
                        continue
                    epoch = om.leaderEpoch()
                    committed.append(
                        CommittedOffset(
                            topic=tp.topic(),
                            partition=tp.partition(),
                            offset=om.offset(),
                            leader_epoch=epoch.get() if epoch.isPresent() else None,
                            metadata=om.metadata(),
                        )
                    )
                committed.sort(key=lambda o: (o.topic, o.partition))
                groups.append(Group(group_id=group_id, offsets=committed))
            after = {p: e["high_watermark"] for p, e in partition_ends(spark, source).items()}
            if before == after:
                return TruthSnapshot(
                    cluster=source.cluster,
                    captured_at=datetime.now(timezone.utc).isoformat(),
                    offsets_topic_end_offsets=after,
                    groups=groups,
                    notes=["fetched by offsets-lakehouse quality: committed offsets only"],
                )
        raise KafkaUnavailable(
            f"Kafka at {source.bootstrap_servers}: {source.topic} kept moving during {ATTEMPTS} truth snapshots"
        )
