"""The generator writes a real-looking, deterministic log with every feature the issue lists.

Feature checks read the written files back with the reader and the codec (and the
events the workload logged); they do not look at the generator's internals.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from pipelines.codec.partitioner import partition_for
from pipelines.codec.reader import Batch, iter_log
from pipelines.codec.records import decode_control, decode_record
from pipelines.codec.segments import SEGMENT_FILE, discover, read_offset_index
from pipelines.generate import generate
from pipelines.generate import run as generate_run
from pipelines.reference.replay import replay_paths


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen") / "logs"
    generate(out, 30_000, seed=8, segment_bytes=128 * 1024)
    return out


def census(out: Path) -> dict:
    c: dict = {
        "magic": Counter(),
        "codec": Counter(),
        "tv": Counter(),
        "control": Counter(),
        "meta_lens": [],
        "misplaced": 0,
        "records": 0,
    }
    for seg in discover([out]):
        for b in iter_log(seg.path):
            assert isinstance(b, Batch)
            c["magic"][b.magic] += 1
            c["codec"][b.codec_name] += 1
            for r in b.records or ():
                c["records"] += 1
                if b.is_control:
                    c["control"][decode_control(r.key, r.value)[0]] += 1
                    continue
                d = decode_record(r.key, r.value)
                assert d.ok, d
                c["tv"][(d.record_type, None if d.tombstone else d.value_version)] += 1
                group = d.key.get("group", d.key.get("group_id"))
                c["misplaced"] += partition_for(group, 50) != seg.partition
                if d.record_type in (0, 1) and d.value:
                    c["meta_lens"].append(len(d.value["metadata"].encode()))
    return c


def test_deterministic(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    generate(a, 3000, seed=5, partitions=10)
    generate(b, 3000, seed=5, partitions=10)
    generate(c, 3000, seed=6, partitions=10)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    assert (a / "expected-state.json").read_bytes() != (c / "expected-state.json").read_bytes()


def test_a_log_can_end_with_its_transactions_open(generated: Path, tmp_path: Path) -> None:
    """``close_transactions=False``: the same log without its closing markers (one COMMIT or ABORT
    batch per open transaction at the end), so its tail is ordinary traffic; those transactions'
    offsets stay pending in its expected state."""
    out = tmp_path / "open"
    result = generate(out, 30_000, seed=8, segment_bytes=128 * 1024, close_transactions=False)
    closing = json.loads((generated / "generator-manifest.json").read_text())
    manifest = json.loads((out / "generator-manifest.json").read_text())
    assert manifest.pop("open_transactions_at_end") is True and "open_transactions_at_end" not in closing
    closed = closing["coordinator_writes"] - manifest["coordinator_writes"]  # the closing marker batches
    with gzip.open(generated / "generator-events.jsonl.gz", "rt") as f:
        events = [json.loads(line) for line in f]
    tail = events[len(events) - closed :]
    assert closed > 1 and {e["event"] for e in tail} <= {"txn_commit", "txn_abort"}
    # every partition's log is the closing log's up to its closing markers, byte for byte
    for seg in sorted(out.glob("__consumer_offsets-*/*.log")):
        mine, theirs = seg.read_bytes(), (generated / seg.relative_to(out)).read_bytes()
        assert theirs.startswith(mine), seg
    pending = json.loads((generated / "expected-state.json").read_text())["pending_transactions"]
    assert result.pending_transactions > len(pending)


def test_features_present(generated: Path) -> None:
    c = census(generated)
    assert c["records"] >= 30_000 and c["misplaced"] == 0
    assert set(c["magic"]) == {0, 1, 2}
    assert set(c["codec"]) == {"none", "gzip", "snappy", "lz4", "zstd"}
    tv = c["tv"]
    for expected in [(0, 0), (1, 1), (1, 2), (1, 3), (1, 4), (1, None), (2, 0), (2, 1), (2, 2), (2, 3), (2, None)]:
        assert tv[expected] > 0, expected
    for rtype in (3, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 19, 20, 21, 22, 23):
        assert tv[(rtype, 0)] > 0, rtype
    # new-protocol member leave / group deletion; share and streams members fenced and removed
    for rtype in (3, 4, 5, 7, 8, 16, 10, 13, 14, 19, 21, 22):
        assert tv[(rtype, None)] > 0, rtype
    assert c["control"][0] > 0 and c["control"][1] > 0  # ABORT and COMMIT markers
    assert max(c["meta_lens"]) >= 127 and min(c["meta_lens"]) == 0


def test_events_cover_lifecycle(generated: Path) -> None:
    with gzip.open(generated / "generator-events.jsonl.gz", "rt") as fh:
        events = [json.loads(line) for line in fh]
    kinds = Counter(e["event"] for e in events)
    for k in (
        "commit",
        "rebalance",
        "empty",
        "reset",
        "delete_group",
        "expire",
        "txn_begin",
        "txn_commit",
        "txn_abort",
        "member_join",
        "member_leave",
        "member_fenced",
        "member_remove",
        "topology",
        "topology_validated",
    ):
        assert kinds[k] > 0, k
    deleted = {e["group"] for e in events if e["event"] == "delete_group"}
    recreated = {e["group"] for i, e in enumerate(events) if e["event"] == "commit" and e["group"] in deleted}
    assert recreated, "some deleted group is recreated under the same name"


def test_segments_are_broker_like(generated: Path) -> None:
    parts = [d for d in generated.iterdir() if d.is_dir()]
    assert len(parts) == 50
    part = max(parts, key=lambda d: len(list(d.glob("*.log"))))
    logs = sorted(p for p in part.iterdir() if SEGMENT_FILE.match(p.name))
    assert len(logs) > 1, "segments roll"
    assert all(len(p.stem) == 20 for p in logs)
    for log in logs:
        base = int(log.stem)
        assert log.with_suffix(".index").exists() and log.with_suffix(".timeindex").exists()
        first = next(iter(iter_log(log)))
        assert isinstance(first, Batch) and first.base_offset == base
        for rel, pos in read_offset_index(log.with_suffix(".index")):
            batch = next(iter(iter_log(log, start=pos)))
            assert isinstance(batch, Batch) and batch.last_offset == base + rel


def test_expected_state_is_the_replay_of_the_files(generated: Path) -> None:
    state = json.loads((generated / "expected-state.json").read_text())
    assert state == json.loads(json.dumps(replay_paths([str(generated)]).snapshot()))
    assert state["offsets"] and state["pending_transactions"] and state["deleted_offsets"]
    causes = Counter(d["cause"] for d in state["deleted_offsets"])
    assert causes["expiry"] and causes["group_deletion"]


def test_intent_check_catches_disagreement(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """generate() refuses to write an expected state that contradicts the workload's intent."""
    original = generate_run.Workload.intent

    def wrong(self):
        intent = original(self)
        key = next(iter(intent))
        intent[key] += 1
        return intent

    monkeypatch.setattr(generate_run.Workload, "intent", wrong)
    with pytest.raises(AssertionError, match="disagrees"):
        generate(tmp_path / "x", 2000, seed=1, partitions=5)


def test_offsets_only_groups_follow_the_workloads_own_log(generated: Path) -> None:
    """assign()-only ("standalone") groups are listed while they hold offsets, as Kafka lists them
    (classic, Empty, empty protocol type) — derived from the workload's event log, not the replay."""
    with gzip.open(generated / "generator-events.jsonl.gz", "rt") as fh:
        events = [json.loads(line) for line in fh]
    lifecycle = ("commit", "reset", "delete_group", "expire", "txn_begin", "txn_commit", "txn_abort")
    last = {}
    open_txns: dict[str, set[int]] = {}  # group -> producers with a transaction not yet ended
    pending_at_end: set[str] = set()  # groups whose last removal found a transaction open
    for e in events:
        if e["group"].startswith("standalone-") and e["event"] in lifecycle:
            last[e["group"]] = e["event"]
            txns = open_txns.setdefault(e["group"], set())
            if e["event"] == "txn_begin":
                txns.add(e["producer_id"])
            elif e["event"] in ("txn_commit", "txn_abort"):
                txns.discard(e["producer_id"])
            elif e["event"] in ("delete_group", "expire"):
                (pending_at_end.add if txns else pending_at_end.discard)(e["group"])
                txns.clear()
    state = json.loads((generated / "expected-state.json").read_text())
    listed = {g["group"]: g for g in state["groups"]}
    deleted = {g["group"]: g["cause"] for g in state["deleted_simple_groups"]}
    committing = {g for g, ev in last.items() if ev == "commit"}
    gone = {g for g, ev in last.items() if ev in ("delete_group", "expire")}
    assert committing and gone, "the workload both commits into and removes assign()-only groups"
    for g in committing:
        assert listed[g] | {"offsets_partition": 0} == {
            "group": g,
            "type": "classic",
            "protocol_type": "",
            "state": "Empty",
            "exists_because": "offsets",
            "offsets_partition": 0,
        }
    assert not gone & set(listed)
    # ... and remembered as deleted with the cause of the tombstones that removed their offsets
    # (a group deleted before it committed anything never existed)
    # (the cause is inferred from the log: an admin deletion after the retention has elapsed since
    # the last commit is indistinguishable from expiry, spec 12.5)
    # (and an offset with pending transactional offsets never expires, spec 12.5: the tombstone of
    # such a key is an explicit delete)
    causes = {"expire": {"expiry"}, "delete_group": {"group_deletion", "explicit_delete", "expiry"}}
    remembered = [g for g in gone if g in deleted]
    assert remembered
    for g in remembered:
        allowed = causes[last[g]] | ({"explicit_delete"} if g in pending_at_end else set())
        assert deleted[g] in allowed, (g, last[g], deleted[g], g in pending_at_end)
    # every listed group is a live classic/consumer/share/streams group or holds offsets
    live_offsets = {o["group"] for o in state["offsets"]} | {p["group"] for p in state["pending_transactions"]}
    assert {g for g, v in listed.items() if v["exists_because"] == "offsets"} <= live_offsets


# the record type of each group family's metadata record (spec 12.3)
FAMILY_OF = {2: "classic", 3: "consumer", 11: "share", 17: "streams"}


def test_one_group_family_live_at_a_time(tmp_path: Path) -> None:
    """Spec 12.3: a group moves between the classic and the new protocols by tombstoning one family
    and writing the other, so at no point of the log does one group id have live metadata records
    of two families (Kafka's coordinator refuses to load such a log: "Group ... is not a consumer
    group"). Read back from the files, record by record. Seed 2 (not the module's seed 7): its log
    deletes a group that never left the classic protocol in the new protocol's era, which once
    left the group's classic record live beside its later KIP-848 records."""
    generated = tmp_path / "logs"
    generate(generated, 30_000, seed=2, segment_bytes=128 * 1024)
    live: dict[str, set[str]] = {}
    ever: dict[str, set[str]] = {}
    checked = 0
    for seg in discover([generated]):
        for b in iter_log(seg.path):
            if b.is_control:
                continue
            for r in b.records or ():
                d = decode_record(r.key, r.value)
                family = FAMILY_OF.get(d.record_type)
                if family is None:
                    continue
                group = d.key.get("group", d.key.get("group_id"))
                families = live.setdefault(group, set())
                if d.tombstone:
                    families.discard(family)
                    continue
                families.add(family)
                ever.setdefault(group, set()).add(family)
                checked += 1
                assert len(families) == 1, (seg.path.name, r.offset, group, sorted(families))
    assert checked > 1000 and {f for fs in ever.values() for f in fs} == set(FAMILY_OF.values())
    assert sum(len(fs) > 1 for fs in ever.values()) > 0, "some groups moved from the classic protocol"
