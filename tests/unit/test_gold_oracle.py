"""Gold's engine against the spec oracle (tests/support/spec_oracle.py), without Spark.

The oracle was written from the spec, apart from both gold's engine and the reference replay.
The engine runs on event tables built from the codec's records (tests/support/gold_events.py);
every gold table is compared with the oracle's model, field by field. Then one rule of the
engine at a time is broken (a mutant of its source) and the comparison must catch it, on
generated data that holds — counted by the oracle — the situations the rule decides.
"""

from __future__ import annotations

import inspect
import textwrap
from collections import Counter
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest

from pipelines.gold import engine as ge
from tests.support.gold_events import run_engine
from tests.support.oracle_compare import Comparison, compare_with_gold
from tests.support.oracle_logs import SEEDS, generated
from tests.support.spec_oracle import ClusterModel, LogBatch, batches_of_files, replay_cluster


@cache
def _log(seed: int) -> tuple[dict[int, list[LogBatch]], ClusterModel]:
    batches = batches_of_files([generated(seed)])
    return batches, replay_cluster(batches)


def test_engine_equals_the_oracle_on_generated_logs() -> None:
    rows, accepted = Counter(), []
    causes, history_causes, gone = Counter(), Counter(), Counter()
    for seed in SEEDS:
        batches, model = _log(seed)
        gold = run_engine(batches)
        cmp = compare_with_gold(model, gold)
        assert not cmp.differences, f"seed {seed}: {cmp.report()}"
        rows.update(cmp.rows)
        accepted += cmp.accepted
        causes.update(r["delete_cause"] for r in gold["current_offsets"] if r["deleted"])
        history_causes.update(r["delete_cause"] for r in gold["offset_history"] if r["deleted"])
        gone.update(r["delete_cause"] for r in gold["current_groups"] if r["deleted"])
        gens = Counter(r["group_id"] for r in gold["group_generations"])
        rows["groups with several generations"] += sum(1 for n in gens.values() if n > 1)
    # vacuity guards: rows present on both sides and compared field by field
    assert rows["current_offsets"] > 900 and rows["pending_transactions"] >= 20, rows
    assert rows["offset_history"] > 40_000 and rows["group_generations"] > 1_500, rows
    assert rows["groups with several generations"] >= 100 and rows["consumer_group_members"] >= 100, rows
    assert rows["current_groups"] >= 150, rows
    assert causes["expiry"] >= 10 and causes["group_deletion"] >= 5, causes
    assert min(history_causes[c] for c in ("expiry", "group_deletion", "explicit_delete")) >= 100, history_causes
    assert gone["converted"] >= 30, gone
    # set aside, each named (tests/support/oracle_compare.py): groups listed twice, §12.5's
    # unsubscribed-topic expiry, a batch dated by the last record gold replays; nothing else
    kinds = {"gold keeps it live beside": 0, "§12.5 expires an unsubscribed topic": 0, "the same batch": 0}
    for a in accepted:
        kind = next((k for k in kinds if k in a), None)
        assert kind is not None, f"an unexpected difference was set aside: {a}"
        kinds[kind] += 1
    # the generator deletes a never-converted group as a classic group (main's 93579ca): its logs
    # no longer hold a group listed twice, so that difference must not be set aside at all
    assert kinds["gold keeps it live beside"] == 0, kinds
    assert kinds["§12.5 expires an unsubscribed topic"] and kinds["the same batch"], kinds


# -- mutants -----------------------------------------------------------------------------------------
def mutant(method: str, old: str, new: str) -> Callable[..., Any]:
    """``PartitionReplay.<method>`` with ``old`` (which must occur once) replaced by ``new``."""
    src = textwrap.dedent(inspect.getsource(getattr(ge.PartitionReplay, method)))
    assert src.count(old) == 1, f"{method} no longer contains the mutated code {old!r}: update the mutant"
    namespace = dict(vars(ge))
    exec(compile(src.replace(old, new), f"<mutant of PartitionReplay.{method}>", "exec"), namespace)
    return namespace[method]


# (name, method, old code, new code, the oracle's count of what exposes it)
MUTANTS = [
    (
        "a COMMIT marker applies a pending offset over a later record of its key",
        "_batch",
        "if current is None or self.v_record_offset[h] > self.v_record_offset[current]:",
        "if True:",
        "commit_marker_lost_to_later_record",
    ),
    (
        "an ABORT marker applies the pending offsets instead of dropping them",
        "_batch",
        'if c["control_type_id"][k] != COMMIT_MARKER:',
        "if False:",
        "abort_dropped_offset",
    ),
    (
        "a group deletion leaves the group's offsets (tombstones beside a group tombstone ignored)",
        "_batch",
        "        elif kind == OFFSET_TOMBSTONE:\n",
        "        elif kind == OFFSET_TOMBSTONE and groups[k] in tomb_groups:\n"
        "            pass\n"
        "        elif kind == OFFSET_TOMBSTONE:\n",
        "tombstone:group_deletion",
    ),
    (
        "a group tombstone deletes the group's offsets itself (spec 12.3: only their own tombstones do)",
        "_batch",
        "                self.classic.pop(g, None)\n",
        "                self.classic.pop(g, None)\n"
        "                for key in [x for x in self.live if x[0] == g]:\n"
        "                    self.dead[key] = (c['record_offset'][k], c['timestamp_ms'][k], 'group_deletion', "
        "self._drop_live(key))\n"
        "                    dirty[key] = None\n",
        "group_record_tombstoned_with_live_offsets",
    ),
    (
        "a tombstone beside a group tombstone reads as an explicit delete (wrong cause)",
        "_cause",
        'fallback = "group_deletion" if group in tomb_groups else "explicit_delete"',
        'fallback = "explicit_delete"',
        "tombstone:group_deletion",
    ),
    (
        "an Empty group's retention counts from the commit, not from when it emptied (wrong cause)",
        "_cause",
        "base = classic[4]",
        "pass",
        "empty_group_clock_decided",
    ),
    (
        "pending transactional offsets do not keep an offset from expiring (wrong cause)",
        "_cause",
        "if prev is None or ts is None or pending:",
        "if prev is None or ts is None:",
        "pending_kept_from_expiry",
    ),
    (
        "a tombstone leaves the pending transactional offsets of its key",
        "_batch",
        "if key in pend:",
        "if False:",
        "pending_dropped_by_tombstone",
    ),
    (
        "a KIP-848 member tombstone is ignored",
        "_batch",
        "if kind == MEMBER else None",
        "if kind == MEMBER else slots[MEMBER_SLOTS[rtypes[k]]]",
        "member_record_tombstoned",
    ),
    (
        "a group converted to another protocol reads as deleted",
        "_deleted_group",
        'cause = "converted"',
        'cause = "group_deletion"',
        "converted",
    ),
]
MUTANT_SEED = SEEDS[0]


def _exposure(model: ClusterModel, what: str) -> dict[int, int]:
    """Per partition, how many times the oracle saw the situation that exposes a mutant."""
    out = {}
    for p, m in model.partitions.items():
        if what == "converted":
            n = sum(1 for r in m.groups.values() if r["delete_cause"] == "converted")
        else:
            n = sum(v for k, v in m.counts.items() if k == what or k.startswith(what + ":"))
        if n:
            out[p] = n
    return out


@cache
def _unmutated() -> Comparison:
    """The engine as it is against the oracle on the mutants' seed (every partition)."""
    batches, model = _log(MUTANT_SEED)
    return compare_with_gold(model, run_engine(batches))


def _compare_on(batches: dict[int, list[LogBatch]], model: ClusterModel, parts: set[int]) -> Comparison:
    """The engine against the oracle on the partitions that expose a mutant (faster than all)."""
    only = {p: bs for p, bs in batches.items() if p in parts}
    return compare_with_gold(ClusterModel({p: model.partitions[p] for p in parts}), run_engine(only))


@pytest.mark.parametrize(("name", "method", "old", "new", "exposed_by"), MUTANTS, ids=[m[0] for m in MUTANTS])
def test_a_broken_rule_is_caught(
    monkeypatch: pytest.MonkeyPatch, name: str, method: str, old: str, new: str, exposed_by: str
) -> None:
    batches, model = _log(MUTANT_SEED)
    exposure = _exposure(model, exposed_by)
    assert sum(exposure.values()) >= 5, f"seed {MUTANT_SEED} does not exercise {exposed_by}: {exposure}"
    parts = set(exposure)
    assert not _unmutated().differences  # the engine as it is: no difference
    monkeypatch.setattr(ge.PartitionReplay, method, mutant(method, old, new))
    caught = _compare_on(batches, model, parts)
    assert caught.differences, f"mutant not caught: {name} ({sum(exposure.values())} x {exposed_by})"
