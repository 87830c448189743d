"""Streams groups as the kafka tier compares them: the same shapes built from our rows (silver's
record values, gold's tables) and from the broker's describeStreamsGroups (pipelines/truth.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pipelines.truth import StreamsTasks

TASK_KINDS = ("active", "standby", "warmup")


def task_map(tasks: Iterable[Mapping[str, Any]] | None) -> dict[str, list[int]]:
    """{subtopology id: sorted partitions} of task structs, subtopologies without a task left out."""
    return {t["subtopology_id"]: sorted(t["partitions"]) for t in tasks or [] if t["partitions"]}


def tasks_of(row: Mapping[str, Any], prefix: str = "") -> dict[str, dict[str, list[int]]]:
    """Each kind's task map of a row with ``{prefix}{kind}_tasks`` columns or fields."""
    return {kind: task_map(row[f"{prefix}{kind}_tasks"]) for kind in TASK_KINDS}


def described_tasks(tasks: StreamsTasks | None) -> dict[str, dict[str, list[int]]]:
    """The same for the broker's description of a member's tasks."""
    tasks = tasks or StreamsTasks()
    return {kind: task_map(t.model_dump() for t in getattr(tasks, kind)) for kind in TASK_KINDS}


def topology(subtopologies: Iterable[Mapping[str, Any]]) -> list[tuple]:
    """Per subtopology, in id order: its id, source topics, repartition sink topics, state
    changelog topic names and repartition source topic names (our rows)."""
    return [
        (
            s["subtopology_id"],
            sorted(s["source_topics"]),
            sorted(s["repartition_sink_topics"]),
            sorted(t["name"] for t in s["state_changelog_topics"]),
            sorted(t["name"] for t in s["repartition_source_topics"]),
        )
        for s in sorted(subtopologies, key=lambda s: s["subtopology_id"])
    ]


def described_topology(subtopologies: Iterable[Any]) -> list[tuple]:
    """The same for the broker's description, in the order it lists them (by id, sorted names)."""
    return [
        (
            s.subtopology_id,
            s.source_topics,
            s.repartition_sink_topics,
            [t.name for t in s.state_changelog_topics],
            [t.name for t in s.repartition_source_topics],
        )
        for s in subtopologies
    ]
