"""The skewed generator (``generate(..., skew=Skew(...))``, pipelines/generate/skew.py) writes what
it promises: one partition with the share of records and the live keys asked for, a classic group
with the members and assigned partitions asked for, deterministic bytes, and an expected state the
reference replay agrees with (``generate`` checks the replay against the workload's intent)."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path

import pytest

from pipelines.codec.partitioner import partition_for
from pipelines.codec.reader import Batch, iter_log
from pipelines.codec.records import decode_record
from pipelines.codec.segments import discover
from pipelines.generate import Skew, generate

SKEW = Skew(partition=7, share=0.85, keys=25_000, members=300, assigned=6_000, big_topics=12)


@pytest.fixture(scope="module")
def skewed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("skew") / "logs"
    generate(out, 40_000, seed=3, partitions=10, segment_bytes=256 * 1024, skew=SKEW)
    return out


def test_the_hot_partition_holds_the_share_and_the_keys(skewed: Path) -> None:
    manifest = json.loads((skewed / "generator-manifest.json").read_text())
    state = json.loads((skewed / "expected-state.json").read_text())
    hot = manifest["records_per_partition"][str(SKEW.partition)]
    assert hot / manifest["records"] >= 0.8
    assert manifest["skew"]["hot_keys_committed"] == SKEW.keys
    live = [o for o in state["offsets"] if o["offsets_partition"] == SKEW.partition]
    assert len(live) >= SKEW.keys
    hot_groups = {o["group"] for o in live if o["group"].startswith(("hot-group-", "big-group-"))}
    assert len(hot_groups) == manifest["skew"]["hot_groups"] + 1
    assert all(partition_for(g, 10) == SKEW.partition for g in hot_groups)


def test_the_big_group_has_its_members_and_assignment(skewed: Path) -> None:
    state = json.loads((skewed / "expected-state.json").read_text())
    [big] = [g for g in state["classic_groups"] if g["group"].startswith("big-group-")]
    assert len(big["members"]) == SKEW.members
    assigned = [(t, p) for m in big["members"] for t, ps in m["assigned_partitions"].items() for p in ps]
    assert len(assigned) == len(set(assigned)) == SKEW.assigned
    assert len({t for t, _ in assigned}) == SKEW.big_topics
    # every record of the group in the files carries every member (formed at once, then replaced)
    records = [
        d.value
        for seg in discover([skewed])
        if seg.partition == SKEW.partition
        for b in iter_log(seg.path)
        if isinstance(b, Batch) and not b.is_control
        for r in b.records or ()
        if (d := decode_record(r.key, r.value)).record_type == 2 and d.key["group"] == big["group"]
    ]
    assert [len(v["members"]) for v in records] == [SKEW.members] * 3
    assert big["generation"] == 3
    # each member commits its own assignment: the group's live keys are exactly what it assigns
    keys = {(o["topic"], o["partition"]) for o in state["offsets"] if o["group"] == big["group"]}
    assert keys == set(assigned)


def test_skewed_output_is_deterministic(skewed: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    generate(again, 40_000, seed=3, partitions=10, segment_bytes=256 * 1024, skew=SKEW)
    files = sorted(p.relative_to(skewed) for p in skewed.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    assert all(filecmp.cmp(skewed / f, again / f, shallow=False) for f in files)


@pytest.mark.parametrize(
    ("skew", "records", "message"),
    [
        (Skew(partition=50), 3_000_000, "not one of the 50 partitions"),
        (Skew(share=1.0), 3_000_000, "share must be between"),
        (Skew(), 2_000_000, "need at least"),
        (Skew(keys=1_000, members=100, assigned=2_000), 3_000_000, "cover the big group"),
        (Skew(members=200_000), 3_000_000, "assigned >= members"),
    ],
)
def test_impossible_skews_are_refused(tmp_path: Path, skew: Skew, records: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        generate(tmp_path / "out", records, skew=skew)
