"""A partition replayed in buckets (pipelines/gold/buckets.py) writes exactly the rows the replay of
the whole partition writes.

The engine runs once per bucket on the events and persisted rows of the bucket's groups (transaction
markers in every bucket) and the partition's facts (events count, last event, latest time, each
batch's last event), as build.py's bucketed tasks do; the buckets' rows together must equal the whole
replay's rows in every table, in one run and over runs whose bucket counts differ (each run reads
the rows the previous run's buckets wrote). The generator writes one group per batch, so the logs
here are also replayed with neighbouring batches merged into one: a batch of several groups,
whose last event is another bucket's, as Kafka 4's coordinator writes them.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipelines.codec.segments import discover
from pipelines.generate import Skew, generate
from pipelines.gold import engine as ge
from pipelines.gold.buckets import PartitionFacts, bucket_index, buckets_for
from pipelines.reference.replay import DEFAULT_RETENTION_MS, iter_batches
from tests.unit.test_gold_engine import CURRENT, Lake, batch_cuts, events_table, gold_events

INTERVALS = (("offset_history", "valid_to_offset"), ("group_generations", "ended_offset"))
TABLES = (*CURRENT, *(t for t, _ in INTERVALS))


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[str, dict[int, list]]:
    """Per log, per partition, its batches: the ordinary mix (transactions, deletions, every group
    type) and a small skewed log (one partition with most records and a 200-member group)."""
    out = {}
    for name, skew in (("mix", None), ("skewed", Skew(keys=6_000, members=200, assigned=2_000, keys_per_group=500))):
        root = tmp_path_factory.mktemp(name) / "logs"
        generate(root, 12_000, seed=11, partitions=3, segment_bytes=64 * 1024, skew=skew)
        by_part: dict[int, list] = {}
        for batch in iter_batches(discover([root])):
            if batch:
                by_part.setdefault(batch[0].partition, []).append(batch)
        out[name] = by_part
    return out


def merged(events: list[dict]) -> list[dict]:
    """The events with every two neighbouring plain batches (no marker, not transactional) as one."""
    out, previous, joined = [], None, {}
    for e in events:
        bid = e["batch_id"]
        if bid not in joined:
            plain = e["kind"] != ge.MARKER and not e["transactional"]
            if plain and previous is not None and previous[1] and previous[0] == joined.get(previous[0]):
                joined[bid] = previous[0]  # this batch joins the one before it
            else:
                joined[bid] = bid
            previous = (bid, plain)
        out.append(e | {"batch_id": joined[bid]})
    return out


class BucketedLake(Lake):
    """A partition's gold tables written by runs of ``buckets`` buckets each (the rows of all buckets
    together, as build.py writes them)."""

    def run_bucketed(self, part: int, rows: list[dict], buckets: int, soft_delete_ms: int | None = None) -> dict:
        events = events_table(rows)
        facts = PartitionFacts()
        facts.add(
            pa.table(
                {
                    "record_offset": events.column("record_offset"),
                    "batch_base_offset": events.column("batch_id"),
                    "timestamp": events.column("timestamp_ms"),
                }
            )
        )
        outs = []
        for index in range(buckets):
            own = self._bucket(events, buckets, index, markers=True)
            inp = ge.PartitionInput(
                "c",
                part,
                own,
                offsets=self._bucket(self.tables["current_offsets"], buckets, index),
                pending=self._bucket(self.tables["pending_transactions"], buckets, index),
                groups=self._bucket(self.tables["current_groups"], buckets, index),
                history=self._bucket(self.open_rows("offset_history", "valid_to_offset"), buckets, index),
                generations=self._bucket(self.open_rows("group_generations", "ended_offset"), buckets, index),
                members=self._bucket(self.tables["consumer_group_members"], buckets, index),
                share_members=self._bucket(self.tables["share_group_members"], buckets, index),
                streams_members=self._bucket(self.tables["streams_group_members"], buckets, index),
                topologies=self._bucket(self.tables["streams_group_topologies"], buckets, index),
                applied_offset=self.applied,
                batch_last=facts.batch_last(own),
                partition_events=facts.events,
                partition_last_offset=facts.last_offset,
                partition_log_now=facts.log_now,
            )
            outs.append(ge.PartitionReplay(inp, f"run{self.runs}", DEFAULT_RETENTION_MS, soft_delete_ms).run())
        self.runs += 1
        for name in TABLES:
            out = pa.concat_tables([o.tables[name] for o in outs])
            column = dict(INTERVALS).get(name)
            old = self.tables[name]
            if column is not None and old is not None:  # closed intervals stay, open ones are replaced
                closed = pc.fill_null(pc.less_equal(old.column(column), self.applied), False)
                old = old.filter(closed).select(out.column_names).cast(out.schema)
                out = pa.concat_tables([old, out])
            self.tables[name] = out
        facts_of = {(o.applied_offset, o.events, o.log_now) for o in outs}
        assert len(facts_of) == 1, f"buckets disagree on the partition's facts: {facts_of}"
        self.applied = outs[0].applied_offset
        return {"applied": self.applied, "events": outs[0].events, "purged": sum(o.purged for o in outs)}

    @staticmethod
    def _bucket(table: pa.Table | None, buckets: int, index: int, markers: bool = False) -> pa.Table | None:
        if table is None:
            return None
        mine = bucket_index(table.column("group_id"), buckets) == index
        if markers:  # markers have no group: every bucket's
            mine |= np.asarray(pc.equal(table.column("kind"), ge.MARKER).to_numpy(zero_copy_only=False), bool)
        return table.filter(pa.array(mine))


def rows_of(lake: Lake) -> dict[str, list[str]]:
    """Every table's rows, order aside."""
    out = {}
    for name in TABLES:
        t = lake.tables[name]
        out[name] = sorted(json.dumps(r, sort_keys=True, default=str) for r in ([] if t is None else t.to_pylist()))
    return out


def test_buckets_for() -> None:
    assert [buckets_for(n) for n in (0, 1, 250_000, 250_001, 2_250_000)] == [1, 1, 1, 2, 9]


def test_bucket_index_is_stable_and_spreads_groups() -> None:
    groups = pa.array([f"g{i}" for i in range(4000)] + [None])
    a, b = bucket_index(groups, 7), bucket_index(pa.chunked_array([groups[:1000], groups[1000:]]), 7)
    assert (a == b).all() and a[-1] == 0
    assert set(np.bincount(a[:-1], minlength=7)) and min(np.bincount(a[:-1], minlength=7)) > 450
    # Kafka's partitioner puts these in one partition: the buckets must still spread them
    same = pa.array([f"hot-{i}" for i in range(5000) if abs(hash_java(f"hot-{i}")) % 50 == 0])
    assert len(set(bucket_index(same, 5).tolist())) == 5


def hash_java(text: str) -> int:
    from pipelines.codec.partitioner import java_string_hash

    return java_string_hash(text)


@pytest.mark.parametrize("merge", [False, True], ids=["batches", "merged-batches"])
@pytest.mark.parametrize("name", ["mix", "skewed"])
def test_buckets_write_the_rows_of_the_whole_partition(logs, name: str, merge: bool) -> None:
    checked = 0
    for part, batches in logs[name].items():
        events = gold_events(batches)
        events = merged(events) if merge else events
        for buckets in (2, 5):
            whole, bucketed = Lake(), BucketedLake()
            out = whole.run(part, events, soft_delete_ms=3 * 86_400_000)
            got = bucketed.run_bucketed(part, events, buckets, soft_delete_ms=3 * 86_400_000)
            assert got == {"applied": out.applied_offset, "events": out.events, "purged": out.purged}
            assert rows_of(bucketed) == rows_of(whole), (name, part, buckets)
            checked += 1
    assert checked == 2 * len(logs[name])


@pytest.mark.parametrize("merge", [False, True], ids=["batches", "merged-batches"])
def test_runs_of_different_bucket_counts_resume_each_others_rows(logs, merge: bool) -> None:
    """Incremental runs: each reads the rows the previous one's buckets wrote, with another count."""
    for name, by_part in logs.items():
        for part, batches in by_part.items():
            events = gold_events(batches)
            events = merged(events) if merge else events
            cuts = sorted(set(batch_cuts(batches, [7, 90, 400, 1500])))
            if merge:  # a cut must not split a merged batch
                cuts = [c for c in cuts if 0 < c < len(events) and events[c]["batch_id"] != events[c - 1]["batch_id"]]
            whole, bucketed = Lake(), BucketedLake()
            for (lo, hi), buckets in zip(itertools.pairwise([0, *cuts, len(events)]), itertools.cycle((3, 1, 4, 2))):
                whole.run(part, events[lo:hi], soft_delete_ms=86_400_000)
                bucketed.run_bucketed(part, events[lo:hi], buckets, soft_delete_ms=86_400_000)
                assert bucketed.applied == whole.applied
            assert rows_of(bucketed) == rows_of(whole), (name, part)


def test_merged_batches_hold_several_groups(logs) -> None:
    """The merged logs do what they are for: batches of several groups, in several buckets."""
    events = merged(gold_events(max(logs["mix"].values(), key=len)))
    groups: dict[int, set] = {}
    for e in events:
        groups.setdefault(e["batch_id"], set()).add(e["group_id"])
    spread = [g for g in groups.values() if len(set(bucket_index(pa.array(sorted(g)), 5).tolist())) > 1]
    assert len(spread) > 50


@pytest.fixture(scope="module")
def silver_files(tmp_path_factory) -> tuple[dict[str, list[str]], list[int]]:
    """The skewed log decoded as silver decodes it, each table a Parquet file (what gold's tasks
    read), and its partitions."""
    import pyarrow.parquet as pq

    from pipelines.silver.decode import build_plan
    from pipelines.silver.local import bronze_rows, bronze_table
    from pipelines.silver.split import decode_blobs

    root = tmp_path_factory.mktemp("read-once")
    generate(root / "logs", 12_000, seed=12, partitions=3, segment_bytes=64 * 1024,
             skew=Skew(keys=6_000, members=200, assigned=2_000, keys_per_group=500))  # fmt: skip
    bronze = bronze_table(bronze_rows([root / "logs"], "gen"))
    tables: dict[str, list[pa.Table]] = {}
    for blob in decode_blobs(bronze.to_batches(max_chunksize=2_000), build_plan()):
        for name, data in zip(blob.column("table").to_pylist(), blob.column("data").to_pylist(), strict=True):
            if data:
                tables.setdefault(name, []).append(pa.ipc.open_stream(data).read_all())
    files = {}
    for name, parts in tables.items():
        path = root / f"{name}.parquet"
        pq.write_table(pa.concat_tables(parts), path)
        files[name] = [str(path)]
    return files, sorted(set(bronze.column("partition").to_pylist()))


@pytest.mark.parametrize("after", [-1, 3_000], ids=["whole", "after-an-offset"])
def test_one_read_splits_rows_as_a_read_per_bucket_keeps_them(silver_files, monkeypatch, after: int) -> None:
    """read_buckets (one task, the files read once) gives each bucket exactly the rows, in the same
    order, and the same partition facts as read_bucket (a task per bucket, a read per bucket)."""
    from pipelines.gold import buckets
    from pipelines.gold.events import MEMBERS_TABLE, SOURCES, partition_events, read_schemas
    from pipelines.runtime.tables import load_specs

    monkeypatch.setattr(buckets, "CHUNK_ROWS", 1_000)  # several chunks per file
    files, parts = silver_files
    schemas = read_schemas(load_specs()["silver"])
    compared = 0
    for part in parts:

        def chunks(table: str, part: int = part):
            return buckets.iter_parquet(files.get(table, []), schemas[table], ("record_offset", after),
                                        ("timestamp",), ("offsets_partition", part))  # fmt: skip

        for n in (2, 5):
            readers, facts = buckets.read_buckets(chunks, n)
            assert len(readers) == n
            for i, read in enumerate(readers):
                one, one_facts = buckets.read_bucket(chunks, n, i)
                for table in (*(s.table for s in SOURCES), MEMBERS_TABLE):
                    got, want = read(table), one(table)
                    assert (got is None) == (want is None), (part, n, i, table)
                    if want is not None:
                        assert got.equals(want), (part, n, i, table)
                        compared += want.num_rows
                events = partition_events(read)
                assert events.equals(partition_events(one))
                assert facts.batch_last(events) == one_facts.batch_last(events)
                assert (facts.events, facts.last_offset, facts.log_now) == (
                    one_facts.events, one_facts.last_offset, one_facts.log_now)  # fmt: skip
    assert compared > 10_000  # every row of every partition, several times over


def test_split_buckets_keeps_every_row_once() -> None:
    from pipelines.gold.buckets import split_buckets

    rows = pa.table({"group_id": [f"g{i % 40}" for i in range(500)], "n": list(range(500))})
    got = split_buckets(rows, 4)
    assert sorted(n for t in got if t is not None for n in t.column("n").to_pylist()) == list(range(500))
    for i, t in enumerate(got):
        assert t is None or set(bucket_index(t.column("group_id"), 4).tolist()) == {i}
    assert split_buckets(None, 3) == [None, None, None]


class TouchedLake(Lake):
    """A partition's gold tables written by :func:`engine.replay`: each run replays only the groups
    its events touch, the other groups' rows passed through."""

    def __init__(self) -> None:
        super().__init__()
        self.restored: list[int] = []  # per run, the current_offsets rows the replay restored

    def run(self, part: int, rows: list[dict], soft_delete_ms: int | None = None) -> ge.PartitionOutput:
        real = ge.PartitionReplay
        restored = self.restored

        class Spy(real):  # type: ignore[misc,valid-type]
            def __init__(self, inp, *args, **kwargs):
                restored.append(0 if inp.offsets is None else inp.offsets.num_rows)
                super().__init__(inp, *args, **kwargs)

        ge.PartitionReplay = Spy  # type: ignore[misc]
        try:
            return super().run(part, rows, soft_delete_ms, replay=ge.replay)
        finally:
            ge.PartitionReplay = real  # type: ignore[misc]


def test_replaying_only_the_touched_groups_writes_the_whole_replay_s_rows(logs) -> None:
    """Incremental runs of :func:`engine.replay` (touched groups replayed, the rest passed through)
    give, run after run, the rows, counts and changed tables of the whole state's replay, soft
    deletes purged from groups no event touched included."""
    restored = whole_keys = purged = 0
    for name, by_part in logs.items():
        for part, batches in by_part.items():
            # merged batches (several groups per batch): a batch's groups are touched together
            events = merged(gold_events(batches))
            # small increments among large ones: a small one touches few of the partition's groups
            cuts = sorted(set(batch_cuts(batches, [7, 90, 400, 1500, 1520, 1540, 1700, 2500, 2510])))
            cuts = [c for c in cuts if 0 < c < len(events) and events[c]["batch_id"] != events[c - 1]["batch_id"]]
            whole, touched = Lake(), TouchedLake()
            for lo, hi in itertools.pairwise([0, *cuts, len(events)]):
                before = whole.tables["current_offsets"]
                # a retention of a minute of log time: runs purge soft deletes, of untouched groups too
                want = whole.run(part, events[lo:hi], soft_delete_ms=60_000)
                got = touched.run(part, events[lo:hi], soft_delete_ms=60_000)
                purged += want.purged
                facts = ("applied_offset", "events", "log_now", "purged", "changed")
                assert {f: getattr(got, f) for f in facts} == {f: getattr(want, f) for f in facts}, (name, part, lo)
                assert rows_of(touched) == rows_of(whole), (name, part, lo)
                if before is not None and before.num_rows:
                    restored += touched.restored[-1]
                    whole_keys += before.num_rows
    # the point of it: the resumed runs restored a part of the state, not all of it
    assert 0 < restored < 0.8 * whole_keys, (restored, whole_keys)
    assert purged > 0
