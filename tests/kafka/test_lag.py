"""Consumer lag from a live cluster: a job with a kafka source whose end offsets are fetched with
the Admin API at run time (``end_offsets: {kind: admin}``), against the broker's own numbers —
its end offsets (ListOffsets latest) minus the group's committed offsets
(listConsumerGroupOffsets), fetched here with confluent-kafka's admin client."""

from __future__ import annotations

from pathlib import Path

import yaml
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import OffsetSpec

from pipelines.runner import Context, run_job
from tests.support.jvm import SHORT_RUN_CONF

TOPIC = "lag-topic"
GROUP = "lag-group"
PARTITIONS = 3
PER_PARTITION = 40
CONSUME = {0: 10, 1: 25}  # records the group consumes and commits per partition; partition 2: none


def _consume_and_commit(h):
    """A member that consumes, commits and stays in the group: the tier's broker expires the offsets
    of an empty group after a minute (offsets.retention.minutes), a stable group's never."""
    consumer = h.consumer(GROUP, "lag-client", **{"max.poll.interval.ms": 900_000})
    consumer.subscribe([TOPIC])
    seen = dict.fromkeys(CONSUME, 0)

    def consumed() -> bool:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error() and seen.get(msg.partition(), 0) < CONSUME.get(msg.partition(), 0):
            seen[msg.partition()] += 1
        return seen == CONSUME

    h.wait(consumed, f"{GROUP} consumed {CONSUME}", every=0)
    h.commit(consumer, {(TOPIC, p): n for p, n in seen.items()})  # the position after the last processed
    return consumer


def _broker_lag(h) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(topic, partition) -> (committed, end, lag) from the broker's Admin API."""
    admin = h.admin
    req = ConsumerGroupTopicPartitions(GROUP)
    committed = {
        (tp.topic, tp.partition): tp.offset
        for tp in admin.list_consumer_group_offsets([req])[GROUP].result(30).topic_partitions
        if tp.offset >= 0
    }
    ends = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in committed})
    out = {}
    for tp, fut in ends.items():
        key, end = (tp.topic, tp.partition), fut.result(30).offset
        out[key] = (committed[key], end, end - committed[key])
    return out


def test_current_lag_equals_the_brokers_end_minus_committed(harness, tmp_path: Path):
    h = harness.harness
    h.create_topic(TOPIC, PARTITIONS)
    h.produce(TOPIC, PER_PARTITION, PARTITIONS)
    member = _consume_and_commit(h)
    try:
        _check(h, tmp_path)
    finally:
        h.close(member)


def _check(h, tmp_path: Path) -> None:
    jobs = {
        "lakehouse": {"root": str(tmp_path / "lake")},
        "spark": {
            "master": "local[2]",
            "conf": {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false", **SHORT_RUN_CONF},
        },
        "sources": {
            "live": {
                "kind": "kafka",
                "cluster": "lagc",
                "bootstrap_servers": h.bootstrap,
                "end_offsets": {"kind": "admin"},
            }
        },
        "jobs": {"lag": {"sources": ["live"], "stages": ["bronze", "silver", "gold"]}},
    }
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump(jobs))
    ctx = Context(tmp_path / "jobs.yaml")
    report = run_job(ctx, "lag")
    assert report.status == "ok", report.to_json()
    ctx.tables.register_existing()  # the tables and views by name, as `sql` has them

    want = _broker_lag(h)
    # the broker's numbers are the producer's and the consumer's
    assert want == {(TOPIC, p): (n, PER_PARTITION, PER_PARTITION - n) for p, n in CONSUME.items()}
    rows = ctx.spark.sql(f"SELECT * FROM gold.current_lag WHERE group_id = '{GROUP}'").collect()
    got = {(r["topic"], r["partition"]): (r["committed_offset"], r["end_offset"], r["lag"]) for r in rows}
    assert got == want
    assert all(r["cluster"] == "lagc" and r["end_offset_observed_at"] is not None for r in rows)
    # the one observation so far is in the history too, with the offset committed before it
    hist = ctx.spark.sql(f"SELECT * FROM gold.lag_history WHERE group_id = '{GROUP}'").collect()
    assert {(r["topic"], r["partition"]): (r["committed_offset"], r["end_offset"], r["lag"]) for r in hist} == want
    # every live key of the cluster got a row; end offsets were asked for exactly their partitions
    live = ctx.spark.sql("SELECT count(*) AS n FROM gold.live_offsets WHERE cluster = 'lagc'").collect()[0]["n"]
    assert ctx.spark.sql("SELECT count(*) AS n FROM gold.current_lag").collect()[0]["n"] == live
    fetched = ctx.spark.sql("SELECT DISTINCT topic, partition FROM bronze.end_offsets").collect()
    asked = ctx.spark.sql("SELECT DISTINCT topic, partition FROM gold.live_offsets WHERE cluster = 'lagc'").collect()
    lag = report.stages[-1].details[0]["lag"]
    assert len(fetched) + len(lag["unknown_partitions"]) == len(asked), lag
